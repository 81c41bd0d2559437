"""Where precision is lost: seqdyn's operator on one op's problem, per backend and dtype, against float64.

For each length, backend and dtype, the inputs rounded to the dtype are computed by that backend in that dtype and
compared with the float64 reference of the same rounded inputs: the error of the outputs and of the final state
relative to their largest magnitude, beside the dtype's unit round-off, and the state's largest magnitude (where a
format would overflow: float16 above 65,504).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from seqdyn.conform.cases import DTYPES, Case
from seqdyn.conform.ops import check_op, rnn_call, scan_reference, ssd_call
from seqdyn.core.operator import coefficient_dynamics

#: the backends compared, per op
BACKENDS = {
    "gated_delta_rule": ("chunk", "recurrent"),
    "selective_scan": ("scan", "recurrent"),
    "ssd": ("chunk", "scan", "recurrent"),
    "linear_rnn": ("scan", "chunk", "recurrent"),
}


def precision_report(
    op: str, lengths: tuple[int, ...] = (1024, 4096), dtypes: tuple[str, ...] = ("float32", "bfloat16", "float16")
) -> list[dict[str, Any]]:
    """One row per (length, backend, dtype): errors of output and final state relative to their largest
    magnitude, the dtype's unit round-off, the largest state entry, and whether anything was not finite."""
    spec, rows = check_op(op), []
    if op not in BACKENDS:
        raise ValueError(
            f"--op: the precision report covers {', '.join(BACKENDS)} (the ops with several backends); got {op!r}"
        )
    compute = COMPUTE[op]
    for length in lengths:
        case = spec.case(Case(1, length, 4, 64, 64))
        inputs = spec.inputs(case, torch.Generator().manual_seed(0))
        for dtype in dtypes:
            rounded = {name: _in_dtype(tensor, DTYPES[dtype]) for name, tensor in inputs.items()}
            reference = spec.reference({name: _in_dtype(tensor, torch.float64) for name, tensor in rounded.items()})
            for backend in BACKENDS[op]:
                got = compute(rounded, backend)
                rows.append(_row(op, length, dtype, backend, got, reference))
    return rows


def _delta_rule_in_dtype(inputs: dict[str, torch.Tensor], backend: str) -> dict[str, torch.Tensor]:
    """The gated delta rule by the operator's ``backend`` in the inputs' dtype (the fallbacks' signature computes it in
    float32 at least: it is called as the operator itself)."""
    q, k, v, g, beta = (inputs[name] for name in ("query", "key", "value", "g", "beta"))
    output, state = coefficient_dynamics(
        q * q.shape[-1] ** -0.5,
        k,
        v,
        log_decay=g,
        householder=beta,
        scale=beta,
        output_final_state=True,
        backend=backend,
    )
    return {"output": output, "final_state": state}


def _ssd_in_dtype(inputs: dict[str, torch.Tensor], backend: str) -> dict[str, torch.Tensor]:
    """Mamba-2's SSD by the operator's ``backend`` in the inputs' dtype (in mamba_ssm's signature)."""
    from seqdyn.hf.acceleration.functions import ssd_chunk_scan

    return ssd_call(functools.partial(ssd_chunk_scan, backend=backend), inputs)


def _linear_rnn_in_dtype(inputs: dict[str, torch.Tensor], backend: str) -> dict[str, torch.Tensor]:
    """RecurrentGemma's linear recurrence by the operator's ``backend``, accumulated in the inputs' dtype."""
    from seqdyn.hf.acceleration.functions import linear_rnn_scan

    dtype = inputs["hidden_states"].dtype
    return rnn_call(functools.partial(linear_rnn_scan, acc_dtype=dtype, backend=backend), inputs)


def _in_dtype(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A floating-point input in ``dtype`` (a mask as it is)."""
    return tensor.to(dtype) if tensor.is_floating_point() else tensor


#: how each op is computed by one of the operator's backends in the inputs' dtype
COMPUTE = {
    "gated_delta_rule": _delta_rule_in_dtype,
    "selective_scan": scan_reference,
    "ssd": _ssd_in_dtype,
    "linear_rnn": _linear_rnn_in_dtype,
}


def _row(op: str, length: int, dtype: str, backend: str, got: dict, reference: dict) -> dict[str, Any]:
    errors = {
        name: float((got[name].double() - reference[name]).abs().max() / reference[name].abs().max())
        for name in reference
    }
    return {
        "op": op,
        "length": length,
        "dtype": dtype,
        "backend": backend,
        "unit_roundoff": torch.finfo(DTYPES[dtype]).eps / 2,
        "output_error": errors["output"],
        "state_error": errors["final_state"],
        "state_max": float(reference["final_state"].abs().max()),
        "finite": bool(all(torch.isfinite(value).all() for value in got.values())),
    }
