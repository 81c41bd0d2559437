"""Terminal output: the progress bar of a run (steps done, the last training loss and test metric, time left) and
the console the commands print their tables to."""

from __future__ import annotations


def console():
    """A rich console; output that is not a terminal (logs, CI, files) gets 150 columns so tables stay whole."""
    import sys

    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=150)


def progress_bar(*columns, console=None):
    """A transient rich ``Progress`` (default columns unless ``columns``) that draws only on a terminal: piped
    into a file or a log it prints nothing, not even the blank line a stopped bar leaves."""
    from rich.progress import Progress

    console = console or _default_console()
    return Progress(*columns, console=console, transient=True, disable=not console.is_terminal)


def _default_console():
    from rich.console import Console

    return Console()


class RunProgress:
    """A rich progress bar for one run (or nothing, when ``enabled`` is false)."""

    def __init__(self, enabled: bool, name: str, total: int, start: int):
        self.bar = None
        if not enabled:
            return
        from rich.markup import escape
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn

        self.bar = progress_bar(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeRemainingColumn(),
        )
        self.task = self.bar.add_task(escape(name[:60]), total=total, completed=start, info="")
        self.bar.start()
        self.metric = ""

    def advance(self, loss: float) -> None:
        if self.bar is not None:
            self.bar.update(self.task, advance=1, info=f"loss {loss:.3f} {self.metric}")

    def show(self, name: str, value: float) -> None:
        self.metric = f"{name} {value:.3f}"

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
