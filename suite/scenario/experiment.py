"""Scenario files: the pydantic models of a scenario YAML file.

A scenario declares an experiment.  Every field listed in AXES may be a scalar or a list; lists are swept
(cartesian product, see cells.py) and scalars are fixed.  Everything else is a scalar setting of the run.
The models forbid unknown keys, so a typo is an error rather than a silently ignored setting.
Which fields are axes, and the allowed values of the closed ones, come from the axis table (suite/axes.py).
Loading a file with `file:line:` errors lives in source.py; expanding the matrix into cells in expand.py.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, Field, StrictBool, ValidationInfo, field_validator, model_validator

from suite.axes import AXES, CHECKPOINTING, CHECKPOINTING_DOC, LAUNCHERS, PIPELINE_SCHEDULES, PRECISIONS
from suite.machine.policy import QuietPolicy
from suite.models.own import ModelShape
from suite.models.presets import PRESETS, UnknownPreset
from suite.scenario.convergence import Convergence
from suite.scenario.data import Data, Eval, SyntheticData
from suite.scenario.fields import resolve_alias, StrategyName, Strict
from suite.scenario.sweep import SweepPolicy
from suite.scenario.yaml_loader import clip

Strategy = StrategyName  # any registered strategy or alias (suite/strategies/registry.py), resolved to its name
Checkpointing = Literal[CHECKPOINTING]  # the allowed values live in the axis table (suite/axes.py)
Precision = Literal[PRECISIONS]
Launcher = Literal[LAUNCHERS]
Schedule = Literal[tuple(PIPELINE_SCHEDULES)]  # type: ignore[valid-type]

# Bounds far above any real run: the planner's products stay finite floats, counts fit torch's and OS timers' ints.
Count = Annotated[int, Field(gt=0, le=1_000_000_000)]
SeqLen = Annotated[int, Field(gt=0, le=2**24)]  # 16M tokens; the longest-context models use about 10M
Gpus = Annotated[int, Field(gt=0, le=2**20)]
Nodes = Annotated[int, Field(gt=0, le=2**16)]
Seed = Annotated[int, Field(ge=0, le=2**63 - 1)]
Beta = Annotated[float, Field(ge=0, lt=1)]  # torch's Adam refuses betas outside [0, 1)


def _known_preset(name: str) -> str:
    if name not in PRESETS:
        raise UnknownPreset(clip(repr(name)))
    return name


def _exclude_entry(entry: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(entry) - set(AXES))
    if unknown or not entry:
        raise ValueError(f"exclude entry {clip(repr(entry))} names no axis or unknown keys {clip(repr(unknown))}; "
                         f"axes: {', '.join(AXES)}")
    if "strategy" in entry:  # aliases are resolved here, once (fsdp -> zero3)
        entry = {**entry, "strategy": resolve_alias(entry["strategy"])}
    return entry


# Checked per item (not per field) so an error's line is the item's line in a block list.
PresetName = Annotated[str, AfterValidator(_known_preset)]
ModelRef = Union[PresetName, ModelShape]
ExcludeEntry = Annotated[dict[str, Any], AfterValidator(_exclude_entry)]


def _axis(doc: str, default: Any = ...) -> Any:
    """A field that takes one value or a non-empty list of values (swept)."""
    return Field(default, description=doc + " A list is swept.")


_Strict = Strict  # every model of the file: extra="forbid", frozen, finite floats (fields.py)


class Optimizer(_Strict):
    """The optimizer every rank builds (the same for every strategy, so strategies stay comparable)."""

    name: Literal["adamw", "adam", "sgd"] = Field("adamw", description="torch.optim class to use.")
    lr: float = Field(3.0e-4, gt=0, description="Learning rate (constant; no schedule, so curves compare exactly).")
    weight_decay: float = Field(0.0, ge=0, description="Decoupled weight decay (AdamW) or L2 (others).")
    betas: tuple[Beta, Beta] = Field((0.9, 0.95), description="Adam betas.")
    fused: Literal["auto", True, False] = Field(
        "auto", description="Fused AdamW kernel: auto = on CUDA only (it is what fast PyTorch uses)."
    )


ScoreAttribute = Literal["loss", "neg_loss", "step", "accuracy", "eval_loss"]


class RaySettings(_Strict):
    """Ray Train options of a `launcher: ray` scenario; names follow Ray's ScalingConfig, RunConfig,
    CheckpointConfig and FailureConfig.  Checkpoints carry the metrics step (optimizer steps done), loss (the
    global loss of the last step) and neg_loss (-loss, for a "max" order like the seed's accuracy)."""

    resources_per_worker: dict[str, float] | None = Field(
        None, description="ScalingConfig(resources_per_worker), e.g. {CPU: 8, GPU: 1}; default 1 CPU, or 1 GPU on cuda."
    )
    placement_strategy: Literal["auto", "PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = Field(
        "auto", description="auto: exactly gpus/nodes workers on each of `nodes` nodes (per-worker node label "
        "selectors); otherwise Ray's placement-group strategy, as is."
    )
    max_failures: int = Field(
        0, ge=-1, le=1_000_000, description="FailureConfig(max_failures): restarts of the worker group from the "
        "latest checkpoint after a worker fails (-1 = unlimited, 0 = a failure fails the cell)."
    )
    checkpoint_every_steps: Count | None = Field(
        None, description="Report a checkpoint every this many optimizer steps (none: no checkpoints)."
    )
    num_to_keep: Count | None = Field(
        None, description="CheckpointConfig(num_to_keep): checkpoints kept (best by the score, else latest); none: all."
    )
    checkpoint_score_attribute: ScoreAttribute | None = Field(
        None, description="CheckpointConfig(checkpoint_score_attribute): loss | neg_loss | step, or the held-out "
        "accuracy | eval_loss of the evaluation at the checkpoint's step (needs eval:); none: recency."
    )
    checkpoint_score_order: Literal["max", "min"] = Field(
        "max", description="CheckpointConfig(checkpoint_score_order): keep the highest (max) or lowest (min) scores."
    )
    storage_path: str | None = Field(
        None, description="RunConfig(storage_path) for checkpoints; default: ray/ in the cell's work folder. "
        "Multi-node clusters need a path every node shares (NFS, s3://...)."
    )
    restore_best: bool = Field(True, description="After fit, load the best checkpoint into a fresh model (a check).")

    @model_validator(mode="after")
    def _consistent(self) -> "RaySettings":
        if self.checkpoint_every_steps is None and (self.num_to_keep or self.checkpoint_score_attribute):
            raise ValueError("num_to_keep / checkpoint_score_attribute need checkpoint_every_steps")
        worst = {("loss", "max"): "min (or neg_loss with max)", ("eval_loss", "max"): "min",
                 ("accuracy", "min"): "max"}.get((self.checkpoint_score_attribute, self.checkpoint_score_order))
        if worst:
            raise ValueError(f"checkpoint_score_attribute {self.checkpoint_score_attribute} with order "
                             f"{self.checkpoint_score_order} would keep the worst checkpoints; use "
                             f"checkpoint_score_order: {worst}")
        return self


class Scenario(_Strict):
    """One experiment: a matrix of cells (axes) plus the settings they share."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$", max_length=100, description="Slug; names the results folder.")
    description: str = Field("", description="One line on what this scenario answers.")
    device: Literal["auto", "cuda", "cpu"] = Field("auto", description="auto = cuda when available, else cpu.")

    model: ModelRef | list[ModelRef] = _axis("Preset name or inline shape ({family: gpt|llama|vit, ...}).")
    seq_len: SeqLen | list[SeqLen] | None = _axis(
        "Tokens per sample (gpt/llama; required). Fixed by image and patch size for vit.", None
    )
    strategy: Strategy | list[Strategy] = _axis(
        "A registered strategy (`suite strategies` lists them): ddp | zero1 | zero2 | zero3 (alias fsdp), or a "
        "hand-written twin: scratch-dp | scratch-dp-overlap | scratch-dp-bucketed | scratch-zero1 | "
        "scratch-zero2 | scratch-zero3. Aliases are replaced by the name they stand for.", "ddp"
    )
    activation_checkpointing: Checkpointing | list[Checkpointing] = _axis(
        " | ".join(f"{mode} ({doc})" for mode, doc in CHECKPOINTING_DOC.items()) + ".", "none"
    )
    precision: Precision | list[Precision] = _axis("fp32 | bf16-mixed | fp16-mixed.", "fp32")
    gpus: Gpus | list[Gpus] = _axis("World size (processes; on CPU, processes).", 1)
    nodes: Nodes | list[Nodes] = _axis("Nodes; > 1 only with launcher: ray.", 1)
    launcher: Launcher | list[Launcher] = _axis(
        "torchrun (this machine's ranks) | ray (Ray Train workers, over nodes).  A list runs each cell both ways: "
        "the same work under two launchers, side by side (in a sweep, each cell gets its own resources).",
        "torchrun")
    shard_size: Gpus | None | list[Gpus | None] = _axis(
        "hsdp: ranks per shard group (parameters sharded within a group, replicated across groups); it must "
        "divide gpus.  Default: the GPUs of one node (gpus / nodes).  Ignored by the other strategies.", None)
    tensor_parallel: Gpus | list[Gpus] = _axis(
        "Tensor-parallel degree t (llama): each block's projections split over t ranks, Megatron-style; the "
        "other gpus / t ways are data parallel (zero3; ddp only when gpus = t).", 1)
    sequence_parallel: StrictBool | list[StrictBool] = _axis(
        "With tensor_parallel t > 1 (Korthikanti et al.'s sequence parallelism, torchtitan's plan): the norms and the "
        "residual stream between blocks sharded on the sequence over the t ranks (activations there / t), each "
        "block's all-reduces become an all-gather before and a reduce-scatter after; the embedding and the head "
        "are split on the vocabulary.  seq_len must divide by t.", False)
    loss_parallel: StrictBool | list[StrictBool] = _axis(
        "With tensor_parallel t > 1: the head's output stays split on the vocabulary and the cross-entropy is "
        "computed on the shards (PyTorch's loss_parallel): no rank holds the whole (batch, seq, vocab) logits.  "
        "vocab must divide by t.", False)
    pipeline_parallel: Gpus | list[Gpus] = _axis(
        "Pipeline stages p (llama, gpt): the blocks split into p consecutive stages (the embedding on the first, "
        "the final norm and head on the last), the accumulation's micro-batches flowing through them.  The world "
        "factors as pipeline x data x context x tensor parallel ranks.  Planned (memory per stage, bubble, "
        "point-to-point traffic); not run yet.", 1)
    pipeline_schedule: Schedule | list[Schedule] = _axis(
        " | ".join(PIPELINE_SCHEDULES) + " (with pipeline_parallel > 1; ignored without): gpipe keeps every "
        "micro-batch's activations, 1f1b at most p on the first stage, interleaved-1f1b holds 2 model chunks per "
        "rank (the bubble halved), zero-bubble (PyTorch's interleaved ZB1P, 2 chunks per rank) fills the bubble "
        "with weight-gradient passes.", "1f1b")
    context_parallel: Gpus | list[Gpus] = _axis(
        "Context-parallel degree c: each sequence split over c ranks (ring attention: K and V circulate), for "
        "long sequences; seq_len must divide by 2c (load-balanced causal chunks).  Planned; not run yet.", 1)
    micro_batch_size: Gpus | list[Gpus] = _axis("Samples per rank per forward pass.", 1)
    global_batch_size: Count | list[Count] = _axis(
        "Samples per optimizer step over all ranks; accumulation = global / (micro x gpus), exactly.", 1
    )

    steps: Count = Field(50, description="Optimizer steps per cell, warm-up included.")
    warmup_steps: int = Field(
        5, ge=0, validate_default=True, description="First steps excluded from timing (still in the loss curve)."
    )
    repeats: Annotated[int, Field(gt=0, le=10_000)] = Field(1, description="Launches of each cell, in interleaved "
                                                           "rounds (A0 B0 A1 B1 ...): compare's unit of evidence.")
    seed: Seed | list[Seed] = _axis("Seed for weights and data; identical on every rank and strategy.  A list "
                                    "(seed: [0, 1, 2]) gives the seed bands of convergence.band.", 0)
    optimizer: Optimizer = Field(default_factory=Optimizer, description="Optimizer settings.")
    data: Data = Field(default_factory=lambda: SyntheticData(kind="synthetic"), description="Training data.")
    convergence: Convergence | None = Field(None, description="Optional convergence gates.")
    eval: Eval | None = Field(None, validate_default=True,
                              description="Held-out evaluation while training (outside the timed steps).")
    gpu_memory_gb: float | None = Field(
        None, gt=0, le=1e6, description="Memory of the target device in GB (1e9 bytes), for the `fits` column of plan."
    )
    timeout_s: Annotated[int, Field(gt=0, le=30 * 86400)] = Field(
        1800, description="Wall-clock limit per cell; the cell is killed past it.")
    exclude: list[ExcludeEntry] = Field(  # at most 64: expand matches each one against every cell
        default_factory=list, max_length=64,
        description="Partial cells to drop, as in CI matrix syntax: [{strategy: ddp, gpus: 1}]."
    )
    bucket_cap_mb: float = Field(25.0, gt=0, le=1e6, description="DDP gradient bucket size in MB.")
    measure_peaks: bool = Field(False, description="Run a short extra MemTracker pass for activation / "
                                "unsharded-parameter peaks.")
    trace_memory: bool = Field(False, description="Trace each cell's per-rank peak on fake tensors before it runs "
                               "and store it beside the measured peaks (always on with measure_peaks).")
    compile: bool = Field(False, description="torch.compile the model (after checkpointing, before sharding).")
    threads_per_rank: Annotated[int, Field(gt=0, le=1024)] = Field(
        1, description="torch intra-op threads per rank (CPU).")
    ray: RaySettings | None = Field(None, description="Ray Train options (launcher: ray only).")
    quiet: QuietPolicy | None = Field(None, description="Check the machine before each timed launch: while other "
                                      "processes keep it busy, wait (up to max_wait_s), warn or refuse "
                                      "(suite run --require-quiet overrides it; docs/machine.md).")
    sweep: SweepPolicy | None = Field(None, description="Schedule the cells as a sweep over a Ray cluster: pack, "
                                      "node or serial (suite run --schedule overrides it; docs/sweeps.md).")

    @field_validator(*AXES, mode="before")
    @classmethod
    def _non_empty(cls, value: Any) -> Any:
        if isinstance(value, list) and not value:
            raise ValueError("an axis needs at least one value (the list is empty)")
        return value

    @field_validator("warmup_steps")
    @classmethod
    def _warmup_below_steps(cls, warmup: int, info: ValidationInfo) -> int:
        # A field validator (not a model one) so the error carries warmup_steps' line, not the document's.
        steps = info.data.get("steps")
        if steps is not None and warmup >= steps:
            raise ValueError(f"warmup_steps {warmup} must be below steps {steps}")
        return warmup

    @field_validator("eval")
    @classmethod
    def _quality_gates_need_eval(cls, ev: Eval | None, info: ValidationInfo) -> Eval | None:
        conv = info.data.get("convergence")
        if ev is None and conv is not None and conv.quality():
            raise ValueError(f"convergence: {', '.join(conv.quality())} judge held-out evaluations: add an eval: "
                             "block (e.g. eval: {every_steps: 10, batches: 4})")
        return ev

    @field_validator("ray")
    @classmethod
    def _ray_needs_ray_launcher(cls, ray: RaySettings | None, info: ValidationInfo) -> RaySettings | None:
        launchers = info.data.get("launcher")
        if ray is not None and launchers is not None and "ray" not in (
                launchers if isinstance(launchers, list) else [launchers]):
            raise ValueError(f"ray: settings need launcher: ray (got {launchers})")
        held_out = ray is not None and ray.checkpoint_score_attribute in ("accuracy", "eval_loss")
        ev, every = info.data.get("eval"), ray.checkpoint_every_steps if ray is not None else None
        if held_out and (ev is None or not ev.every_steps or every % ev.every_steps):
            raise ValueError(f"checkpoint_score_attribute {ray.checkpoint_score_attribute} scores each checkpoint by "
                             f"the evaluation at its step: eval.every_steps must divide checkpoint_every_steps "
                             f"{every} (eval: {ev.every_steps if ev else 'none'})")
        return ray

    def axis_values(self, axis: str) -> list[Any]:
        value = getattr(self, axis)
        return list(value) if isinstance(value, list) else [value]
