"""Analysis toolkit: what coefficient dynamics say about a tensor of coefficients, a mixer or a model.

    A = seqdyn.mixers.build("softmax_attention", 64).coefficients(x)     # [B, H, T, T]
    seqdyn.analysis.near_zero_fraction(A)                                # Principle 2 (Sieber et al. 2025)
    seqdyn.analysis.combination_class_shares(A)                          # {"convex": 1.0, ...} (appendix A)
    seqdyn.analysis.has_positional_information(mixer)                    # Lemma 3: Λ ≠ I
    rows = seqdyn.analysis.inspect_model(model, inputs)                  # per layer and head

Modules: :mod:`~seqdyn.analysis.coefficients` (metrics on ``A``), :mod:`~seqdyn.analysis.mixers` (readouts,
mixers and the lemmas), :mod:`~seqdyn.analysis.model` (whole models), :mod:`~seqdyn.analysis.plots` (figures;
matplotlib is imported only when a figure is drawn).
"""

from importlib import import_module

from seqdyn.analysis.coefficients import (
    COMBINATION_CLASSES,
    NEAR_ZERO_EPS,
    check_coefficients,
    combination_class,
    combination_class_shares,
    large_fraction,
    mean_zero_count,
    near_zero_fraction,
    near_zero_ratio,
    roundoff,
    zero_count_per_row,
)
from seqdyn.analysis.mixers import (
    dot_product_variance,
    expand_state,
    has_positional_information,
    larger_state_recovers,
    lemma2_demo,
    readout_near_zero_set,
    spectral_bound,
    spectral_radii,
    taylor_softmax_error,
)
from seqdyn.analysis.model import (
    HeadReport,
    MixerCall,
    capture_mixer_inputs,
    format_table,
    inspect_model,
    layer_coefficients,
    layer_dsfs,
    table_legend,
)

_PLOTS = ("plot_accuracy_grid", "plot_coefficients", "plot_principle")

__all__ = [
    "COMBINATION_CLASSES",
    "NEAR_ZERO_EPS",
    "HeadReport",
    "MixerCall",
    "capture_mixer_inputs",
    "check_coefficients",
    "combination_class",
    "combination_class_shares",
    "dot_product_variance",
    "expand_state",
    "format_table",
    "has_positional_information",
    "inspect_model",
    "large_fraction",
    "larger_state_recovers",
    "layer_coefficients",
    "layer_dsfs",
    "lemma2_demo",
    "mean_zero_count",
    "near_zero_fraction",
    "near_zero_ratio",
    "readout_near_zero_set",
    "roundoff",
    "spectral_bound",
    "spectral_radii",
    "table_legend",
    "taylor_softmax_error",
    "zero_count_per_row",
    *_PLOTS,
]


def __getattr__(name: str):
    # plots are re-exported lazily; plots.py itself imports matplotlib only inside its functions
    if name in _PLOTS:
        return getattr(import_module("seqdyn.analysis.plots"), name)
    raise AttributeError(f"module 'seqdyn.analysis' has no attribute {name!r}")
