"""A cell: one fully resolved point of a scenario's matrix, what one launch of the worker trains.

A Cell carries everything a worker needs, so nothing downstream reads the scenario file again: the runner
writes it as the worker's payload, the worker reads it back (`Cell.model_validate_json`), and every stored
result carries it (results/schema.py re-validates it on reading).  Its id is a short hash of the settings that
change what is computed (not the scenario's name, timeouts or gates), so the same cell in two runs, two scenario
files or on two machines has the same id, and `compare` can match them.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import ConfigDict, Field, create_model

from suite.axes import AXES, ID_OMITS_AT_DEFAULT
from suite.models.own import AnyShape, HfShape, ModelShape, PythonShape
from suite.scenario.experiment import Checkpointing, Launcher, Precision, Scenario

# Settings that do not change what a cell computes: left out of its id.
# `ray` (checkpointing, retries, placement) changes how a ray cell is run, not what it computes; the launcher
# axis is in the id, so a torchrun and a ray cell of the same settings differ by it alone.
# Not part of what a cell computes: limits, gates, launcher options, and evaluation (it reads the model and never
# changes training, so a cell trains the same with and without `eval:` and compares as the same cell).
_NOT_IN_ID = {"id", "scenario", "timeout_s", "gpu_memory_gb", "convergence", "repeats", "ray", "trace_memory", "eval"}


# The settings a cell carries exactly as its scenario states them.  Their type, bounds, default and meaning are
# written once, on Scenario (experiment.py); the cell takes each of those fields as it is.
SHARED = ("steps", "warmup_steps", "optimizer", "data", "device", "bucket_cap_mb", "measure_peaks",
          "trace_memory", "compile", "threads_per_rank", "timeout_s", "gpu_memory_gb", "repeats", "convergence",
          "eval", "ray")
_Settings = create_model("_Settings", __config__=ConfigDict(extra="forbid", frozen=True), __module__=__name__,
                         **{name: (Scenario.model_fields[name].annotation, Scenario.model_fields[name])
                            for name in SHARED})


class Cell(_Settings):
    """One fully resolved point of a scenario's matrix: what one launch of the worker trains.  Besides the
    SHARED settings (declared on Scenario), a cell has one value per axis, its id, its scenario's name and the
    gradient accumulation its batch sizes imply."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field("", description="Stable short hash of the settings below (filled in by expand).")
    scenario: str = Field(description="Name of the scenario the cell came from.")
    model: ModelShape
    seq_len: int = Field(description="Tokens per sample (for vit: patches + class token).")
    strategy: str = Field(description="A registered strategy's name (suite/strategies/registry.py; the scenario "
                          "resolved its alias, and a stored result may name a plugin's strategy not loaded here).")
    activation_checkpointing: Checkpointing
    precision: Precision
    gpus: int = Field(description="World size.")
    nodes: int
    launcher: Launcher = Field("torchrun", description="How the ranks are started: torchrun, or Ray Train workers "
                               "(suite.axes.LAUNCHERS).")
    shard_size: int | None = Field(None, description="hsdp: ranks per shard group (resolved); None otherwise.")
    tensor_parallel: int = Field(1, description="Tensor-parallel degree; gpus / tensor_parallel ranks of data "
                                 "parallelism.")
    sequence_parallel: bool = Field(False, description="Norms and residual stream sharded on the sequence over the "
                                    "tensor-parallel ranks (needs tensor_parallel > 1).")
    loss_parallel: bool = Field(False, description="Head output and cross-entropy sharded on the vocabulary over the "
                                "tensor-parallel ranks (needs tensor_parallel > 1).")
    pipeline_parallel: int = Field(1, description="Pipeline stages (1: none).")
    pipeline_schedule: str | None = Field(None, description="The pipeline schedule (suite.axes.PIPELINE_SCHEDULES); "
                                          "None without pipeline parallelism.")
    context_parallel: int = Field(1, description="Context-parallel degree: ranks one sequence is split over.")
    micro_batch_size: int
    global_batch_size: int
    grad_accum: int = Field(description="Micro-batches per rank per optimizer step.")
    seed: int

    def settings(self) -> dict[str, Any]:
        """The resolved settings that define the cell (what its id hashes)."""
        out = {k: v for k, v in self.model_dump(mode="json").items() if k not in _NOT_IN_ID}
        # fields added later stay out of the id at their defaults: the ids of older results still hold
        for key, default in ID_OMITS_AT_DEFAULT.items():
            if out[key] == default:
                del out[key]
        # The preset is a name, not a setting: a shape written inline equal to a preset is the same cell.  So is
        # an hf config's path: the cell is what the file holds (`contents`), wherever it lies.
        out["model"] = {k: v for k, v in out["model"].items()
                        if k != "preset" and not (k == "config" and out["model"]["family"] == "hf")}
        return out

    @property
    def replicas(self) -> int:
        """Data-parallel replicas: gpus / (tensor x pipeline x context-parallel ranks); the ranks of one replica
        read the same batches (scenario/tensor_parallel.data_ranks: the same before a cell exists)."""
        return self.gpus // (self.tensor_parallel * self.pipeline_parallel * self.context_parallel)

    def axes(self) -> dict[str, Any]:
        """The cell's value on each axis, with the model given by its preset name when it has one."""
        values = {axis: getattr(self, axis) for axis in AXES}
        values["model"] = model_label(self.model)
        return values


def model_label(shape: AnyShape) -> str:
    if shape.preset:
        return shape.preset
    if isinstance(shape, HfShape):  # the config file's name: scenarios/models/qwen2-tiny.json -> hf-qwen2-tiny
        parts = [p for p in shape.config.replace("\\", "/").split("/") if p]
        stem = parts[-1][:-5] if parts[-1].endswith(".json") else parts[-1]
        if stem == "config" and len(parts) > 1:  # a model's folder: .../Qwen2.5-0.5B/config.json -> hf-Qwen2.5-0.5B
            stem = parts[-2]
        return "hf-" + stem
    if isinstance(shape, PythonShape):  # the function, and its arguments: two sizes are two labels
        args = ",".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in sorted(shape.args.items()))
        label = "py-" + shape.factory.rsplit(":", 1)[-1] + (f"[{args}]" if args else "")
        return label if len(label) <= 80 else label[:64] + "~" + hashlib.sha256(label.encode()).hexdigest()[:8]
    return f"{shape.family}-L{shape.layers}-h{shape.hidden}"


def cell_id(settings: dict[str, Any]) -> str:
    blob = json.dumps(settings, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:10]
