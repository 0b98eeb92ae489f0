"""From per-rank records to one cell's numbers: pure functions, no torch, no I/O.

Conventions (stated once, used by every result):
- Losses and step times are rank 0's.  Losses are the global mean (identical on every rank); step times are
  device-synchronised wall times of whole optimizer steps.  The first `warmup_steps` are excluded from every
  timing statistic (they still count in the loss curve).
- Throughput = tokens (or samples) per step x measured steps / their summed time, i.e. per step / mean step
  time: the rate a long run would sustain.  Per device divides by the world size.
- MFU = flops_per_token x tokens/s per device / peak FLOP/s of the precision used, with flops_per_token from
  the planner (6 Psi + 12 L h s, no recomputation counted).  No peak (CPUs, fp32, unknown devices) means no
  MFU value; the accounting is stored anyway.
- Memory: rank 0's measured bytes beside the planner's per-rank prediction, ratio = measured / predicted.
- Overhead: launch (launcher start to the worker starting setup), setup, train, and teardown (everything
  after the last step until the launcher exited: process-group teardown, process exit, launcher exit).
  The four add up to the wall time.
"""

from __future__ import annotations

import statistics
from typing import Any, Sequence

from suite.plan.flops import PEAK_SOURCE, peak_flops
from suite.results.schema import (MemoryComparison, Mfu, Overhead, PipelineMeasured, RankRecord, StepStats,
                                  Throughput)

MFU_FORMULA = ("MFU = flops_per_token x tokens_per_s_per_device / peak_flops; "
               "flops_per_token = 6 x params + 12 x layers x hidden x seq_len (no recomputation)")


def measured_steps(record: RankRecord) -> list[float]:
    """Step times after warm-up."""
    return list(record.step_times_s[record.warmup_steps:])


def throughput(record: RankRecord, times: Sequence[float]) -> Throughput | None:
    if not times or sum(times) <= 0:
        return None
    mean = sum(times) / len(times)
    tokens = record.tokens_per_step / mean
    return Throughput(tokens_per_s=tokens, tokens_per_s_per_device=tokens / record.world_size,
                      samples_per_s=record.samples_per_step / mean)


def mfu(tp: Throughput | None, flops_per_token: float, device_name: str | None, precision: str,
        traced_only: str | None = None) -> Mfu:
    """`traced_only`: why the planner has no shape for the model (your own): suite does not count its FLOPs
    (6 x params would overstate a mixture of experts and understate an image model), so no MFU."""
    peak = peak_flops(device_name, precision)
    value = None
    if peak and tp is not None and not traced_only:
        value = flops_per_token * tp.tokens_per_s_per_device / peak
    formula = MFU_FORMULA if not traced_only else f"no MFU: the model's FLOPs are not counted ({traced_only})"
    return Mfu(value=value, formula=formula, flops_per_token=flops_per_token, peak_flops=peak,
               peak_source=PEAK_SOURCE if peak else None, precision=precision)


def _ratio(measured: float | None, predicted: float | None) -> float | None:
    if measured is None or not predicted:
        return None
    return measured / predicted


def memory(record: RankRecord, predicted: dict[str, float], traced_peak: float | None = None) -> MemoryComparison:
    """Rank 0's measured bytes beside the planner's (textbook) ones; `total_cuda` and `total_tracker` compare
    to its total and, when the cell was traced, to the traced peak."""
    tb, cm, pk = record.tensor_bytes, record.cuda_memory, record.peaks
    measured: dict[str, float | None] = {
        "parameters": tb.parameters if tb else None,
        "gradients": tb.gradients if tb else None,
        "optimizer_states": tb.optimizer_states if tb else None,
        "master_weights": tb.master_weights if tb else None,
        "activations": pk.activations if pk else None,
        "unsharded_parameters": pk.unsharded_parameters if pk else None,
        "total_tracker": pk.total if pk else None,
        "total_cuda": cm.max_memory_allocated if cm else None,
        "reserved_cuda": cm.max_memory_reserved if cm else None,
    }
    ratio = {key: _ratio(measured[key], predicted.get(key))
             for key in ("parameters", "gradients", "optimizer_states", "master_weights", "activations")}
    ratio["total_tracker"] = _ratio(measured["total_tracker"], predicted.get("total"))
    ratio["total_cuda"] = _ratio(measured["total_cuda"], predicted.get("total"))
    # against the traced peak of the same code (prediction["traced"]; measure_peaks cells)
    ratio["tracker_vs_traced"] = _ratio(measured["total_tracker"], traced_peak)
    ratio["cuda_vs_traced"] = _ratio(measured["total_cuda"], traced_peak)
    if traced_peak is not None:
        predicted = {**predicted, "traced_peak": traced_peak}
    return MemoryComparison(measured=measured, predicted=dict(predicted), ratio=ratio)


def overhead(launch_start: float, launch_end: float, setup_done_t: float | None,
             record: RankRecord | None) -> Overhead | None:
    """Split the wall time; None without the worker's setup time and its setup_done event."""
    if record is None or record.setup_s is None or setup_done_t is None:
        return None
    wall = launch_end - launch_start
    setup = record.setup_s.total
    launch = setup_done_t - setup - launch_start
    train = record.train_s
    return Overhead(launch=launch, setup=setup, train=train, teardown=wall - launch - setup - train, wall=wall)


def pipeline_measured(records: list[RankRecord], prediction: dict[str, Any], stages: int) -> PipelineMeasured | None:
    """The measured bubble and each stage's model states (its first rank's: the mesh is (pp, dp, tp), so stage i
    starts at rank i x its data- x tensor-parallel ranks); None without pipeline parallelism.

    The bubble is the formula's: the share of the pipeline's time a stage sits idle, waiting for another stage.
    The pipeline's time of a step is the longest any rank spent in the schedule: the ranks enter a step together
    (the previous step's gradient-norm all-reduce over the pipeline holds them; 2 ms apart on CPU), and the first
    stage leaves last, after the final backward.  A rank waits in its schedule's waits for messages and, after
    its schedule ends, until that longest one ends (the last stage waits there for the first stage's final
    backward); what is neither computing nor waiting is the schedule's own work, its overhead share.  Where a
    rank's waits were not timed (older records, a torch without the hook), idle is everything but computing
    (1 - busy / the pipeline's time), the overhead included, and no overhead is given.

    Each rank's idle and overhead shares are the medians over its steps after warm-up (each step's seconds over
    that step's pipeline time), as a cell's step time is its median step: one step in which a rank happened to
    wait long does not move it (schema 12; schema 11 took the shares of the steps' sums).  The bubble is the
    busiest rank's idle share: with unequal stages the slowest one sets the pace, and the others also idle for
    the difference, which the formula does not count."""
    if stages == 1:
        return None
    steady = [(r, r.pipeline_busy_s[r.warmup_steps:], r.pipeline_s[r.warmup_steps:],
               r.pipeline_wait_s[r.warmup_steps:]) for r in records]
    steady = sorted([t for t in steady if t[1] and len(t[1]) == len(t[2])], key=lambda t: t[0].rank)
    idle: list[float] = []
    overhead: list[float] = []
    if steady and len({len(wall) for _, _, wall, _ in steady}) == 1:
        spans = [max(step) for step in zip(*(wall for _, _, wall, _ in steady))]
        timed = all(len(waits) == len(wall) for _, _, wall, waits in steady)
        if all(sp > 0 for sp in spans):
            if timed:  # waits, and the time after the rank's schedule ended
                idle = [statistics.median((w + sp - wl) / sp for w, sp, wl in zip(waits, spans, wall))
                        for _, _, wall, waits in steady]
                overhead = [statistics.median(max(0.0, wl - b - w) / sp
                                              for b, w, sp, wl in zip(busy, waits, spans, wall))
                            for _, busy, wall, waits in steady]
            else:
                idle = [statistics.median(1.0 - b / sp for b, sp in zip(busy, spans)) for _, busy, _, _ in steady]
    by_rank, per_stage = {r.rank: r for r in records}, max(1, records[0].world_size // stages)
    firsts = [by_rank.get(i * per_stage) for i in range(stages)]
    tb = [r.tensor_bytes if r is not None else None for r in firsts]
    states = [b.parameters + b.gradients + b.optimizer_states + b.master_weights for b in tb if b is not None]
    return PipelineMeasured(bubble=min(idle) if idle else None, rank_idle=idle, rank_overhead=overhead,
                            bubble_predicted=(prediction.get("pipeline") or {}).get("bubble_fraction"),
                            stage_states=states if len(states) == stages else [])


def aggregate(records: list[RankRecord], prediction: dict[str, Any], precision: str,
              launch_start: float, launch_end: float, setup_done_t: float | None, stages: int = 1) -> dict[str, Any]:
    """The CellResult fields computed from the rank records (rank 0 first); empty records give empty fields.
    `stages`: the cell's pipeline_parallel."""
    if not records:
        return {}
    r0 = min(records, key=lambda r: r.rank)
    times = measured_steps(r0)
    tp = throughput(r0, times)
    return {
        "losses": list(r0.losses),
        "final_loss": r0.losses[-1] if r0.losses else None,
        "grad_norms": list(r0.grad_norms),  # rank 0's: the synchronized gradient's, or rank 0's own when it was not
        "eval": list(r0.eval),  # reduced over ranks: every rank holds the same
        "step_times_s": times,
        "step_time": StepStats.of(times),
        "throughput": tp,
        # A CPU has no tabulated peak: never look one up by its model name.
        "mfu": mfu(tp, prediction["flops_per_token"], None if r0.device.startswith("cpu") else r0.device_name,
                   precision, prediction.get("analytic")),
        "memory": memory(r0, prediction["memory_bytes"] or {}, (prediction.get("traced") or {}).get("peak")),
        "overhead_s": overhead(launch_start, launch_end, setup_done_t, r0),
        "pipeline": pipeline_measured(records, prediction, stages),
    }
