"""``seqdyn conform``: correct implementations pass every case, each kind of bug fails the cases it touches and
shrinks to a small failing case, and bad input is one line."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from typer.testing import CliRunner

from seqdyn.cli import app
from seqdyn.conform import Case, conform, load_callable, sweep
from seqdyn.conform.harness import check_case
from seqdyn.conform.ops import OPS, adapter_for
from seqdyn.hf.acceleration.functions import gated_delta_rule

QUICK = sweep(quick=True, dtypes=("float32",))


def seqdyn_chunk(query, key, value, g, beta, initial_state=None, output_final_state=False, **kwargs):
    """seqdyn's own chunk form, in transformers' convention."""
    return gated_delta_rule(query, key, value, g, beta, initial_state=initial_state, output_final_state=True)


def fla_style(q, k, v, beta, g, scale=None, initial_state=None, output_final_state=False):
    """The same, in flash-linear-attention's convention (grouped key heads taken)."""
    return gated_delta_rule(q, k, v, g, beta, initial_state=initial_state, output_final_state=True)


def forgets_the_initial_state(query, key, value, g, beta, initial_state=None, **kwargs):
    return seqdyn_chunk(query, key, value, g, beta, initial_state=None)


def wrong_after_one_chunk(query, key, value, g, beta, initial_state=None, **kwargs):
    """Right within the first 64 steps, with the decays after them dropped."""
    return seqdyn_chunk(query, key, value, torch.cat([g[:, :64], 0 * g[:, 64:]], 1), beta, initial_state)


def noisy(relative: float):
    def implementation(query, key, value, g, beta, initial_state=None, **kwargs):
        output, state = seqdyn_chunk(query, key, value, g, beta, initial_state)
        unit = torch.finfo(output.dtype).eps / 2
        generator = torch.Generator().manual_seed(3)
        jitter = 2 * torch.rand(output.shape, generator=generator, dtype=output.dtype) - 1
        return output + relative * unit * output.abs().max().detach() * jitter, state

    return implementation


def crashes(query, key, value, g, beta, **kwargs):
    raise RuntimeError("CUDA error: an illegal memory access was encountered")


def test_seqdyns_own_chunk_form_conforms_in_float32_and_float64():
    report = conform(seqdyn_chunk, "gated_delta_rule", sweep(quick=True, dtypes=("float32", "float64")))
    assert report["failed"] == 0 and report["passed"] == len(report["cases"]) == 18


def test_transformers_fallbacks_conform_in_float32_and_bfloat16_and_compute_float64_in_float32():
    pytest.importorskip("transformers")
    fn = load_callable("transformers.models.qwen3_next.modeling_qwen3_next:torch_chunk_gated_delta_rule")
    assert conform(fn, "gated_delta_rule", sweep(quick=True))["failed"] == 0
    in_float64 = conform(fn, "gated_delta_rule", sweep(quick=True, dtypes=("float64",))[:2])
    assert in_float64["failed"] == 2  # its float32 round-off is a million times float64's tolerance
    assert min(case["worst_ratio"] for case in in_float64["cases"]) > 1e4


def test_each_convention_is_recognized_and_only_seqdyns_takes_grouped_heads():
    report = conform(fla_style, "gated_delta_rule", QUICK)
    assert report["adapter"] == "fla" and report["failed"] == 0
    assert not any("key heads" in case["case"] for case in report["cases"])
    own = conform(gated_delta_rule, "gated_delta_rule", QUICK)
    assert own["adapter"] == "seqdyn" and own["failed"] == 0
    assert any("key heads" in case["case"] for case in own["cases"])
    assert conform(seqdyn_chunk, "gated_delta_rule", QUICK[:1])["adapter"] == "transformers"


@pytest.mark.parametrize("name", ["naive_recurrent_gated_delta_rule", "naive_chunk_gated_delta_rule"])
def test_flash_linear_attentions_naive_references_conform(name):
    """Their naive.py, vendored unchanged (MIT); a decay's gradient that is zero in exact arithmetic (T = 1, zero
    state) is measured against the case's largest magnitude, where the chunk form's round-off is 1e-9."""
    from tests.conform.fixtures import fla_gated_delta_rule_naive as fla

    report = conform(getattr(fla, name), "gated_delta_rule", QUICK)
    assert report["adapter"] == "fla" and report["failed"] == 0 and report["passed"] == 9


def test_a_forgotten_initial_state_fails_only_the_cases_with_one_and_shrinks_to_a_tiny_one():
    report = conform(forgets_the_initial_state, "gated_delta_rule", QUICK)
    failing = [case["case"] for case in report["cases"] if not case["passed"]]
    assert failing and all("initial state" in case for case in failing)
    smallest = report["minimized"]["case"]
    assert smallest.startswith("B=1 T=1 H=1 K=1 V=1, initial state")


def test_a_bug_after_the_first_chunk_shrinks_to_the_first_length_past_it():
    report = conform(wrong_after_one_chunk, "gated_delta_rule", QUICK)
    assert all(case["passed"] for case in report["cases"] if " T=64 " in case["case"] or " T=7 " in case["case"])
    assert report["minimized"]["case"].startswith("B=1 T=65 ")


@pytest.mark.parametrize(("relative", "passed"), [(1.0, True), (1e4, False)])
def test_the_tolerance_admits_round_off_of_the_dtype_and_not_a_thousand_times_more(relative, passed):
    case = Case(1, 65, 2, 32, 32, dtype="float32")
    spec = OPS["gated_delta_rule"]
    checked = check_case(spec, adapter_for(seqdyn_chunk, spec.name), noisy(relative), case)
    assert checked.passed is passed and (passed or checked.quantity == "output")


def test_a_crash_inside_the_implementation_is_a_failing_case_with_its_message():
    report = conform(crashes, "gated_delta_rule", QUICK[:2])
    assert report["failed"] == 2 and "illegal memory access" in report["cases"][0]["error"]
    assert report["minimized"]["error"].startswith("RuntimeError")


def test_a_case_shrinks_along_one_axis_at_a_time():
    case = Case(2, 65, 4, 32, 16, key_heads=2, initial_state=True, decay="extreme")
    smaller = case.smaller()
    assert replace(case, batch=1) in smaller and replace(case, length=32) in smaller
    assert replace(case, heads=2, key_heads=None) in smaller and replace(case, decay="typical") in smaller
    assert all(each.size < case.size or each.decay != case.decay or not each.initial_state for each in smaller)


def test_bad_input_is_one_line_naming_the_argument():
    runner = CliRunner()
    for arguments, message in [
        (
            ["tests.conform.test_conform:seqdyn_chunk", "--op", "ssd_scan"],
            "--op: seqdyn knows gated_delta_rule, selective_scan, causal_conv1d",
        ),
        (["no.such.module:f", "--op", "gated_delta_rule"], "callable 'no.such.module:f'"),
        (["json:dumps", "--op", "gated_delta_rule"], "match no calling convention"),
        (["tests.conform.test_conform:seqdyn_chunk", "--op", "gated_delta_rule", "--dtypes", "f8"], "--dtypes"),
    ]:
        result = runner.invoke(app, ["conform", *arguments])
        assert result.exit_code == 2 and message in result.output, result.output


def test_the_command_writes_the_report_and_exits_1_on_a_failing_case(tmp_path):
    runner = CliRunner()
    path = tmp_path / "report.json"
    target = "tests.conform.test_conform:forgets_the_initial_state"
    result = runner.invoke(app, ["conform", target, "--op", "gated_delta_rule", "--quick", "--json", str(path)])
    assert result.exit_code == 1 and "smallest failing case: B=1 T=1" in result.output
    report = json.loads(path.read_text())
    assert report["callable"] == target and report["failed"] > 0
    ok = runner.invoke(
        app, ["conform", "tests.conform.test_conform:seqdyn_chunk", "--op", "gated_delta_rule", "--quick"]
    )
    assert ok.exit_code == 0, ok.output


def naive_selective_scan(
    u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False, return_last_state=False
):  # noqa: N803
    """Gu & Dao 2023, Algorithm 2, step by step as mamba_ssm's ``selective_scan_ref`` states it (x ``[b, d, l]``,
    A ``[d, n]``, B, C ``[b, n, l]``)."""
    delta = delta + delta_bias[:, None] if delta_bias is not None else delta
    delta = torch.nn.functional.softplus(delta) if delta_softplus else delta
    state = u.new_zeros(u.shape[0], u.shape[1], A.shape[1])
    outputs = []
    for t in range(u.shape[2]):
        step = delta[:, :, t, None]  # [b, d, 1]
        state = torch.exp(step * A) * state + step * B[:, None, :, t] * u[:, :, t, None]
        outputs.append((state * C[:, None, :, t]).sum(-1))
    y = torch.stack(outputs, dim=-1) + (u * D[:, None] if D is not None else 0)
    y = y * torch.nn.functional.silu(z) if z is not None else y
    return (y, state) if return_last_state else y


def test_mambas_reference_scan_and_seqdyns_accelerated_one_conform():
    from seqdyn.hf.acceleration.functions import selective_scan

    naive = conform(naive_selective_scan, "selective_scan", sweep(quick=True, dtypes=("float32", "float64")))
    assert naive["adapter"] == "mamba_ssm" and naive["failed"] == 0 and naive["passed"] > 10
    assert all("initial state" not in case["case"] and "N=" in case["case"] for case in naive["cases"])
    accelerated = conform(selective_scan, "selective_scan", QUICK)
    assert accelerated["adapter"] == "transformers" and accelerated["failed"] == 0


def test_a_scan_without_its_skip_connection_fails_on_the_output_alone():
    def no_skip(u, delta, A, B, C, D=None, z=None, delta_bias=None, **kwargs):  # noqa: N803
        return naive_selective_scan(u, delta, A, B, C, None, z, delta_bias, **kwargs)

    report = conform(no_skip, "selective_scan", QUICK[:1])
    assert report["failed"] == 1 and report["cases"][0]["ratios"]["final_state"] < 1
    assert report["minimized"]["case"].startswith("B=1 T=1 H=1 N=1")


def test_the_precision_report_is_within_a_few_round_offs_of_each_dtype_and_names_a_bad_dtype(tmp_path):
    from seqdyn.conform.precision import precision_report

    rows = precision_report("selective_scan", lengths=(64,), dtypes=("float32", "bfloat16"))
    assert {(row["dtype"], row["backend"]) for row in rows} == {
        (dtype, backend) for dtype in ("float32", "bfloat16") for backend in ("scan", "recurrent")
    }
    for row in rows:
        assert row["finite"] and row["output_error"] < 16 * row["unit_roundoff"]
    bf16 = next(row for row in rows if row["dtype"] == "bfloat16")
    assert bf16["output_error"] > 100 * next(row for row in rows if row["dtype"] == "float32")["output_error"]
    result = CliRunner().invoke(app, ["precision", "--op", "selective_scan", "--lengths", "32", "--dtypes", "f8"])
    assert result.exit_code == 2 and "--dtypes" in result.output
    single = CliRunner().invoke(app, ["precision", "--op", "causal_conv1d", "--lengths", "32"])
    assert single.exit_code == 2 and "--op: the precision report covers" in single.output, single.output
    ok = CliRunner().invoke(
        app, ["precision", "--lengths", "32", "--dtypes", "float32", "--json", str(tmp_path / "p.json")]
    )
    assert ok.exit_code == 0 and json.loads((tmp_path / "p.json").read_text())[0]["length"] == 32


@pytest.mark.parametrize("op", ["ssd", "linear_rnn"])
def test_the_precision_report_covers_ssd_and_the_linear_recurrence_on_every_backend(op):
    """Mamba-2's SSD (chunk, scan, recurrent) and RecurrentGemma's linear recurrence (scan, chunk, recurrent), each
    computed in the dtype by that backend (the recurrence accumulated in it too), within a few round-offs."""
    from seqdyn.conform.precision import BACKENDS, precision_report

    rows = precision_report(op, lengths=(96,), dtypes=("float32", "bfloat16"))
    assert {row["backend"] for row in rows} == set(BACKENDS[op]) and len(BACKENDS[op]) == 3
    for row in rows:
        assert row["finite"] and row["output_error"] < 16 * row["unit_roundoff"], row
    float32 = max(row["output_error"] for row in rows if row["dtype"] == "float32")
    assert min(row["output_error"] for row in rows if row["dtype"] == "bfloat16") > 100 * float32


def test_seqdyns_short_convolution_conforms_and_a_flipped_kernel_fails_at_one_step():
    from seqdyn.hf.acceleration.functions import causal_conv1d

    report = conform(causal_conv1d, "causal_conv1d", sweep(quick=True, dtypes=("float32", "float64")))
    assert report["adapter"] == "transformers" and report["failed"] == 0 and report["passed"] > 10
    assert {"output", "dx", "dweight", "dbias"} <= set(report["cases"][0]["ratios"])

    def flipped(x, weight, bias=None, activation=None):  # the taps in the wrong order: correlation for convolution
        return causal_conv1d(x, weight.flip(-1), bias, activation)

    broken = conform(flipped, "causal_conv1d", QUICK, adapter="causal_conv1d")
    assert broken["failed"] > 0 and broken["minimized"]["case"].startswith("B=1 T=1 H=1 N=1")  # w_{w−1} against w_0


PACKED = [case for case in sweep(dtypes=("float32",)) if case.documents > 1]


def runs_across_documents(query, key, value, g, beta, initial_state=None, cu_seqlens=None, **kwargs):
    """Takes ``cu_seqlens`` and ignores it: the row runs as one sequence from the first document's state (the
    field's "state leaks across packed documents" bug)."""
    first = None if initial_state is None else initial_state[:1]
    output, state = seqdyn_chunk(query, key, value, g, beta, first)
    return output, state if cu_seqlens is None else state.expand(len(cu_seqlens) - 1, *state.shape[1:])


def test_packed_rows_have_uneven_documents_that_end_inside_and_across_chunks():
    assert Case(1, 65, 2, 32, 32, documents=3).offsets == (0, 7, 28, 65)
    assert any(
        64 in case.offsets[1:-1] or any(a < 64 < b for a, b in zip(case.offsets, case.offsets[1:])) for case in PACKED
    )
    with pytest.raises(ValueError, match="documents: 3 packed documents need one row"):
        Case(2, 65, 2, 32, 32, documents=3)
    assert all(each.documents <= each.length for each in Case(1, 4, 1, 2, 2, documents=3).smaller())


def test_seqdyns_packed_delta_rule_and_convolution_conform_to_each_document_alone():
    """The reference runs each document alone from its own row of the initial state; seqdyn's packed paths agree in
    float32 and float64. A convention without the packing input (transformers' fallback) is not given packed rows."""
    from seqdyn.hf.acceleration.functions import causal_conv1d

    for dtype in ("float32", "float64"):
        cases = [replace(case, dtype=dtype) for case in PACKED]
        delta = conform(gated_delta_rule, "gated_delta_rule", cases)
        assert delta["failed"] == 0 and delta["passed"] == 3 and "documents packed" in delta["cases"][0]["case"]
        conv = conform(causal_conv1d, "causal_conv1d", cases)
        assert conv["failed"] == 0 and conv["passed"] >= 1
    assert conform(seqdyn_chunk, "gated_delta_rule", PACKED + QUICK[:1])["passed"] == 1


def test_a_state_leaking_across_packed_documents_fails_every_packed_row_and_shrinks_to_two_steps():
    report = conform(runs_across_documents, "gated_delta_rule", PACKED + QUICK[:2], adapter="seqdyn")
    failing = [case["case"] for case in report["cases"] if not case["passed"]]
    assert len(failing) == 3 and all("documents packed" in case for case in failing)
    assert report["minimized"]["case"].startswith("B=1 T=2 (2 documents packed) H=1 K=1 V=1")

    def conv_across(x, weight, bias=None, activation=None, seq_idx=None):
        from seqdyn.hf.acceleration.functions import causal_conv1d

        return causal_conv1d(x, weight, bias, activation)

    conv = conform(conv_across, "causal_conv1d", PACKED, adapter="causal_conv1d")
    assert conv["failed"] >= 1 and conv["minimized"]["case"].startswith("B=1 T=2 (2 documents packed) H=1 N=1")


def test_mamba2s_ssd_scan_by_transformers_and_by_seqdyn_conforms_with_grouped_b_and_c():
    """transformers' mamba2_chunk_scan computes in float32 whatever its inputs (float64 fails by design)."""
    from seqdyn.hf.acceleration.functions import ssd_chunk_scan

    own = conform(ssd_chunk_scan, "ssd", sweep(quick=True, dtypes=("float32", "float64")))
    assert own["adapter"] == "transformers" and own["failed"] == 0
    assert any("key heads" in case["case"] for case in own["cases"])
    pytest.importorskip("transformers")
    fallback = load_callable("transformers.models.mamba2.modeling_mamba2:mamba2_chunk_scan")
    assert conform(fallback, "ssd", sweep(quick=True))["failed"] == 0
    assert conform(fallback, "ssd", sweep(quick=True, dtypes=("float64",))[:2])["failed"] == 2


def ssd_across_documents(hidden_states, dt, A, B, C, chunk_size, seq_idx=None, **kwargs):  # noqa: N803
    """seqdyn's SSD with ``seq_idx`` dropped: its state runs across the packed documents."""
    from seqdyn.hf.acceleration.functions import ssd_chunk_scan

    return ssd_chunk_scan(hidden_states, dt, A, B, C, chunk_size, **kwargs)


def test_packed_ssd_rows_conform_by_seq_idx_each_document_from_a_zero_state():
    """``seq_idx`` (mamba_ssm's) packs SSD rows: seqdyn's scan keeps the documents apart in float32 and float64; one
    that ignores it fails every packed row; a packed row with initial states is not given (``seq_idx`` cannot say
    them), nor is a packed row to a convention without ``seq_idx`` (transformers' fallback)."""
    from seqdyn.hf.acceleration.functions import ssd_chunk_scan

    for dtype in ("float32", "float64"):
        cases = [replace(case, dtype=dtype) for case in PACKED]
        own = conform(ssd_chunk_scan, "ssd", cases)
        assert own["failed"] == 0 and own["passed"] == 1 and "documents packed" in own["cases"][0]["case"]
        assert "initial state" not in own["cases"][0]["case"]
    broken = conform(ssd_across_documents, "ssd", PACKED, adapter="transformers")
    failing = [case["case"] for case in broken["cases"] if not case["passed"]]
    assert failing and all("documents packed" in case for case in failing)
    pytest.importorskip("transformers")
    fallback = load_callable("transformers.models.mamba2.modeling_mamba2:mamba2_chunk_scan")
    assert not any("documents packed" in case["case"] for case in conform(fallback, "ssd", PACKED + QUICK[:1])["cases"])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_chunk_backends_scalar_decay_gradient_keeps_its_precision_under_strong_decays(dtype):
    """Decays down to e^−4 a step: ∂g taken as differences of cumulative sums lost 2-4× the tolerance here (the
    gradient ~ e^−16 beside terms ~ 1); summed over the segments that contain each step it stays within half of it."""
    from seqdyn.hf.acceleration.functions import ssd_chunk_scan

    spec = OPS["ssd"]
    case = Case(1, 4, 1, 16, 32, decay="extreme", dtype=dtype)
    checked = check_case(spec, adapter_for(ssd_chunk_scan, "ssd"), ssd_chunk_scan, case)
    assert checked.passed and max(checked.ratios["dA"], checked.ratios["ddt_bias"]) < 0.5


def ignores_resets(hidden_states, recurrent_gate, reset, recurrent_states=None):
    from seqdyn.hf.acceleration.functions import linear_rnn_scan

    return linear_rnn_scan(hidden_states, recurrent_gate, torch.zeros_like(reset), recurrent_states)


def test_recurrent_gemmas_linear_recurrence_conforms_with_resets_where_packed_documents_begin():
    from seqdyn.hf.acceleration.functions import linear_rnn_scan

    cases = sweep(quick=True, dtypes=("float32", "float64"))
    own = conform(linear_rnn_scan, "linear_rnn", cases)
    assert own["failed"] == 0 and any("documents packed" in case["case"] for case in own["cases"])
    broken = conform(ignores_resets, "linear_rnn", cases)
    failing = [case["case"] for case in broken["cases"] if not case["passed"]]
    assert failing and all("documents packed" in case for case in failing)
    pytest.importorskip("transformers")
    method = "transformers.models.recurrent_gemma.modeling_recurrent_gemma:RecurrentGemmaRglru._rnn_scan"
    fallback = conform(load_callable(method), "linear_rnn", sweep(quick=True))
    assert fallback["failed"] == 0 and fallback["passed"] == len(fallback["cases"])


@pytest.mark.parametrize("strength", [0.5, 4.0, 30.0])
def test_the_chunk_backends_diagonal_decay_gradient_stays_at_round_off_under_strong_decays(strength):
    """A diagonal decay's ∂g still goes through suffix sums; per channel the cancellation stays at round-off: every
    gradient within 1e-13 of the recurrent backend's in float64 (measured 9e-15 at decays down to e^−4 a step)."""
    from seqdyn.core.operator import coefficient_dynamics

    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 65, 2, 16, generator=generator, dtype=torch.float64) for _ in range(3))
    g = -strength * torch.rand(1, 65, 2, 16, generator=generator, dtype=torch.float64)
    weights = torch.randn(1, 65, 2, 16, generator=generator, dtype=torch.float64)
    grads = {}
    for backend in ("recurrent", "chunk"):
        leaves = [t.clone().requires_grad_() for t in (q, k, v, g)]
        out = coefficient_dynamics(*leaves[:3], log_decay=leaves[3], backend=backend)
        grads[backend] = torch.autograd.grad((out * weights).sum(), leaves)
    for ours, reference in zip(grads["chunk"], grads["recurrent"]):
        assert (ours - reference).abs().max() <= 1e-13 * reference.abs().max()
