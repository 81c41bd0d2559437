"""The papers' training protocols, as sweep configs: Zoology's MQAR (:mod:`.zoology`, Sieber et al. 2024's), MAD
(:mod:`.mad`, Sieber et al. 2025's) and the DLR atomic tasks (:mod:`.atomic`, Gupta et al. 2022's).

Each protocol module gives the one interface of :mod:`.base`: its ``Budget`` (a :class:`~.base.Budget`), its model
descriptor (a :class:`~.base.Model`), ``SMOKE`` (the smoke scale's budget), ``PAPER_LRS`` (the paper's learning
rates), ``PLATEAU_WORDS`` (what a model scores before it learns the protocol's tasks, in words) and a sweep builder
of the signature :class:`~.base.SweepBuilder`.
"""
