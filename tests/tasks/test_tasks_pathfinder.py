"""Pathfinder-Segmentation: label-2 pixels form one dashed path joining the two circles, found from the image."""

import math

import numpy as np
import pytest
import torch

from seqdyn.tasks import build, pathfinder


def _components(pixels, reach):
    """Groups of pixels linked by Chebyshev distance <= reach (breadth-first search)."""
    left = set(map(tuple, pixels))
    groups = []
    while left:
        todo = [left.pop()]
        group = set(todo)
        while todo:
            y, x = todo.pop()
            for dy in range(-reach, reach + 1):
                for dx in range(-reach, reach + 1):
                    q = (y + dy, x + dx)
                    if q in left:
                        left.remove(q)
                        group.add(q)
                        todo.append(q)
        groups.append(group)
    return groups


def _circle_cores(image, radius):
    """Pixels whose whole (2h+1)² neighbourhood is ink, h = ⌊r/√2⌋: only filled circles are that thick."""
    h = int(radius / math.sqrt(2))
    M = image.shape[0]
    padded = np.pad(image > 0, h)
    solid = np.ones_like(image, dtype=bool)
    for dy in range(2 * h + 1):
        for dx in range(2 * h + 1):
            solid &= padded[dy : dy + M, dx : dx + M]
    return _components(np.argwhere(solid), 1)


@pytest.mark.parametrize("M, positive_prob", [(96, 0.5), (128, 1.0), (128, 0.0)])
def test_label_two_is_one_path_joining_the_two_circles(M, positive_prob):
    task = build("pathfinder_segmentation", seq_len=M * M, positive_prob=positive_prob)
    inputs, targets = task.generate(12, seed=3)
    expected = {1.0: {"positive"}, 0.0: {"negative"}, 0.5: {"positive", "negative"}}[positive_prob]
    assert _scene_kinds(task, inputs, targets) == expected


def test_a_scene_without_room_for_both_main_paths_is_drawn_again():
    # 22 dashes in a 64 x 64 image: some first paths leave the second no room in 200 tries (an error before)
    task = build("pathfinder_segmentation", seq_len=64 * 64, num_dashes=22)
    inputs, targets = task.generate(64, seed=0)
    assert _scene_kinds(task, inputs, targets) == {"positive", "negative"}
    again, _ = task.generate(64, seed=0)
    assert torch.equal(inputs, again)


def test_main_paths_that_never_fit_name_num_dashes(monkeypatch):
    """40 dashes in 32 × 32: refused when the task is built; past that check (made lenient here), the generator
    still gives up naming num_dashes."""
    with pytest.raises(ValueError, match="no room for a main path of 40 dashes.*fewer num_dashes"):
        build("pathfinder_segmentation", seq_len=32 * 32, num_dashes=40)
    monkeypatch.setattr(pathfinder, "PATH_ROOM", 100.0)
    monkeypatch.setattr(pathfinder, "_SCENE_TRIES", 2)  # give up sooner: 40 dashes never fit in 32 x 32
    monkeypatch.setattr(pathfinder, "_MAIN_TRIES", 5)
    task = build("pathfinder_segmentation", seq_len=32 * 32, num_dashes=40)
    with pytest.raises(RuntimeError, match="num_dashes"):
        task.generate(4, seed=0)


def _scene_kinds(task, inputs, targets) -> set[str]:
    """Check every scene (circles on the main paths, label 2 joining both, distractors apart); its kinds."""
    M = task.side
    assert set(torch.unique(inputs).tolist()) <= {0.0, 1.0} and set(torch.unique(targets).tolist()) <= {0, 1, 2}
    gap, radius, clearance = task.gap, task.radius, task.clear
    kinds = set()
    for x, y in zip(inputs, targets):
        image, label = x[:, 0].reshape(M, M).numpy(), y.reshape(M, M).numpy()
        assert (image[label > 0] == 1).all()  # labels only on strokes
        circles = _circle_cores(image, radius)
        assert len(circles) == 2
        assert all(label[next(iter(c))] > 0 for c in circles)  # circles lie on main paths
        ones = _components(np.argwhere(label == 1), gap + 1)
        twos = _components(np.argwhere(label == 2), gap + 1)
        if twos:
            kinds.add("positive")
            assert len(twos) == 1 and len(ones) == 1
            assert all(c <= twos[0] for c in circles)  # one dashed path carries both circles
        else:
            kinds.add("negative")
            assert len(ones) == 2
            assert sorted(sum(c <= path for c in circles) for path in ones) == [1, 1]  # one circle each
        for path in ones + twos:
            assert len(path) >= task.num_dashes * task.dash  # long main paths
        # distractor ink keeps its distance from the main paths
        others = np.argwhere((image > 0) & (label == 0))
        main = np.argwhere(label > 0)
        if len(others):
            gaps = np.abs(others[:, None, :] - main[None, :, :]).max(-1).min()
            assert gaps > clearance
    return kinds


def test_distractors_and_positive_rate_at_the_default_size():
    task = build("pathfinder_segmentation")
    inputs, targets = task.generate(16, seed=0)
    assert inputs.shape == (16, 65536, 1) and targets.shape == (16, 65536)
    positive = (targets == 2).any(1).float().mean()
    assert 0.2 < positive < 0.8
    distractor_ink = ((inputs[..., 0] > 0) & (targets == 0)).float().sum(1)
    assert (distractor_ink > 10 * task.dash).all()


def test_macro_f1_and_macro_accuracy_by_hand():
    task = build("pathfinder_segmentation", seq_len=64 * 64)
    targets = torch.tensor([[0, 0, 1, 2]])
    predicted = torch.tensor([[0, 1, 1, 2]])
    logits = torch.nn.functional.one_hot(predicted, 3).float()
    metrics = task.metrics(logits, targets)
    # class 0: tp 1, fn 1 -> F1 2/3, recall 1/2; class 1: tp 1, fp 1 -> F1 2/3, recall 1; class 2: 1, 1
    assert metrics["macro_f1"] == pytest.approx((2 / 3 + 2 / 3 + 1) / 3)
    assert metrics["macro_accuracy"] == pytest.approx((0.5 + 1 + 1) / 3)
    assert metrics["accuracy"] == pytest.approx(0.75)


def test_png_has_image_and_mask(tmp_path):
    task = build("pathfinder_segmentation", seq_len=64 * 64)
    inputs, targets = task.generate(1, seed=0)
    path = task.save_png(inputs, targets, tmp_path / "example.png")
    assert (tmp_path / "example.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.endswith("example.png")


@pytest.mark.parametrize(
    "params, words",
    [
        ({"seq_len": 65535}, ["seq_len", "65535", "perfect square"]),
        ({"seq_len": 32 * 32, "num_dashes": 4, "dash_length": 12}, ["seq_len", "1024", "too small"]),
        ({"seq_len": 500}, ["seq_len", "500"]),
        ({"positive_prob": 1.5}, ["positive_prob", "1.5"]),
    ],
)
def test_impossible_parameters_are_refused(params, words):
    with pytest.raises(ValueError) as info:
        build("pathfinder_segmentation", **params)
    for word in words:
        assert word in str(info.value)
