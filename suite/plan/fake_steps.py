"""The traced steps themselves: the worker's code, run inside trace.py's fake world (see its docstring).

Kept apart from trace.py so that module stays importable without torch (trace_key, the cache)."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from suite.data import build_data
from suite.models.build import build_model, materialize
from suite.plan.depth import PhaseLog
from suite.worker.loop import Trainer
from suite.worker.measure import track_peaks
from suite.worker.parallelize import data_replica, parallelize

# What CUDA's SDPA would run instead of the CPU kernel a trace sees (same O(s)-per-head saved tensors).
_CUDA_ATTENTION = {"fp32": "memory-efficient attention (flash needs 16-bit inputs)",
                   "bf16-mixed": "flash attention", "fp16-mixed": "flash attention"}


class _AttentionOps(TorchDispatchMode):
    """Notes which attention op ran (the one SDPA dispatched to), without changing anything."""

    def __init__(self):
        super().__init__()
        self.seen: str | None = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.name()
        if self.seen is None and ("attention" in name or "multi_head" in name):
            self.seen = name
        return func(*args, **(kwargs or {}))


def _as_sampled(micro_batches):
    """The step's batches made again under the tracker, as the CPU worker holds them (sampled there: one inputs
    and one targets tensor for the rank's slice, the micro-batches views of them).  A CUDA worker copies each
    micro-batch separately: the same bytes (token ids: a few KiB)."""
    m = micro_batches[0][0].shape[0]
    inputs, targets = (torch.cat([mb[k] for mb in micro_batches]) for k in (0, 1))
    return list(zip(inputs.split(m), targets.split(m)))


def run_traced(cell, steps: int, phase: list[str], phases: bool = False) -> dict[str, Any]:
    """Build, parallelize and run `steps` optimizer steps of `cell` as rank 0 under the memory tracker.
    Must run inside a fake process group and FakeTensorMode (trace.trace_cell sets both up).  Appends to
    `phase` what it is doing (an error then says whether the model, the strategy or the step failed).
    `phases`: also name every moment with its phase (plan/depth.py): the result's "phases"."""
    device = torch.device("cpu")
    phase.append("building the model")
    # The structure on `meta` (no storage, no initialization: torchvision's ViT init reads values on the host,
    # which fake tensors do not have), then fake `cpu` tensors in its place; their values are never read.
    with torch._subclasses.fake_tensor.unset_fake_temporarily(), torch.device("meta"):
        model = build_model(cell.model, cell.seed)
    materialize(model, device)  # to_empty, tied parameters kept tied
    log = None
    if phases:
        prefix = next(name for name, m in model.named_modules() if m is model.blocks)
        log = PhaseLog(cell.model.layers, prefix)
    phase.append(f"applying checkpointing and strategy {cell.strategy}")
    par = parallelize(model, cell, device)
    trainer = Trainer(par, cell, device)
    notes = []
    if trainer.scaler.is_enabled():
        # GradScaler skips the step on a non-finite gradient, which it learns by reading a value on the
        # host; fake tensors have none.  Its scale and in-place unscale allocate no tensors worth counting.
        trainer.scaler = torch.amp.GradScaler(device.type, enabled=False)
        notes.append("fp16: GradScaler disabled in the trace (its inf check reads a value on the host)")
    with torch._subclasses.fake_tensor.unset_fake_temporarily():
        # real (small) token batches, drawn outside the fake mode and the tracker: sampling them op by op
        # under both costs more than the step; the fake mode lifts them on first use
        data = build_data(cell, *data_replica(cell, torch.distributed.get_rank()))  # this rank's slice
        batches = [data.micro_batches(i) for i in range(steps)]
    counted: dict[str, int] = {}
    step = iter(range(steps))
    if par.pipeline is not None and par.tracker == "fsdp":  # track_peaks uses MemTracker for a schedule's step
        notes.append("pipeline: traced with MemTracker (FSDP's all-gathered and reduce-scattered buffers are "
                     "labelled as temporaries, not by their FSDP role)")

    def run_step(between) -> None:
        i = next(step)
        if log is not None:
            log.next_step()
            reset = between

            def between() -> None:
                reset()
                log.next_micro()
        trainer.step(_as_sampled(batches[i]), between=between)
        if i == 0:  # as the worker does: bytes counted after the first optimizer step
            counted.update(par.count_bytes().model_dump())

    phase.append("running the training steps")
    attention = _AttentionOps()
    with attention:
        peaks, at_peak = track_peaks(par, run_step, steps, observe=log.observe if log else None,
                                     schedule=par.pipeline is not None)
    if attention.seen:
        notes.append(f"attention: traced with aten.{attention.seen.split('::')[-1]} (CPU); on CUDA, SDPA would "
                     f"pick {_CUDA_ATTENTION[cell.precision]}, which also never stores the s x s scores")
    return {
        "at_peak": at_peak, "category_peaks": {k: v for k, v in peaks.by_category.items()}, "counted": counted,
        "tracker": "FSDPMemTracker" if par.tracker == "fsdp" and par.pipeline is None else "MemTracker",
        "attention_kernel": attention.seen, "notes": notes, "phases": log.phases if log else None,
        "stages": par.extra.get("pipeline_stages", [0]),
    }
