"""Native CPU kernels, the lowest layer of seqdyn: each C++ kernel beside the module that builds it and registers
it as a ``torch.library`` operator (``seqdyn::scan``, ``seqdyn::rms_norm``) with a fake implementation and its
autograd formula.  Where a kernel cannot run (no compiler, other devices or dtypes, ``SEQDYN_KERNELS=off``), its
torch definition runs: the scan backend's ``BlockScan`` for the scan, :func:`~seqdyn.kernels.norm.rms_norm_reference`
beside the norm.  See :mod:`seqdyn.kernels.build` for ``SEQDYN_KERNELS``."""
