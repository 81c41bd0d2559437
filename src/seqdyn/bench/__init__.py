"""Benchmarks behind ``seqdyn bench``: speed and memory targets live here, never in timed unit tests."""


def console():
    """A rich console; output that is not a terminal (logs, CI, files) gets 150 columns so tables stay whole."""
    import sys

    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=150)
