"""The mixers of the newest transitions train: each learns the tiny MQAR run of the training tests (the setting a
2-layer softmax model learns in a few hundred steps) well above chance (1/16); slow, so CI's second step runs it."""

from __future__ import annotations

import pytest

from seqdyn.train.config import parse_config
from seqdyn.train.loop import train_run
from tests.train._helpers import tiny

NEWEST = (
    "kda",
    "rwkv7",
    "rwkv6",
    "gated_deltaproduct",
    "forgetting_attention",
    "path_attention",
    "hgrn2",
    "lightning_attention",
    "rwkv4",
)


@pytest.mark.slow  # 20–50 s each on one core
@pytest.mark.parametrize("mixer", NEWEST)
def test_each_learns_the_tiny_recall_task(mixer, tmp_path):
    result = train_run(parse_config(tiny(**{"model.mixer": mixer})), checkpoint_dir=tmp_path, progress=False)
    assert result.status in ("stopped_early", "finished"), result
    assert result.best_metric >= 0.5, result
