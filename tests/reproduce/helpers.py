"""Hand-made result rows for the claim predicates of the reproductions."""

from __future__ import annotations

from typing import Any

from seqdyn.reproduce.base import Results


def row(best: float | None, status: str = "finished", reason: str | None = None, **keys: Any) -> dict[str, Any]:
    """One run's row: dotted keys given with ``__`` for ``.`` (``model__mixer="s6"``)."""
    values = {key.replace("__", "."): value for key, value in keys.items()}
    name = ", ".join(f"{key}={value}" for key, value in values.items())
    return {"name": name, "run_id": str(abs(hash(name)))[:12], "status": status, "reason": reason, "best": best,
            "final": best, "steps": 10, "wall_time": 1.0, **values}


def results(rows: list[dict[str, Any]], scale: str = "cpu") -> Results:
    return Results(scale, tuple(rows))
