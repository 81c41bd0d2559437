"""Seed 001 Fig. 5 (``seqdyn.reproduce.timing_claims``): the claims on hand-made timings where they must hold, fail
and stay open; the slope is a power law's exponent."""

from __future__ import annotations

import pytest
import torch

from seqdyn.reproduce import timing_claims as tc
from seqdyn.reproduce.base import Results
from seqdyn.reproduce.claims import FAILED, HELD, INCONCLUSIVE, MISSING

LENGTHS = (512, 1024, 2048, 4096, 8192)


def timings(
    softmax_power: float, ssd_power: float, lengths=LENGTHS, fixed: float = 0.0, ssd_powers: tuple = ()
) -> Results:
    """Rows of both layers with time = fixed + (L / 512)^power milliseconds, in two identical rounds (an interval
    of width 0: the slope itself decides), or one round per SSD power of ``ssd_powers``."""
    ssd_rounds = ssd_powers or (ssd_power, ssd_power)
    rows = [
        {
            "name": f"{layer} {length} {turn}",
            "run_id": f"{layer}/{length}/{turn}",
            "status": "finished",
            "reason": None,
            "best": None,
            "final": None,
            "steps": 0,
            "wall_time": 0.0,
            "timing.layer": layer,
            "timing.length": length,
            "timing.seconds": 1e-3 * (fixed + (length / 512) ** power),
            "timing.round": turn,
        }
        for turn, ssd in enumerate(ssd_rounds)
        for layer, power in (("softmax", softmax_power), ("ssd", ssd))
        for length in lengths
    ]
    return Results("cpu", tuple(rows))


def verdicts(data: Results) -> list[str]:
    """Fig. 5's two claims."""
    return [claim.decide(data).verdict for claim in tc.CLAIMS[:2]]


def test_the_slope_is_the_exponent_of_a_power_law():
    assert tc.log_slope([(length, 3.0 * length**1.7) for length in LENGTHS]) == pytest.approx(1.7)


@pytest.mark.parametrize(
    ("softmax", "ssd", "expected"),
    [
        (2.0, 1.0, [HELD, HELD]),
        (1.51, 1.19, [HELD, HELD]),
        (1.49, 1.21, [FAILED, FAILED]),
    ],
)
def test_the_claims_just_above_and_below_their_slopes(softmax, ssd, expected):
    assert verdicts(timings(softmax, ssd)) == expected


def test_the_slope_is_read_over_the_longest_lengths_where_fixed_costs_fade():
    """A fixed cost flattens the short lengths: with 3 of 5 lengths fitted, a quadratic layer still reads ≥ 1.5."""
    data = timings(2.0, 1.0, fixed=2.0)
    assert tc.slope(data, "softmax").values[0] > 1.5 and verdicts(data) == [HELD, HELD]


def test_rounds_either_side_of_the_line_leave_the_claim_open_and_agreeing_rounds_decide_it():
    """The published run's SSD slope 1.006 and a later one's 1.2025, either side of 1.2: open (seeds) — a single
    timing decides nothing; five rounds close together decide."""
    ssd = next(claim for claim in tc.CLAIMS if claim.name == "SSD time linear in L")
    split = ssd.decide(timings(2.0, 1.0, ssd_powers=(1.006, 1.2025)))
    assert split.verdict == INCONCLUSIVE and split.cause == "seeds" and split.seeds == {ssd_label(): 2}
    close = ssd.decide(timings(2.0, 1.0, ssd_powers=(1.0, 1.02, 1.05, 0.99, 1.03)))
    assert close.verdict == HELD and close.seeds == {ssd_label(): 5}


def ssd_label() -> str:
    return f"{tc.LAYERS['ssd'][0]}: slope of log time against log L"


def test_too_few_lengths_leave_the_claims_open():
    assert verdicts(timings(2.0, 1.0, lengths=(512, 1024))) == [INCONCLUSIVE, INCONCLUSIVE]


def test_the_table_gives_each_length_and_the_ratio():
    lines = tc.REPRODUCTION.table(timings(2.0, 1.0)).splitlines()
    assert lines[0] == "| L | softmax attention (ms) | SSD (ms) | softmax / SSD |"
    assert lines[-3] == "| 8192 | 256.00 | 16.00 | 16.00 |"  # no step timed: no step line


def test_the_layers_compute_attention_as_attention_and_ssd_with_its_chunked_algorithm():
    assert {key: (mixer, backend) for key, (_, mixer, _, backend) in tc.LAYERS.items()} == {
        "softmax": ("softmax_attention", "chunk"),
        "ssd": ("mamba2", "chunk"),
    }


def with_steps(data: Results, attention_s: float, dlr_s: float, device: str | None = "cuda: NVIDIA H200") -> Results:
    """``data`` with Table 1's two step timings, timed on ``device`` (None: a row that does not say)."""
    rows = [
        {
            "name": f"{layer} step {turn}",
            "run_id": f"{layer}_step/4096/{turn}",
            "status": "finished",
            "reason": None,
            "best": None,
            "final": None,
            "steps": 0,
            "wall_time": 0.0,
            "timing.layer": f"{layer}_step",
            "timing.length": 4096,
            "timing.seconds": seconds,
            "timing.batch": 16,
            "timing.round": turn,
        }
        | ({} if device is None else {"timing.device": device})
        for turn in (0, 1)
        for layer, seconds in (("attention", attention_s), ("dlr", dlr_s))
    ]
    return Results(data.scale, data.rows + tuple(rows))


SIX_TIMES = next(claim for claim in tc.CLAIMS if claim.name == "ATTENTION 6× slower than DLR")


@pytest.mark.parametrize(
    ("attention_s", "dlr_s", "verdict"),
    [(6.3, 1.0, HELD), (6.0, 1.0, HELD), (5.9, 1.0, FAILED), (None, 1.0, INCONCLUSIVE)],
)
def test_attention_six_times_slower_than_dlr_per_step_on_a_cuda_device(attention_s, dlr_s, verdict):
    """Table 1 (bottom): "more than 6× slower" at L = 4096, the ratio of the two layers' step times on a GPU; the
    verdict names the GPU."""
    data = timings(2.0, 1.0)
    data = with_steps(data, attention_s, dlr_s) if attention_s else data
    outcome = SIX_TIMES.decide(data)
    assert outcome.verdict == verdict
    if verdict != INCONCLUSIVE:
        assert outcome.reason == "timed on cuda: NVIDIA H200"


@pytest.mark.parametrize("device", ["cpu", None])
@pytest.mark.parametrize("attention_s", [6.3, 5.9])
def test_attention_six_times_slower_is_not_decided_off_a_cuda_device(device, attention_s):
    """The 6.3× is the paper's PyKeOps kernels on one NVIDIA 3090: timed on a CPU — or on rows that do not say where —
    the claim is inconclusive whichever side of 6 the ratio lies, and the reason says why and what would decide it."""
    outcome = SIX_TIMES.decide(with_steps(timings(2.0, 1.0), attention_s, 1.0, device))
    assert outcome.verdict == INCONCLUSIVE and outcome.cause == MISSING
    assert outcome.reason.startswith("decided only on a CUDA device") and "timed on cpu" in outcome.reason
    assert f"ratio {attention_s:.2f}" in outcome.reason


def test_the_step_is_timed_on_the_cpu_here_at_the_scales_batch_and_says_so():
    rows = [row for row in tc.compute_rows(tc.SCALES["smoke"]) if row["timing.layer"] in tc.STEP_NAMES]
    device = "cpu" if not torch.cuda.is_available() else tc.device_name(torch.device("cuda"))
    assert [(row["timing.device"], row["timing.batch"], row["timing.round"]) for row in rows] == [
        (device, 2, 0),
        (device, 2, 0),
        (device, 2, 1),
        (device, 2, 1),
    ]
    assert f"batch 2, timed on {device}" in tc.REPRODUCTION.table(Results("smoke", tuple(rows)))


def test_the_step_is_table_1s_single_layers_at_its_sizes():
    scale = tc.SCALES["cpu"]
    assert (scale.step_length, scale.step_width, scale.step_state, scale.step_batch) == (4096, 128, 4096, 16)
    assert tc.STEP_LAYERS == ("attention", "dlr")
