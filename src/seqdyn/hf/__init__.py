"""seqdyn models in the transformers ecosystem (``pip install 'seqdyn[hf]'``).

Importing this package registers ``SeqdynConfig`` (``model_type="seqdyn"``) with ``AutoConfig``, ``SeqdynModel``
with ``AutoModel`` and ``SeqdynForCausalLM`` with ``AutoModelForCausalLM``::

    import seqdyn.hf
    from transformers import AutoModelForCausalLM

    config = seqdyn.hf.SeqdynConfig(vocab_size=256, mixer="gated_deltanet", d_model=64, layers=4)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained("out/tiny")
    tokens = AutoModelForCausalLM.from_pretrained("out/tiny").generate(prompt, max_new_tokens=32)

Two adapters, neither importing the other: seqdyn models as transformers models (``configuration``, ``modeling``,
``cache``, and ``convert``: ``seqdyn.hf.from_transformers(model)`` converts a transformers model of a supported family
to seqdyn with the same weights and logits, one module per family), and seqdyn's operator inside transformers' models
(``acceleration``: ``seqdyn.hf.accelerate(model)`` gives that model's layers their own forward that runs seqdyn's
functions in place of transformers' PyTorch fallbacks).

This is the only seqdyn package that imports transformers.
"""

from __future__ import annotations

try:
    import transformers
except ImportError as error:  # pragma: no cover - the extra is installed in CI
    raise ImportError("seqdyn.hf needs transformers: pip install 'seqdyn[hf]'") from error

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from seqdyn.hf.acceleration import accelerate
from seqdyn.hf.cache import SeqdynCache, SeqdynLayerState
from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.convert import from_transformers
from seqdyn.hf.modeling import SeqdynForCausalLM, SeqdynModel, SeqdynPreTrainedModel

__all__ = [
    "SeqdynCache",
    "SeqdynConfig",
    "SeqdynForCausalLM",
    "SeqdynLayerState",
    "SeqdynModel",
    "SeqdynPreTrainedModel",
    "accelerate",
    "from_transformers",
    "transformers",
]

AutoConfig.register(SeqdynConfig.model_type, SeqdynConfig, exist_ok=True)
AutoModel.register(SeqdynConfig, SeqdynModel, exist_ok=True)
AutoModelForCausalLM.register(SeqdynConfig, SeqdynForCausalLM, exist_ok=True)
