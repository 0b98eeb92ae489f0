"""Checks of the pipeline and context axes against a cell's model and batch (used by cells.expand).  Each
problem names the field's line and the numbers.

- The world factors as pipeline x data x context x tensor-parallel ranks: p x c x t must divide gpus.
- Pipeline stages are consecutive blocks of a llama or gpt model (the embedding on the first stage, the final
  norm and head on the last): p x v stages (v model chunks per rank: suite.axes.PIPELINE_SCHEDULES) must divide
  the layers.  The micro-batches of a step (the accumulation) flow through them: 1f1b, interleaved-1f1b and
  zero-bubble need at least p of them (fewer leave a stage with nothing to overlap), and the two interleaved
  ones (interleaved-1f1b, zero-bubble) a multiple of p (PyTorch's interleaved schedules require it).
- Context parallelism splits each sequence over c ranks in 2c chunks (each rank takes one from the head and one
  from the tail, so the causal mask's work is balanced): 2c must divide seq_len.
"""

from __future__ import annotations

from typing import Any

from suite.axes import PIPELINE_SCHEDULES
from suite.scenario.source import SourceMap
from suite.strategies import registry


def planned_only(cell) -> str | None:
    """Why suite plans `cell` but cannot run it yet ("context_parallel 2: ..."), or None when it can: the runner
    skips such cells (infeasible), the worker refuses them.  Runnable pipelines: llama stages under gpipe, 1f1b
    or interleaved-1f1b, with a strategy that takes a data-parallel sub-mesh, and tensor parallelism (with
    sequence parallelism, without loss parallelism); zero-bubble on bare stages (ddp, one rank a stage) and under
    zero2."""
    pp, cp = getattr(cell, "pipeline_parallel", 1), getattr(cell, "context_parallel", 1)
    if cp > 1:
        why = _context_parallel_not_run(cell, cp, pp)
        if why:
            return why
    if pp == 1:
        return None
    schedule, family = cell.pipeline_schedule, getattr(cell.model, "family", None)
    if family != "llama":
        return f"pipeline_parallel {pp} on {family}: suite cuts only llama models into stages"
    if schedule == "zero-bubble" and (registry.get(cell.strategy).family == "zero3" or cell.tensor_parallel > 1):
        return (f"pipeline_parallel {pp} with zero-bubble, strategy {cell.strategy} and tensor_parallel "
                f"{cell.tensor_parallel}: suite runs zero-bubble on bare stages (ddp, one rank a stage) and under "
                "zero2; under FSDP2 resharding after each forward (zero3, hsdp) its split backward gave other "
                "gradients than the reference (gradient norm 0.884 against 1.220 at the first step: 2 stages x 2 "
                "zero3 replicas, fp32), and under tensor parallelism it is not checked")
    if cell.precision == "fp16-mixed":
        return (f"pipeline_parallel {pp} in fp16-mixed: the schedule runs backward itself, so the GradScaler cannot "
                "scale the loss first; use bf16-mixed")
    if cell.loss_parallel:
        return (f"pipeline_parallel {pp} with loss parallelism: the loss on vocabulary shards needs its context "
                "around the schedule, and the last stage would hand the schedule a sharded DTensor; suite runs "
                "pipelines x tensor parallelism with or without sequence parallelism")
    spec = registry.get(cell.strategy)
    if not spec.pipeline:
        ok = ", ".join(n for n in registry.names() if registry.get(n).pipeline)
        return (f"pipeline_parallel {pp} with strategy {cell.strategy}: suite runs it over the whole process group, "
                f"not a stage's data-parallel ranks (those that run on a stage's: {ok})")
    replicas = cell.replicas
    if spec.family == "dp" and replicas > 1:
        return (f"pipeline_parallel {pp} with strategy {cell.strategy} on {cell.gpus} gpus: DDP's reducer cannot "
                f"have several micro-batches of a stage in flight, which every schedule does; with {replicas} "
                "data-parallel replicas use zero2 or zero3")
    return None


def _context_parallel_not_run(cell, cp: int, pp: int) -> str | None:
    """Why a context-parallel cell is planned only, or None: suite runs it (on llama or gpt: other models are
    refused at validate, check_pipeline_and_context) alone or with tensor parallelism, under a strategy over
    dp x cp ranks (not hsdp's 2-D mesh, not inside pipeline stages)."""
    if pp > 1:
        return (f"context_parallel {cp} with pipeline_parallel {pp}: the schedule splits the step into micro-batches "
                "itself, so the sequence cannot be split around each one yet")
    if cell.shard_size:
        return (f"context_parallel {cp} with hsdp (shard_size {cell.shard_size}): suite flattens the data- and "
                "context-parallel ranks into one dimension for the strategy, not into hsdp's two")
    if cell.loss_parallel:
        return f"context_parallel {cp} with loss parallelism: not run yet (tensor_parallel with sequence_parallel is)"
    return None


def layout_ranks(combo: dict[str, Any]) -> int:
    """Ranks one data-parallel replica spans: pipeline x context x tensor parallel."""
    return combo["pipeline_parallel"] * combo["context_parallel"] * combo["tensor_parallel"]


def check_pipeline_and_context(combo: dict[str, Any], shape: Any, micro_batches: int | None,
                               src: SourceMap) -> list[str]:
    """micro_batches: the accumulation the batch sizes give (None when they do not divide: reported elsewhere)."""
    pp, cp, tp, gpus = combo["pipeline_parallel"], combo["context_parallel"], combo["tensor_parallel"], combo["gpus"]
    if pp == 1 and cp == 1:
        return []
    problems = []
    if gpus % layout_ranks(combo):
        problems.append(f"{src.where('pipeline_parallel' if pp > 1 else 'context_parallel')}: pipeline_parallel {pp} "
                        f"x context_parallel {cp} x tensor_parallel {tp} = {layout_ranks(combo)} does not divide gpus "
                        f"{gpus}: the world must factor as pipeline x data x context x tensor-parallel ranks")
    family = getattr(shape, "family", None)
    for axis, n, what in (("pipeline_parallel", pp, "stages are split by blocks"),
                          ("context_parallel", cp, "the sequence is split inside its attention")):
        if n > 1 and family not in ("llama", "gpt"):
            problems.append(f"{src.where(axis)}: {axis} {n} needs a llama or gpt model, not {family} ({what})")
    if pp > 1 and family in ("llama", "gpt"):
        schedule = combo["pipeline_schedule"]
        v = PIPELINE_SCHEDULES[schedule].chunks
        if shape.layers % (pp * v):
            stages = f"{pp} x {v} model chunks per rank ({schedule}) = {pp * v} stages" if v > 1 else f"{pp} stages"
            problems.append(f"{src.where('pipeline_parallel')}: pipeline_parallel {stages} do not divide the "
                            f"{shape.layers} layers of the model")
        if micro_batches is not None and schedule != "gpipe" and micro_batches < pp:
            problems.append(f"{src.where('pipeline_schedule')}: pipeline_schedule {schedule} needs at least "
                            f"pipeline_parallel {pp} micro-batches per step; global_batch_size / (micro_batch_size x "
                            f"data-parallel ranks) gives {micro_batches}")
        elif micro_batches is not None and v > 1 and micro_batches % pp:
            problems.append(f"{src.where('pipeline_schedule')}: pipeline_schedule {schedule} needs micro-batches per "
                            f"step a multiple of pipeline_parallel {pp}; got {micro_batches}")
    seq = combo["seq_len"]
    if cp > 1 and seq is not None and seq % (2 * cp):
        problems.append(f"{src.where('context_parallel')}: context_parallel {cp} splits each sequence into 2 x {cp} = "
                        f"{2 * cp} load-balanced chunks, which does not divide seq_len {seq}")
    return problems
