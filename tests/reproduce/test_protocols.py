"""The three training protocols (``seqdyn.reproduce.protocols``): one interface under the same names — a budget,
a model descriptor, the smoke budget, the paper's learning rates, the plateau in words and a sweep builder of one
signature."""

from __future__ import annotations

import inspect

import pytest

from seqdyn import mixers
from seqdyn.reproduce.protocols import atomic, base, mad, zoology

PROTOCOLS = {
    "zoology": (zoology, zoology.mqar_sweeps, zoology.MQARModel),
    "mad": (mad, mad.mad_sweeps, mad.MADModel),
    "atomic": (atomic, atomic.atomic_sweeps, atomic.AtomicModel),
}


@pytest.mark.parametrize("name", list(PROTOCOLS))
def test_each_protocol_gives_the_one_interface(name):
    module, sweeps, model = PROTOCOLS[name]
    assert issubclass(module.Budget, base.Budget) and isinstance(module.SMOKE, module.Budget)
    assert issubclass(model, base.Model)
    assert module.PAPER_LRS and all(isinstance(lr, float) for lr in module.PAPER_LRS)
    assert isinstance(module.PLATEAU_WORDS, str) and module.PLATEAU_WORDS
    parameters = list(inspect.signature(sweeps).parameters.values())
    shared = list(inspect.signature(base.SweepBuilder.__call__).parameters)[1:7]  # without self and **axes
    assert [parameter.name for parameter in parameters[:6]] == shared
    assert parameters[5].default is None
    assert all(parameter.kind is inspect.Parameter.KEYWORD_ONLY for parameter in parameters[6:])


def test_no_protocol_shadows_the_mixers_base_class():
    assert not hasattr(zoology, "Mixer") and zoology.MQARModel is not mixers.Mixer


def test_a_budget_writes_steps_else_epochs_and_its_evaluation_interval():
    assert zoology.SMOKE.train_options(16, backend="auto") == {
        "batch_size": 16,
        "backend": "auto",
        "steps": 6,
        "eval_every": 3,
    }
    assert mad.Budget().train_options(128) == {"batch_size": 128, "epochs": 200}


def test_the_learning_rates_default_to_the_papers_and_may_be_given():
    (paper,) = zoology.mqar_sweeps(
        "p", ("linear_attention",), ((16, 2),), (0,), zoology.SMOKE, widths=(16,), states=(8,)
    )
    assert sorted({run.optimizer.lr for run in paper.expand()}) == sorted(zoology.PAPER_LRS)
    (own,) = atomic.atomic_sweeps("p", ("dlr",), ("shift",), (0,), atomic.SMOKE)
    assert {run.optimizer.lr for run in own.expand()} == {atomic.MODELS["dlr"].lr} == {atomic.PAPER_LRS[0]}
    (given,) = atomic.atomic_sweeps("p", ("dlr",), ("shift",), (0,), atomic.SMOKE, (1e-2, 1e-3))
    assert sorted(run.optimizer.lr for run in given.expand()) == [1e-3, 1e-2]
    model = mad.MADModel(mixer="linear_attention", options={"heads": 2}, block=mad.GATED_BLOCK)
    (entry, as_dict) = (
        mad.mad_sweeps(
            "p", models, {"memorization": {"vocab_size": 16, "seq_len": 8}}, (0,), mad.SMOKE, weight_decays=(0.0,)
        )
        for models in ([model], [model.entry()])
    )
    assert [run.run_id for run in entry[0].expand()] == [run.run_id for run in as_dict[0].expand()]
    assert {run.optimizer.lr for run in entry[0].expand()} == set(mad.PAPER_LRS)


def test_only_zoologys_protocol_draws_the_mixers_own_inits_as_well():
    """Zoology's ``_init_weights`` ignores the mixers' own initializations (IntelligentControlSystems/dsf-mqar at
    7c5aff8, zoology/model.py, lines 73-96); MAD and the DLR tasks keep them."""
    (mqar,) = zoology.mqar_sweeps("p", ("s6",), ((16, 2),), (0,), zoology.SMOKE, widths=(16,), states=(8,))
    (tasks,) = mad.mad_sweeps("p", [mad.CONTROL], {"memorization": {"vocab_size": 16, "seq_len": 8}}, (0,), mad.SMOKE)
    (atomics,) = atomic.atomic_sweeps("p", ("dlr",), ("shift",), (0,), atomic.SMOKE)
    assert zoology.KEEP_MIXER_INIT is False and mqar.model.keep_mixer_init is False
    assert tasks.model.keep_mixer_init is True and atomics.model.keep_mixer_init is True
