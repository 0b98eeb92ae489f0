"""`suite plan` as data: one row per cell with its axes and the planner's numbers (pure; no printing)."""

from __future__ import annotations

from typing import Any, Callable

from suite.plan import predict
from suite.plan.trace_record import Trace, TraceFailure


def plan_rows(cells, trace: Callable[[Any], Trace | TraceFailure] | None = None) -> list[dict[str, Any]]:
    """The `suite plan --json` objects: cell, settings, num_parameters, the three memory predictions
    (memory_bytes = textbook, as_implemented, traced), fits (+ fits_by, fits_bytes), flops, comm.
    `trace(cell)`: a traced peak per cell (suite.plan.trace_cache.TraceCache.get), or None for no tracing."""
    rows = []
    for cell in cells:
        p = predict(cell, trace(cell) if trace is not None else None)
        rows.append({
            "cell": cell.id,
            "settings": cell.axes(),
            "num_parameters": p.num_parameters,
            "memory_bytes": p.memory_bytes.model_dump() if p.memory_bytes else None,  # None: traced only
            "as_implemented": p.as_implemented.model_dump() if p.as_implemented else None,
            "analytic": p.analytic,
            "host_bytes": p.host_bytes,
            "traced": p.traced.model_dump() if p.traced else None,
            "trace_error": p.trace_error,
            "fits": p.fits,
            "fits_by": p.fits_by,
            "fits_bytes": p.fits_bytes,
            "flops_per_token": p.flops_per_token,
            "recompute_flops_per_token": p.recompute_flops_per_token,
            "comm_bytes_per_step": p.comm_bytes_per_step,
            "context_bytes_per_step": p.context_bytes_per_step,
            "pipeline": p.pipeline.model_dump() if p.pipeline else None,  # stages, bubble, bytes per stage
        })
    return rows
