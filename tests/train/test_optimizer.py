"""The optimizer's parameter groups: weight decay on matrices only, and the state-space parameters on their own
learning rate and weight decay when ``optimizer.ssm_lr`` / ``ssm_weight_decay`` ask for it (S4's convention; seed
002 trains DLR without weight decay on its parameters)."""

from __future__ import annotations

import pytest
import torch

from seqdyn import mixers, tasks
from seqdyn.models import build_model
from seqdyn.train.config import RunConfig
from seqdyn.train.loop import build_optimizer

SSM_MIXERS = (
    "dlr",
    "dss_exp",
    "s4",
    "s4d",
    "s5",
    "lru",
    "s6",
    "ssd",
    "mamba2",
    "gated_deltanet",
    "gated_deltaproduct",
    "kda",
    "qlstm_s6",
    "rglru",
    "parallel",
)  # (its default parts: mamba2 beside attention)


def config(**optimizer) -> RunConfig:
    return RunConfig.model_validate(
        {
            "name": "t",
            "model": {"mixer": "dlr", "mixer_options": {"state_dim": 8}, "d_model": 8, "layers": 2, "positions": False},
            "task": {"name": "shift", "params": {"seq_len": 16}, "train_examples": 4, "test_examples": 4},
            "optimizer": {"lr": 1e-3, "weight_decay": 0.1, **optimizer},
            "train": {"steps": 1},
        }
    )


def groups_of(run: RunConfig):
    task = tasks.build(run.task.name, **run.task.params)
    model = build_model(run.model, task)
    ssm = {id(p) for block in model.blocks for p in block.mixer.ssm_parameters()}
    return model, ssm, build_optimizer(model, run).param_groups


def test_by_default_every_parameter_follows_lr_and_matrices_decay():
    model, ssm, groups = groups_of(config())
    assert len(groups) == 2 and ssm
    assert {g["lr"] for g in groups} == {1e-3} and [g["weight_decay"] for g in groups] == [0.1, 0.0]
    assert all(p.dim() >= 2 for p in groups[0]["params"]) and all(p.dim() < 2 for p in groups[1]["params"])
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))


def test_ssm_parameters_take_their_own_learning_rate_and_weight_decay():
    model, ssm, groups = groups_of(config(ssm_lr=1e-5, ssm_weight_decay=0.0))
    chosen = [g for g in groups if any(id(p) in ssm for p in g["params"])]
    others = [g for g in groups if g not in chosen]
    assert all(id(p) in ssm for g in chosen for p in g["params"])
    assert {(g["lr"], g["base_lr"], g["weight_decay"]) for g in chosen} == {(1e-5, 1e-5, 0.0)}
    assert {g["lr"] for g in others} == {1e-3} and {g["weight_decay"] for g in others} == {0.1, 0.0}
    counted = [id(p) for g in groups for p in g["params"]]
    assert sorted(counted) == sorted(id(p) for p in model.parameters()) and len(set(counted)) == len(counted)


def test_the_schedule_scales_each_group_from_its_own_peak(tmp_path):
    from seqdyn.train.loop import Trainer

    run = config(ssm_lr=1e-5).model_copy(
        update={
            "schedule": config().schedule.model_copy(update={"warmup": 0.5}),
            "train": config().train.model_copy(update={"steps": 4}),
        }
    )
    trainer = Trainer(run, checkpoint_dir=tmp_path)
    trainer.train_step()
    lrs = sorted({g["lr"] for g in trainer.optimizer.param_groups})
    assert lrs == pytest.approx([1e-5 / 2, 1e-3 / 2])  # step 0 of a 2-step warm-up: half of each peak


@pytest.mark.parametrize("name", mixers.names())
def test_ssm_parameters_are_the_state_space_ones(name):
    torch.manual_seed(0)
    mixer = mixers.build(name, 8, **({"heads": 2} if name in ("softmax_attention", "linear_attention") else {}))
    chosen = mixer.ssm_parameters()
    assert {id(p) for p in chosen} <= {id(p) for p in mixer.parameters()}
    assert bool(chosen) == (name in SSM_MIXERS), [n for n, p in mixer.named_parameters() if any(p is c for c in chosen)]
