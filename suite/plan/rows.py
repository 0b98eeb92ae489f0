"""`suite plan` as data: one row per cell with its axes and the planner's numbers (pure; no printing)."""

from __future__ import annotations

from typing import Any

from suite.plan import predict


def plan_rows(cells) -> list[dict[str, Any]]:
    """The `suite plan --json` objects: cell, settings, num_parameters, memory_bytes, fits, flops, comm."""
    rows = []
    for cell in cells:
        p = predict(cell)
        rows.append({
            "cell": cell.id,
            "settings": cell.axes(),
            "num_parameters": p.num_parameters,
            "memory_bytes": p.memory_bytes.model_dump(),
            "fits": p.fits,
            "flops_per_token": p.flops_per_token,
            "comm_bytes_per_step": p.comm_bytes_per_step,
        })
    return rows
