"""Training throughput per mixer and the overhead of the training harness (``seqdyn bench train``
prints them).

For every mixer, a 2-layer model on MQAR (CPU: d = 128, L = 256; GPU: d = 512, L = 512, batch 64, bfloat16):

* **bare step** — forward, backward and AdamW step on one fixed batch, nothing else;
* **harness step** — :class:`seqdyn.train.loop.Trainer` steps: the shuffled batch of the step, the learning-rate
  schedule, the loss check, the progress bar, and a row in the results store every ``log_every`` steps.

The two are timed alternately, step by step, and their medians compared.  Tokens per second are those of the
harness; the overhead is ``1 − bare / harness`` (target < 5 %).  With ``--compile-step`` the bare step is also timed
with the model under ``torch.compile`` (its first call, the compilation, timed apart), alternately with the eager
one: whether compiling the training step pays, as the ratio eager / compiled.
"""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from seqdyn import mixers
from seqdyn.bench.measure import resolve_device
from seqdyn.core.autotune import elapsed_seconds


@dataclass
class TrainCell:
    mixer: str
    tokens_per_s: float | None = None
    bare_ms: float | None = None
    harness_ms: float | None = None
    status: str = "ok"
    note: str = ""
    compiled_ms: float | None = None
    compile_s: float | None = None
    #: the eager bare step timed alternately with the compiled one (``bare_ms`` is timed with the harness)
    eager_ms: float | None = None

    @property
    def compile_ratio(self) -> float | None:
        """The eager bare step's time over the compiled one's, timed in the same pairs (> 1: compiling pays)."""
        return None if self.compiled_ms is None else self.eager_ms / self.compiled_ms

    @property
    def overhead(self) -> float | None:
        if self.bare_ms is None or self.harness_ms is None:
            return None
        return 1.0 - self.bare_ms / self.harness_ms


def bench_config(mixer: str, device: torch.device, d_model: int, seq_len: int, batch: int, steps: int):
    from seqdyn.train.config import RunConfig

    gpu = device.type == "cuda"
    return RunConfig.model_validate(
        {
            "name": f"bench-{mixer}",
            "model": {"mixer": mixer, "d_model": d_model, "layers": 2},
            "task": {
                "name": "mqar",
                "params": {"seq_len": seq_len, "num_kv_pairs": seq_len // 8, "vocab_size": 8192},
                "train_examples": batch * (steps + 2),
                "test_examples": batch,
            },
            "train": {
                "steps": 10**6,
                "batch_size": batch,
                "device": str(device),
                "dtype": "bfloat16" if gpu else "float32",
            },
        }
    )


def _interleaved_ms(first, second, repeats: int, device: torch.device) -> tuple[float, float]:
    """Median step times (ms) of two step functions timed alternately, so that drifts in the machine's speed
    (other work, clock changes) fall on both alike."""

    def once(step) -> float:
        return elapsed_seconds(step, device) * 1000

    pairs = [(once(first), once(second)) for _ in range(repeats)]
    return statistics.median(a for a, _ in pairs), statistics.median(b for _, b in pairs)


def _bare_step(trainer, model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor):
    """Forward, backward and the optimizer's step on one fixed batch, nothing else: ``model`` is the trainer's
    own, or the same under ``torch.compile`` (the same weights and optimizer)."""

    def step() -> None:
        with trainer.autocast():
            loss = trainer.task.loss(model(inputs), targets)
        trainer.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        trainer.optimizer.step()

    return step


def _harness_step(trainer, store, run_id: str, bar, log_every: int):
    """One training step as the harness runs it: ``trainer.train_step()``, the progress bar advanced with its loss,
    and every ``log_every`` steps the loss logged to ``store`` and a heartbeat for the run ``run_id``."""

    def harness() -> None:
        loss = trainer.train_step()
        bar.advance(loss)
        if trainer.step % log_every == 0:
            store.log_metrics(run_id, trainer.step, 0.0, "train", {"loss": loss}, 0.0)
            store.heartbeat(run_id, "bench")

    return harness


def measure(
    mixer: str,
    device: torch.device,
    d_model: int,
    seq_len: int,
    batch: int,
    steps: int,
    log_every: int = 10,
    compile_step: bool = False,
) -> TrainCell:
    """Bare and harness step times of one mixer (a warm-up step each first); with ``compile_step`` also the bare
    step compiled, against the eager one."""
    from seqdyn.train.loop import Trainer
    from seqdyn.train.progress import RunProgress
    from seqdyn.train.store import Store

    config = bench_config(mixer, device, d_model, seq_len, batch, steps)
    with tempfile.TemporaryDirectory() as folder:
        store = Store(Path(folder) / "bench.db")
        store.add_run(config.run_id, config.name, config.canonical())
        store.claim(config.run_id, "bench")
        trainer = Trainer(config, store, checkpoint_dir=folder, owner="bench", progress=False)
        inputs, targets = (t[:batch].to(trainer.device) for t in trainer.train_data)
        bare = _bare_step(trainer, trainer.model, inputs, targets)
        bar = RunProgress(True, config.name, 10**6, 0)
        harness = _harness_step(trainer, store, config.run_id, bar, log_every)
        try:
            bare(), harness()
            bare_ms, harness_ms = _interleaved_ms(bare, harness, steps, device)
            eager_ms = compiled_ms = compile_s = None
            if compile_step:
                compiled = _bare_step(trainer, torch.compile(trainer.model), inputs, targets)
                compile_s = elapsed_seconds(compiled, device)  # the first call compiles
                eager_ms, compiled_ms = _interleaved_ms(bare, compiled, steps, device)
        finally:
            bar.close()
            store.close()
    return TrainCell(
        mixer,
        batch * seq_len / (harness_ms / 1000),
        bare_ms,
        harness_ms,
        compiled_ms=compiled_ms,
        compile_s=compile_s,
        eager_ms=eager_ms,
    )


def run(
    names=None, device: str = "auto", steps: int = 7, progress=None, compile_step: bool = False, **sizes: int
) -> tuple[list[TrainCell], dict]:
    """Measure every named mixer (default: all); ``sizes`` overrides ``d_model``, ``seq_len`` or ``batch``."""
    device_ = resolve_device(device)
    gpu = device_.type == "cuda"
    setup = {"d_model": 512 if gpu else 128, "seq_len": 512 if gpu else 256, "batch": 64 if gpu else 16}
    unknown = set(sizes) - set(setup)
    if unknown:
        raise ValueError(f"unknown size {sorted(unknown)}; sizes: {', '.join(setup)}")
    setup.update(sizes)
    cells = []
    for name in names or mixers.names():
        try:
            cell = measure(
                name, device_, setup["d_model"], setup["seq_len"], setup["batch"], steps, compile_step=compile_step
            )
        except (RuntimeError, ValueError) as error:  # e.g. out of memory or an option a width can't take
            cell = TrainCell(name, status="error", note=str(error).splitlines()[0][:80])
        cells.append(cell)
        if progress is not None:
            progress(cell)
    return cells, setup
