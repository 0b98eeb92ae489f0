"""Versioned result records: what a worker rank writes, and what the runner stores per cell.

These are the contracts between the worker (torch side), the runner, and the report/compare code (which never
imports torch).  Fixed keys, pydantic-validated on write and on read.  Bump SCHEMA_VERSION when a field changes
meaning; readers refuse records of a newer version instead of misreading them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Sequence

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, create_model, field_serializer, field_validator,
                      model_serializer, model_validator)

from suite.axes import LATER_AXES, TABLE
from suite.machine.state import MachineState
from suite.results import bounded
from suite.scenario import Cell
from suite.stats import percentile

# 1: the first.  2: RankRecord.restarts and CellResult.first_failure (new fields; an older suite, whose models
# forbid unknown keys, then says "newer schema" instead of failing on an unknown key).  Version-1 records read
# as before: the new fields take their defaults.  3: RankRecord.eval and CellResult.eval (held-out evaluation).
# 4: seed is an axis: Manifest.seed may be a list, CellResult.axes holds seed (filled in from the cell when an
# older record lacks it, so old and new results of one cell show the same axes); TensorBytes.host (offload).
# 5: RankRecord.grad_norms and CellResult.grad_norms (the global gradient norm per step); older records read
# with an empty list, which the match gate reports as "no gradient norms recorded" and does not compare.
# 6: CellResult.machine (the machine's state around the timed launch, suite/machine/); older records read with
# None, which compare reports as "machine state unknown"; Manifest.packages_digest (compare: "packages").
# 7: Manifest.lock_digest (the lock the environment was installed from; compare: "lock"); older manifests None.
# 8: RankRecord.pipeline_busy_s / pipeline_s and CellResult.pipeline (pipeline parallelism: the measured bubble and the model
# states per stage); older records read with an empty list and None.
# 9: CellResult.schedule (where a cluster sweep ran the cell, its attempts) and MachineState.shared_with (the
# sweep's cells that shared its node during the timed steps); older records read with None and an empty list.
# 10: PipelineMeasured.bubble is the busiest rank's idle share of the pipeline's time (the longest schedule
# time over the ranks), no longer the mean of each rank's share of its own schedule time, which missed the last
# stage's wait for the final backward; PipelineMeasured.rank_idle (each rank's share).  Older records read as
# written: an empty rank_idle says their bubble is the older measure.
# 11: RankRecord.pipeline_wait_s (the schedule's waits for messages); PipelineMeasured.bubble counts a rank idle
# only while it waits for another stage, and PipelineMeasured.rank_overhead holds the schedule's own work, which
# schema 10 counted as idle.  Older records read with an empty list and are measured as schema 10 measured them.
# 12: PipelineMeasured.rank_idle and rank_overhead are each rank's median step's shares, and the bubble the
# busiest rank's (schema 11: shares of the steps' sums).  No field changes; stored results keep what they wrote.
SCHEMA_VERSION = 12

Status = Literal["ok", "failed", "oom", "timeout", "diverged", "infeasible", "gate-failed", "interrupted"]
FINAL_STATUSES = ("ok", "failed", "oom", "timeout", "diverged", "infeasible", "gate-failed")


# Measured numbers are finite and in range (a stored record is data from a stranger: 1e308 seconds or an
# Infinity throughput would overflow the statistics every reader computes).  Losses and gradient norms may be
# NaN or infinite: a diverged cell's are facts, and written as such.
MAX_SECONDS = 1e9  # about 31 years
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)]
Duration = Annotated[float, Field(ge=-MAX_SECONDS, le=MAX_SECONDS, allow_inf_nan=False)]  # clocks of 2 processes
Rate = Annotated[float, Field(ge=0, le=1e24, allow_inf_nan=False)]  # per second: tokens, samples, FLOPs
Bytes = Annotated[int, Field(ge=0, le=1 << 62)]
Count = Annotated[int, Field(ge=0, le=1 << 40)]
Ratio = Annotated[float, Field(ge=-1e12, le=1e12, allow_inf_nan=False)]


def _within_limits(value: dict[str, Any]) -> dict[str, Any]:
    problem = bounded.loose_problem(value)
    if problem:
        raise ValueError(problem)
    return value


# A free-form part of a record (strategy facts, the dumped prediction): any JSON, within the reader's limits.
Loose = Annotated[dict[str, Any], AfterValidator(_within_limits)]


class _Record(BaseModel):
    # NaN / inf losses are facts (a diverged cell): write them as NaN / Infinity, not null, so they read back.
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")


# ----------------------------------------------------------------------------------------------- worker side
class TensorBytes(_Record):
    """Bytes held by this rank, counted from the tensors themselves (local shards only)."""

    parameters: Bytes
    gradients: Bytes
    optimizer_states: Bytes
    master_weights: Bytes = Field(
        0,
        description="A separate copy the optimizer updates, beside the compute parameters (FSDP2 zero2 keeps "
        "fp32 shards while the unsharded parameters live through forward and backward); 0 when none.",
    )
    host: Bytes = Field(0, description="CPU offload: how many of the bytes above are in host memory (parameters, "
                      "gradients and optimizer states the strategy keeps there); 0 when nothing is offloaded.")


class CudaMemory(_Record):
    """torch.cuda memory statistics, reset after warm-up."""

    max_memory_allocated: Bytes
    max_memory_reserved: Bytes
    num_alloc_retries: Count
    num_ooms: Count


class PeakMemory(_Record):
    """Peaks from the optional MemTracker / FSDPMemTracker pass (`measure_peaks: true`), bytes."""

    activations: Bytes = Field(description="Peak bytes of activations saved for backward.")
    unsharded_parameters: Bytes = Field(0, description="Peak bytes of all-gathered (unsharded) parameters (FSDP).")
    total: Bytes = Field(description="Peak of all tracked categories together.")
    by_category: dict[str, Bytes] = Field(fail_fast=True,
                                          default_factory=dict, description="Tracker's raw per-category peaks.")


class SetupTimes(_Record):
    """Seconds spent before the first training step, by phase."""

    process_group: Seconds
    model_build: Seconds
    strategy: Seconds = Field(description="Checkpointing, compile and sharding applied to the built model.")
    data: Seconds
    total: Seconds


class EvalPoint(_Record):
    """One held-out evaluation (scenario `eval:`), reduced over all ranks: the same on every rank."""

    step: int = Field(description="Optimizer steps completed when it ran.")
    loss: float = Field(description="Mean cross-entropy over every held-out target (token or image).")
    accuracy: float | None = Field(None, description="Fraction of held-out images classified right (vit).")
    perplexity: float | None = Field(None, description="exp(loss), for language models (gpt, llama).")
    samples: int = Field(description="Held-out samples evaluated, all ranks.")
    seconds: Seconds = Field(description="Wall time of the evaluation (never inside a timed step).")
    train_s: Seconds = Field(0.0, description="Training time so far: the sum of every step's time, warm-up included.")
    wall_s: Seconds = Field(0.0, description="Wall time since training began, evaluations included (MLPerf's clock).")


class TimeToTarget(_Record):
    """When a cell reached its held-out quality target (convergence.target), or that it did not."""

    metric: str
    value: float = Field(description="The target.")
    reached: bool
    step: int | None = Field(None, description="Optimizer steps done at the first evaluation that reached it.")
    train_s: Seconds | None = Field(None, description="Training time to it (step times only).")
    wall_s: Seconds | None = Field(None, description="Wall time to it, the evaluations included.")
    best: float | None = Field(None, description="The best value evaluated (the last when the metric has none).")


class RankRecord(_Record):
    """Everything one worker rank measured for one cell (file: rank<R>.json in the cell's work folder)."""

    schema_version: int = SCHEMA_VERSION
    cell_id: str
    rank: int
    world_size: int
    local_rank: int
    hostname: str
    node_ip: str | None = None
    node_id: str | None = Field(
        None, description="Cluster node id (Ray's node id under launcher ray, None under torchrun): it "
        "tells apart nodes that share a host name and address."
    )
    device: str = Field(description="torch device string, e.g. cpu or cuda:0.")
    device_name: str = Field(description="Device model (torch.cuda.get_device_name) or the CPU model.")
    status: Literal["ok", "diverged", "failed", "oom"]
    error: str | None = None
    losses: list[float] = Field(fail_fast=True,
                                description="Global mean loss per optimizer step (identical on all ranks).")
    step_times_s: list[Seconds] = Field(fail_fast=True,
                                        description="Wall time of every optimizer step, device synchronized.")
    grad_norms: list[float] = Field(fail_fast=True,
        default_factory=list, description="Global L2 norm of the gradient each optimizer step applied (all ranks' "
        "shards together; there is no clipping), computed outside the timed step (suite/worker/gradients.py). "
        "The same on every rank once gradients are synchronized; empty in records written before schema 5.")
    warmup_steps: int = Field(description="The first this-many step_times_s are warm-up (excluded from stats).")
    tokens_per_step: int = Field(description="Tokens (samples for vit) processed per optimizer step, all ranks.")
    samples_per_step: int
    tensor_bytes: TensorBytes | None = None
    cuda_memory: CudaMemory | None = None
    peaks: PeakMemory | None = None
    setup_s: SetupTimes | None = None
    train_s: Seconds = 0.0
    teardown_s: Seconds = 0.0
    restarts: int = Field(
        0, description="How many times the worker group was restarted before this record was written (Ray's "
        "FailureConfig; always 0 under torchrun)."
    )
    eval: list[EvalPoint] = Field(fail_fast=True,
                                  default_factory=list, description="Held-out evaluations, in step order.")
    pipeline_busy_s: list[Seconds] = Field(
        fail_fast=True, default_factory=list, description="Pipeline parallelism: per optimizer step, the seconds "
        "this rank's stages computed (forward and backward chunks, device synchronized; techniques/"
        "pipeline_parallel.py).  Empty without.")
    pipeline_s: list[Seconds] = Field(
        fail_fast=True, default_factory=list, description="Pipeline parallelism: per optimizer step, the seconds the "
        "schedule ran (forward and backward of every micro-batch; the optimizer step is outside).  Empty without.")
    pipeline_wait_s: list[Seconds] = Field(
        fail_fast=True, default_factory=list, description="Pipeline parallelism: per optimizer step, the seconds "
        "the schedule waited for point-to-point messages (schema 11; empty without, in older records, and where "
        "the installed torch's waits cannot be timed).")
    extra: Loose = Field(default_factory=dict, description="Strategy-specific facts.")

    @model_validator(mode="before")
    @classmethod
    def _restarts_from_extra(cls, data: Any) -> Any:
        """Records written before `restarts` was a field carried it in extra["restarts"]: read it from there."""
        if isinstance(data, dict) and "restarts" not in data and "restarts" in (data.get("extra") or {}):
            return {**data, "restarts": int(data["extra"]["restarts"])}
        return data


# ----------------------------------------------------------------------------------------------- runner side
class StepStats(_Record):
    """Step-time statistics over the measured (post-warm-up) steps, seconds."""

    n: Count
    median: Seconds
    p10: Seconds
    p90: Seconds
    mean: Seconds

    @classmethod
    def of(cls, times: Sequence[float]) -> "StepStats | None":
        """The statistics of these step times (None when there are none)."""
        if not times:
            return None
        return cls(n=len(times), median=percentile(times, 50), p10=percentile(times, 10),
                   p90=percentile(times, 90), mean=sum(times) / len(times))


class Throughput(_Record):
    tokens_per_s: Rate
    tokens_per_s_per_device: Rate
    samples_per_s: Rate


class Mfu(_Record):
    """Model FLOPs utilisation and how it was computed; value None when the peak is unknown (CPUs, fp32)."""

    value: Ratio | None
    formula: str
    flops_per_token: Rate
    peak_flops: Rate | None
    peak_source: str | None
    precision: str


class MemoryComparison(_Record):
    """Measured per-rank bytes beside the planner's prediction (rank 0; ratio = measured / predicted)."""

    measured: dict[str, Rate | None] = Field(fail_fast=True)
    predicted: dict[str, Rate] = Field(fail_fast=True)
    ratio: dict[str, Ratio | None] = Field(fail_fast=True)


class Gate(_Record):
    name: str = Field(description="finite | min_loss_drop | max_final_loss | match | max_eval_loss | min_accuracy | "
                      "target")
    passed: bool
    detail: str
    step: int | None = Field(None, description="First failing step, where it applies.")


class Overhead(_Record):
    """Where a cell's wall time went, seconds: the harness's work stays outside train."""

    launch: Duration = Field(description="From starting the launcher to the worker's first line of setup.")
    setup: Duration
    train: Duration
    teardown: Duration
    wall: Duration = Field(description="Whole cell, launcher start to launcher exit.")


class PipelineMeasured(_Record):
    """What a pipeline-parallel cell measured beside its plan (the runner's aggregate, from every rank)."""

    bubble: Ratio | None = Field(description="The busiest rank's share of the pipeline's time spent waiting for "
                                 "another stage (its schedule's waits for messages, and the time after its "
                                 "schedule ends until the longest schedule over the ranks ends), its median step's "
                                 "after warm-up; schema 11 took the share of the steps' sums.  Before schema 11, "
                                 "and where waits were not timed, the "
                                 "share spent not computing, which also holds the schedule's own work; before "
                                 "schema 10, each rank's own schedule time and the mean over ranks.  None when no "
                                 "rank recorded them.")
    rank_idle: list[Ratio] = Field(fail_fast=True, default_factory=list, description="Every rank's idle "
                                   "share of the pipeline's time, by rank, measured as `bubble` is (schema 10; "
                                   "empty in older results).")
    rank_overhead: list[Ratio] = Field(fail_fast=True, default_factory=list, description="Every rank's share of "
                                       "the pipeline's time spent in the schedule's own work (neither computing "
                                       "nor waiting: cutting micro-batches, posting messages, the loss), by rank, "
                                       "its median step's (schema 11; empty where waits were not timed).")
    bubble_predicted: Ratio | None = Field(description="The planner's bubble for the schedule (plan/pipeline.py).")
    stage_states: list[Bytes] = Field(fail_fast=True, description="Model states (parameters, gradients, optimizer "
                                      "states, master weights) of the first rank of each pipeline stage, first "
                                      "stage first.")


class RankInfo(_Record):
    rank: int
    hostname: str
    node_ip: str | None = None
    node_id: str | None = Field(
        None, description="Cluster node id (Ray's node id under launcher ray, None under torchrun): it "
        "tells apart nodes that share a host name and address."
    )
    device_name: str


class RankFailure(_Record):
    """The rank whose process ended badly first, as its launcher saw it (torchrun's failure report)."""

    rank: int
    pid: int
    exitcode: int = Field(description="Exit status; negative: killed by signal -exitcode.")
    signal: str | None = Field(None, description="The signal's name (SIGKILL) when it was killed by one.")
    timestamp: float | None = Field(None, description="Unix time the launcher noticed (whole seconds).")


class _AxesBase(_Record):
    """A stored cell's value on each axis (one typed field per entry of suite/axes.py), the model by its label."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    # the order the stored record listed its axes in (results older than an axis list it last): kept so that
    # reports, pages and the site's index of old results read exactly as before
    _order: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _keep_order(cls, data: Any, handler: Any) -> Any:
        axes = handler(data)
        if isinstance(data, dict):
            fields = cls.__pydantic_fields__  # (model_fields is a slow property when read once per key)
            axes._order = tuple(k for k in data if k in fields)
        return axes

    def __eq__(self, other: object) -> bool:  # the values, not the order they were written in
        return isinstance(other, _AxesBase) and type(self) is type(other) and self.__dict__ == other.__dict__

    def get(self, axis: str) -> Any:
        """The value on `axis` by name (None for a name that is not an axis): for code that walks suite.axes.AXES."""
        return getattr(self, axis, None)

    @model_serializer(mode="wrap")
    def _in_written_order(self, handler: Any) -> Any:
        values = handler(self)
        return {**{k: values[k] for k in self._order if k in values}, **values}

    def as_dict(self) -> dict[str, Any]:
        """{axis: value}, in the order the record was written in (what `varying_axes` and the site's index take)."""
        return self.model_dump()


# Built from the axis table, so a new axis is a new field here without another list of axes to keep in step.
Axes = create_model("Axes", __base__=_AxesBase, __module__=__name__,
                    **{a.name: (a.value_type, Field(a.older_default if a.added_later else None if a.name == "seed" else ...,
                                                description=a.doc)) for a in TABLE})


class Schedule(_Record):
    """Where a cluster sweep ran the cell (`suite run --schedule pack|node|serial` on a Ray cluster, suite/sweep/)."""

    mode: Literal["pack", "node", "serial"] = Field(description="The sweep's schedule.")
    node: Annotated[str, Field(max_length=200)] | None = Field(None, description="The Ray node id of the attempt "
                                                               "that gave this result; '*' for a cell that had the "
                                                               "whole cluster (launcher: ray).")
    attempts: int = Field(1, ge=1, le=1000, description="Tries it took: more than 1 when a node died under it and "
                          "the sweep ran it again on another.")
    lost_on: list[Annotated[str, Field(max_length=200)]] = Field(default_factory=list, max_length=1000,
                                                                 description="Nodes that died under earlier tries.")


class CellResult(_Record):
    """One run of one cell (file: cells/<cell_id>-r<repeat>.json in the run folder)."""

    schema_version: int = SCHEMA_VERSION
    cell_id: str
    repeat: int = 0
    axes: Axes = Field(description="The cell's axis values (model by preset name).")
    cell: Cell = Field(description="The full resolved cell, as the worker received it (re-validated on reading; "
                       "never resolved again: a stored own model is not re-read or re-probed).")
    status: Status
    error: str | None = Field(None, description="Tail of the error output when the cell did not finish ok.")
    started_at: str
    finished_at: str
    launcher: str
    losses: list[float] = Field(fail_fast=True, default_factory=list)
    final_loss: float | None = None
    grad_norms: list[float] = Field(fail_fast=True,
                                    default_factory=list, description="Rank 0's global gradient norm per step "
                                    "(schema 5; empty in older results).")
    step_times_s: list[Seconds] = Field(fail_fast=True,
                                        default_factory=list, description="Measured (post-warm-up) steps, rank 0.")
    step_time: StepStats | None = None
    throughput: Throughput | None = None
    mfu: Mfu | None = None
    memory: MemoryComparison | None = None
    prediction: Loose = Field(description="suite.plan.Prediction for the cell, dumped.")
    overhead_s: Overhead | None = None
    gates: list[Gate] = Field(fail_fast=True, default_factory=list)
    ranks: list[RankInfo] = Field(fail_fast=True, default_factory=list)
    restarts: int = 0
    first_failure: RankFailure | None = Field(
        None, description="Which rank died first and how (launcher: torchrun / container), when one failed.")
    eval: list[EvalPoint] = Field(fail_fast=True,
                                  default_factory=list, description="Held-out evaluations (rank 0's), in step order.")
    time_to_target: TimeToTarget | None = Field(None, description="convergence.target: when it was reached.")
    machine: MachineState | None = Field(None, description="What else used the machine's CPUs and GPUs, and "
                                         "their clocks, around the timed launch (schema 6; None in older results "
                                         "and for cells that never launched).")
    pipeline: PipelineMeasured | None = Field(None, description="Pipeline parallelism: the measured bubble and "
                                              "the model states per stage; None without it.")
    schedule: Schedule | None = Field(None, description="Where a cluster sweep ran it (schema 9); None when the "
                                      "runner launched it itself (--schedule serial without a cluster).")
    extra: Loose = Field(default_factory=dict)

    # (the Cell read, the cell exactly as the record wrote it): for writing it back unchanged (below)
    _cell_written: tuple[Cell, dict] | None = PrivateAttr(default=None)

    @field_validator("cell", mode="before")
    @classmethod
    def _stored_cell(cls, value: Any) -> Any:
        # a result is data from a stranger: its cell is checked, but an own model's config is not read again
        # and its factory is not imported (the `stored` context; suite/models/own.py)
        return Cell.model_validate(value, context={"stored": True}) if isinstance(value, dict) else value

    @model_validator(mode="wrap")
    @classmethod
    def _remember_written_cell(cls, data: Any, handler: Any) -> Any:
        result = handler(data)
        if isinstance(data, dict) and isinstance(data.get("cell"), dict):
            result._cell_written = (result.cell, data["cell"])
        return result

    def __eq__(self, other: object) -> bool:  # the record's values; how its cell was written is not one
        return isinstance(other, CellResult) and self.__dict__ == other.__dict__

    @field_serializer("cell", mode="wrap")
    def _cell_as_written(self, cell: Cell, handler: Any) -> Any:
        """A result read from disk writes its cell back as it was written (an older suite's cell lacks fields
        added since): re-publishing old runs gives the same bytes, and the site's page digests do not change
        with suite's version.  A cell made here (or replaced since) is dumped in full."""
        written = self._cell_written
        return written[1] if written is not None and written[0] is cell else handler(cell)

    @model_validator(mode="before")
    @classmethod
    def _new_axes(cls, data: Any) -> Any:
        # results before schema 4 had no seed, shard_size or tensor_parallel axes: fill them from the cell (or
        # the defaults), so old and new results of one cell show the same axes to tables, pivots and compare
        if not (isinstance(data, dict) and isinstance(data.get("axes"), dict)):
            return data
        cell = data["cell"] if isinstance(data.get("cell"), dict) else {}
        missing = {k: cell.get(k, default) for k, default in LATER_AXES.items() if k not in data["axes"]}
        if "seed" not in data["axes"] and cell.get("seed") is not None:
            missing["seed"] = cell["seed"]
        return {**data, "axes": {**data["axes"], **missing}} if missing else data


class Manifest(_Record):
    """The environment a run folder's results were obtained in (manifest.json)."""

    schema_version: int = SCHEMA_VERSION
    run_id: str
    scenario: str
    created_at: str
    command: list[str] = Field(fail_fast=True)
    suite_version: str
    git_commit: str | None
    git_dirty: bool | None
    python: str
    torch: str | None
    cuda: str | None
    nccl: str | None
    driver: str | None
    devices: list[str] = Field(fail_fast=True)
    device_count: int
    cpu_model: str
    hostname: str
    container_image: str | None = Field(None, description="Image reference the cells ran in, if any.")
    container_image_digest: str | None = None
    packages_digest: str | None = Field(None, description="sha256 (first 16 hex digits) of the runner's installed "
                                        "Python distributions as sorted name==version lines (schema 6; None in "
                                        "older manifests): two environments with one digest hold the same packages.")
    lock_digest: str | None = Field(None, description="sha256 (first 16 hex digits) of the lock files the "
                                    "environment was installed from (lock/*.txt, kept in <prefix>/suite-lock/ by "
                                    "scripts/setup and the Dockerfile); None when it was not installed from a lock "
                                    "or the manifest is older.  extra.lock_mismatches lists locked packages whose "
                                    "installed version differs.")
    seed: int | list[int] = Field(description="The scenario's seed, or its seed axis (seed: [0, 1, 2]).")
    env: dict[str, str] = Field(fail_fast=True,
                                description="Allowlisted environment variables only (never the whole env).")
    extra: Loose = Field(default_factory=dict, description="E.g. preflight all-reduce bus bandwidth.")

    @model_serializer(mode="wrap")
    def _older_manifests_unchanged(self, handler: Any) -> Any:
        """An older manifest (no packages_digest, no lock_digest) dumps exactly as it was written: pages named by its digest keep
        their names."""
        values = handler(self)
        for key in ("packages_digest", "lock_digest"):
            if isinstance(values, dict) and values.get(key) is None:
                values.pop(key, None)
        return values
