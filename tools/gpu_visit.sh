#!/usr/bin/env bash
# One visit to a lent GPU: the gpu scale's reproductions, the least device time to a decision first, until the
# time limit; every run stops at a checkpoint and the next visit resumes it.  The visit starts from what earlier
# visits brought home (gpu/seqdyn.db and its checkpoints) and packs its store, checkpoints and the verdicts of the
# reproductions it finished into $OUT/visit.tar.gz (one file, as the device tool brings files back).
#
#   bash tools/gpu_visit.sh 8m            # on the GPU machine, from the repository's root (WORKERS=8 by default)
#
# At the gpu scale it first times stacked runs against one run at a time (`seqdyn bench sweep`, at most
# BENCH_SECONDS=150 of the limit, kept as bench_sweep.txt and .json; BENCH_SWEEP=0 leaves it out) and trains with
# the stack size it chooses; STACK=N sets it instead (1: one run at a time per worker).
#
# SCALE=smoke ONLY="dlr_context" HOME_STORE=DIR PYTHON=.venv/bin/python run the same on a CPU (the tests do).
#
# Brought home (docs/reproducing.md, "Visits to a lent GPU"):
#   mkdir -p visit && tar xzf visit.tar.gz -C visit
#   .venv/bin/seqdyn merge visit/seqdyn.db --store gpu/seqdyn.db
#   cp -r visit/out/. docs/reproductions/gpu/
set -euo pipefail

limit=${1:-8m}
# the least H200 time to a decision first (each module's gpu_minutes); dlr_context's runs are dlr_atomic's
ORDER=(dsf_lm_perplexity dlr_context dsf_mqar_models dlr_atomic dsf_qlstm_transition coef_positions
       coef_scaling_seeds coef_unstable_lambda coef_lambda_structure coef_kernel_maps coef_readout_maps dlr_long_range)
if [ -n "${ONLY:-}" ]; then read -r -a ORDER <<< "$ONLY"; fi
python=${PYTHON:-python3}
home=${HOME_STORE:-gpu}
export PYTHONPATH=src PYTHONUNBUFFERED=1
seconds=$("$python" -c "from seqdyn.train.timelimit import parse_duration; print(int(parse_duration('$limit')))")
visit=$(mktemp -d)/visit
mkdir -p "$visit"
if [ -f "$home/seqdyn.db" ]; then
  cp "$home/seqdyn.db" "$visit/"
  if [ -d "$home/seqdyn.checkpoints" ]; then cp -r "$home/seqdyn.checkpoints" "$visit/"; fi
fi
end=$(( $(date +%s) + seconds ))
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
if [ "${BENCH_SWEEP:-1}" = 1 ] && [ "${SCALE:-gpu}" = gpu ]; then
  echo "== seqdyn bench sweep (at most ${BENCH_SECONDS:-150} s)"
  timeout "${BENCH_SECONDS:-150}" "$python" -m seqdyn bench sweep --device cuda --sizes 4,16 --steps 3 \
    --json "$visit/bench_sweep.json" > "$visit/bench_sweep.txt" 2>&1 || echo "bench sweep: exit status $?"
  cat "$visit/bench_sweep.txt"
  if [ -z "${STACK:-}" ] && [ -f "$visit/bench_sweep.json" ]; then
    STACK=$("$python" -c "import json; print(json.load(open('$visit/bench_sweep.json'))['best_stack'])")
  fi
fi
echo "training with --stack ${STACK:-1}"
for name in "${ORDER[@]}"; do
  left=$(( end - $(date +%s) ))
  if [ "$left" -le 30 ]; then
    echo "time limit reached before $name"
    break
  fi
  data=()
  if [ "$name" = dsf_lm_perplexity ]; then
    if [ ! -f data/shakespeare.txt ]; then echo "$name: left out (carry data/shakespeare.txt)"; continue; fi
    data=(--data data/shakespeare.txt)
  fi
  echo "== $name ($left s left)"
  "$python" -m seqdyn reproduce "$name" --scale "${SCALE:-gpu}" --store "$visit/seqdyn.db" --out "$visit/out" \
    --workers "${WORKERS:-8}" --stack "${STACK:-1}" --time-limit "${left}s" --no-progress "${data[@]}" \
    || echo "$name: exit status $?"
done
tar czf "${OUT:-.}/visit.tar.gz" -C "$visit" .
echo "packed $(du -sh "${OUT:-.}/visit.tar.gz" | cut -f1) into ${OUT:-.}/visit.tar.gz"
