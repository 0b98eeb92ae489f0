"""The largest micro-batch whose traced peak fits the device, found without running anything.

DeepSpeed's autotuner prunes its trial runs by estimated memory; suite answers from traces alone.  A traced
peak grows with the micro-batch (activations and temporaries scale with it, nothing shrinks), so: double
the micro-batch from 1 until a trace does not fit, then bisect between the last fit and the first misfit —
about 2 log2(answer) traces per cell, each cached by its shape.  Pipeline- and context-parallel cells are not
traced yet: their search reads the as-implemented model's largest stage instead (`basis`), and says so.

The limit is `gpu_memory_gb x 1e9 x (1 - headroom)`: the headroom is what the trace cannot see.  A trace
counts the bytes tensors hold — what `torch.cuda.max_memory_allocated` reports on a GPU.  The device must also
hold what the caching allocator *reserves* beyond that (`max_memory_reserved`: 2 MiB / 20 MiB block rounding,
blocks freed but kept for reuse, fragmentation; typically 5-15% more in training), the CUDA context and
kernels (about 0.5-1 GB) and NCCL's buffers.  The default 0.1 covers the usual case; the GPU check records
allocated and reserved peaks side by side for the cells it runs, to size it.  Each answer also gives the
traced peak at the next micro-batch — the one that did not fit — so the margin is visible, and the search
runs on the fast traces and the trace cache (a second search of the same shapes traces nothing).
"""

from __future__ import annotations

from typing import Callable, Literal

from pydantic import BaseModel, Field

from suite.plan import host_bytes, predict
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
    next_micro_batch: int | None = Field(None, description="The micro-batch one above the answer (the smallest "
                                         "that does not fit), when traced.")
    next_peak: int | None = Field(None, description="Its traced peak, bytes: above `limit`.")
    error: str | None = None
    basis: Literal["traced", "as-implemented"] = Field(
        "traced", description="What each micro-batch's peak came from: its trace, or, for pipeline- and "
        "context-parallel cells (not traced yet), the as-implemented model's largest pipeline stage.")


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
    basis = "as-implemented" if untraced_layout(cell) else "traced"

    def peak(m: int) -> int | None:
        if basis == "as-implemented":
            value = int(predict(cell.model_copy(update={"micro_batch_size": m})).as_implemented.total) - host
            tried.append((m, value))
            return value
        found = get(cell.model_copy(update={"micro_batch_size": m}))
        value = found.peak - host if isinstance(found, Trace) else None
        tried.append((m, value))
        if isinstance(found, TraceFailure):
            raise _Failed(found.error)
        return value

    answer = dict(limit=limit, headroom=headroom, traces=tried, basis=basis)
    try:
        if peak(1) > limit:
            return MicroBatchAnswer(micro_batch_size=None, peak=None, next_micro_batch=1, next_peak=_peak_of(tried, 1),
                                    **answer)
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
    return MicroBatchAnswer(micro_batch_size=good, peak=_peak_of(tried, good), next_micro_batch=bad,
                            next_peak=_peak_of(tried, bad), **answer)


def untraced_layout(cell) -> bool:
    """Pipeline cells, whose search reads the as-implemented model: a pipeline's trace is one full trace per
    pipeline rank with all its micro-batches (minutes at 405B scale: too slow to repeat for every micro-batch
    size tried).  Context-parallel cells are traced like the others (the ring runs under the fake group)."""
    return getattr(cell, "pipeline_parallel", 1) > 1


class _Failed(Exception):
    pass


def _peak_of(tried: list[tuple[int, int | None]], m: int) -> int | None:
    return next(p for size, p in tried if size == m)
