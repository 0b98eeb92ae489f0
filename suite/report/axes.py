"""The axes a cell is swept along, their short table headers, and which of them vary among some cells.

varying_axes is the one answer to "which axes differ here" for the cell table (`suite results show`), the
report's tables, pivots and plots, and compare's cell descriptions.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

# Axes in the order cells list them (suite.scenario.AXES), with the short header each gets in a table.
AXIS_HEADERS = {
    "model": "model", "seq_len": "seq", "strategy": "strategy", "activation_checkpointing": "ckpt",
    "precision": "precision", "gpus": "gpus", "nodes": "nodes", "shard_size": "shard", "tensor_parallel": "tp", "micro_batch_size": "mbs",
    "global_batch_size": "gbs", "seed": "seed",
}
AXES = tuple(AXIS_HEADERS)


def varying_axes(items: Iterable[Mapping[str, Any]], axes: Sequence[str] = AXES) -> list[str]:
    """The axes (in the order given) on which the items do not all have the same value; a missing key is None."""
    items = list(items)
    if not items:
        return []
    first = items[0]
    return [a for a in axes if any(x.get(a) != first.get(a) for x in items)]
