"""Checkpoints of a training run that any strategy can write and any strategy (or a plain model) can read.

Format: a *full* (unsharded) state dict, gathered with torch.distributed.checkpoint.state_dict
(`get_model_state_dict` / `get_optimizer_state_dict` with `full_state_dict=True, cpu_offload=True`):

    model.pt    {fqn: tensor}  the plain model's keys - no DDP `module.`, checkpoint-wrapper or compile
                prefixes (the state-dict API strips them), so `build_model(shape, seed).load_state_dict()`
                takes it as is, strictly;
    optim.pt    the optimizer state keyed by the same fully qualified names (per parameter: step, exp_avg,
                exp_avg_sq for Adam), full tensors;
    meta.json   steps done, the loss curve and step times so far, strategy, cell id (see Meta).

Why full state dicts rather than torch.distributed.checkpoint's sharded files: the same checkpoint restores
into DDP, ZeRO-1, FSDP (ZeRO-2/3) at any world size and into an unwrapped model for inspection, which is
what the seed did and what a test can check; the price is that rank 0 holds the whole model and optimizer
in CPU memory while saving (fine up to a few billion parameters; sharded DCP would be the next step).

Who does what: gathering is collective (every rank calls `save`; FSDP all-gathers shards), rank 0 writes the
files.  On restore every rank reads the files and `set_*_state_dict` keeps its own shard.  ZeRO-1's
ZeroRedundancyOptimizer is not understood by the state-dict API: it is consolidated to rank 0 with its own
`consolidate_state_dict` (keyed by parameter index) and loaded whole on every rank, which re-partitions it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from suite.strategies import registry

FORMAT = "full_state_dict/v1"
MODEL_FILE, OPTIM_FILE, META_FILE = "model.pt", "optim.pt", "meta.json"


@dataclass
class Meta:
    """What a checkpoint says about itself (meta.json)."""

    step: int  # optimizer steps done: the run resumes at step index `step`
    losses: list[float]  # the global loss of each step done (so a resumed run's curve is whole)
    step_times_s: list[float]
    cell_id: str
    strategy: str
    world_size: int
    format: str = FORMAT
    extra: dict = field(default_factory=dict)
    eval: list[dict] = field(default_factory=list)  # held-out evaluations so far (EvalPoint dumps)
    grad_norms: list[float] = field(default_factory=list)  # the global gradient norm of each step done


def check_supported(strategy: str, tensor_parallel: int = 1, pipeline_parallel: int = 1) -> None:
    """Refuse strategies whose registry entry says their state cannot be checkpointed (the hand-written ZeRO
    strategies give their optimizer flat shards: the state-dict API cannot name its state), and tensor- or
    pipeline-parallel cells (their checkpoints are not tested yet; a stage holds part of the model)."""
    for axis, n in (("tensor_parallel", tensor_parallel), ("pipeline_parallel", pipeline_parallel)):
        if n > 1:
            raise ValueError(f"checkpoints of {axis.replace('_', '-')} cells ({axis} {n}) are not tested yet; leave "
                             "ray.checkpoint_every_steps unset for them")
    spec = registry.get(strategy)
    if not spec.checkpointable:
        why = spec.extra.get("not_checkpointable", "its registry entry says so")
        raise ValueError(f"checkpoints of strategy {strategy} are not supported ({why}); "
                         f"leave ray.checkpoint_every_steps unset for it")


def _is_zero1(optimizer: torch.optim.Optimizer) -> bool:
    return type(optimizer).__name__ == "ZeroRedundancyOptimizer"


def gather(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """Full model and optimizer state dicts on rank 0's CPU (collective: every rank must call it)."""
    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_sd = get_model_state_dict(model, options=opts)
    if _is_zero1(optimizer):
        optimizer.consolidate_state_dict(to=0)
        optim_sd = optimizer.state_dict() if dist.get_rank() == 0 else {}
    else:
        optim_sd = get_optimizer_state_dict(model, optimizer, options=opts)
    return model_sd, optim_sd


def save(directory: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, meta: Meta) -> bool:
    """Gather (collective) and, on rank 0, write the checkpoint into `directory`; True where files were written."""
    model_sd, optim_sd = gather(model, optimizer)
    if dist.get_rank() != 0:
        return False
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    torch.save(model_sd, directory / MODEL_FILE)
    torch.save(optim_sd, directory / OPTIM_FILE)
    (directory / META_FILE).write_text(json.dumps(asdict(meta), indent=1), encoding="utf-8")
    return True


def read_meta(directory: Path) -> Meta:
    data = json.loads((Path(directory) / META_FILE).read_text(encoding="utf-8"))
    if data.get("format") != FORMAT:
        raise ValueError(f"{directory}: checkpoint format {data.get('format')!r}, expected {FORMAT!r}")
    return Meta(**data)


def load_model_state(directory: Path) -> dict[str, torch.Tensor]:
    """The full model state dict of a checkpoint (for `plain_model.load_state_dict(sd, strict=True)`)."""
    return torch.load(Path(directory) / MODEL_FILE, map_location="cpu", weights_only=True)


def restore(directory: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Meta:
    """Load a checkpoint into this rank's (wrapped / sharded) model and optimizer; every rank calls it."""
    meta = read_meta(directory)
    if meta.world_size != dist.get_world_size() and _is_zero1(optimizer):
        raise ValueError(f"ZeRO-1 checkpoint of world size {meta.world_size} cannot be loaded at "
                         f"{dist.get_world_size()} ranks (ZeroRedundancyOptimizer partitions by rank)")
    opts = StateDictOptions(full_state_dict=True)
    set_model_state_dict(model, load_model_state(directory), options=opts)
    optim_sd = torch.load(Path(directory) / OPTIM_FILE, map_location="cpu", weights_only=True)
    if _is_zero1(optimizer):
        optimizer.load_state_dict(optim_sd)
    else:
        set_optimizer_state_dict(model, optimizer, optim_sd, options=opts)
    return meta
