"""Data parallelism: ``torchrun`` + DistributedDataParallel, with the miner and the loss
seeing the *global* batch (pytorch-metric-learning's distributed wrappers), as the
authors' single-process ``DataParallel`` run did.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np
import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def init_distributed(device: str = "auto") -> Tuple[DistInfo, str]:
    """Join the process group ``torchrun`` set up (NCCL on CUDA, gloo on the CPU).

    Returns the rank information and the device string this rank should use.
    """
    if not launched_by_torchrun() or int(os.environ["WORLD_SIZE"]) <= 1:
        return DistInfo(), device
    info = DistInfo(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0)))
    use_cuda = torch.cuda.is_available() and device in ("auto", "cuda") or device.startswith("cuda")
    if use_cuda:
        torch.cuda.set_device(info.local_rank)
        device = f"cuda:{info.local_rank}"
    else:
        device = "cpu"
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return info, device


def shutdown_distributed() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def wrap_model(model: torch.nn.Module, info: DistInfo, device: torch.device) -> torch.nn.Module:
    if not info.enabled:
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def wrap_loss_and_miner(loss_fn, miner, info: DistInfo):
    """Gather every rank's embeddings so mining and the loss run over the global batch."""
    if not info.enabled:
        return loss_fn, miner
    from pytorch_metric_learning.utils.distributed import DistributedLossWrapper, DistributedMinerWrapper

    return DistributedLossWrapper(loss_fn), (DistributedMinerWrapper(miner) if miner is not None else None)


def _comm(t: torch.Tensor) -> torch.Tensor:
    """NCCL moves CUDA tensors only; gloo moves CPU tensors."""
    return t.cuda() if dist.get_backend() == "nccl" else t


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def broadcast_array(array: Optional[np.ndarray], info: DistInfo) -> np.ndarray:
    """Rank 0's int64 array on every rank (a batch plan must be identical everywhere)."""
    if not info.enabled:
        assert array is not None
        return array
    length = _comm(torch.tensor([len(array) if info.is_main else 0], dtype=torch.int64))
    dist.broadcast(length, 0)
    buf = torch.from_numpy(array.astype(np.int64)) if info.is_main else torch.zeros(int(length.item()), dtype=torch.int64)
    buf = _comm(buf)
    dist.broadcast(buf, 0)
    return buf.cpu().numpy()


def any_rank(flag: bool, info: DistInfo) -> bool:
    """True on every rank when it is true on one (e.g. the time budget ran out)."""
    if not info.enabled:
        return flag
    t = _comm(torch.tensor([1 if flag else 0], dtype=torch.int64))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def sum_over_ranks(value: float, info: DistInfo) -> float:
    if not info.enabled:
        return value
    t = _comm(torch.tensor([value], dtype=torch.float64))
    dist.all_reduce(t)
    return float(t.item())
