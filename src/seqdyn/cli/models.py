"""The model side of the command line: ``seqdyn mixers`` (the registered mixers and their options),
``seqdyn convert`` (transformers checkpoints to seqdyn), ``seqdyn config schema`` (the config reference) and
``seqdyn demo`` (the operator's backends against the reference)."""

from __future__ import annotations

import re
from typing import Optional

import typer

from seqdyn.cli.common import fail

config_app = typer.Typer(help="The run and sweep configs (YAML).", no_args_is_help=True)


def demo(
    quick: bool = typer.Option(
        False,
        help="Only T=256 and 1024 in the benchmark table, without the slow recurrent reference's timings "
        "(under a minute).",
    ),
) -> None:
    """The operator demo: every backend against the reference, then the benchmark table."""
    from seqdyn.bench.operator import run_demo

    run_demo(quick=quick)


@config_app.command("schema")
def config_schema() -> None:
    """Print the config reference as Markdown (docs/config.md): each field's type, default, values and meaning."""
    from seqdyn.train.config_reference import config_reference

    typer.echo(config_reference(), nl=False)


def convert(
    model_dir: Optional[str] = typer.Argument(
        None,
        metavar="MODEL_DIR",
        help="A transformers checkpoint folder (config.json and its weights) of a supported family.",
    ),
    out_dir: Optional[str] = typer.Argument(None, metavar="OUT_DIR", help="A new folder for the seqdyn checkpoint."),
    check: bool = typer.Option(
        False,
        "--check",
        help="Convert a tiny random model of every supported family, built "
        "offline, and print the largest differences from transformers.",
    ),
) -> None:
    """Convert a transformers model to seqdyn: the same logits, its tokenizer and generation config copied.

    Families: Mamba, Falcon-Mamba, Mamba-2, Qwen3.5, Qwen3-Next, Qwen3.5-MoE, Bamba, Granite-MoE-Hybrid,
    Nemotron-H, OLMo-Hybrid, RecurrentGemma, Falcon-H1, Jamba, MiniMax-01, LFM2, LFM2-MoE, RWKV-4, Kimi-Linear,
    Bailing-hybrid, xLSTM 7B, Zamba, Zamba2. The result loads with transformers' AutoModelForCausalLM once seqdyn.hf is
    imported, and opens in `seqdyn inspect OUT_DIR --text ...` and the analysis API as coefficient dynamics.
    """
    try:
        from seqdyn.hf.convert import TINY_CONFIGS, UnsupportedModel, check_conversion, convert_checkpoint
    except ImportError as error:
        fail(str(error))
    if check:
        _print_checks([check_conversion(family) for family in TINY_CONFIGS])
        return
    if model_dir is None or out_dir is None:
        fail("convert: give MODEL_DIR and OUT_DIR (or --check)")
    try:
        written = convert_checkpoint(model_dir, out_dir)
    except UnsupportedModel as error:
        fail(str(error))
    typer.echo(f"{written}: a seqdyn checkpoint converted from {model_dir}")


def _print_checks(reports: list[dict]) -> None:
    """``convert --check``'s tables: each converted family's differences, then each linear-recurrent family of
    transformers that is refused, with what seqdyn lacks to compute it exactly."""
    from rich.table import Table

    from seqdyn.hf.convert import NOT_YET
    from seqdyn.train.progress import console

    columns = [key for key in reports[0] if key != "family"]
    table = Table(title="seqdyn convert --check: largest |seqdyn − transformers| / largest |logit|, tiny models")
    for column in ("family", *columns):
        table.add_column(column)
    for report in reports:
        table.add_row(
            report["family"],
            *(f"{report[key]:.1e}" if isinstance(report[key], float) else str(report[key]) for key in columns),
        )
    refused = Table(title="refused: the linear-recurrent families of transformers seqdyn does not compute exactly yet")
    refused.add_column("family")
    refused.add_column("what seqdyn lacks for it")
    for family, reason in sorted(NOT_YET.items()):
        refused.add_row(family, reason)
    console().print(table)
    console().print(refused)


def list_mixers(
    name: Optional[str] = typer.Argument(
        None,
        metavar="NAME",
        help="A mixer, or the import path of your own (my_package.my_module:MyMixer): print "
        "its equations and what each option means.",
    ),
) -> None:
    """List the registered mixers with their options and defaults, or document one (seqdyn mixers custom)."""
    from rich.console import Console
    from rich.table import Table

    from seqdyn import mixers

    if name is not None:
        try:
            typer.echo(mixers.describe(name).text(), nl=False)
        except ValueError as error:
            fail(f"NAME: {error}")
        return
    table = Table(
        title="seqdyn mixers (seqdyn.mixers.build(name, d_model, **options))",
        caption=f"sizes at d_model = {SIZE_WIDTH} with the defaults; state: the floats the layer keeps per sequence "
        f"after {SIZE_LENGTH:,} tokens (÷ tokens: what attention's cache adds per token). seqdyn mixers NAME: its "
        "equations and what each option means",
    )
    for column in ("name", "what it is", "parameters", f"state at {SIZE_LENGTH:,}", "options (defaults)"):
        table.add_column(column, justify="right" if column == "parameters" else "left", no_wrap=column == "name")
    for name in mixers.names():
        parameters, state = mixer_sizes(name)
        summary = first_sentence(mixers.describe(name).summary)
        options = ", ".join(f"{k}={v!r}" for k, v in mixers.options(name).items())
        table.add_row(name, summary, f"{parameters:,}", state, options)
    Console().print(table)


def first_sentence(text: str) -> str:
    """The first sentence of ``text`` (an author list's "et al." does not end one)."""
    return re.split(r"(?<!\bal)\.(?:\s|$)", text.strip(), maxsplit=1)[0]


#: the width and the sequence length `seqdyn mixers` measures every mixer's size at
SIZE_WIDTH, SIZE_LENGTH = 64, 1024


def mixer_sizes(name: str) -> tuple[int, str]:
    """Mixer ``name``'s parameters at :data:`SIZE_WIDTH` with its defaults, and its state after :data:`SIZE_LENGTH`
    tokens in floats (with the floats per token where it grows with the sequence)."""
    from seqdyn import mixers

    mixer = mixers.build(name, SIZE_WIDTH)
    parameters = sum(p.numel() for p in mixer.parameters())
    state = mixer.state_size(SIZE_LENGTH)
    grows = mixer.state_size(2 * SIZE_LENGTH) > state
    return parameters, f"{state:,}" + (f" ({state // SIZE_LENGTH:,} per token)" if grows else "")
