"""TTT-Linear (Sun et al. 2024, "Learning to (Learn at Test Time)").

The state is the weight W of an inner linear model trained online by one gradient step per token on
``ℓ(W) = ½‖Wᵀk_t − v_t‖²`` with a fixed inner learning rate η::

    S_t = S_{t-1} − η k_t (k_tᵀ S_{t-1} − v_tᵀ) = (I − η k_t k_tᵀ) S_{t-1} + η k_t v_tᵀ,   o_t = S_tᵀ (q_t K^-½)

— the delta rule with β_t = η.  Coefficient form: φ = identity, Λ_t = I − η k_t k_tᵀ, b = η K^-½,
η_norm = 1.  Keys are L2-normalized so the inner step is stable for 0 < η < 2.
"""

from __future__ import annotations

from torch import Tensor, nn

from seqdyn.core.dynamics import Dynamics
from seqdyn.layers import HeadOutput
from seqdyn.layers.norms import l2_normalize
from seqdyn.mixers.base import CoefficientMixer, MixerState, check_heads, split_heads


class TTTLinear(CoefficientMixer):
    """TTT-Linear: the state is a linear model trained by one gradient step per token at a fixed learning rate.

    Args:
        heads: the number of heads H; K = V = d_model / H per head.
        inner_lr: the inner learning rate η of the gradient step on ½‖Sᵀk_t − v_t‖², 0 < η < 2 (keys are
            normalized, so the step is stable there; 1 replaces the value stored at k_t).
    """

    name = "ttt_linear"

    def __init__(self, d_model: int, heads: int = 4, inner_lr: float = 1.0, chunk_size: int = 64):
        super().__init__(d_model, chunk_size)
        self.heads = check_heads(heads, d_model)
        if not 0 < inner_lr < 2:
            raise ValueError(f"inner_lr: expected 0 < η < 2 (a stable step on normalized keys), got {inner_lr}")
        self.inner_lr = float(inner_lr)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.output = HeadOutput(d_model, heads, d_model // heads, gate=False)

    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, Tensor]:
        q, k, v = (split_heads(t, self.heads) for t in self.qkv(x).chunk(3, dim=-1))
        k = l2_normalize(k)
        rate = k.new_full(k.shape[:3], self.inner_lr)
        return Dynamics(q, k, v, householder=rate, scale=rate * q.shape[-1] ** -0.5), x

    def core_output(self, core: Tensor, extras: Tensor) -> Tensor:
        return self.output(core, extras)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, heads={self.heads}, inner_lr={self.inner_lr}"


MIXER = TTTLinear
