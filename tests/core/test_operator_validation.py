"""Bad input raises ``ValueError`` naming the argument, what was given and what is allowed."""

from __future__ import annotations

import pytest
import torch

import seqdyn

B, T, H, K, V = 2, 6, 3, 4, 5


def good(**changes):
    args = {"q": torch.randn(B, T, H, K), "k": torch.randn(B, T, H, K), "v": torch.randn(B, T, H, V)}
    args.update(changes)
    return args


BAD = [
    # (description, arguments, words the message must contain)
    ("q rank", good(q=torch.randn(B, T, K)), ["q", "4 dimensions", "[B, T, H, K]"]),
    ("k not a tensor", good(k=[[1.0]]), ["k", "tensor", "list"]),
    ("v integer", good(v=torch.ones(B, T, H, V, dtype=torch.long)), ["v", "floating-point", "torch.int64"]),
    ("batch mismatch", good(k=torch.randn(B + 1, T, H, K)), ["k", "batch size 3", "2"]),
    ("time mismatch", good(v=torch.randn(B, T + 1, H, V)), ["v", "sequence length 7", "6"]),
    ("head mismatch", good(k=torch.randn(B, T, 2, K)), ["k", "2 heads", "3 or 1"]),
    ("key dim mismatch", good(k=torch.randn(B, T, H, K + 1)), ["k", "key dimension 5", "4"]),
    ("empty sequence", good(q=torch.randn(B, 0, H, K), k=torch.randn(B, 0, H, K), v=torch.randn(B, 0, H, V)), ["T=0"]),
    ("log_decay rank", good(log_decay=torch.randn(B, T)), ["log_decay", "[B, T, H]", "[B, T, H, K]"]),
    ("log_decay K", good(log_decay=torch.randn(B, T, H, K + 2)), ["log_decay", "last dimension 6", "K=4"]),
    ("log_decay heads", good(log_decay=torch.randn(B, T, 2)), ["log_decay", "2 heads"]),
    ("householder rank", good(householder=torch.rand(B, T, H, K, 1)), ["householder", "[B, T, H]", "factors per step"]),
    ("householder factors", good(householder=torch.rand(B, T, H, K)), ["k: with householder", "[B, T, H, n, K]"]),
    (
        "direction without householder",
        good(householder_dir=torch.randn(B, T, H, K)),
        ["householder_dir", "without householder"],
    ),
    (
        "direction shape",
        good(householder=torch.rand(B, T, H), householder_dir=torch.randn(B, T, H, K + 1)),
        ["householder_dir", "last dimension"],
    ),
    ("scale type", good(scale="big"), ["scale", "float", "[B, T, H]", "str"]),
    ("scale shape", good(scale=torch.rand(B, T + 1, H)), ["scale", "sequence length"]),
    ("scale integer tensor", good(scale=torch.tensor(2)), ["scale", "floating-point"]),
    ("readout name", good(readout="gelu"), ["readout", "'gelu'", "exp", "identity", "callable"]),
    ("normalizer name", good(normalizer="softmax"), ["normalizer", "'softmax'", "abs_max1", "sum"]),
    ("normalizer shape", good(normalizer=torch.rand(B, T)), ["normalizer", "[B, T, H]"]),
    ("backend name", good(backend="flash"), ["backend", "'flash'", "chunk", "scan", "auto"]),
    (
        "scan with householder",
        good(backend="scan", householder=torch.rand(B, T, H)),
        ["backend='scan' cannot compute", "householder", "'quadratic'", "'recurrent'", "'chunk'"],
    ),
    (
        "scan with exp",
        good(backend="scan", readout="exp", normalizer="sum"),
        ["backend='scan' cannot compute", "readout='exp'", "'chunk'"],
    ),
    (
        "chunk with relu",
        good(backend="chunk", readout="relu"),
        ["backend='chunk' cannot compute", "'relu'", "'quadratic'", "'recurrent'"],
    ),
    ("chunk with exp and none", good(backend="chunk", readout="exp"), ["backend='chunk' cannot compute"]),
    ("chunk size", good(chunk_size=0), ["chunk_size", "positive integer", "0"]),
    ("state format", good(normalizer="sum", initial_state=torch.zeros(B, H, K, V)), ["initial_state", "(S", "z"]),
    ("state shape", good(initial_state=torch.zeros(B, H, V, K)), ["initial_state", "[B, H, K, V]", "[2, 3, 5, 4]"]),
    ("state integer", good(initial_state=torch.zeros(B, H, K, V, dtype=torch.int32)), ["initial_state", "floating"]),
    ("cache format", good(readout="exp", initial_state=torch.zeros(B, H, K, V)), ["initial_state", "key cache"]),
    (
        "cache key width",
        good(readout="exp", initial_state=(torch.zeros(B, H, 3, K + 1), torch.zeros(B, H, 3, V))),
        ["initial_state", "K=4"],
    ),
]


@pytest.mark.parametrize("description,arguments,words", BAD, ids=[b[0] for b in BAD])
def test_bad_input_names_the_argument(description, arguments, words):
    arguments = dict(arguments)
    q, k, v = arguments.pop("q"), arguments.pop("k"), arguments.pop("v")
    with pytest.raises(ValueError) as error:
        seqdyn.coefficient_dynamics(q, k, v, **arguments)
    for word in words:
        assert word in str(error.value), f"{description}: {word!r} not in {str(error.value)!r}"


def test_device_mismatch_is_named():
    meta = torch.empty(B, T, H, V, device="meta")
    with pytest.raises(ValueError, match="v: on device meta"):
        seqdyn.coefficient_dynamics(torch.randn(B, T, H, K), torch.randn(B, T, H, K), meta)


def test_coefficients_validate_like_the_operator():
    with pytest.raises(ValueError, match="readout"):
        seqdyn.coefficients(torch.randn(B, T, H, K), torch.randn(B, T, H, K), readout="nope")
    with pytest.raises(ValueError, match="initial_state"):
        seqdyn.coefficients(torch.randn(B, T, H, K), torch.randn(B, T, H, K), initial_state=torch.zeros(1))
    for readout in ("identity", "exp"):  # K = 0: no keys to score (issue 18)
        with pytest.raises(ValueError, match=r"key and value dimensions must be ≥ 1, got K=0$"):
            seqdyn.coefficients(torch.randn(B, T, H, 0), torch.randn(B, T, H, 0), readout=readout)


def test_mixed_precision_promotes_and_returns_the_dtype_of_v():
    out = seqdyn.coefficient_dynamics(
        torch.randn(B, T, H, K, dtype=torch.float64), torch.randn(B, T, H, K), torch.randn(B, T, H, V)
    )
    assert out.dtype == torch.float32
    _, state = seqdyn.coefficient_dynamics(
        torch.randn(B, T, H, K, dtype=torch.float64),
        torch.randn(B, T, H, K),
        torch.randn(B, T, H, V),
        output_final_state=True,
    )
    assert state.dtype == torch.float64


def test_without_a_chunk_size_householder_factors_of_narrow_keys_chunk_by_32_and_every_other_problem_by_64():
    from seqdyn.core.dynamics import Dynamics
    from seqdyn.core.problem import DEFAULT_CHUNK_SIZE, DELTA_RULE_CHUNK_SIZE, HOUSEHOLDER_CHUNK_SIZE, prepare

    q, k, v = (torch.randn(1, 8, 2, 4) for _ in range(3))
    beta, g = torch.rand(1, 8, 2), -torch.rand(1, 8, 2)
    delta_rule = Dynamics(q, k, v, log_decay=g, householder=beta, scale=beta)
    assert (DELTA_RULE_CHUNK_SIZE, HOUSEHOLDER_CHUNK_SIZE, DEFAULT_CHUNK_SIZE) == (32, 32, 64)
    assert prepare(delta_rule).chunk_size == DELTA_RULE_CHUNK_SIZE
    assert prepare(delta_rule, chunk_size=16).chunk_size == 16
    assert prepare(Dynamics(q, k, v, log_decay=g)).chunk_size == DEFAULT_CHUNK_SIZE
    other_direction = Dynamics(q, k, v, householder=beta, householder_dir=torch.randn(1, 8, 2, 4))
    assert prepare(other_direction).chunk_size == HOUSEHOLDER_CHUNK_SIZE
    diagonal = Dynamics(q, k, v, log_decay=-torch.rand(1, 8, 2, 4), householder=beta)
    assert prepare(diagonal).chunk_size == HOUSEHOLDER_CHUNK_SIZE
    wide = torch.randn(1, 8, 2, 128)
    wide_keys = Dynamics(wide, wide, v, log_decay=-torch.rand(1, 8, 2, 128), householder=beta)
    assert prepare(wide_keys).chunk_size == DEFAULT_CHUNK_SIZE
    assert prepare(Dynamics(wide, wide, v, householder=beta)).chunk_size == DELTA_RULE_CHUNK_SIZE
