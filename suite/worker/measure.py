"""What a rank measures besides the loss: device facts, CUDA allocator statistics, the MemTracker peaks pass,
and how records leave the process (atomic JSON, an append-only event log).

Peaks pass (`measure_peaks: true`).  torch's MemTracker (FSDPMemTracker for FSDP) is a TorchDispatchMode
that sees every tensor allocation and labels it: parameter, gradient, activation (created in forward or in a
checkpoint's recomputation), temporary (created in backward), optimizer state; FSDPMemTracker also tells
sharded from unsharded parameters.  It works on CPU, where no allocator statistics exist.  We track the
maximum of each category over time (torch's own "peak" snapshot only records the categories at the moment
the *total* peaked), over 2 extra steps run after the timed loop: the tracker slows every op down by ~3x,
so it never runs inside the timed steps.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch
from pydantic import BaseModel

from suite.results.schema import CudaMemory, PeakMemory
from suite.strategies.base import Parallel


# ----------------------------------------------------------------------------------------------- device facts
def cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")  # Linux; elsewhere platform's answer
    lines = cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return names[0] if names else platform.processor() or platform.machine()


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()


def host_identity() -> tuple[str, str | None]:
    host = socket.gethostname()
    try:
        return host, socket.gethostbyname(host)
    except OSError:
        return host, None


def reset_cuda_peaks(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def cuda_memory(device: torch.device) -> CudaMemory | None:
    if device.type != "cuda":
        return None
    s = torch.cuda.memory_stats(device)
    return CudaMemory(
        max_memory_allocated=torch.cuda.max_memory_allocated(device),
        max_memory_reserved=torch.cuda.max_memory_reserved(device),
        num_alloc_retries=int(s.get("num_alloc_retries", 0)),
        num_ooms=int(s.get("num_ooms", 0)),
    )


# ----------------------------------------------------------------------------------------------- peaks pass
def _category_peak_tracker(base: type) -> type:
    """A subclass of MemTracker / FSDPMemTracker that also keeps each category's own maximum, and every
    category's bytes at the moment the total peaked (the planner's trace reports that breakdown)."""

    class CategoryPeaks(base):
        def __init__(self, *args, observe=None, **kwargs):
            super().__init__(*args, **kwargs)
            self.category_peaks: dict[str, int] = {}
            self.at_peak: dict[str, int] = {}
            self._observe = observe  # observe(tracker, labels) after every update (the planner's phases)

        def _update_peak_stats(self, *args, **kwargs):
            # torch's per-module peak snapshots (a walk over every module on every op: a fifth of a large
            # trace's time); suite reads only its own maxima, kept in _update_snap
            return None

        def _update_snap(self, u_type, *args, **kwargs):  # called on every tracked allocation, free and resize
            super()._update_snap(u_type, *args, **kwargs)
            if getattr(u_type, "name", None) == "DEL":
                # a free lowers every label: no maximum moves.  (Frees can also come late, from the garbage
                # collector: skipping them keeps the moments the planner names independent of its timing.)
                return
            for snap in self._curr_mem_snap.values():
                named = {getattr(key, "value", key): value for key, value in snap.items()}
                for name, value in named.items():
                    if value > self.category_peaks.get(name, 0):
                        self.category_peaks[name] = value
                if named.get("Total", 0) > self.at_peak.get("Total", -1):
                    self.at_peak = named
                if self._observe is not None:
                    self._observe(self, named)

    return CategoryPeaks


def _schedule_mod_tracker():
    """torch's ModTracker for a pipeline schedule's step (MemTracker's module bookkeeping).

    A schedule runs a stage's forward for several micro-batches before their backwards, which MemTracker
    refuses for a top-level module ("does not support memory tracking for multiple iterative calls").  It
    accepts a submodule used several times in one iteration, i.e. one with a parent besides "Global": this
    tracker keeps a named parent, "pipeline schedule", above the stages, and puts it back after each backward
    (ModTracker resets its parents to {"Global"} when a backward ends)."""
    from torch.distributed._tools.mod_tracker import ModTracker
    from torch.utils._pytree import tree_map_only

    parent = "pipeline schedule"

    class ScheduleModTracker(ModTracker):
        def __init__(self):
            super().__init__()
            self.parents.add(parent)

        def _fw_pre_hook(self, mod, input):
            # ModTracker hooks a module's inputs to learn when their backward ends; a stage's input is a leaf
            # that requires grad, and under a split backward (zero-bubble: the input gradient by autograd.grad)
            # such a hook on a leaf fails ("A leaf node was passed to _will_engine_execute_node ...").  It
            # sees those leaves detached (the same storage, no gradient): a module whose inputs are all leaves
            # then leaves the parents when the backward ends, as ModTracker does for one with no such input.
            seen = tree_map_only(torch.Tensor, lambda a: a.detach() if a.requires_grad and a.grad_fn is None else a,
                                 input)
            return super()._fw_pre_hook(mod, seen)

        def _maybe_set_engine_callback(self):
            if self._has_callback:
                return
            super()._maybe_set_engine_callback()  # queues the reset to {"Global"}; then, after it:
            torch.autograd.Variable._execution_engine.queue_callback(lambda: self.parents.add(parent))

    return ScheduleModTracker()


def track_peaks(par: Parallel, run_step: Callable[[Callable[[], None]], None], steps: int = 2,
                observe: Callable[[object, dict[str, int]], None] | None = None,
                schedule: bool = False) -> tuple[PeakMemory, dict[str, int]]:
    """Run `steps` training steps under the memory tracker; `run_step(between)` runs one step and calls
    `between()` after every micro-batch's backward (the tracker needs its per-iteration stats reset).
    Returns the peaks and the tracker's categories at the moment of the largest total.  `observe(tracker,
    labels)`: called after every tracked allocation, free or resize (plan/depth.py names its phase)."""
    optimizer = getattr(par.optimizer, "optim", par.optimizer)  # ZeroRedundancyOptimizer: the local one
    if par.tracker == "fsdp" and not schedule:  # it takes one FSDP root; a pipeline rank may hold several stages
        from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

        tracker = _category_peak_tracker(FSDPMemTracker)(par.model, optimizer, observe=observe)
    else:
        from torch.distributed._tools.mem_tracker import MemTracker

        tracker = _category_peak_tracker(MemTracker)(observe=observe)
        if schedule:
            tracker._mod_tracker = _schedule_mod_tracker()
        tracker.track_external(par.model, optimizer)
    with tracker:
        for _ in range(steps):
            run_step(tracker.reset_mod_stats)
    by_cat = dict(tracker.category_peaks)
    total = by_cat.pop("Total", 0)
    peaks = PeakMemory(
        activations=by_cat.get("Activation", 0),
        unsharded_parameters=by_cat.get("Unsharded Param", 0),
        total=total,
        by_category=by_cat,
    )
    return peaks, dict(tracker.at_peak)


def measure_peaks(par: Parallel, run_step: Callable[[Callable[[], None]], None], steps: int = 2) -> PeakMemory:
    """`track_peaks` without the breakdown at the peak (what a rank records)."""
    return track_peaks(par, run_step, steps, schedule=par.pipeline is not None)[0]


# ----------------------------------------------------------------------------------------------- output
def write_atomic(path: Path, record: BaseModel) -> None:
    """Write a record so readers see the old file or the whole new one, never a half-written one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(record.model_dump_json(indent=1))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class EventLog:
    """Rank 0's progress lines (events.jsonl), one JSON object per line, flushed as written; a no-op on
    other ranks.  The runner tails it for progress; results never come from it."""

    def __init__(self, path: Path | None, enabled: bool):
        self.file = None
        if enabled:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.file = open(path, "a", buffering=1)

    def emit(self, event: str, **fields) -> None:
        if self.file is not None:
            self.file.write(json.dumps({"event": event, **fields, "t": time.time()}) + "\n")

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
