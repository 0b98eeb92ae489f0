"""The axes a scenario sweeps: each axis once, with its allowed values, its table header and its order.

This table is the one place an axis is written down.  Everything that knows about axes reads it:

    scenario/   the fields a scenario may sweep (`Scenario`), the closed value sets (`CHECKPOINTING`,
                `PRECISIONS`) as pydantic Literals, `exclude` / `match` / `band` keys, the cell id
    worker/     the checkpointing mode and precision it is handed (typed by these Literals)
    results/    the `Axes` record each stored cell result carries (one typed field per axis)
    report/     column headers, the order rows and pivot columns are sorted in, `--group-by`
    compare/    how a cell is described (`ckpt=full tp=2`)

Adding a *value* to a closed axis (a new checkpointing mode) is one entry in its tuple below plus the code that
implements it (for checkpointing: `techniques/checkpointing.POLICIES` and the planner's
`plan/memory.ACTIVATIONS`); validation, the JSON Schema, the report's ordering and the worker follow from here.
Adding an *axis* is one `Axis` entry plus its field on `Scenario` (its type and bounds) and the code that uses
it.  Open axes (model, strategy, the sizes) are validated by their types or registries, not by a tuple here.

Pure data: no torch, no pydantic, no other suite module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Literal, Mapping, Sequence

# ------------------------------------------------------------------------------------------- closed value sets
# Activation checkpointing policies (suite/techniques/checkpointing.py), in the order the report lists them
# (about least memory saved first): every-k checkpoints every k-th block in full (layer-level).
CHECKPOINTING = ("none", "every-4", "every-2", "selective", "op-level", "full")
# What each policy saves and recomputes, in one line each: the scenario schema, `--help` and the README say this
CHECKPOINTING_DOC = {
    "none": "nothing recomputed",
    "every-4": "every 4th block recomputed in full, the others keep everything",
    "every-2": "every 2nd block recomputed in full, the others keep everything",
    "selective": "each block: matmul outputs saved, the rest (attention core, norms, element-wise ops) recomputed",
    "op-level": "torchtitan's op-level policy: attention outputs and every other matmul's saved",
    "full": "each block recomputed from its input",
}
# How a cell's ranks are started (suite/launch/): torchrun on this machine, or Ray Train workers over a cluster's
# nodes (the only launcher for nodes > 1).
LAUNCHERS = ("torchrun", "ray")
# Numeric precision of a cell: parameters, compute and gradients (docs/parallelism.md).
PRECISIONS = ("fp32", "bf16-mixed", "fp16-mixed")


@dataclass(frozen=True)
class PipelineSchedule:
    """What a pipeline schedule (pipeline_parallel > 1) does that the planner, the worker and validate read."""

    chunks: int  # v: the model chunks ("virtual stages") each rank holds
    sends_held: bool  # whether PyTorch's schedule keeps every send's work (and so its tensor) past the
    # micro-batch's backward: gpipe to the end of its phase loops, the runtime schedules to the end of the step
    forwards_first: bool  # every forward before any backward: the last stage holds every micro-batch's logits


# Pipeline schedules by name: the planner's bubble and in-flight arithmetic is keyed by these names
# (plan/pipeline.py, docs/parallelism.md).
PIPELINE_SCHEDULES = {
    # all forwards, then all backwards: m micro-batches of activations in flight
    "gpipe": PipelineSchedule(chunks=1, sends_held=True, forwards_first=True),
    # one forward, one backward: at most p micro-batches in flight on the first stage
    "1f1b": PipelineSchedule(chunks=1, sends_held=False, forwards_first=False),
    # v = 2 chunks per rank: the bubble / v, at v x the point-to-point messages
    "interleaved-1f1b": PipelineSchedule(chunks=2, sends_held=True, forwards_first=False),
    # ZB1P over v = 2 chunks: backward split into input- and weight-gradient passes
    "zero-bubble": PipelineSchedule(chunks=2, sends_held=True, forwards_first=False),
}

_UNSET: Any = object()


def checkpoint_every(mode: str) -> int | None:
    """k for a layer-level policy "every-k" (every k-th block checkpointed in full), None for the others."""
    head, _, k = mode.partition("-")
    return int(k) if head == "every" and k.isdigit() else None


@dataclass(frozen=True)
class Axis:
    """One axis of a scenario's matrix."""

    name: str  # the scenario key, the cell's field, the results' `axes` key
    header: str  # the short column header tables use
    doc: str  # what the value means, in a few words
    stored: Any = str  # the type of an open axis's value in a stored result's `axes` (results/schema.Axes)
    values: tuple[Any, ...] | None = None  # the allowed values when the set is closed
    sorted_by_table: bool = False  # tables and pivots list the values in `values` order, not alphabetically
    # Axes added after results were first stored: the value every older cell had.  At that value the axis is
    # left out of cell ids and benchmark names (so those stay as they were) and filled in on reading an older
    # result (from its cell when the cell has it).  _UNSET for the axes results have always carried.
    older_default: Any = _UNSET
    # A setting that became an axis later: every cell id always hashed it, so ids keep it even at older_default.
    always_in_id: bool = False

    @property
    def value_type(self) -> Any:
        """The type of one value: a Literal of the closed set, else `stored`."""
        return Literal[self.values] if self.values is not None else self.stored

    @property
    def added_later(self) -> bool:
        """Whether results older than this axis exist (they read with `older_default`)."""
        return self.older_default is not _UNSET


TABLE: tuple[Axis, ...] = (
    Axis("model", "model", "the preset name, or the label of an inline shape / own model"),
    Axis("seq_len", "seq", "tokens per sample (vit: patches + class token)", int | None),
    Axis("strategy", "strategy", "a registered strategy's name (suite/strategies/registry.py)"),
    Axis("activation_checkpointing", "ckpt", "what backward recomputes", values=CHECKPOINTING, sorted_by_table=True),
    Axis("precision", "precision", "parameters, compute and gradients", values=PRECISIONS),
    Axis("gpus", "gpus", "world size: ranks (GPUs, or CPU processes)", int),
    Axis("nodes", "nodes", "nodes the ranks are spread over", int),
    Axis("launcher", "launcher", "how the ranks are started: torchrun (one node) or Ray Train (over nodes)",
         values=LAUNCHERS, older_default="torchrun", always_in_id=True),
    Axis("shard_size", "shard", "hsdp: ranks per shard group; None for other strategies", int | None,
         older_default=None),
    Axis("tensor_parallel", "tp", "tensor-parallel degree", int, older_default=1),
    Axis("sequence_parallel", "sp", "with tensor parallelism: norms and the residual stream sharded on the sequence",
         bool, older_default=False),
    Axis("loss_parallel", "lp", "with tensor parallelism: the head and cross-entropy sharded on the vocabulary", bool,
         older_default=False),
    Axis("pipeline_parallel", "pp", "pipeline stages: the blocks split over p ranks", int, older_default=1),
    Axis("pipeline_schedule", "sched", "pipeline schedule (None without pipeline parallelism)", str | None,
         values=(None, *PIPELINE_SCHEDULES), sorted_by_table=True, older_default=None),
    Axis("context_parallel", "cp", "context-parallel degree: the sequence split over c ranks (ring attention)", int,
         older_default=1),
    Axis("micro_batch_size", "mbs", "samples per rank per forward pass", int),
    Axis("global_batch_size", "gbs", "samples per optimizer step over all ranks", int),
    Axis("seed", "seed", "seed of weights and data (None: a result older than the seed axis)", int | None),
)

# The axes in the order cells list them; cell ids and `exclude` / `match` keys use these names.
AXES: tuple[str, ...] = tuple(a.name for a in TABLE)
# Each axis's short table header.
AXIS_HEADERS: dict[str, str] = {a.name: a.header for a in TABLE}
# Axes added after results were first stored, with the value older cells had (see Axis.older_default).
LATER_AXES: dict[str, Any] = {a.name: a.older_default for a in TABLE if a.added_later}
# The later axes whose default value cell ids leave out (all but the former settings that ids always hashed).
ID_OMITS_AT_DEFAULT: dict[str, Any] = {a.name: a.older_default for a in TABLE if a.added_later and not a.always_in_id}
_BY_NAME = {a.name: a for a in TABLE}


def axis(name: str) -> Axis:
    """The table entry of an axis (KeyError names the known axes)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name!r} is not an axis; axes: {', '.join(AXES)}") from None


def in_use(name: str, value: Any) -> bool:
    """Whether an axis's value says something: False for an axis added later at the value every older result
    had (tensor_parallel 1, pipeline_schedule None: the layout was not used), which the lines listing a cell's
    settings leave out."""
    return not (name in LATER_AXES and value == LATER_AXES[name])


def rank(name: str, value: Any) -> int | None:
    """Where `value` stands in its axis's report order (an axis with `sorted_by_table`), None otherwise."""
    entry = _BY_NAME.get(name)
    if entry is None or not entry.sorted_by_table or value not in entry.values:
        return None
    return entry.values.index(value)


def varying_axes(items: Iterable[Mapping[str, Any]], axes: Sequence[str] = AXES) -> list[str]:
    """The axes (in the order given) on which the items do not all have the same value; a missing key is None.

    The one answer to "which axes differ here" for the cell table (`suite results show`), the report's tables,
    pivots and plots, and compare's cell descriptions."""
    items = list(items)
    if not items:
        return []
    first, rest, out = items[0], items[1:], []
    for a in axes:  # plain loops: this walks every item on every axis that does not vary (10,000 rows x ~20)
        value = first.get(a)
        for x in rest:
            if x.get(a) != value:
                out.append(a)
                break
    return out
