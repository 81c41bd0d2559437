"""Packed against padded language-model training on the same documents: the loss curves and the tokens per second.

The documents are the paragraphs of this repository's own Markdown (``README.md`` and ``docs/*.md``, cut at blank
lines: real English of mixed lengths, on every checkout), bytes, at most ``--seq-len`` + 1 tokens each.  Two runs of
the same config — a Gated DeltaNet model with every second layer softmax attention — differ only in
``train.pack``: right-padded rows (every row ``--seq-len`` long) against the batch's documents end to end
(``cu_seqlens``).  Both draw the same documents at every step from the same initialization, so their losses must
agree step by step up to round-off; their steps are timed alternately, one thread, and the real tokens per second
compared.

Run: python examples/pilots/packed_training.py [--steps 200] [--seq-len 512] [--batch 16] (a table of the loss
every ``--every`` steps, then a ``RESULT`` line).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch

from seqdyn.core.autotune import elapsed_seconds
from seqdyn.train.config import parse_config
from seqdyn.train.loop import Trainer

ROOT = Path(__file__).resolve().parents[2]


def corpus(folder: Path) -> Path:
    texts = [(ROOT / "README.md").read_text()] + [p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))]
    path = folder / "paragraphs.txt"
    path.write_text("\n\n".join(texts), encoding="utf-8")
    return path


def config(path: Path, pack: bool, steps: int, seq_len: int, batch: int):
    return parse_config(
        {
            "name": f"pilot-{'packed' if pack else 'padded'}",
            "model": {"mixer": ["gated_deltanet", "softmax_attention"], "d_model": 64, "layers": 2},
            "task": {
                "name": "lm",
                "params": {"path": str(path), "seq_len": seq_len, "document_separator": "\n\n", "holdout": 0.05},
                "train_examples": steps * batch,
                "test_examples": batch,
            },
            "optimizer": {"lr": 3e-3},
            "train": {"steps": steps, "batch_size": batch, "pack": pack, "backend": "auto"},
        }
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--every", type=int, default=20)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        path = corpus(Path(folder))
        trainers = {
            pack: Trainer(
                config(path, pack, args.steps, args.seq_len, args.batch),
                checkpoint_dir=Path(folder) / str(pack),
                progress=False,
            )
            for pack in (False, True)
        }
        losses = {False: [], True: []}
        seconds = {False: [], True: []}
        for _ in range(args.steps):
            for pack, trainer in trainers.items():
                seconds[pack].append(
                    elapsed_seconds(lambda: losses[pack].append(trainer.train_step()), torch.device("cpu"))
                )
        inputs, targets = trainers[False].train_data
        real_tokens = int((targets != -100).sum()) / len(targets) * args.batch  # per step, on average
    print("| step | padded loss | packed loss |\n| ---: | ---: | ---: |")
    for step in range(args.every - 1, args.steps, args.every):
        print(f"| {step + 1} | {losses[False][step]:.4f} | {losses[True][step]:.4f} |")
    tokens = {pack: real_tokens / statistics.median(seconds[pack][1:]) for pack in (False, True)}
    largest = max(abs(a - b) for a, b in zip(losses[False], losses[True]))
    print(
        "RESULT "
        + json.dumps(
            {
                "steps": args.steps,
                "seq_len": args.seq_len,
                "batch": args.batch,
                "real_tokens_per_row": round(real_tokens / args.batch, 1),
                "largest_loss_difference": largest,
                "padded_tokens_per_s": round(tokens[False]),
                "packed_tokens_per_s": round(tokens[True]),
                "packed_over_padded": round(tokens[True] / tokens[False], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
