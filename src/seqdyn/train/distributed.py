"""Data-parallel training of one run with ``torchrun`` (DDP): gloo on the CPU, nccl on GPUs.

``torchrun --nproc_per_node N -m seqdyn train CONFIG`` starts N processes; each takes an equal share of every
global batch (``batch_size`` stays the global batch), gradients are averaged by DDP, and only rank 0 writes to
the results store and the checkpoints.  With equal shards the loss and the update equal those of one process on
the whole batch.

Teardown: every rank waits at a barrier once the run is done (rank 0 still writes the last checkpoint and the
store while the others are finished), then the DDP wrappers are collected before the process group is destroyed:
a DDP wrapper sits in a reference cycle and holds the group, which otherwise lived on until some later garbage
collection — at times in the interpreter's shutdown, after the other ranks had gone, where it aborted the rank.
"""

from __future__ import annotations

import gc
import os
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor


class Distributed:
    """The process group of a ``torchrun`` launch."""

    def __init__(self, backend: str | None = None):
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ.get("LOCAL_RANK", self.rank))
        backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        if backend == "nccl":
            torch.cuda.set_device(self.local_rank)
        if not dist.is_initialized():
            dist.init_process_group(backend)

    @classmethod
    def from_environment(cls) -> Distributed | None:
        """A process group when launched by ``torchrun`` with more than one process, else ``None``."""
        return cls() if int(os.environ.get("WORLD_SIZE", "1")) > 1 else None

    def device(self, requested: torch.device) -> torch.device:
        return torch.device("cuda", self.local_rank) if requested.type == "cuda" else requested

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        from torch.nn.parallel import DistributedDataParallel

        params = next(model.parameters())
        return DistributedDataParallel(model, device_ids=[self.local_rank] if params.is_cuda else None)

    def shard(self, indices: Tensor) -> Tensor:
        """This rank's share of a global batch (``len(indices)`` must be divisible by the world size)."""
        if len(indices) % self.world:
            raise ValueError(
                f"train.batch_size: a global batch of {len(indices)} does not split into "
                f"{self.world} equal shards; use a multiple of {self.world}"
            )
        return indices[self.rank :: self.world]

    def mean(self, value: Tensor) -> float:
        """The mean of a scalar over all ranks."""
        value = value.detach().clone().float()
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
        return float(value) / self.world

    def broadcast_object(self, obj: Any) -> Any:
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        """Wait until every rank is here."""
        dist.barrier()

    def close(self) -> None:
        """Free what holds the process group (DDP wrappers left in reference cycles), then destroy it."""
        gc.collect()
        if dist.is_initialized():
            dist.destroy_process_group()
