"""The model side of the command line: ``seqdyn mixers`` (the registered mixers and their options),
``seqdyn convert`` (transformers checkpoints to seqdyn), ``seqdyn config schema`` (the config reference) and
``seqdyn demo`` (the operator's backends against the reference)."""

from __future__ import annotations

from typing import Optional

import typer

from seqdyn.cli.common import fail

config_app = typer.Typer(help="The run and sweep configs (YAML).", no_args_is_help=True)


def demo(
    quick: bool = typer.Option(False, help="Only T=256 and 1024 in the benchmark table (about 75 s on 2 cores)."),
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
    Nemotron-H, OLMo-Hybrid, RecurrentGemma, Falcon-H1. The result loads with transformers'
    AutoModelForCausalLM once seqdyn.hf is imported, and opens in `seqdyn inspect OUT_DIR --text ...` and the
    analysis API as coefficient dynamics.
    """
    try:
        from seqdyn.hf.convert import TINY_CONFIGS, UnsupportedModel, check_conversion, convert_checkpoint
    except ImportError as error:
        fail(str(error))
    if check:
        from rich.table import Table

        from seqdyn.train.progress import console

        reports = [check_conversion(family) for family in TINY_CONFIGS]
        columns = [key for key in reports[0] if key != "family"]
        table = Table(title="seqdyn convert --check: largest |seqdyn − transformers| / largest |logit|, tiny models")
        for column in ("family", *columns):
            table.add_column(column)
        for report in reports:
            table.add_row(
                report["family"],
                *(f"{report[key]:.1e}" if isinstance(report[key], float) else str(report[key]) for key in columns),
            )
        console().print(table)
        return
    if model_dir is None or out_dir is None:
        fail("convert: give MODEL_DIR and OUT_DIR (or --check)")
    try:
        written = convert_checkpoint(model_dir, out_dir)
    except UnsupportedModel as error:
        fail(str(error))
    typer.echo(f"{written}: a seqdyn checkpoint converted from {model_dir}")


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
        caption="seqdyn mixers NAME: its equations and what each option means",
    )
    table.add_column("name")
    table.add_column("options (defaults)")
    for name in mixers.names():
        table.add_row(name, ", ".join(f"{k}={v!r}" for k, v in mixers.options(name).items()))
    Console().print(table)
