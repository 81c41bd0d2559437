"""Peer checks of the newest transitions against flash-linear-attention's own reference code, in float64.

    python tools/peer_check_fla.py --fla PATH [--commit REV] [--write-fixture tests/core/fixtures/fla_naive.json]

PATH is a flash-linear-attention checkout or its bare git directory (``REV``, default ``HEAD``). The script reads
each op's ``naive.py`` there (its code stays out of this project), lifts it to float64 (their references compute in
float32: ``.float()`` becomes ``.double()``, and the default dtype is float64), runs it on seeded inputs and
compares seqdyn's every backend with it. ``--write-fixture`` also saves each case's seqdyn arguments and fla's
outputs as numbers, which ``tests/core/test_fla_fixtures.py`` checks in CI without flash-linear-attention. Exits 1
if any comparison is off by more than 1e-10.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import subprocess
import sys
import types
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import seqdyn  # noqa: E402

TOLERANCE = 1e-10
B, T, H, K, V, N = 2, 9, 2, 4, 3, 2  # N: Householder factors per token


def naive_module(fla: Path, commit: str, op: str) -> types.ModuleType:
    """``fla/ops/OP/naive.py`` (or ``fla/ops/OP`` where OP names a file) of the checkout or git directory ``fla``,
    lifted to float64."""
    relative = f"fla/ops/{op}" if op.endswith(".py") else f"fla/ops/{op}/naive.py"
    if (fla / relative).exists():
        source = (fla / relative).read_text()
    else:
        source = subprocess.run(
            ["git", "--git-dir", str(fla), "show", f"{commit}:{relative}"], check=True, capture_output=True, text=True
        ).stdout
    source = re.sub(r"torch\.float(32)?\b", "torch.float64", source.replace(".float()", ".double()"))
    module = types.ModuleType(f"fla_naive_{op.replace('/', '_').removesuffix('.py')}")
    exec(compile(source, relative, "exec"), module.__dict__)
    return module


def inputs(seed: int) -> dict[str, torch.Tensor]:
    """Seeded float64 inputs: unit keys (so every delta-rule factor is a contraction), decays in (0.5, 1)."""
    gen = torch.Generator().manual_seed(seed)
    randn = lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float64)  # noqa: E731
    rand = lambda *shape: torch.rand(*shape, generator=gen, dtype=torch.float64)  # noqa: E731
    return {
        "q": randn(B, T, H, K),
        "k": F.normalize(randn(B, T, H, K), dim=-1),
        "k_factors": F.normalize(randn(B, T, H, N, K), dim=-1),
        "v": randn(B, T, H, V),
        "v_factors": randn(B, T, H, N, V),
        "beta": rand(B, T, H),
        "beta_factors": rand(B, T, H, N),
        "log_decay": torch.log(0.5 + 0.5 * rand(B, T, H)),
        "log_decay_diagonal": torch.log(0.5 + 0.5 * rand(B, T, H, K)),
        "removal_key": F.normalize(randn(B, T, H, K), dim=-1),  # RWKV-7's κ̂
        "rate": rand(B, T, H, K),  # its in-context learning rate a
    }


def cases(fla: Path, commit: str, x: dict[str, torch.Tensor]):
    """``(name, fla's output, seqdyn's description)`` for each op."""
    kda = naive_module(fla, commit, "kda")
    for name in ("naive_recurrent_kda", "naive_chunk_kda"):
        options = {"chunk_size": 3} if name == "naive_chunk_kda" else {}
        length = T - T % 3 if options else T
        part = {key: value[:, :length] for key, value in x.items()}
        expected = getattr(kda, name)(
            part["q"], part["k"], part["v"], part["log_decay_diagonal"], part["beta"], **options
        )[0]
        yield (
            f"kda/{name}",
            expected,
            dict(
                q=part["q"],
                k=part["k"],
                v=part["v"],
                householder=part["beta"],
                scale=part["beta"],
                log_decay=part["log_decay_diagonal"],
                decay_first=True,
                query_scale=K**-0.5,
            ),
        )
    product = naive_module(fla, commit, "gated_delta_product")
    flat = lambda t: t.movedim(3, 2).flatten(1, 2)  # noqa: E731  [B, T, H, n, …] -> [B, T·n, H, …]: fla's layout
    expected = product.naive_recurrent_gated_delta_product(
        x["q"],
        flat(x["k_factors"]),
        flat(x["v_factors"]),
        x["log_decay"],
        flat(x["beta_factors"]),
        None,
        None,
        num_householder=N,
    )[0]
    yield (
        "gated_delta_product/naive_recurrent_gated_delta_product",
        expected,
        dict(
            q=x["q"],
            k=x["k_factors"],
            v=x["v_factors"],
            householder=x["beta_factors"],
            scale=x["beta_factors"],
            log_decay=x["log_decay"],
            query_scale=1.0,
        ),
    )
    gla = naive_module(fla, commit, "gla")  # HGRN2 runs on it with k = 1 − f
    forget = torch.exp(x["log_decay_diagonal"])
    expected = gla.naive_recurrent_gla(x["q"], 1 - forget, x["v"], x["log_decay_diagonal"])[0]
    yield (
        "gla/naive_recurrent_gla (HGRN2's k = 1 − f)",
        expected,
        dict(q=x["q"], k=1 - forget, v=x["v"], log_decay=x["log_decay_diagonal"], query_scale=1.0),
    )
    simple = naive_module(fla, commit, "simple_gla")  # lightning attention: a fixed decay per head, no scale
    fixed = x["log_decay"][:1, :1].expand(B, T, H)
    expected = simple.naive_chunk_simple_gla(x["q"], x["k"], x["v"], fixed, chunk_size=4, scale=1.0)[0]
    yield (
        "simple_gla/naive_chunk_simple_gla (lightning attention)",
        expected,
        dict(q=x["q"], k=x["k"], v=x["v"], log_decay=fixed, scale=1.0, query_scale=1.0),
    )
    path = naive_module(fla, commit, "path_attn")  # PaTH-FoX: Householder transitions inside softmax, FoX's gate
    w = F.normalize(x["k_factors"][:, :, :, 0], dim=-1)
    beta = 2 * x["beta"]
    expected = path.naive_path_attn(x["q"], x["k"], x["v"], w, beta, x["log_decay"], K**-0.5, chunk_size=4)
    yield (
        "path_attn/naive_path_attn",
        expected,
        dict(
            q=x["q"],
            k=x["k"],
            v=x["v"],
            readout="exp",
            normalizer="sum",
            householder=beta,
            householder_dir=w,
            outer_log_decay=x["log_decay"] * K**-0.5,  # fla scales the gate with the scores: (s + G_i − G_j)/√K
            query_scale=1.0,
            backends=("quadratic", "recurrent", "auto"),
        ),
    )
    forgetting = naive_module(fla, commit, "forgetting_attn")
    expected = forgetting.naive_forgetting_attn(x["q"], x["k"], x["v"], x["log_decay"])
    yield (
        "forgetting_attn/naive_forgetting_attn",
        expected,
        dict(
            q=x["q"],
            k=x["k"],
            v=x["v"],
            readout="exp",
            normalizer="sum",
            outer_log_decay=x["log_decay"],
            query_scale=1.0,
        ),
    )


def low_rank_cases(fla: Path, commit: str, x: dict[str, torch.Tensor]):
    """The generalized delta rule, ``S_t = (D_t + β_t α_tᵀ) S_{t−1} + k_t v_tᵀ`` (``dplr``; ``iplr`` without D), on
    RWKV-7's rank-one part α = −κ̂, β = κ̂ ⊙ a: seqdyn's ``low_rank_write`` β and ``low_rank_read`` α; and RWKV-6,
    whose output reads the state before the step plus the bonus ``q_tᵀ Diag(u) k_t v_t`` (seqdyn's ``bonus``).  fla
    lays these references out head first, ``[B, H, T, ·]``."""
    alpha, beta = -x["removal_key"], x["removal_key"] * x["rate"]
    first = lambda t: t.transpose(1, 2)  # noqa: E731  [B, T, H, ·] <-> [B, H, T, ·]
    for op, decayed in (("dplr", True), ("iplr", False)):
        module = naive_module(fla, commit, f"generalized_delta_rule/{op}")
        decay = (first(x["log_decay_diagonal"]),) if decayed else ()
        for name in (f"{op}_recurrence", f"{op}_chunkwise"):
            options = {"chunk_size": 3} if name.endswith("chunkwise") else {}
            tensors = (first(x[key]) for key in ("q", "k", "v"))
            expected = getattr(module, name)(*tensors, first(alpha), first(beta), *decay, **options)[0]
            description = dict(q=x["q"], k=x["k"], v=x["v"], low_rank_write=beta, low_rank_read=alpha, scale=1.0)
            if decayed:
                description["log_decay"] = x["log_decay_diagonal"]
            yield f"generalized_delta_rule/{op}/{name}", first(expected), dict(description, query_scale=K**-0.5)
    bonus = x["rate"][0, 0]  # RWKV-6's u [H, K]
    description = dict(q=x["q"], k=x["k"], v=x["v"], log_decay=x["log_decay_diagonal"], bonus=bonus, scale=1.0)
    tensors = [first(x[key]) for key in ("q", "k", "v", "log_decay_diagonal")]
    recurrent = naive_module(fla, commit, "rwkv6/recurrent_naive.py").naive_recurrent_rwkv6
    yield "rwkv6/naive_recurrent_rwkv6", first(recurrent(*tensors, bonus)[0]), dict(description, query_scale=K**-0.5)
    chunked = naive_module(fla, commit, "rwkv6/chunk_naive.py").naive_chunk_rwkv6  # no query scale; T = 3 chunks
    part = {
        key: value[:, : T - T % 3] if getattr(value, "ndim", 0) > 2 else value for key, value in description.items()
    }
    expected = chunked(*(t[:, :, : T - T % 3] for t in tensors), bonus, chunk_size=3)
    yield "rwkv6/naive_chunk_rwkv6", first(expected), dict(part, query_scale=1.0)


def seqdyn_outputs(description: dict, backend: str) -> torch.Tensor:
    """seqdyn's output for a case (``query_scale`` multiplies q: where fla scales q, seqdyn's ``b`` scales keys)."""
    description = dict(description)
    scale = description.pop("query_scale")
    description.pop("backends", None)
    if description.get("readout", "identity") == "identity":
        description["q"] = description["q"] * scale
    return seqdyn.coefficient_dynamics(**description, backend=backend)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fla", type=Path, required=True, help="a flash-linear-attention checkout or git directory")
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--write-fixture", type=Path, default=None)
    arguments = parser.parse_args()
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)  # what their references allocate without a dtype (path_attn's A) too
    x, failures, fixture = inputs(0), 0, {"cases": []}
    every = itertools.chain(
        cases(arguments.fla, arguments.commit, x), low_rank_cases(arguments.fla, arguments.commit, x)
    )
    for name, expected, description in every:
        backends = description.get("backends", ("quadratic", "recurrent", "chunk", "auto"))
        errors = {backend: float((seqdyn_outputs(description, backend) - expected).abs().max()) for backend in backends}
        worst = max(errors.values())
        failures += worst > TOLERANCE
        print(
            f"{name}: " + ", ".join(f"{b} {e:.1e}" for b, e in errors.items()) + (" FAIL" if worst > TOLERANCE else "")
        )
        tensors = {key: value.tolist() for key, value in description.items() if isinstance(value, torch.Tensor)}
        options = {key: value for key, value in description.items() if not isinstance(value, torch.Tensor)}
        fixture["cases"].append({"name": name, "expected": expected.tolist(), "tensors": tensors, "options": options})
    if arguments.write_fixture is not None:
        fixture["source"] = f"flash-linear-attention {arguments.commit}"
        arguments.write_fixture.write_text(json.dumps(fixture))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
