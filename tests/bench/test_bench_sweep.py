"""``seqdyn bench sweep``: one run at a time against stacks of runs, timed alternately on a reproduction's runs;
the ratio and where stacking stops helping are read from the medians."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from seqdyn.bench.sweep import SweepCell, best_stack, run
from seqdyn.cli import app


def test_a_stack_is_timed_beside_one_run_at_a_time_on_the_reproductions_runs():
    cells, scale, device = run(["dsf_mqar_models"], "smoke", (2,), "cpu", 1, ["softmax_attention"])
    assert scale == "smoke" and device.type == "cpu"
    (cell,) = cells
    assert cell.status == "ok" and cell.mixer == "softmax_attention"
    assert cell.one_ms > 0 and cell.stacked_ms[2] > 0
    assert cell.ratio(2) == pytest.approx(2 * cell.one_ms / cell.stacked_ms[2])
    assert cell.memory_per_run_mb == {}  # measured on a GPU only


def test_stacking_stops_helping_where_the_ratio_grows_by_less_than_a_tenth():
    cell = SweepCell("r", "m", "n", one_ms=10.0, stacked_ms={2: 10.0, 4: 12.0, 8: 23.0})
    assert [cell.ratio(size) for size in (2, 4, 8)] == pytest.approx([2.0, 10 / 3, 80 / 23])
    assert cell.stops_helping() == 8
    assert SweepCell("r", "m", "n", one_ms=10.0, stacked_ms={2: 10.0, 4: 10.0}).stops_helping() is None


def test_a_stack_of_one_is_refused_in_one_line():
    with pytest.raises(ValueError, match="--sizes: expected stack sizes of 2 or more"):
        run(["dsf_mqar_models"], "smoke", (1, 2))
    result = CliRunner().invoke(app, ["bench", "sweep", "--sizes", "1", "--scale", "smoke"])
    assert result.exit_code != 0 and "--sizes" in result.output


def test_the_stack_size_chosen_is_the_best_median_ratio_where_it_pays_and_one_otherwise():
    def cell(**stacked):
        return SweepCell("r", "m", "n", one_ms=10.0, stacked_ms={int(k[1:]): v for k, v in stacked.items()})

    paying = [cell(s4=10.0, s16=20.0), cell(s4=20.0, s16=40.0), cell(s4=40.0, s16=200.0)]
    assert [c.ratio(16) for c in paying] == pytest.approx([8.0, 4.0, 0.8])
    assert best_stack(paying) == 16  # medians: 4 → 2.0, 16 → 4.0
    assert best_stack([cell(s4=38.0), cell(s4=35.0)]) == 1  # ratios 1.05 and 1.14: below 1.2
    assert best_stack([SweepCell("r", "m", "n", status="error")]) == 1


def test_the_measurement_is_written_as_json_with_the_stack_it_chooses(tmp_path):
    import json

    target = tmp_path / "sweep.json"
    args = ["bench", "sweep", "--reproductions", "dsf_mqar_models", "--scale", "smoke", "--sizes", "2"]
    result = CliRunner().invoke(app, [*args, "--mixers", "softmax_attention", "--steps", "1", "--json", str(target)])
    assert result.exit_code == 0, result.output
    written = json.loads(target.read_text())
    assert written["scale"] == "smoke" and written["best_stack"] in (1, 2)
    (row,) = written["cells"]
    assert row["mixer"] == "softmax_attention" and set(row["ratio"]) == {"2"}
