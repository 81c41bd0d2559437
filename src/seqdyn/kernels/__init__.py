"""Native CPU kernels, the lowest layer of seqdyn (it imports nothing else of seqdyn): each C++ kernel beside the
module that builds it and registers it as a ``torch.library`` operator with a fake implementation and its autograd
formula — today the selective scan (``seqdyn::scan``, :mod:`seqdyn.kernels.scan`).  Where a kernel cannot run (no
compiler, other devices or dtypes, ``SEQDYN_KERNELS=off``), its torch definition runs: the scan backend's
``BlockScan``.  A kernel stays only where it pays at the mixer level (``docs/kernels.md``); see
:mod:`seqdyn.kernels.build` for ``SEQDYN_KERNELS``."""
