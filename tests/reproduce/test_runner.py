"""Running a reproduction: resuming after a kill repeats no finished run and loses none; a store holding other
configs under the same sweep names is refused untouched; ``list`` shows every reproduction module; bad input is a
one-line error with exit code 2."""

from __future__ import annotations

import json
import pkgutil
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import seqdyn.reproduce
from seqdyn import reproduce
from seqdyn.cli import app
from seqdyn.cli.reproductions import VERDICT_STYLES, report_markdown
from seqdyn.reproduce import dsf_mqar_models
from seqdyn.reproduce.runner import named_sweeps, run, verdict_rows
from seqdyn.train import sweep as sweep_module
from seqdyn.train.store import Store

REPRODUCTION = dsf_mqar_models.REPRODUCTION


def test_a_killed_reproduction_resumes_without_repeating_a_finished_run(tmp_path, monkeypatch):
    trained: list[str] = []
    real = sweep_module.train_or_record_failure

    def killed_after_two(config, store, **options):
        if len(trained) == 2:
            raise KeyboardInterrupt("killed")
        trained.append(config.run_id)
        return real(config, store, **options)

    monkeypatch.setattr(sweep_module, "train_or_record_failure", killed_after_two)
    with pytest.raises(KeyboardInterrupt):
        run(REPRODUCTION, "smoke", tmp_path / "runs.db", tmp_path / "out", progress=False)
    first = list(trained)

    def counting(config, store, **options):
        trained.append(config.run_id)
        return real(config, store, **options)

    monkeypatch.setattr(sweep_module, "train_or_record_failure", counting)
    written = run(REPRODUCTION, "smoke", tmp_path / "runs.db", tmp_path / "out", progress=False)
    again = trained[len(first) :]
    assert len(first) == 2 and not set(first) & set(again)
    assert len(first) + len(again) == 5
    statuses = {record.status for record in Store(tmp_path / "runs.db").runs()}
    assert statuses == {"finished"} and written.outcomes
    # the resumed call's wall time leaves out the two runs of the killed one, and its outputs say so
    assert written.runs_before == 2
    assert json.loads((written.folder / "verdict.json").read_text())["runs_before"] == 2
    assert "2 of the runs held results from an earlier call" in (written.folder / "table.md").read_text()
    assert "; 2 runs trained by an earlier call)" in report_markdown(tmp_path / "out")


@pytest.mark.parametrize("target", [REPRODUCTION.name, "all"])
def test_a_store_with_another_config_under_the_same_name_is_refused_untouched(target, tmp_path):
    """Also by ``all``, before the reproductions ahead of this one have trained anything."""
    store_path = tmp_path / "runs.db"
    sweep = named_sweeps(REPRODUCTION, "smoke")[0]
    other = sweep.model_copy(update={"optimizer": sweep.optimizer.model_copy(update={"weight_decay": 0.0})})
    store = Store(store_path)
    for config in other.expand():
        store.add_run(config.run_id, config.name, config.canonical(), sweep.name)
    before = [(r.id, r.status) for r in store.runs()]
    result = CliRunner().invoke(
        app, ["reproduce", target, "--scale", "smoke", "--store", str(store_path), "--out", str(tmp_path / "out")]
    )
    assert result.exit_code == 2
    assert "holds 5 run(s) of another config" in result.output
    assert [(r.id, r.status) for r in Store(store_path).runs()] == before
    assert not (tmp_path / "out").exists()


def test_list_shows_every_reproduction_module():
    folder = Path(seqdyn.reproduce.__file__).parent
    modules = {m.name for m in pkgutil.iter_modules([str(folder)])} - reproduce.FRAMEWORK
    assert set(reproduce.names()) == modules and modules
    result = CliRunner().invoke(app, ["reproduce", "list"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    for name in modules:
        assert name in result.output
        assert reproduce.get(name).figure in result.output
    # the paper scale: the GPU estimate where one exists, and "not measured" only where none does
    from seqdyn.cli.reproductions import _scale_time

    assert _scale_time(reproduce.get("dsf_qlstm_transition"), "paper") == "about 27 h on one H200 (estimated)"
    # the gpu scale: its estimate where the module has one, "—" where it has no gpu scale
    assert _scale_time(reproduce.get("dsf_qlstm_transition"), "gpu") == "about 50 min on one H200 (estimated)"
    assert _scale_time(reproduce.get("dlr_shift_length"), "gpu") == "—"
    assert "--scale smoke|cpu|gpu|paper" in result.output
    assert [name for name in sorted(modules) if _scale_time(reproduce.get(name), "paper") == "not measured"] == [
        "dsf_lm_perplexity"
    ]
    assert "estimated on one H200 from timed training steps" in result.output


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["no_such_thing"], "unknown reproduction 'no_such_thing'; known: coef_kernel_maps, coef_lambda_structure"),
        (["dsf_mqar_models", "--scale", "huge"], "--scale: expected one of smoke, cpu, gpu, paper, got 'huge'"),
        (["dlr_shift_length", "--scale", "gpu"], "--scale gpu: dlr_shift_length has no gpu scale"),
        (["dsf_mqar_models", "--scale", "gpu"], "--scale gpu: its runs train on a GPU and this machine has none"),
        (["all", "--scale", "gpu"], "--scale gpu: its runs train on a GPU and this machine has none"),
        (["dsf_mqar_models", "--scale", "paper"], "add --yes to start anyway"),
        (["report"], "no reproduction has written a verdict.json there yet"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(arguments, message, tmp_path, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    result = CliRunner().invoke(
        app, ["reproduce", *arguments, "--store", str(tmp_path / "runs.db"), "--out", str(tmp_path / "out")]
    )
    assert result.exit_code == 2
    assert message in result.output
    assert not (tmp_path / "runs.db").exists()


def test_report_prints_the_verdicts_written(tmp_path):
    run(REPRODUCTION, "smoke", tmp_path / "runs.db", tmp_path / "out", progress=False)
    result = CliRunner().invoke(app, ["reproduce", "report", "--out", str(tmp_path / "out")], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    for claim in REPRODUCTION.claims:
        assert claim.statement.split(" ")[0] in result.output
    assert "smoke" in result.output


def test_the_ours_cell_shows_what_was_measured_not_the_thresholds():
    from seqdyn.reproduce.runner import ours_text

    numbers = {
        "DLR SHIFT: DLR": 0.995,
        "DLR SHIFT: lowest seed": 0.99,
        "DLR SHIFT: threshold": 0.9,
        "MIPS: ATTENTION": 0.8,
        "MIPS: DLR": 0.01,
        "MIPS: difference": 0.79,
        "MIPS: seed spread": 0.02,
        "MIPS: margin": 0.2,
    }
    assert ours_text(numbers) == "DLR SHIFT 0.995, MIPS: ATTENTION 0.8, MIPS: DLR 0.01, MIPS: seed spread 0.02"


def test_report_markdown_has_one_row_per_claim_and_names_each_reproduction_once(tmp_path):
    run(REPRODUCTION, "smoke", tmp_path / "runs.db", tmp_path / "out", progress=False)
    result = CliRunner().invoke(app, ["reproduce", "report", "--out", str(tmp_path / "out"), "--markdown"])
    assert result.exit_code == 0, result.output
    assert result.output == report_markdown(tmp_path / "out")
    rows = [line for line in result.output.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == len(REPRODUCTION.claims)
    assert [row.count(f"`{REPRODUCTION.name}` (smoke, ") for row in rows] == [1] + [0] * (len(rows) - 1)
    for row, claim in zip(rows, REPRODUCTION.claims):
        cells = row.replace("\\|", "¦").split(" | ")
        assert len(cells) == 6 and cells[1] == claim.statement.replace("|", "¦")
        assert cells[4].startswith(("Welch's 95% interval", "Student's 95% interval"))  # the rule, then the seeds
    assert "evidence" not in result.output
    # the folder's hand-written evidence follows the full table, not the brief one
    (tmp_path / "out" / "evidence.md").write_text("## Evidence\n\n- *a claim*: why.\n")
    full = report_markdown(tmp_path / "out")
    assert full.startswith(result.output.split("\n\n| reproduction")[0].rstrip())  # the same title
    assert full.endswith("|\n\n## Evidence\n\n- *a claim*: why.\n")
    assert "The evidence after the table is `evidence.md`, written by hand." in full
    assert "Evidence" not in report_markdown(tmp_path / "out", brief=True)


def test_report_against_an_earlier_run_gives_each_claim_before_and_after_with_the_counts(tmp_path):
    run(REPRODUCTION, "smoke", tmp_path / "runs.db", tmp_path / "after", progress=False)
    (tmp_path / "before" / REPRODUCTION.name).mkdir(parents=True)
    verdict = json.loads((tmp_path / "after" / REPRODUCTION.name / "verdict.json").read_text())
    first, second, *rest = verdict["claims"]
    earlier = {"verdict": "held", "cause": None, "reason": "", "name": first["name"]}
    gone = {**second, "name": "a claim no longer made", "verdict": "did not hold", "cause": None}
    old = {**verdict, "date": "2026-11-28", "commit": "3810fbc", "claims": [{**first, **earlier}, gone, *rest]}
    (tmp_path / "before" / REPRODUCTION.name / "verdict.json").write_text(json.dumps(old))
    (tmp_path / "before" / "other").mkdir()  # a reproduction the new run did not make is left out
    (tmp_path / "before" / "other" / "verdict.json").write_text(json.dumps({**old, "reproduction": "other"}))
    result = CliRunner().invoke(
        app, ["reproduce", "report", "--out", str(tmp_path / "after"), "--against", str(tmp_path / "before")]
    )
    assert result.exit_code == 0, result.output
    rows = {line.split(" | ")[1]: line.split(" | ")[2:] for line in result.output.splitlines()[2:] if "`" in line}
    after = f"{verdict['date']}, {verdict['commit'].split()[0]}"
    now = first["verdict"] + (f" ({first['cause']})" if first["cause"] else "")
    assert rows[first["name"]] == ["held, 2026-11-28, 3810fbc", f"{now}, {after} |"]
    assert rows[second["name"]][0] == "—" and rows["a claim no longer made"][1] == "— |"
    assert "other" not in result.output

    def counts(claims):
        by_verdict = [sum(claim["verdict"] == name for claim in claims) for name in VERDICT_STYLES]
        return f"{len(claims)} claims: {by_verdict[0]} held, {by_verdict[1]} did not hold, {by_verdict[2]} inconclusive"

    assert result.output.endswith(f"\n\nBefore: {counts(old['claims'])}. After: {counts(verdict['claims'])}.\n")


def test_brief_report_gives_each_claim_by_its_name_and_an_inconclusive_verdict_its_cause(tmp_path):
    from seqdyn.reproduce.runner import brief_numbers, claim_cause, commit_text

    run(REPRODUCTION, "smoke", tmp_path / "runs.db", tmp_path / "out", progress=False)
    result = CliRunner().invoke(app, ["reproduce", "report", "--out", str(tmp_path / "out"), "--markdown", "--brief"])
    assert result.exit_code == 0 and result.output == report_markdown(tmp_path / "out", brief=True)
    # one reproduction: its scale, date and commit (with what it ran on) are said once above the table, not on its row
    verdict = json.loads((tmp_path / "out" / REPRODUCTION.name / "verdict.json").read_text())
    assert result.output.startswith(
        f"All at scale smoke, date {verdict['date']}, commit {commit_text(verdict)}.\n\n"
        "| reproduction (wall time) | claim |"
    )
    assert result.output.count("smoke") == 1
    rows = [line for line in result.output.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [row.replace("\\|", "¦").split(" | ")[1] for row in rows] == [claim.name for claim in REPRODUCTION.claims]
    assert (
        brief_numbers({"SHIFT: DLR": 0.997, "SHIFT: DSS-EXP": 0.998, "SHIFT: difference": 0.001, "CUMSUM: DLR": 1.0})
        == "SHIFT: DLR 0.997 vs DSS-EXP 0.998"
    )
    assert brief_numbers({"DLR": 0.5, "lowest seed": 0.4, "S6": 0.25}) == "DLR 0.5, S6 0.25"
    # a verdict.json written before claims recorded their cause: the cause its reason says
    assert [
        claim_cause({"verdict": "inconclusive", "reason": reason})
        for reason in (
            "control softmax on x 0.49 < 0.9 (...)",
            "budget: S6 best seed 0.26 ...",
            "L=64: the difference -0.2 is within the seed spread 0.7 of the margin",
            "S6: seed 2 (failed)",
        )
    ] == ["control", "budget", "seeds", None]
    assert claim_cause({"verdict": "held", "reason": ""}) is None
    assert claim_cause({"verdict": "inconclusive", "reason": "budget: S6", "cause": "seeds"}) == "seeds"


def test_the_brief_report_reads_a_verdict_json_written_before_claims_recorded_their_cause(tmp_path):
    run(REPRODUCTION, "smoke", tmp_path / "runs.db", tmp_path / "out", progress=False)
    path = tmp_path / "out" / REPRODUCTION.name / "verdict.json"
    verdict = json.loads(path.read_text())
    assert all("cause" in claim for claim in verdict["claims"])
    brief = report_markdown(tmp_path / "out", brief=True)
    path.write_text(
        json.dumps(
            verdict
            | {
                "claims": [
                    {key: value for key, value in claim.items() if key != "cause"} for claim in verdict["claims"]
                ]
            }
        )
    )
    assert report_markdown(tmp_path / "out", brief=True) == brief


def test_the_readme_links_the_verdicts_of_docs_reproductions_and_says_them_right(monkeypatch):
    """README.md's Reproductions section links docs/reproductions/README.md instead of copying its table; its counts
    are those of the verdicts committed there, and every claim it names as held is held there."""
    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)
    readme = (root / "README.md").read_text()
    assert "(docs/reproductions/README.md)" in readme and "| reproduction (" not in readme
    claims = verdict_rows("docs/reproductions")
    counts = {verdict: sum(claim["verdict"] == verdict for claim in claims) for verdict in VERDICT_STYLES}
    said = re.search(r"(\d+) claims: (\d+) held, (\d+) did not hold, (\d+) inconclusive", readme)
    assert said and [int(n) for n in said.groups()] == [len(claims), *counts.values()]
    held = {(claim["reproduction"], claim["name"]) for claim in claims if claim["verdict"] == "held"}
    named = re.findall(r"^- `(\w+)` — (.+?) \(", readme[readme.index("Among what held") :], flags=re.M)
    assert len(named) >= 5 and set(named) <= held, set(named) - held


def test_docs_reproductions_readme_is_the_markdown_report_of_its_verdicts(monkeypatch):
    """docs/reproductions/README.md lists exactly the verdicts committed beside it (regenerate it with
    `seqdyn reproduce report --out docs/reproductions --markdown > docs/reproductions/README.md`)."""
    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)
    assert (root / "docs" / "reproductions" / "README.md").read_text() == report_markdown("docs/reproductions")


def test_all_goes_on_past_a_reproduction_that_fails_and_names_it_at_the_end(tmp_path, monkeypatch):
    from seqdyn.cli import reproductions as commands
    from seqdyn.reproduce import dlr_context

    def broken(results, path):
        raise RuntimeError("a bug in its figure")

    monkeypatch.setattr(commands, "names", lambda: ["dlr_context", REPRODUCTION.name])
    monkeypatch.setattr(dlr_context.REPRODUCTION, "plot", broken)
    result = CliRunner().invoke(
        app,
        [
            "reproduce",
            "all",
            "--scale",
            "smoke",
            "--store",
            str(tmp_path / "runs.db"),
            "--out",
            str(tmp_path / "out"),
            "--workers",
            "1",
            "--no-progress",
        ],
        env={"COLUMNS": "300"},
    )
    assert result.exit_code == 1
    smoke = dlr_context.REPRODUCTION.wall_time["smoke"] + REPRODUCTION.wall_time["smoke"]
    assert f"2 reproductions at --scale smoke; 2 of them measured here, in {smoke:.0f} s together" in result.output
    assert "dlr_context failed (RuntimeError: a bug in its figure)" in result.output
    assert "1 of 2 reproductions failed: dlr_context" in result.output
    assert (tmp_path / "out" / REPRODUCTION.name / "verdict.json").exists()
    assert {record.status for record in Store(tmp_path / "runs.db").runs()} == {"finished"}


def test_the_paper_estimate_of_a_corpus_reproduction_builds_its_sweeps_on_the_given_data(monkeypatch):
    """Without a GPU, ``--scale paper`` says how long it would take; for the language model that arithmetic needs
    the sweeps on ``--data`` (before, it asked for --data that had been given)."""
    from seqdyn.cli import reproductions as commands

    lm = reproduce.get("dsf_lm_perplexity")
    smoke = named_sweeps(lm, "smoke")
    calls = []

    def sweeps_on(reproduction, scale, data=None):
        calls.append((scale, data))
        return smoke

    monkeypatch.setattr(commands, "named_sweeps", sweeps_on)
    assert commands.estimate_seconds(lm, "paper", "corpus.txt") == lm.wall_time["cpu"]
    assert calls == [("cpu", "corpus.txt"), ("paper", "corpus.txt")]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "not measured"), (100, "100 s"), (1_974, "33 min"), (7_199, "120 min"), (22_435, "6 h 14 min")],
)
def test_durations_read_in_seconds_minutes_or_hours(seconds, text):
    from seqdyn.cli.reproductions import _duration

    assert _duration(seconds) == text


def test_outputs_rewritten_from_finished_runs_keep_the_wall_time_of_their_training(tmp_path):
    """Run again over a store that holds every run finished, a reproduction rewrites its outputs (a changed
    figure, say) and keeps the wall time of the call that trained them, unless the folder held other runs."""
    first = run(REPRODUCTION, "smoke", tmp_path / "runs.db", tmp_path / "out", progress=False)
    (first.folder / "verdict.json").write_text(
        json.dumps({**json.loads((first.folder / "verdict.json").read_text()), "elapsed_s": 1234.5})
    )
    again = run(REPRODUCTION, "smoke", tmp_path / "runs.db", tmp_path / "out", progress=False)
    assert again.elapsed_s == 1234.5
    assert json.loads((again.folder / "verdict.json").read_text())["elapsed_s"] == 1234.5
    (again.folder / "results.csv").write_text("name,run_id\nother,000000000000\n")
    assert run(REPRODUCTION, "smoke", tmp_path / "runs.db", tmp_path / "out", progress=False).elapsed_s < 1234.5


def test_the_runner_writes_each_scales_wall_time_beside_the_verdict_and_a_published_one_is_what_list_shows(
    tmp_path, monkeypatch
):
    from seqdyn.reproduce import base
    from seqdyn.reproduce.runner import record_timing

    first = run(REPRODUCTION, "smoke", tmp_path / "runs.db", tmp_path / "out", progress=False, workers=1)
    timing = json.loads((first.folder / "timing.json").read_text())
    verdict = json.loads((first.folder / "verdict.json").read_text())
    assert timing["reproduction"] == REPRODUCTION.name and list(timing["scales"]) == ["smoke"]
    smoke = timing["scales"]["smoke"]
    assert (smoke["seconds"], smoke["date"], smoke["commit"]) == (
        verdict["elapsed_s"],
        verdict["date"],
        verdict["commit"],
    )
    assert (smoke["workers"], smoke["runs_before"]) == (1, 0)
    # the outputs rewritten from finished runs keep the call that trained them; another scale is added beside
    record_timing(first.folder, "smoke", 1234.5, 0, 2)
    run(REPRODUCTION, "smoke", tmp_path / "runs.db", tmp_path / "out", progress=False)
    assert json.loads((first.folder / "timing.json").read_text())["scales"]["smoke"]["seconds"] == 1234.5
    record_timing(first.folder, "cpu", 600.0, 3, 2)
    scales = json.loads((first.folder / "timing.json").read_text())["scales"]
    assert scales["smoke"]["seconds"] == 1234.5
    assert (scales["cpu"]["seconds"], scales["cpu"]["runs_before"]) == (600.0, 3)
    # what a reproduction says it takes is its published folder's timing, not a number in its code
    monkeypatch.setattr(base, "PUBLISHED", tmp_path / "out")
    assert REPRODUCTION.wall_time == {"smoke": 1234.5, "cpu": 600.0, "gpu": None, "paper": None}
    assert REPRODUCTION.paper_gpu_estimate == ""
    monkeypatch.setattr(base, "PUBLISHED", tmp_path / "nowhere")
    assert REPRODUCTION.wall_time == {"smoke": None, "cpu": None, "gpu": None, "paper": None}


def test_every_published_reproduction_has_its_measured_wall_times_beside_its_verdict():
    from seqdyn.reproduce.base import PUBLISHED

    for name in reproduce.names():
        timing = json.loads((PUBLISHED / name / "timing.json").read_text())
        assert timing["reproduction"] == name and reproduce.get(name).wall_time["cpu"] is not None
        assert all(
            set(entry) == {"seconds", "date", "commit", "workers", "runs_before", "note"}
            for entry in timing["scales"].values()
        )


def test_a_claim_open_for_the_budget_names_what_would_decide_it():
    """The paper scale's protocol (its first clause) and its estimated cost on one H200; at the paper scale, that
    the paper's own budget left it open; other verdicts untouched."""
    from types import SimpleNamespace

    from seqdyn.reproduce.claims import Outcome
    from seqdyn.reproduce.runner import with_what_decides

    reproduction = SimpleNamespace(
        reductions={"paper": "Table 8's settings: 300,000 steps of batch 32; five seeds."},
        paper_gpu_estimate="over 40 h",
    )
    budget = Outcome("inconclusive", {}, "budget: DLR still improving", cause="budget")
    assert with_what_decides(budget, reproduction, "cpu").reason == (
        "budget: DLR still improving; would decide it: --scale paper — Table 8's settings: 300,000 steps of batch "
        "32 (estimated over 40 h on one H200)"
    )
    unestimated = SimpleNamespace(reductions={}, paper_gpu_estimate="")
    assert with_what_decides(budget, unestimated, "cpu").reason.endswith("--scale paper (its cost not estimated yet)")
    assert with_what_decides(budget, reproduction, "paper").reason.endswith("; the paper's own budget left it open")
    held = Outcome("held", {"x": 1.0})
    assert with_what_decides(held, reproduction, "cpu") is held
    nearer = SimpleNamespace(**vars(reproduction), scales=("smoke", "cpu", "gpu", "paper"), gpu_minutes=40)
    assert with_what_decides(budget, nearer, "cpu").reason == (
        "budget: DLR still improving; would decide it: --scale gpu (estimated 40 min on one H200, one run at a "
        "time), else --scale paper — Table 8's settings: 300,000 steps of batch 32 (estimated over 40 h on one H200)"
    )
    assert "--scale gpu" not in with_what_decides(budget, nearer, "gpu").reason
    own = with_what_decides(budget, reproduction, "cpu", "Pathfinder at L = 16,384, 150,000 steps of batch 16")
    assert own.reason.endswith(
        "--scale paper — Pathfinder at L = 16,384, 150,000 steps of batch 16 (estimated over 40 h on one H200)"
    )
