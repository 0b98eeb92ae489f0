"""The largest micro-batch whose traced peak fits the device, found without running anything.

DeepSpeed's autotuner prunes its trial runs by estimated memory; suite answers from traces alone.  A traced
peak grows with the micro-batch (activations and temporaries scale with it, nothing shrinks), so: double
the micro-batch from 1 until a trace does not fit, then bisect between the last fit and the first misfit —
about 2 log2(answer) traces per cell, each cached by its shape.

The limit is `gpu_memory_gb x 1e9 x (1 - headroom)`: the headroom is what the trace cannot see (the CUDA
context, NCCL's buffers, the caching allocator's rounding and fragmentation).
"""

from __future__ import annotations

from typing import Callable

from pydantic import BaseModel, Field

from suite.plan import host_bytes
from suite.plan.trace_record import Trace, TraceFailure

MAX_SEARCH_MICRO_BATCH = 4096


class MicroBatchAnswer(BaseModel):
    """The search's answer for one cell."""

    micro_batch_size: int | None = Field(description="Largest micro-batch that fits (None: not even 1, or "
                                         "a trace failed).")
    peak: int | None = Field(description="Its traced per-rank peak, bytes.")
    limit: float = Field(description="gpu_memory_gb x 1e9 x (1 - headroom), bytes.")
    headroom: float
    traces: list[tuple[int, int | None]] = Field(description="(micro-batch, traced peak) in the order tried.")
    capped: bool = Field(False, description="True when the search stopped at MAX_SEARCH_MICRO_BATCH.")
    error: str | None = None


def max_micro_batch(cell, get: Callable[[object], Trace | TraceFailure], headroom: float) -> MicroBatchAnswer:
    """Search the largest fitting micro-batch for `cell` (its other settings kept); `get(cell)` traces."""
    if cell.gpu_memory_gb is None:
        raise ValueError("--max-micro-batch needs the device's size: set gpu_memory_gb in the scenario")
    if not 0 <= headroom < 1:
        raise ValueError(f"--headroom {headroom:g} must be at least 0 and below 1 (a fraction of gpu_memory_gb)")
    limit = cell.gpu_memory_gb * 1e9 * (1 - headroom)
    tried: list[tuple[int, int | None]] = []
    # offload: the CPU trace counts host and device as one memory; the device's share is the peak less the host
    # bytes (as predict's `fits`), which do not depend on the micro-batch
    host = int(host_bytes(cell))

    def peak(m: int) -> int | None:
        found = get(cell.model_copy(update={"micro_batch_size": m}))
        value = found.peak - host if isinstance(found, Trace) else None
        tried.append((m, value))
        if isinstance(found, TraceFailure):
            raise _Failed(found.error)
        return value

    answer = dict(limit=limit, headroom=headroom, traces=tried)
    try:
        if peak(1) > limit:
            return MicroBatchAnswer(micro_batch_size=None, peak=None, **answer)
        good, bad = 1, None
        while bad is None:  # double until a misfit (or the cap)
            if good * 2 > MAX_SEARCH_MICRO_BATCH:
                return MicroBatchAnswer(micro_batch_size=good, peak=_peak_of(tried, good), capped=True, **answer)
            if peak(good * 2) <= limit:
                good *= 2
            else:
                bad = good * 2
        while bad - good > 1:  # bisect: good fits, bad does not
            mid = (good + bad) // 2
            good, bad = (mid, bad) if peak(mid) <= limit else (good, mid)
    except _Failed as exc:
        return MicroBatchAnswer(micro_batch_size=None, peak=None, error=str(exc), **answer)
    return MicroBatchAnswer(micro_batch_size=good, peak=_peak_of(tried, good), **answer)


class _Failed(Exception):
    pass


def _peak_of(tried: list[tuple[int, int | None]], m: int) -> int | None:
    return next(p for size, p in tried if size == m)
