"""A real rank's MemTracker peak against the trace of the same code, allowing for the one effect of gloo that a
trace cannot follow.

gloo's worker thread marks an all-gather finished (waking the rank that waits on it) and only then lets go of
its Work, which holds the output buffer.  So, now and then, the next all-gather's buffer is made while the
last one still lives, and the real peak holds one gathered unit more than the program order the trace follows.
Seen on CPU here (2026-12-07, tests/dist/test_pipeline_parallel.py's zero3 1f1b cell, 5 runs of 4 ranks):
2 ranks in 20 peaked 181,760 bytes above their trace, exactly one llama block's fp32 parameters, at a
backward prefetch; the other 18 were within 0.4%.  NCCL's buffers follow the caching allocator's stream rules
instead, so on a GPU this race does not exist.
"""

from __future__ import annotations

from suite.scenario import Cell
from suite.strategies import registry


def late_gather_bytes(cell: Cell) -> int:
    """The largest buffer an all-gather of parameters makes for `cell` (one block's fp32 parameters, each
    FSDP unit being a block), or 0 when the strategy gathers no parameters (its family shards none)."""
    if not registry.SHARDS[registry.get(cell.strategy).family].parameters:
        return 0
    return 4 * cell.model.block_parameters() // cell.tensor_parallel


def peak_matches_trace(measured: int, traced: int, cell: Cell, rel: float = 0.05) -> bool:
    """`measured` is `traced` within `rel`, or is that plus one late all-gather buffer (see the module)."""
    late = late_gather_bytes(cell)
    return any(abs(measured - extra - traced) <= rel * traced for extra in {0, late})
