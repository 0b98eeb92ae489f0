"""The analytic model: what a cell should cost, from the textbook, from the code, and (optionally) traced.

Pure Python (no torch).  `predict(cell, trace)` gives the per-rank memory three ways —

    memory_bytes    the textbook (ZeRO paper + Korthikanti et al.; memory.py), kept as the reference
    as_implemented  what suite's code holds (implemented.py: the registry's per-strategy bytes, fused attention)
    traced          the peak of the real code on fake tensors (trace.py; computed by the caller, needs torch)

— plus FLOPs per token and bytes communicated per step.  A model the formulas do not cover (your own:
suite.models.own, `analytic` False) is "traced only": no textbook and no as-implemented breakdown (None),
`fits` from its trace alone, and `analytic` names why.  `fits` compares the best available number with the
device: the traced peak when there is one, else the as-implemented total, and `fits_by` says which.  The
runner stores the prediction beside what was measured so every result shows all of them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from suite.models.hf_keys import ANALYTIC_TYPES
from suite.plan.comm import comm_bytes_per_step
from suite.plan.flops import flops_per_token
from suite.plan.implemented import predict_memory
from suite.plan.memory import MemoryBreakdown, activation_bytes, offloaded, shard_world, static_bytes
from suite.plan.pipeline import (bubble_fraction, context, cp_elements, in_flight, p2p_elements, pipeline,
                                 stage_parameters, stage_shape)
from suite.plan.recompute import recompute_flops_per_token
from suite.plan.tensor_parallel import per_rank_parameters, tp_comm_elements
from suite.plan.trace_record import Trace, TraceFailure

__all__ = ["Prediction", "MemoryBreakdown", "PipelinePlan", "host_bytes", "predict", "traced_only"]


class PipelinePlan(BaseModel):
    """What pipeline parallelism adds to a cell's plan (plan/pipeline.py)."""

    stages: int = Field(description="Pipeline ranks p (each holds L / p layers).")
    schedule: str = Field(description="The schedule (suite.axes.PIPELINE_SCHEDULES).")
    virtual_stages: int = Field(description="Model chunks per rank v (2 for interleaved-1f1b and zero-bubble).")
    micro_batches: int = Field(description="Micro-batches per step m (the accumulation).")
    bubble_fraction: float = Field(description="Share of a step the ranks sit idle: (p-1)/(m+p-1), interleaved "
                                   "(p-1)/(vm+p-1), zero-bubble (p-1)/(3vm+p-1).")
    in_flight: list[float] = Field(description="Micro-batches of activations each pipeline rank holds at its peak.")
    stage_textbook: list[float] = Field(description="Textbook bytes per pipeline rank, first to last.")
    stage_as_implemented: list[float] = Field(description="As-implemented bytes per pipeline rank, first to last: "
                                              "the largest is the cell's.")
    p2p_bytes_per_step: float = Field(description="Bytes one rank sends to its neighbouring stages per step.")


class Prediction(BaseModel):
    """The planner's numbers for one cell, per rank."""

    num_parameters: int
    memory_bytes: MemoryBreakdown | None = Field(description="The textbook breakdown (see memory.py); None for a "
                                                 "traced-only model.")
    as_implemented: MemoryBreakdown | None = Field(description="What the code holds (see implemented.py); None for "
                                                   "a traced-only model.")
    analytic: str | None = Field(None, description="Why the formulas do not cover the model (traced only), or None.")
    host_bytes: float = Field(0.0, description="What an offloading strategy keeps in host memory (a CPU trace's "
                              "peak includes it; the device's share is the peak less it).")
    traced: Trace | None = Field(None, description="The traced peak of the real code, when traced.")
    trace_error: str | None = Field(None, description="Why the cell could not be traced, when it was asked to be.")
    fits: bool | None = Field(description="predicted bytes <= gpu_memory_gb x 1e9; None when the scenario "
                              "gives no size.")
    fits_by: Literal["traced", "as-implemented", "none"] = Field(
        "as-implemented", description="Which prediction `fits` and `fits_bytes` use.")
    fits_bytes: float = Field(0.0, description="The per-rank bytes `fits` compared with the device.")
    flops_per_token: float = Field(description="Training FLOPs per token: 6 x params + 12 x L x h x s.")
    recompute_flops_per_token: float = Field(0.0, description="Forward FLOPs per token the checkpointing policy "
                                             "reruns in backward (plan/recompute.py): hardware, not model, work.")
    comm_bytes_per_step: float = Field(description="Bytes each rank sends per optimizer step (see comm.py; with "
                                       "tensor, pipeline and context parallelism their traffic is included).")
    pipeline: PipelinePlan | None = Field(None, description="Stages, bubble and per-stage bytes; None without "
                                          "pipeline parallelism.")
    context_bytes_per_step: float = Field(0.0, description="Bytes one context-parallel rank sends around the ring "
                                          "per step (K, V and their gradients; included in comm_bytes_per_step).")


def predict(cell, trace: Trace | TraceFailure | None = None) -> Prediction:
    """The planner's numbers for a Cell (anything with its fields: model, strategy, precision, gpus, ...).
    `trace`: the cell's Trace (or why tracing failed) from suite.plan.trace, when it was traced."""
    shape = cell.model
    psi = shape.num_parameters()
    traced = trace if isinstance(trace, Trace) else None
    why = traced_only(shape)
    textbook = implemented = None
    p = pipeline(cell)[0]
    stages = None
    if why is None:
        by_rank = [_textbook(cell, r) for r in range(p)]
        as_built = [predict_memory(cell, r) for r in range(p)]  # every pipeline rank (one without pipelining)
        textbook = max(by_rank, key=lambda b: b.total)
        implemented = max(as_built, key=lambda b: b.total)
        if p > 1:
            stages = ([b.total for b in by_rank], [b.total for b in as_built])
    host = implemented.host if implemented else host_bytes(cell)
    # A trace runs on the CPU, where offloaded bytes and device bytes are one pool: its device peak is the peak
    # less what the strategy keeps on the host (resident the whole step)
    if traced:
        by, nbytes = "traced", float(traced.peak) - host
    elif implemented:
        by, nbytes = "as-implemented", implemented.total
    else:
        by, nbytes = "none", 0.0
    element = 4 if cell.precision == "fp32" else 2
    return Prediction(
        num_parameters=psi,
        memory_bytes=textbook,
        as_implemented=implemented,
        analytic=why,
        host_bytes=host,
        traced=traced,
        trace_error=trace.error if isinstance(trace, TraceFailure) else None,
        fits=None if cell.gpu_memory_gb is None or by == "none" else nbytes <= cell.gpu_memory_gb * 1e9,
        fits_by=by,
        fits_bytes=nbytes,
        flops_per_token=flops_per_token(shape, cell.seq_len),
        recompute_flops_per_token=recompute_flops_per_token(shape, cell.seq_len, cell.activation_checkpointing),
        comm_bytes_per_step=comm_bytes_per_step(max(stage_parameters(cell, r) for r in range(p)), cell.strategy,
                                                cell.precision, cell.gpus // (getattr(cell, "tensor_parallel", 1) * p),
                                                cell.grad_accum,
                                                shard=getattr(cell, "shard_size", None))
        + (tp_comm_elements(cell) + p2p_elements(cell) + cp_elements(cell)) * element,
        pipeline=_pipeline_plan(cell, stages) if p > 1 else None,
        context_bytes_per_step=cp_elements(cell) * element,
    )


def _textbook(cell, rank: int) -> MemoryBreakdown:
    """The textbook breakdown of pipeline rank `rank` (0 without pipeline parallelism)."""
    static = static_bytes(stage_parameters(cell, rank), cell.strategy, cell.precision, shard_world(cell))
    acts = activation_bytes(stage_shape(cell), cell.seq_len, cell.micro_batch_size, cell.activation_checkpointing,
                            cell.precision, getattr(cell, "tensor_parallel", 1),
                            getattr(cell, "sequence_parallel", False), context(cell)) * in_flight(cell, rank)
    return offloaded(static, cell.strategy, 0.0, acts)


def _pipeline_plan(cell, stages: tuple[list[float], list[float]] | None) -> PipelinePlan:
    p, v, schedule = pipeline(cell)
    return PipelinePlan(stages=p, schedule=schedule, virtual_stages=v, micro_batches=cell.grad_accum,
                        bubble_fraction=bubble_fraction(cell), in_flight=[in_flight(cell, r) for r in range(p)],
                        stage_textbook=stages[0] if stages else [], stage_as_implemented=stages[1] if stages else [],
                        p2p_bytes_per_step=p2p_elements(cell) * (4 if cell.precision == "fp32" else 2))


def traced_only(shape) -> str | None:
    """Why the analytic memory model does not cover `shape` (a model of your own), or None."""
    if shape.analytic:
        return None
    if shape.family == "hf":
        return (f"traced only: hf model_type {shape.model_type!r} is not a Llama-layout decoder "
                f"(analytic: {', '.join(ANALYTIC_TYPES)}); suite plan --trace gives its peak")
    return f"traced only: {shape.factory} is your own module; suite plan --trace gives its peak"


def host_bytes(cell) -> float:
    """What an offloading strategy keeps in host memory all step (its static bytes; needs only the parameter
    count, so traced-only models have it too); 0 for the others."""
    if traced_only(cell.model) is None:
        return predict_memory(cell).host
    from suite.plan.implemented import static_bytes as held
    from suite.strategies import registry

    if not registry.get(cell.strategy).offload:
        return 0.0
    return sum(held(per_rank_parameters(cell), cell.strategy, cell.precision, shard_world(cell)).values())
