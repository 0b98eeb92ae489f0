"""Trace a cell's per-rank memory by running its real code on fake tensors (no GPU, no real memory).

    fake process group (world = cell.gpus, we are rank 0)  ─┐
    FakeTensorMode: build the model, parallelize it         ├─ the worker's own code: build_model, parallelize
      (checkpointing, the strategy's apply, its precision)  │  (compile off), Trainer.step, count_bytes,
    torch's MemTracker / FSDPMemTracker over 2 steps        ─┘  track_peaks (suite/worker/measure.py)

Fake tensors carry shapes, dtypes and devices but no storage, so a 64-rank llama3-70b cell traces on a laptop;
the fake process group turns every collective into a no-op that leaves its output the right shape.  torch's
trackers see every allocation and free, so the peak is the peak of this code path.  What differs from a GPU
run is said in `Trace.notes`: the trace runs on `cpu` (a fake `cuda` device needs an NVIDIA driver), so the
attention op is the CPU's fused SDPA, which — like CUDA's flash and memory-efficient kernels — keeps O(s) per
head, never the s x s scores; the CUDA caching allocator's rounding and fragmentation are not modelled (the
GPU check compares with `torch.cuda.max_memory_allocated`).

Micro-batches: a step traces min(grad_accum, 2) of them.  From the second micro-batch on, accumulation is a
steady state (the gradients exist and are added to in place), so more micro-batches change the peak only by
their input tensors (token ids, a few KiB); tracing 2 keeps a 64-micro-batch cell as cheap as a 2-micro-batch
one.  The model is built on `meta` and materialized as fake tensors without initialization (values are
never read).

Depth: a stack of identical blocks is traced as two shallow copies whose every phase is carried to the real
depth (depth.py: exact against the full trace in the tests, 3-8 s for llama3-8b); `trace_cell(cell, full=True)`
builds every layer, as do models and strategies depth.py cannot extrapolate (the Trace says which and why).

Pipelines: each pipeline rank holds other stages, so a pipeline cell is traced once per pipeline rank (the
fake group's rank set to that rank's first data-parallel rank), each from two shallow copies carried to the
stage's depth (depth.py) or in full, with all the step's micro-batches (`trace_micro_batches`); the worst
rank's trace is the cell's, every rank's peak is in `Trace.stages`.  The stages get their neighbours' tensors
up front (worker/parallelize._boundary_tensors), and the tracker keeps a named parent above the stages
(worker/measure._schedule_mod_tracker), since torch's MemTracker refuses a top-level module's second forward
before its backward, which every schedule does.

Strategies that need extra care under fake tensors do it themselves, behind `dist.get_backend() == "fake"`
(DDP: no constructor sync, an in-place comm hook); the device mesh is built outside the fake mode (fsdp.py).
"""

from __future__ import annotations

import hashlib
import json
import time
import warnings
from typing import Any

from suite.plan.depth import DepthError, Shallow, extrapolate, shallow_depths, stage_chunks, why_full
from suite.plan.fake_world import traced_world
from suite.plan.trace_record import StagePeak, Trace, TraceError, fold

TRACE_STEPS = 2
MAX_TRACE_MICRO_BATCHES = 2
MAX_TRACE_LAYERS = 512  # building is O(modules) Python work: 512 layers take about a minute here
MAX_TRACE_WORLD = 65536  # sharding bookkeeping grows with the ranks; beyond this a plan would stall, not answer

# What decides a cell's memory (its id also hashes steps, seed, lr, data: they do not change the trace).
_TRACE_FIELDS = ("model", "seq_len", "strategy", "activation_checkpointing", "precision", "gpus", "shard_size",
                 "tensor_parallel", "sequence_parallel", "loss_parallel", "pipeline_parallel", "pipeline_schedule",
                 "context_parallel", "micro_batch_size", "bucket_cap_mb")


def trace_key(cell) -> str:
    """Cells with the same key have the same trace (see _TRACE_FIELDS; accumulation counted up to 2)."""
    s = cell.settings()
    # the axes added later (shard_size, tensor_parallel, ...): only in the settings of cells that use them (old
    # keys stay as they were)
    key = {f: s[f] for f in _TRACE_FIELDS if f in s} | {
        "micro_batches": trace_micro_batches(cell),
        "optimizer": s["optimizer"]["name"],  # always traced with the foreach implementation (traced_cell)
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def trace_micro_batches(cell) -> int:
    """Micro-batches a traced step runs: at most 2 (accumulation is a steady state from the second on), but
    all of a pipeline's: its stages' memory grows with every micro-batch of the step, not only with those a
    schedule keeps in flight (PyTorch 2.14's 1f1b on 2 ranks, a tiny llama at 256 tokens: about one s x h fp32
    tensor more per micro-batch on each stage; before the last stage stopped keeping every micro-batch's
    output, also the logits of each)."""
    if getattr(cell, "pipeline_parallel", 1) > 1:
        return cell.grad_accum
    return min(cell.grad_accum, MAX_TRACE_MICRO_BATCHES)


def check_traceable(cell, layers: int | None = None) -> None:
    """Refuse, before building anything, what cannot be traced (TraceError with the numbers); `layers`: the
    depth that will be built (default: the model's)."""
    from suite.scenario.pipeline import planned_only
    from suite.strategies import registry

    reason = planned_only(cell)
    if reason:
        raise TraceError(f"{reason}, so there is no code to trace; plan uses the as-implemented model")
    spec = registry.get(cell.strategy)
    if not spec.traceable:
        raise TraceError(f"strategy {cell.strategy} is registered with traceable=False: it cannot run under fake "
                         "tensors; its cells have no traced peak (plan uses the as-implemented model)")
    if cell.gpus > MAX_TRACE_WORLD:
        raise TraceError(f"{cell.gpus} ranks: a trace simulates at most {MAX_TRACE_WORLD}")
    built = cell.model.layers if layers is None else layers
    if (built or 0) > MAX_TRACE_LAYERS:
        raise TraceError(f"model {cell.axes()['model']} has {built} layers; a full trace builds every layer and "
                         f"handles at most {MAX_TRACE_LAYERS}")


def traced_cell(cell):
    """The cell as traced: compile off, synthetic batches of the same shapes, at most 2 micro-batches, the
    optimizer in its foreach implementation.

    Not fused: under FakeTensorMode, fused AdamW on FSDP2's DTensors reports full-size (unsharded) states —
    17x the real bytes on 8 ranks, while real tensors on the same fake group hold the sharded ones.  foreach
    traces faithfully (it is what the CPU comparison runs); its step temporaries are more than fused AdamW's
    (none), so where a cell's peak falls in the optimizer step the trace errs high."""
    from suite.scenario.data import SyntheticData

    micro_batches = trace_micro_batches(cell)
    optimizer = cell.optimizer.model_copy(update={"fused": False})
    return cell.model_copy(update={
        "compile": False, "data": SyntheticData(kind="synthetic"), "grad_accum": micro_batches,
        "global_batch_size": cell.micro_batch_size * cell.replicas * micro_batches,
        "optimizer": optimizer,
    })


def cell_notes(cell) -> list[str]:
    """Where a trace differs from this cell's run in ways its trace_key leaves out (added per cell, after the
    cache: cells sharing a trace can differ in these)."""
    notes = []
    fused = cell.optimizer.fused
    if cell.optimizer.name != "sgd" and (fused is True or (fused == "auto" and cell.device == "cuda")):
        notes.append("optimizer: traced in its foreach implementation (fused AdamW on fake DTensors mis-tracks); "
                     "the cell's fused optimizer holds fewer step temporaries, so a peak in the step errs high")
    if cell.compile:
        notes.append("compile: off in the trace (compiled graphs may free intermediates sooner)")
    traced = trace_micro_batches(cell)
    if cell.grad_accum > traced:
        notes.append(f"accumulation: {traced} of the cell's {cell.grad_accum} micro-batches traced (a steady state "
                     "from the second on)")
    return notes


def trace_cell(cell, full: bool = False) -> Trace:
    """Trace `cell` (see the module docstring): from two shallow copies extrapolated to its depth where that
    applies (plan/depth.py), else in full (`full`: always).  TraceError when it cannot be traced (cell_notes
    not added)."""
    import torch

    t0 = time.perf_counter()
    if cell.pipeline_parallel > 1:
        return _pipeline_trace(cell, t0, full)
    why = "a full trace was asked for" if full else why_full(cell)
    notes: list[str] = []
    if why is None:
        try:
            return _extrapolated(cell, t0)
        except DepthError as exc:
            why = str(exc)
            notes.append(f"depth: traced in full ({exc})")
    check_traceable(cell)
    found = _run(cell, traced_cell(cell))
    labels = found["at_peak"]
    return Trace(peak=labels.get("Total", 0), at_peak=fold(labels), labels_at_peak=labels,
                 category_peaks=found["category_peaks"], counted=found["counted"], tracker=found["tracker"],
                 world=cell.gpus, steps=TRACE_STEPS, micro_batches=trace_micro_batches(cell),
                 device="cpu", attention_kernel=found["attention_kernel"], notes=found["notes"] + notes,
                 seconds=round(time.perf_counter() - t0, 3), torch=torch.__version__, method="full",
                 depths=[cell.model.layers], why_full=why)


def _pipeline_trace(cell, t0: float, full: bool = False) -> Trace:
    """One trace per pipeline rank, from two shallow copies (every phase carried to the stage's depth) where
    depth.why_full allows, else in full (see the module docstring); the worst rank's is the cell's."""
    import torch

    p, per_rank = cell.pipeline_parallel, cell.gpus // cell.pipeline_parallel  # the mesh is (pp, dp, tp)
    why = "a full trace was asked for" if full else why_full(cell)
    notes: list[str] = []
    if why is None:
        try:
            return _pipeline_extrapolated(cell, t0, per_rank)
        except DepthError as exc:
            why = str(exc)
            notes.append(f"depth: traced in full ({exc})")
    check_traceable(cell)
    tcell = traced_cell(cell)
    found = [_run(cell, tcell, rank=k * per_rank) for k in range(p)]
    stages = [StagePeak(pipeline_rank=k, stages=f["stages"], peak=f["at_peak"].get("Total", 0),
                        at_peak=fold(f["at_peak"])) for k, f in enumerate(found)]
    worst = max(range(p), key=lambda k: stages[k].peak)
    labels = found[worst]["at_peak"]
    return Trace(peak=stages[worst].peak, at_peak=fold(labels), labels_at_peak=labels,
                 category_peaks=found[worst]["category_peaks"], counted=found[worst]["counted"],
                 tracker=found[worst]["tracker"], world=cell.gpus, steps=TRACE_STEPS,
                 micro_batches=trace_micro_batches(cell), device="cpu",
                 attention_kernel=found[worst]["attention_kernel"], notes=found[worst]["notes"] + notes,
                 seconds=round(time.perf_counter() - t0, 3), torch=torch.__version__, method="full",
                 depths=[cell.model.layers], why_full=f"pipeline: {why}", stages=stages, peak_stage=worst)


def _pipeline_extrapolated(cell, t0: float, per_rank: int) -> Trace:
    """Each pipeline rank traced at two shallow depths per stage, every phase carried to the stage's depth."""
    import torch

    chunks = stage_chunks(cell)
    per_stage = cell.model.layers // chunks
    ranks = []
    for k in range(cell.pipeline_parallel):
        (_, a), (found, b) = shallow_traces(cell, rank=k * per_rank)
        ranks.append((found, extrapolate(a, b, per_stage)))
    stages = [StagePeak(pipeline_rank=k, stages=f["stages"], peak=got.peak, at_peak=fold(got.at_peak))
              for k, (f, got) in enumerate(ranks)]
    worst = max(range(len(stages)), key=lambda k: stages[k].peak)
    last, got = ranks[worst]
    return Trace(peak=got.peak, at_peak=fold(got.at_peak), labels_at_peak=got.at_peak,
                 category_peaks=got.category_peaks, counted=got.counted, tracker=last["tracker"], world=cell.gpus,
                 steps=TRACE_STEPS, micro_batches=trace_micro_batches(cell), device="cpu",
                 attention_kernel=last["attention_kernel"], notes=last["notes"],
                 seconds=round(time.perf_counter() - t0, 3), torch=torch.__version__, method="extrapolated",
                 depths=[chunks * d for d in shallow_depths(cell)], peak_phase=got.phase, stages=stages,
                 peak_stage=worst)


def shallow_traces(cell, depths: tuple[int, int] | None = None,
                   rank: int = 0) -> list[tuple[dict[str, Any], Shallow]]:
    """`cell`'s model traced as `rank` at `depths` blocks per stage (default: depth.shallow_depths; a pipeline's
    model has p x v stages) with every moment named by its phase: (what run_traced found, its Shallow) per
    depth."""
    depths = depths or shallow_depths(cell)
    chunks = stage_chunks(cell)
    check_traceable(cell, layers=chunks * max(depths))
    tcell = traced_cell(cell)
    out = []
    for depth in depths:
        copy = tcell.model_copy(update={"model": tcell.model.model_copy(update={"layers": chunks * depth})})
        found = _run(cell, copy, phases=True, rank=rank)
        out.append((found, Shallow(depth=depth, phases=found["phases"], counted=found["counted"])))
    return out


def from_shallow(cell, shallow: list[tuple[dict[str, Any], Shallow]], seconds: float = 0.0) -> Trace:
    """The Trace of `cell` at its own depth from two shallow traces (DepthError when they do not line up)."""
    import torch

    got = extrapolate(shallow[0][1], shallow[1][1], cell.model.layers)
    last = shallow[-1][0]
    return Trace(peak=got.peak, at_peak=fold(got.at_peak), labels_at_peak=got.at_peak,
                 category_peaks=got.category_peaks, counted=got.counted, tracker=last["tracker"], world=cell.gpus,
                 steps=TRACE_STEPS, micro_batches=min(cell.grad_accum, MAX_TRACE_MICRO_BATCHES), device="cpu",
                 attention_kernel=last["attention_kernel"], notes=last["notes"], seconds=round(seconds, 3),
                 torch=torch.__version__, method="extrapolated", depths=[s.depth for _, s in shallow],
                 peak_phase=got.phase)


def _extrapolated(cell, t0: float) -> Trace:
    """The trace of `cell` from its two shallow copies, every phase carried to its depth."""
    shallow = shallow_traces(cell)
    return from_shallow(cell, shallow, time.perf_counter() - t0)


def _run(cell, tcell, phases: bool = False, rank: int = 0) -> dict[str, Any]:
    """run_traced for `tcell` as `rank` inside a fake world and FakeTensorMode; errors name `cell` and the
    phase."""
    phase = ["starting"]  # run_traced appends what it is doing, so an error says where it happened
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode

        from suite.plan.fake_steps import run_traced

        with traced_world(cell.gpus, rank), FakeTensorMode(allow_non_fake_inputs=True), warnings.catch_warnings():
            # torch's own chatter about fake tensors and ungraded parameters: not the user's problem
            warnings.filterwarnings("ignore", message=".*(FakeTensor|traceable wrapper-subclass).*")
            return run_traced(tcell, TRACE_STEPS, phase, phases=phases)
    except TraceError:
        raise
    except Exception as exc:  # any failure of the traced code: say which cell, where and what; never fall back
        who = f", rank {rank}" if rank else ""
        where = (f"cell {cell.id} ({cell.strategy}, {cell.activation_checkpointing}, {cell.precision}{who}) while "
                 f"{phase[-1]}")
        if type(exc).__name__ in ("DataDependentOutputException", "DynamicOutputShapeException"):
            raise TraceError(f"{where}: the code reads a tensor's value on the host ({exc.func}), which a fake "
                             "tensor does not have: it cannot be traced") from exc
        raise TraceError(f"trace of {where} failed: {type(exc).__name__}: {exc}"[:2000]) from exc
