"""The analytic model: what a cell should cost, from the textbook formulas of ../shared/reference.md.

Pure Python (no torch).  `predict(cell)` gives the per-rank memory breakdown, FLOPs per token and bytes
communicated per step; the runner stores it beside what was measured so every result shows both.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from suite.plan.comm import comm_bytes_per_step
from suite.plan.flops import flops_per_token
from suite.plan.memory import MemoryBreakdown, activation_bytes, static_bytes

__all__ = ["Prediction", "MemoryBreakdown", "predict"]


class Prediction(BaseModel):
    """The planner's numbers for one cell, per rank."""

    num_parameters: int
    memory_bytes: MemoryBreakdown
    fits: bool | None = Field(description="total <= gpu_memory_gb x 1e9; None when the scenario gives no size.")
    flops_per_token: float = Field(description="Training FLOPs per token: 6 x params + 12 x L x h x s.")
    comm_bytes_per_step: float = Field(description="Bytes each rank sends per optimizer step (see comm.py).")


def predict(cell) -> Prediction:
    """The planner's numbers for a Cell (anything with its fields: model, strategy, precision, gpus, ...)."""
    shape = cell.model
    psi = shape.num_parameters()
    static = static_bytes(psi, cell.strategy, cell.precision, cell.gpus)
    acts = activation_bytes(shape, cell.seq_len, cell.micro_batch_size, cell.activation_checkpointing, cell.precision)
    memory = MemoryBreakdown(**static, activations=acts, total=sum(static.values()) + acts)
    fits = None if cell.gpu_memory_gb is None else memory.total <= cell.gpu_memory_gb * 1e9
    return Prediction(
        num_parameters=psi,
        memory_bytes=memory,
        fits=fits,
        flops_per_token=flops_per_token(shape, cell.seq_len),
        comm_bytes_per_step=comm_bytes_per_step(psi, cell.strategy, cell.precision, cell.gpus, cell.grad_accum),
    )
