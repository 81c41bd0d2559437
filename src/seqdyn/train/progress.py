"""Terminal output: the progress bar of a run (steps done, the last training loss and test metric, time left) and
the console the commands print their tables to."""

from __future__ import annotations


def console():
    """A rich console; output that is not a terminal (logs, CI, files) gets 150 columns so tables stay whole."""
    import sys

    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=150)


class RunProgress:
    """A rich progress bar for one run (or nothing, when ``enabled`` is false)."""

    def __init__(self, enabled: bool, name: str, total: int, start: int):
        self.bar = None
        if not enabled:
            return
        from rich.markup import escape
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[info]}"), TimeRemainingColumn(), transient=True)
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
