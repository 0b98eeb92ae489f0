"""What a memory trace found (pure data; the tracer itself is suite/plan/trace.py and needs torch).

A trace runs the cell's real code — model, `parallelize` (checkpointing, the strategy's apply, its precision
policy), the training loop's step — for rank 0 of the cell's world, under PyTorch's FakeTensorMode (tensors
with shapes and dtypes but no storage) and a fake process group (collectives that move nothing), and lets
torch's own MemTracker / FSDPMemTracker label every allocation.  So its peak is the peak of the code that
runs, not of a formula; it needs no GPU and no real memory.

Categories.  torch's trackers label tensors by role; `CATEGORIES` folds their labels into suite's fixed keys
(the labels themselves are kept too, in `at_peak`):

    parameters      Parameter, Buffer, Sharded Param, Unsharded Param   (what forward computes with, and shards)
    gradients       Gradient, Sharded Grad, Unsharded Grad
    optimizer_states  Optstate / OptState
    activations     Activation (saved for backward, or recomputed by a checkpoint), Inputs
    temporaries     Temp (created in backward and freed soon after)
    communication   All Gather, Reduce Scatter (FSDP's collective buffers)

Master weights are not a label of their own (a hand-written ZeRO's fp32 shard is a Parameter to the
tracker; FSDP2's fp32 shard is a Sharded Param): they are in `counted`, the strategy's own byte count
(`Parallel.count_bytes`, the same function a real run records), taken after the first traced step.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

CATEGORIES: dict[str, tuple[str, ...]] = {
    "parameters": ("Parameter", "Buffer", "Sharded Param", "Unsharded Param"),
    "gradients": ("Gradient", "Sharded Grad", "Unsharded Grad"),
    "optimizer_states": ("Optstate", "OptState"),
    "activations": ("Activation", "Inputs"),
    "temporaries": ("Temp",),
    "communication": ("All Gather", "Reduce Scatter"),
}


def fold(labels: dict[str, int]) -> dict[str, int]:
    """torch tracker labels -> suite's fixed keys (see CATEGORIES); an unknown label goes to `other`."""
    out = {key: 0 for key in CATEGORIES} | {"other": 0}
    owner = {label: key for key, group in CATEGORIES.items() for label in group}
    for label, value in labels.items():
        if label != "Total":
            out[owner.get(label, "other")] += value
    return out


class StagePeak(BaseModel):
    """One pipeline rank's traced peak (a pipeline cell is traced once per pipeline rank)."""

    model_config = ConfigDict(extra="forbid")

    pipeline_rank: int = Field(description="The pipeline rank traced (0 holds the first stage).")
    stages: list[int] = Field(description="The stages it holds (several under an interleaved schedule).")
    peak: int = Field(description="Its largest total of tracked bytes.")
    at_peak: dict[str, int] = Field(description="Bytes by suite category at that moment.")


class Trace(BaseModel):
    """One cell's traced per-rank memory (rank 0's view of a `world`-rank job), in bytes."""

    model_config = ConfigDict(extra="forbid")

    peak: int = Field(description="Largest total of tracked bytes at any moment of the traced steps.")
    at_peak: dict[str, int] = Field(description="Bytes by suite category (see CATEGORIES) at that moment.")
    labels_at_peak: dict[str, int] = Field(description="The same moment in torch's tracker's own labels.")
    category_peaks: dict[str, int] = Field(description="Each torch label's own maximum over the steps.")
    counted: dict[str, int] = Field(
        description="The strategy's count_bytes after the first step: parameters, gradients, optimizer_states, "
        "master_weights (what a real run records as tensor_bytes).")
    tracker: str = Field(description="MemTracker or FSDPMemTracker.")
    world: int = Field(description="Ranks simulated by the fake process group.")
    steps: int = Field(description="Optimizer steps traced.")
    micro_batches: int = Field(description="Micro-batches per traced step (the cell's, at most 2 without pipeline "
                               "stages: trace.trace_micro_batches).")
    device: str = Field(description="Device the fake tensors claim (cpu: a fake cuda device needs a driver).")
    attention_kernel: str | None = Field(description="The attention op the trace ran (None: no attention).")
    notes: list[str] = Field(default_factory=list, description="Where the trace differs from a GPU run.")
    seconds: float = Field(description="Wall time of the trace on the machine that ran it.")
    torch: str = Field(description="torch version that traced.")
    method: Literal["full", "extrapolated"] = Field(
        "full", description="full: every layer built and run; extrapolated: two shallow copies traced and every "
        "phase carried to the real depth (plan/depth.py).")
    depths: list[int] = Field(default_factory=list, description="The depths actually traced.")
    why_full: str | None = Field(None, description="Why a full trace (not extrapolated), when it is one.")
    peak_phase: str | None = Field(None, description="Extrapolated: the phase the peak falls in "
                                   "(step/micro-batch/stage/region).")
    stages: list[StagePeak] = Field(default_factory=list, description="Pipeline cells: every pipeline rank's "
                                    "peak (the Trace's other fields are the worst one's).")
    peak_stage: int | None = Field(None, description="Pipeline cells: the pipeline rank whose peak is the cell's.")


class TraceFailure(BaseModel):
    """A cell that could not be traced, and why (never silently replaced by another estimate)."""

    model_config = ConfigDict(extra="forbid")

    error: str


class TraceError(Exception):
    """A cell that cannot be traced; the message names the cell, the strategy and the reason."""
