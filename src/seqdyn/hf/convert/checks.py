"""The checks of the conversion: each family's tiny random model built offline (:func:`tiny_model`) against its
conversion (:func:`check_conversion`, what ``seqdyn convert --check`` prints and the tests bound).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from seqdyn.hf.convert.checkpoints import quiet_transformers
from seqdyn.hf.convert.registry import TINY_CONFIGS, from_transformers


def tiny_model(family: str, dtype: torch.dtype = torch.float32, seed: int = 0, **changes: Any) -> nn.Module:
    """A random transformers model of ``family`` at :data:`TINY_CONFIGS`' size (with ``changes`` to its config),
    in eval mode, every weight moved off transformers' initialization (which leaves some at 0 or 1, where a wrongly
    mapped weight would not show)."""
    if family not in TINY_CONFIGS:
        raise ValueError(f"family: expected one of {', '.join(TINY_CONFIGS)}, got {family!r}")
    model_class, config_class, fields = TINY_CONFIGS[family]
    return random_model(model_class, config_class, {**fields, **changes}, dtype, seed)


def random_model(
    model_class: str, config_class: str, fields: dict[str, Any], dtype: torch.dtype = torch.float32, seed: int = 0
) -> nn.Module:
    """transformers' ``model_class`` of ``config_class(**fields)``, random from ``seed``, in eval mode, every weight
    moved by N(0, 0.05²) off its initialization."""
    import transformers

    torch.manual_seed(seed)
    model = getattr(transformers, model_class)(getattr(transformers, config_class)(**fields)).to(dtype).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    return model


def check_conversion(family: str, length: int = 40, new_tokens: int = 32) -> dict[str, Any]:
    """The largest differences between ``family``'s tiny model and its conversion, relative to the largest logit:
    a whole forward in float32 and in float64, and the logits of ``new_tokens`` greedy tokens (float64) after a
    prompt the seqdyn model prefills in chunks; whether the generated tokens agree."""
    inputs = torch.randint(
        0, TINY_CONFIGS[family][2]["vocab_size"], (2, length), generator=torch.Generator().manual_seed(1)
    )
    report: dict[str, Any] = {"family": family, "class": TINY_CONFIGS[family][0]}
    for dtype, name in ((torch.float32, "forward float32"), (torch.float64, "forward float64")):
        theirs = tiny_model(family, dtype)
        ours = from_transformers(theirs)
        with torch.no_grad(), quiet_transformers():  # (its notes on the fallbacks it runs instead of mamba_ssm)
            expected = theirs(inputs).logits.double()
            report[name] = float((ours(inputs).logits.double() - expected).abs().max() / expected.abs().max())
    prompt, mask = inputs[:1, :24], torch.ones_like(inputs[:1, :24])
    settings = dict(
        max_new_tokens=new_tokens,
        do_sample=False,
        output_logits=True,
        return_dict_in_generate=True,
        pad_token_id=0,
        attention_mask=mask,
    )
    with quiet_transformers():
        expected, got = theirs.generate(prompt, **settings), ours.generate(prompt, **settings)
    steps = min(len(expected.logits), len(got.logits))  # a different end-of-sequence token may stop one early
    theirs_logits, ours_logits = (torch.stack(out.logits[:steps]).double() for out in (expected, got))
    report[f"decode {new_tokens} tokens"] = float((ours_logits - theirs_logits).abs().max() / theirs_logits.abs().max())
    report["same tokens"] = bool(torch.equal(got.sequences, expected.sequences))
    with torch.no_grad():
        whole, cache, chunks = theirs(prompt).logits.double(), None, []
        for piece in prompt.split(10, dim=1):
            out = ours(piece, cache=cache, use_cache=True)
            cache = out.cache
            chunks.append(out.logits)
    report["chunked prefill"] = float((torch.cat(chunks, dim=1).double() - whole).abs().max() / whole.abs().max())
    return report
