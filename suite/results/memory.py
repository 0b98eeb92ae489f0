"""A stored result's memory, like for like: the one answer to "how does the measured memory compare with the
prediction" for `suite run`'s and `results show`'s table, the report, compare and the site.

A measured peak (the allocator's on a GPU, the memory tracker's, a plain total) is compared with the predicted
total; without one (a CPU run without measure_peaks) the counted model states (parameters, gradients, optimizer
states, master weights) are compared with the prediction for the same categories.  The scope says which.
"""

from __future__ import annotations

from suite.results.schema import CellResult

# Memory categories of the planner (suite.plan.memory.MemoryBreakdown), in stacking order.
BREAKDOWN = ("parameters", "gradients", "optimizer_states", "master_weights", "activations")
STATES = BREAKDOWN[:4]  # what ZeRO shards: everything but activations


def memory_parts(r: CellResult) -> tuple[dict[str, float | None], dict[str, float]]:
    """(measured, predicted) per-rank bytes by category; predicted falls back to the stored prediction."""
    if r.memory is not None:
        return dict(r.memory.measured), dict(r.memory.predicted)
    return {}, dict(r.prediction.get("memory_bytes") or {})  # None: a traced-only model


# Measured peaks, best first: the allocator's (GPU), the memory tracker's (measure_peaks), a plain total.
PEAK_KEYS = (("total_cuda", "peak (cuda)"), ("total_tracker", "peak (tracker)"), ("total", "peak"))


def measured_memory(r: CellResult) -> tuple[float | None, float | None, str | None]:
    """(measured, predicted, scope) per-rank bytes, like for like.

    A measured peak is compared with the predicted total (scope 'peak (cuda)' etc.).  Without one (CPU runs
    without measure_peaks) the counted model states (parameters, gradients, optimizer states, master weights) are
    compared with the prediction for the same categories (scope "states"), so the ratio never mixes scopes.
    """
    measured, predicted = memory_parts(r)
    for key, scope in PEAK_KEYS:
        if measured.get(key) is not None:
            return measured[key], predicted.get("total"), scope
    states_m, states_p = states_bytes(r)
    if states_m is not None:
        return states_m, states_p, "states"
    return None, predicted.get("total"), None


def states_bytes(r: CellResult) -> tuple[float | None, float | None]:
    """(measured, predicted) bytes of model states (params, grads, optimizer, master) over the same categories."""
    measured, predicted = memory_parts(r)
    keys = [k for k in STATES if measured.get(k) is not None]
    if not keys:
        return None, sum(predicted[k] for k in STATES) if all(k in predicted for k in STATES) else None
    # a traced-only model (your own) has no predicted states: no ratio, not a prediction of 0
    return sum(measured[k] for k in keys), sum(predicted[k] for k in keys) if all(k in predicted for k in keys) \
        else None


def memory_ratio(r: CellResult) -> tuple[float | None, str | None]:
    """(measured / predicted, scope) of one result, like for like (see measured_memory); None without both."""
    measured, predicted, scope = measured_memory(r)
    return (None if measured is None or not predicted else measured / predicted), scope
