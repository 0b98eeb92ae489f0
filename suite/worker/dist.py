"""The rank's place in the job: torchrun's environment, the device, and the process group.

torchrun (and Ray Train) set RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for every process;
`init_process_group("env://")` rendezvous through them.  Without them (a plain `python` call, or a test
calling run_worker in-process) the worker is a world of one, with an in-memory store instead of a TCP one.

Backends: nccl for CUDA tensors (GPU-to-GPU over NVLink / InfiniBand), gloo for CPU tensors.  If a process
group already exists (Ray Train's TorchConfig creates one before the training function runs) it is used
as is and left for its owner to destroy.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from suite.device import resolve_device


@dataclass(frozen=True)
class Rank:
    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    backend: str
    owns_group: bool  # whether this worker created the process group (and so destroys it)
    excepthook: Any = None  # sys.excepthook before init_process_group wrapped it (restored at teardown)


def pick_device(requested: str, local_rank: int) -> torch.device:
    """auto = this rank's GPU (cuda:LOCAL_RANK) when CUDA is available, else the CPU."""
    # CUDA is asked only for auto: a cpu cell on a GPU host must not start the CUDA driver in every rank
    gpus = torch.cuda.device_count() if requested == "auto" and torch.cuda.is_available() else 0
    if resolve_device(requested, gpus) == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("device: cuda was requested but torch.cuda.is_available() is False on this machine")
    count = torch.cuda.device_count()
    if count == 1:  # one visible GPU per process (Ray, or CUDA_VISIBLE_DEVICES set per rank): it is ours
        return torch.device("cuda", 0)
    if local_rank >= count:
        raise RuntimeError(f"LOCAL_RANK {local_rank} has no GPU: {count} are visible (CUDA_VISIBLE_DEVICES)")
    return torch.device("cuda", local_rank)


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    try:
        return default if value is None else int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None


def setup(requested_device: str, expected_world: int) -> Rank:
    """Join (or create) the process group for this rank and select its device."""
    rank, local_rank = env_int("RANK", 0), env_int("LOCAL_RANK", 0)
    world = env_int("WORLD_SIZE", 1)
    if world != expected_world:
        raise RuntimeError(f"WORLD_SIZE is {world} but the cell has gpus: {expected_world}; launch one process per rank")
    device = pick_device(requested_device, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    owns = not dist.is_initialized()
    hook = sys.excepthook  # init_process_group wraps it to prefix "[rankN]:"; one layer per group otherwise
    if owns:
        if "MASTER_ADDR" in os.environ:
            dist.init_process_group(backend, rank=rank, world_size=world,
                                    device_id=device if device.type == "cuda" else None)
        elif world == 1:
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
        else:
            raise RuntimeError(f"WORLD_SIZE {world} > 1 but MASTER_ADDR is not set: launch with torchrun")
    elif dist.get_world_size() != world or dist.get_rank() != rank:
        raise RuntimeError(f"existing process group is rank {dist.get_rank()} of {dist.get_world_size()}, "
                           f"environment says rank {rank} of {world}")
    return Rank(rank, local_rank, world, device, dist.get_backend(), owns, hook)


def global_mean(value: torch.Tensor, world: int) -> float:
    """The mean of a scalar over all ranks (one small all-reduce, then a host read)."""
    t = value.detach().float().reshape(1).clone()
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.item() / world


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA kernels run asynchronously; CPU ops have finished already)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def teardown(rank: Rank) -> None:
    if rank.owns_group and dist.is_initialized():
        dist.destroy_process_group()
        sys.excepthook = rank.excepthook
