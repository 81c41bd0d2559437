"""Pathfinder-Segmentation (Gupta et al. 2022 §3.2): label every pixel of a Pathfinder image, flattened to T = M².

An M×M image (M = √``seq_len``: 256 by default, 512 in the paper's hardest setting) holds two long dashed main
paths of ``num_dashes`` dashes, short dashed distractors of ``distractor_dashes`` dashes, and two filled circles
at path ends. With probability ``positive_prob`` both circles sit on the two ends of the same main path,
otherwise one sits on an end of each. Labels (per pixel): 2 on a main path whose two ends both carry a circle,
1 on the other main path(s), 0 elsewhere (background and distractors); a circle takes the label of its path.

Geometry (defaults scale with M; all in pixels): dashes of ``dash_length`` = max(2, M/32) separated by gaps of
``gap_length`` = max(1, dash/2); strokes ``line_width`` = max(1, M/128) wide; circles of radius
``circle_radius`` = 2·width + 1. Lengths scale with M, so a larger M draws the same kind of scene at a finer
resolution (with ``num_distractors`` = 20 attempted distractors). A path is a smooth random walk: its direction
turns by at most ``max_turn`` degrees between dashes and reflects off the border; dash centres of non-adjacent
dashes stay at least one dash+gap apart (no self-crossing). Different objects are always more than
``clearance`` = gap + 2 pixels apart (Chebyshev), by rejection on a coarse occupancy grid; a distractor that
cannot be placed in a few tries is dropped. Strokes are binary (1 on black).

Inputs: float ``[n, M², 1]`` pixel intensities in row-major order; targets int64 ``[n, M²]`` in {0, 1, 2}.
Head: tagging with 3 classes. Metrics: macro F1 and macro accuracy (per-class F1 / recall averaged over the
classes, Gupta et al. 2022 Table 3), and pixel accuracy.
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch

from seqdyn.tasks.base import IGNORE_INDEX, Param, Task, TaskSpec, register

_CHUNK = 16  # images generated together
_MAIN_TRIES = 200
_SCENE_TRIES = 20  # scenes drawn again from scratch where a main path found no room
_DISTRACTOR_TRIES = 12
_REACH = 3  # occupancy cells are 1/_REACH of the separation; a point checks the cells within _REACH of its own


def _size(default: str) -> Param:
    return Param(None, int, f"pixels; None: {default}", low=1, optional=True)


#: how long a main path may be against the room between the circles' margins (M − 2·(radius + 1)) for its scenes to
#: be drawn; measured with the defaults: M = 40 (42 px against 32) fails to place its paths, M = 44 (42 against 36)
#: draws them
PATH_ROOM = 1.2


@register
class PathfinderSegmentation(Task):
    """Per-pixel Pathfinder: which pixels lie on the main path whose two ends carry the circles."""

    name = "pathfinder_segmentation"
    family = "higher-order"
    reference = "Gupta et al. 2022 §3.2 (Pathfinder-Segmentation); Linsley et al. 2018"
    head_kind = "tagging"
    PARAMS = {
        "seq_len": Param(65536, int, "M² for an M×M image (256² default; 512² in the paper)", low=1024),
        "num_dashes": Param(14, int, "dashes per main path", low=2),
        "distractor_dashes": Param(4, int, "dashes per distractor", low=1),
        "num_distractors": Param(20, int, "distractor paths (those that do not fit are dropped)", low=0),
        "dash_length": _size("max(2, M // 32)"),
        "gap_length": _size("max(1, dash_length // 2)"),
        "line_width": _size("max(1, M // 128)"),
        "circle_radius": _size("2·line_width + 1"),
        "clearance": _size("gap_length + 2"),
        "max_turn": Param(30.0, float, "maximum turn between consecutive dashes, degrees", low=0.0, high=180.0),
        "positive_prob": Param(0.5, float, "probability that one path carries both circles", low=0.0, high=1.0),
    }

    def _check(self) -> None:
        M = math.isqrt(self.seq_len)
        if M * M != self.seq_len:
            self._fail(f"parameter seq_len={self.seq_len} must be a perfect square M² (e.g. 65536 = 256²)")
        self.side = M
        self.dash = self.dash_length or max(2, M // 32)
        self.gap = self.gap_length or max(1, self.dash // 2)
        self.width = self.line_width or max(1, M // 128)
        self.radius = self.circle_radius or 2 * self.width + 1
        self.clear = self.clearance or self.gap + 2
        room = M - 2 * (self.radius + 1)
        if 2 * (self.dash + self.gap) > room:
            self._fail(
                f"parameter seq_len={self.seq_len} (M={M}) is too small for dashes of {self.dash}+{self.gap} px "
                f"and circles of radius {self.radius}: need 2·(dash + gap) <= M − 2·(radius + 1)"
            )
        if self.width > self.dash:
            self._fail(f"parameter line_width={self.width} must be <= dash_length={self.dash}")
        path = self.num_dashes * (self.dash + self.gap)
        if path > PATH_ROOM * room:
            self._fail(
                f"parameter seq_len={self.seq_len} (M={M}) has no room for a main path of {self.num_dashes} dashes of "
                f"{self.dash}+{self.gap} px ({path} px > {PATH_ROOM} × {room} px between the circles' margins); "
                f"take a larger seq_len or fewer num_dashes"
            )

    def _spec(self) -> TaskSpec:
        T = self.seq_len
        return TaskSpec("channels", 1, T, self.head_kind, 3, T, "macro_f1")

    # --- generation ---------------------------------------------------------------------------------
    def _generate(self, n: int, rng: np.random.Generator, split: str) -> tuple[np.ndarray, np.ndarray]:
        M = self.side
        images = np.zeros((n, M, M), dtype=np.float32)
        labels = np.zeros((n, M, M), dtype=np.int64)
        for start in range(0, n, _CHUNK):
            stop = min(n, start + _CHUNK)
            self._draw_chunk(rng, images[start:stop], labels[start:stop])
        return images.reshape(n, M * M, 1), labels.reshape(n, M * M)

    def _draw_chunk(self, rng: np.random.Generator, images: np.ndarray, labels: np.ndarray) -> None:
        """Draw ``len(images)`` scenes; a scene where a main path finds no room is drawn again from scratch."""
        todo = np.arange(images.shape[0])
        for _ in range(_SCENE_TRIES):
            drawn_images, drawn_labels = np.zeros_like(images[todo]), np.zeros_like(labels[todo])
            ok = self._draw_scenes(rng, drawn_images, drawn_labels)
            images[todo[ok]], labels[todo[ok]] = drawn_images[ok], drawn_labels[ok]
            todo = todo[~ok]
            if todo.size == 0:
                return
        raise RuntimeError(
            f"{self.name}: could not place both main paths in {_SCENE_TRIES} scenes of "
            f"{_MAIN_TRIES} tries each; reduce num_dashes"
        )

    def _draw_scenes(self, rng: np.random.Generator, images: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """Draw one scene per image; returns which scenes have both main paths (the others are to be discarded)."""
        n = images.shape[0]
        # strokes reach line_width/2 + 1 px beyond their outline points: keep those points this far apart
        cell = -(-(self.clear + self.width + 3) // _REACH)
        cells = -(-self.side // cell) + 2 * _REACH
        grid = np.zeros((n, cells, cells), dtype=bool)
        positive = rng.random(n) < self.positive_prob
        end_a = rng.random(n) < 0.5  # negative: which end of A (and of B) carries the circle
        end_b = rng.random(n) < 0.5
        circles_a = np.stack([positive | ~end_a, positive | end_a], axis=1)  # [start, end]
        circles_b = np.stack([~positive & ~end_b, ~positive & end_b], axis=1)
        main_margin = self.radius + 1
        path_a = self._place(rng, grid, cell, self.num_dashes, main_margin, circles_a, _MAIN_TRIES)
        path_b = self._place(rng, grid, cell, self.num_dashes, main_margin, circles_b, _MAIN_TRIES)
        no_circles = np.zeros((n, 2), dtype=bool)
        for _ in range(self.num_distractors):
            margin = self.width + 1
            s, e, ok = self._place(rng, grid, cell, self.distractor_dashes, margin, no_circles, _DISTRACTOR_TRIES)
            self._stamp_dashes(images, None, s[ok], e[ok], np.flatnonzero(ok), 0)
        rows = np.arange(n)
        label_a, label_b = np.where(positive, 2, 1), np.ones(n, dtype=np.int64)
        for (s, e, _), circles, label in ((path_a, circles_a, label_a), (path_b, circles_b, label_b)):
            self._stamp_dashes(images, labels, s, e, rows, label)
            for which, centre in ((0, s[:, 0]), (1, e[:, -1])):
                has = circles[:, which]
                self._stamp_disc(images, labels, centre[has], rows[has], label[has])
        return path_a[2] & path_b[2]

    def _walk(self, rng: np.random.Generator, k: int, dashes: int, margin: float) -> tuple[np.ndarray, np.ndarray]:
        """``k`` smooth reflecting random walks: dash starts and ends ``[k, dashes, 2]`` as (y, x)."""
        lo, hi = margin, self.side - 1 - margin
        step = self.dash + self.gap
        p = rng.uniform(lo, hi, size=(k, 2))
        theta = rng.uniform(0, 2 * np.pi, size=k)
        turns = np.deg2rad(self.max_turn) * rng.uniform(-1, 1, size=(k, dashes))
        starts, ends = np.empty((k, dashes, 2)), np.empty((k, dashes, 2))
        for d in range(dashes):
            if d:
                theta = theta + turns[:, d]
            nxt = p + step * np.stack([np.sin(theta), np.cos(theta)], axis=1)
            theta = np.where((nxt[:, 0] < lo) | (nxt[:, 0] > hi), -theta, theta)  # reflect off top/bottom
            theta = np.where((nxt[:, 1] < lo) | (nxt[:, 1] > hi), np.pi - theta, theta)  # and off the sides
            direction = np.stack([np.sin(theta), np.cos(theta)], axis=1)
            starts[:, d], ends[:, d] = p, p + self.dash * direction
            p = p + step * direction
        return starts, ends

    def _acceptable(self, starts: np.ndarray, ends: np.ndarray, circles: np.ndarray) -> np.ndarray:
        """No self-crossing (non-adjacent dash centres one step apart) and circles clear of each other."""
        centres = (starts + ends) / 2
        dist = np.linalg.norm(centres[:, :, None] - centres[:, None, :], axis=-1)
        far = np.abs(np.arange(centres.shape[1])[:, None] - np.arange(centres.shape[1])) >= 2
        ok = ~((dist < self.dash + self.gap) & far).any(axis=(1, 2))
        both = circles.all(axis=1)
        apart = np.linalg.norm(starts[:, 0] - ends[:, -1], axis=1) >= 2 * self.radius + self.clear + 2
        return ok & (~both | apart)

    def _outline(self, starts: np.ndarray, ends: np.ndarray, circles: np.ndarray) -> np.ndarray:
        """Points ``[k, P, 2]`` no farther than 1 px from every point of the object (dashes and circle rims)."""
        t = np.linspace(0, 1, self.dash + 1)
        dash_pts = starts[:, :, None] + t[:, None] * (ends - starts)[:, :, None]
        points = [dash_pts.reshape(len(starts), -1, 2)]
        angles = np.linspace(0, 2 * np.pi, max(8, math.ceil(2 * np.pi * self.radius)), endpoint=False)
        ring = self.radius * np.stack([np.sin(angles), np.cos(angles)], axis=1)
        for which, centre in ((0, starts[:, 0]), (1, ends[:, -1])):
            scale = circles[:, which, None, None].astype(float)  # an unmarked end collapses onto its point
            points.append(centre[:, None] + scale * ring)
        return np.concatenate(points, axis=1)

    def _place(self, rng, grid, cell, dashes, margin, circles, tries):
        """Place one object per image, avoiding the occupied cells of ``grid``; returns starts, ends, placed."""
        n = grid.shape[0]
        starts, ends = np.zeros((n, dashes, 2)), np.zeros((n, dashes, 2))
        placed = np.zeros(n, dtype=bool)
        pending = np.arange(n)
        for _ in range(tries):
            s, e = self._walk(rng, pending.size, dashes, margin)
            outline = self._outline(s, e, circles[pending])
            cells = (outline // cell).astype(np.int64) + _REACH
            hit = np.zeros(pending.size, dtype=bool)
            for dy in range(-_REACH, _REACH + 1):
                for dx in range(-_REACH, _REACH + 1):
                    hit |= grid[pending[:, None], cells[..., 0] + dy, cells[..., 1] + dx].any(axis=1)
            ok = ~hit & self._acceptable(s, e, circles[pending])
            done = pending[ok]
            starts[done], ends[done], placed[done] = s[ok], e[ok], True
            grid[np.broadcast_to(done[:, None], cells[ok].shape[:2]), cells[ok][..., 0], cells[ok][..., 1]] = True
            pending = pending[~ok]
            if pending.size == 0:
                break
        return starts, ends, placed

    def _stamp_dashes(self, images, labels, starts, ends, rows, label) -> None:
        """Draw the dashes (``line_width`` square brush) and write ``label`` under them."""
        if len(rows) == 0:
            return
        t = np.linspace(0, 1, 2 * self.dash + 1)
        pts = np.rint(starts[:, :, None] + t[:, None] * (ends - starts)[:, :, None]).astype(np.int64)
        pts = pts.reshape(len(rows), -1, 2)
        offsets = np.arange(-((self.width - 1) // 2), self.width // 2 + 1)
        for dy in offsets:
            for dx in offsets:
                y, x = pts[..., 0] + dy, pts[..., 1] + dx
                r = np.broadcast_to(rows[:, None], y.shape)
                images[r, y, x] = 1.0
                if labels is not None:
                    labels[r, y, x] = np.broadcast_to(np.asarray(label)[:, None], y.shape)

    def _stamp_disc(self, images, labels, centres, rows, label) -> None:
        r = self.radius
        dy, dx = np.mgrid[-r : r + 1, -r : r + 1]
        inside = dy**2 + dx**2 <= r * r
        c = np.rint(centres).astype(np.int64)
        y = c[:, 0, None] + dy[inside]
        x = c[:, 1, None] + dx[inside]
        rr = np.broadcast_to(rows[:, None], y.shape)
        images[rr, y, x] = 1.0
        labels[rr, y, x] = np.broadcast_to(label[:, None], y.shape)

    # --- metrics and rendering ---------------------------------------------------------------------------
    def metrics(self, outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        """Macro F1 and macro accuracy over the classes 0/1/2 (each averaged over the classes that occur)."""
        outputs = self._output_window(outputs.detach(), targets)
        targets = targets.to(outputs.device)
        mask = targets != IGNORE_INDEX
        pred, true = outputs.argmax(-1)[mask], targets[mask]
        f1s, recalls = [], []
        for c in range(3):
            tp = int(((pred == c) & (true == c)).sum())
            fp = int(((pred == c) & (true != c)).sum())
            fn = int(((pred != c) & (true == c)).sum())
            if 2 * tp + fp + fn:
                f1s.append(2 * tp / (2 * tp + fp + fn))
            if tp + fn:
                recalls.append(tp / (tp + fn))
        return {
            "macro_f1": float(np.mean(f1s)) if f1s else float("nan"),
            "macro_accuracy": float(np.mean(recalls)) if recalls else float("nan"),
            "accuracy": float((pred == true).float().mean()) if true.numel() else float("nan"),
            "loss": float(self.loss(outputs, targets)),
        }

    def render(self, inputs: torch.Tensor, targets: torch.Tensor, index: int = 0, width: int = 48) -> str:
        """A downsampled text picture: ``#`` label 2, ``+`` label 1, ``o`` other strokes, ``.`` background."""
        M = self.side
        image = inputs[index, :, 0].reshape(M, M).numpy()
        label = targets[index].reshape(M, M).numpy()
        block = max(1, -(-M // width))
        rows = []
        for y in range(0, M, block):
            line = []
            for x in range(0, M, block):
                lab, ink = label[y : y + block, x : x + block].max(), image[y : y + block, x : x + block].max()
                line.append("#" if lab == 2 else "+" if lab == 1 else "o" if ink > 0 else ".")
            rows.append("".join(line))
        kind = "positive (one path joins the circles)" if (label == 2).any() else "negative"
        return f"pathfinder_segmentation: {M}×{M}, {kind}; # label 2, + label 1, o distractor\n" + "\n".join(rows)

    def save_png(self, inputs: torch.Tensor, targets: torch.Tensor, path: str | os.PathLike, index: int = 0) -> str:
        """Write example ``index`` (image and label mask side by side) as a PNG; returns the path."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.colors import ListedColormap

        M = self.side
        fig, axes = plt.subplots(1, 2, figsize=(8, 4.2))
        axes[0].imshow(inputs[index, :, 0].reshape(M, M).numpy(), cmap="gray", vmin=0, vmax=1)
        axes[0].set_title("image")
        cmap = ListedColormap(["white", "lightgray", "black"])
        axes[1].imshow(targets[index].reshape(M, M).numpy(), cmap=cmap, vmin=0, vmax=2, interpolation="nearest")
        axes[1].set_title("labels (0 white, 1 gray, 2 black)")
        for ax in axes:
            ax.set_axis_off()
        fig.tight_layout()
        fig.savefig(path, dpi=max(100, M // 4))
        plt.close(fig)
        return os.fspath(path)
