"""The strategy registry: every fact about a strategy, in one entry that every other part of suite reads.

An entry (`StrategySpec`) says what the strategy is called (and its aliases), which ZeRO *family* it belongs
to, and from that what it shards; how many bytes it moves per optimizer step; which native strategy it is the
hand-written twin of; whether its training state can be checkpointed; and where its `apply` lives.  Readers:

    suite/scenario/fields.py, expand.py the allowed values (and JSON Schema enum); aliases resolved once, there
    suite/plan/memory.py, plan/comm.py  what is sharded over N ranks, bytes communicated per step
    suite/strategies/__init__.py        `get_strategy(name)` imports the entry's apply
    suite/launch/ray/checkpoint.py      `checkpointable`
    suite/report/tables.py, pivots.py   ordering (family, native first, then its twins) and twin pairs

This module imports neither torch nor any strategy module, so planning, validation and reports stay cheap.

Adding a strategy: write its `apply(model, mesh, policy, device) -> Parallel` (strategies/base.py) in a file and `register()` an entry,
either in BUILTIN below or from a plugin module named in SUITE_PLUGINS (comma-separated module names,
imported on the first lookup in every process suite starts; torchrun's ranks inherit the variable).
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from typing import Literal

from suite.modules import parse_names

Family = Literal["dp", "zero1", "zero2", "zero3"]
FAMILIES: tuple[Family, ...] = ("dp", "zero1", "zero2", "zero3")
PLUGINS_ENV = "SUITE_PLUGINS"


@dataclass(frozen=True)
class Shards:
    """What a family splits over the N ranks (each rank keeps 1/N); fp32 master weights go with the
    optimizer states (ZeRO-1 and up own them per shard)."""

    optimizer_states: bool
    gradients: bool
    parameters: bool


# ZeRO's stages (arXiv 1910.02054): each shards one more kind of state than the one before.
SHARDS: dict[Family, Shards] = {
    "dp": Shards(False, False, False),
    "zero1": Shards(True, False, False),
    "zero2": Shards(True, True, False),
    "zero3": Shards(True, True, True),
}


@dataclass(frozen=True)
class Comm:
    """Elements each rank sends per optimizer step, in units of Psi (the parameter count), with k
    micro-batches per step: `per_step + per_micro_batch * k`.  `pattern` names the collectives."""

    per_step: float
    per_micro_batch: float = 0.0
    pattern: str = ""
    # HSDP: across the R replicas of a shard, each rank all-reduces its gradient shard (Psi / S elements, 2 x
    # for a ring): `per_shard_across_replicas / S` more, when R > 1
    per_shard_across_replicas: float = 0.0

    def elements(self, grad_accum: int, shard: int | None = None, replicas: int = 1) -> float:
        across = self.per_shard_across_replicas / shard if shard and replicas > 1 else 0.0
        return self.per_step + self.per_micro_batch * grad_accum + across


@dataclass(frozen=True)
class Holds:
    """Bytes per parameter one rank holds *as implemented*, each as (replicated, sharded): r + s / N.

    What the strategy's own `count_bytes` reports after the first step (suite/plan/implemented.py turns it
    into per-rank bytes; tests/unit/test_implemented.py checks it against a trace of the real code).  Where it
    differs from the textbook: autocast keeps fp32 parameters and gradients (no 16-bit copy, no separate
    master), FSDP2's fp32 shards are the master copy, and each hand-written strategy holds what its
    docstring says."""

    parameters: tuple[float, float]
    gradients: tuple[float, float]
    optimizer_states: tuple[float, float]
    master_weights: tuple[float, float] = (0, 0)
    # Parameter sharding: besides the shards, the root unit (embeddings, final norm, head) and this many
    # blocks are unsharded at once, in the compute dtype, while they compute (FSDP2 and scratch-zero3: 1).
    unsharded_blocks: int = 0


# As implemented with fp32 parameters, per family: what the textbook says for fp32, and also what every
# autocast strategy holds in mixed precision (its parameters and gradients stay fp32).
FP32_HOLDS: dict[Family, Holds] = {
    "dp": Holds((4, 0), (4, 0), (8, 0)),
    "zero1": Holds((4, 0), (4, 0), (0, 8)),
    "zero2": Holds((4, 0), (0, 4), (0, 8)),
    "zero3": Holds((0, 4), (0, 4), (0, 8), unsharded_blocks=1),
}


@dataclass(frozen=True)
class StrategySpec:
    """One strategy's facts.  `apply` is "module:function", imported on first use."""

    name: str
    family: Family
    apply: str
    comm: Comm
    summary: str
    aliases: tuple[str, ...] = ()
    twin: str | None = None  # the native strategy a hand-written one must match (None: it is native)
    checkpointable: bool = True  # the state-dict checkpoint API can save and restore its training state
    traceable: bool = True  # runs under fake tensors and a fake process group (suite plan --trace)
    # rank 0's bytes at every moment of a step are affine in the model's depth, so a trace of two shallow copies
    # extrapolates (plan/depth.py); False: traced in full, extra["not_depth_affine"] says why
    depth_affine: bool = True
    # its gradients stay allocated between optimizer steps (DDP's bucket views, flat buffers); False: set to None
    # by zero_grad and made again in backward (FSDP2), so a peak at the start of backward holds none of them
    keeps_gradients: bool = True
    # under no_sync (every micro-batch of a step but the last) it accumulates each rank's gradients unsharded,
    # full size in fp32 (FSDP2's set_requires_gradient_sync(False): the reduce-scatter waits for the last
    # micro-batch), so a later micro-batch's peak holds them beside the sharded ones
    accumulates_unsharded: bool = False
    holds_fp32: Holds | None = None  # as implemented in fp32 (None: FP32_HOLDS of its family)
    holds_mixed: Holds | None = None  # in bf16/fp16-mixed (None: as in fp32, which is what autocast does)
    # shards within groups of the cell's shard_size ranks and replicates across groups (HSDP): its sharded
    # bytes divide by shard_size, not by the world size; other strategies shard over the whole world
    shard_group: bool = False
    # CPU offload (FSDP2's CPUOffloadPolicy): sharded parameters, gradients and the optimizer step live on the
    # host; the device holds the unsharded working set (root + one block) and the activations.  The planner
    # counts the first as host bytes, apart from the device total
    offload: bool = False
    # composes with tensor_parallel > 1: its apply takes the (dp, tp) mesh's dp part as `mesh=` (ddp: only with
    # no data parallelism left, gpus = tp)
    tensor_parallel: bool = False
    # runs on one pipeline stage's data-parallel ranks: its apply takes the (pp, dp) mesh's dp part as `mesh=`
    # (ddp: only without replicas, gpus = pipeline_parallel: its reducer cannot have several micro-batches of a
    # stage in flight before their backward, which every pipeline schedule does)
    pipeline: bool = False
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def shards(self) -> Shards:
        return SHARDS[self.family]

    def holds(self, precision: str) -> Holds:
        """Bytes per parameter as implemented in `precision` (see Holds)."""
        fp32 = self.holds_fp32 or FP32_HOLDS[self.family]
        return fp32 if precision == "fp32" else (self.holds_mixed or fp32)


_DP = Comm(2, pattern="all-reduce of gradients (ring: reduce-scatter + all-gather)")
_ZERO3 = Comm(1, 2, pattern="all-gather of parameters in forward and in backward per micro-batch, "
                            "one reduce-scatter of gradients")
# FSDP2 zero2 keeps the unsharded parameters (compute dtype) from forward to backward; its fp32 shards are a
# second copy (counted as master weights).  The hand-written ZeRO's flat buffers are 16-bit in mixed precision
# with an fp32 master shard; scratch-zero1 keeps the full 16-bit gradients, scratch-zero2 frees them once
# reduce-scattered; scratch-zero3's fp32 master chunks are its parameters at rest (its 16-bit full buffers
# exist only while a block computes: the trace sees them).
_FSDP2_ZERO2 = (Holds((4, 0), (0, 4), (0, 8), (0, 4)), Holds((2, 0), (0, 4), (0, 8), (0, 4)))
_SCRATCH_MIXED = {"zero1": Holds((2, 0), (2, 4), (0, 8), (0, 4)), "zero2": Holds((2, 0), (0, 4), (0, 8), (0, 4))}
_HSDP = Comm(1, 2, per_shard_across_replicas=2,
             pattern="zero3's all-gathers and reduce-scatter within the shard group, then an all-reduce of each "
                     "gradient shard across the replicas")
_UNTESTED = "its state-dict checkpoints are not tested in suite yet"
# Flat shards in their optimizer: the state-dict API cannot name their optimizer states.
_FLAT = "its optimizer holds flat shards, not the model's parameters"

BUILTIN: tuple[StrategySpec, ...] = (
    StrategySpec("ddp", "dp", "suite.strategies.ddp:apply", _DP, "DistributedDataParallel, bucketed all-reduce "
                 "overlapped with backward", tensor_parallel=True, pipeline=True),
    StrategySpec("zero1", "zero1", "suite.strategies.zero1:apply",
                 Comm(3, pattern="all-reduce of gradients + each shard's owner broadcasts it"),
                 "ZeroRedundancyOptimizer under DDP: optimizer states sharded", depth_affine=False,
                 extra={"not_depth_affine": "ZeroRedundancyOptimizer gives each rank whole tensors, largest first, "
                        "so rank 0's share of a shallow copy is not the real model's"}),
    StrategySpec("zero2", "zero2", "suite.strategies.fsdp:apply",
                 Comm(2, pattern="reduce-scatter of gradients + all-gather of parameters"),
                 "FSDP2 with reshard_after_forward=False: gradients and optimizer states sharded",
                 holds_fp32=_FSDP2_ZERO2[0], holds_mixed=_FSDP2_ZERO2[1], keeps_gradients=False, pipeline=True,
                 accumulates_unsharded=True),
    StrategySpec("zero3", "zero3", "suite.strategies.fsdp:apply", _ZERO3,
                 "FSDP2 with reshard_after_forward=True: parameters, gradients and optimizer states sharded",
                 aliases=("fsdp",), tensor_parallel=True, keeps_gradients=False, pipeline=True,
                 accumulates_unsharded=True),
    StrategySpec("hsdp", "zero3", "suite.strategies.fsdp:apply", _HSDP,
                 "FSDP2 on a 2-D mesh (replicate x shard): zero3 within each shard group of shard_size ranks, "
                 "replicated across groups", shard_group=True, tensor_parallel=True, pipeline=True,
                 checkpointable=False, extra={"not_checkpointable": _UNTESTED}, keeps_gradients=False,
                 accumulates_unsharded=True),
    StrategySpec("zero3-offload", "zero3", "suite.strategies.fsdp:apply", _ZERO3,
                 "zero3 with FSDP2's CPUOffloadPolicy: sharded parameters, gradients and the optimizer step on "
                 "the host; host-device copies in place of device memory", offload=True, checkpointable=False,
                 extra={"not_checkpointable": _UNTESTED}, keeps_gradients=False, accumulates_unsharded=True),
    StrategySpec("hsdp-offload", "zero3", "suite.strategies.fsdp:apply", _HSDP,
                 "hsdp with FSDP2's CPUOffloadPolicy (as zero3-offload, within shard groups)", shard_group=True,
                 offload=True, checkpointable=False, extra={"not_checkpointable": _UNTESTED}, keeps_gradients=False,
                 accumulates_unsharded=True),
    StrategySpec("scratch-dp", "dp", "suite.strategies.scratch.dp:apply", _DP,
                 "hand-written: all-reduce every gradient after backward", twin="ddp"),
    StrategySpec("scratch-dp-overlap", "dp", "suite.strategies.scratch.dp_overlap:apply", _DP,
                 "hand-written: async all-reduce from each gradient's hook, during backward", twin="ddp"),
    StrategySpec("scratch-dp-bucketed", "dp", "suite.strategies.scratch.dp_bucketed:apply", _DP,
                 "hand-written: gradients packed into flat buckets, all-reduced during backward", twin="ddp"),
    StrategySpec("scratch-zero1", "zero1", "suite.strategies.scratch.zero1:apply",
                 Comm(3, pattern="all-reduce of gradients + all-gather of the updated shards"),
                 "hand-written: optimizer states and fp32 master weights in flat shards", twin="zero1",
                 checkpointable=False, extra={"not_checkpointable": _FLAT}, holds_mixed=_SCRATCH_MIXED["zero1"]),
    StrategySpec("scratch-zero2", "zero2", "suite.strategies.scratch.zero2:apply",
                 Comm(2, pattern="reduce-scatter of gradients during backward + all-gather of updated shards"),
                 "hand-written: + gradients reduce-scattered, only a shard kept", twin="zero2",
                 checkpointable=False, extra={"not_checkpointable": _FLAT}, holds_mixed=_SCRATCH_MIXED["zero2"]),
    # its root unit (the embeddings) is gathered once per micro-batch instead of twice: slightly under (2k+1)
    StrategySpec("scratch-zero3", "zero3", "suite.strategies.scratch.zero3:apply", _ZERO3,
                 "hand-written: + parameters sharded, each block gathered just before its use", twin="zero3",
                 checkpointable=False, extra={"not_checkpointable": _FLAT}),
)

_SPECS: dict[str, StrategySpec] = {}
_ALIASES: dict[str, str] = {}
_plugins_loaded = False


def register(spec: StrategySpec) -> StrategySpec:
    """Add a strategy (name and aliases must be new; a twin must be a registered native strategy)."""
    taken = [n for n in (spec.name, *spec.aliases) if n in _SPECS or n in _ALIASES]
    if taken:
        raise ValueError(f"strategy name(s) {taken} are registered already")
    if spec.family not in SHARDS:
        raise ValueError(f"strategy {spec.name}: family {spec.family!r} is not one of {', '.join(FAMILIES)}")
    if spec.twin is not None and (spec.twin not in _SPECS or _SPECS[spec.twin].twin is not None):
        raise ValueError(f"strategy {spec.name}: twin {spec.twin!r} is not a registered native strategy")
    if ":" not in spec.apply:
        raise ValueError(f"strategy {spec.name}: apply {spec.apply!r} must be 'module:function'")
    _SPECS[spec.name] = spec
    _ALIASES.update({a: spec.name for a in spec.aliases})
    return spec


def unregister(name: str) -> None:
    """Remove a strategy (tests that register a throw-away one clean up with this)."""
    spec = _SPECS.pop(name)
    for alias in spec.aliases:
        _ALIASES.pop(alias, None)


class PluginError(RuntimeError):
    """A module named in SUITE_PLUGINS cannot be imported (the CLI prints it and exits 2)."""


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True  # first, so a plugin's own lookups do not recurse
    try:
        modules = plugin_modules()
    except ValueError as exc:
        _plugins_loaded = False
        raise PluginError(str(exc)) from None
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            _plugins_loaded = False  # every later lookup fails the same way: never carry on without it
            raise PluginError(f"{PLUGINS_ENV}: plugin module {module!r} cannot be imported ({exc}); "
                              f"is its folder on PYTHONPATH?") from exc
        except Exception as exc:  # the plugin's own code failed while importing: name it, keep the cause
            _plugins_loaded = False
            raise PluginError(f"{PLUGINS_ENV}: plugin module {module!r} raised {type(exc).__name__} while "
                              f"importing: {' '.join(str(exc).split())[:300]}") from exc


def plugin_modules() -> list[str]:
    """The module names SUITE_PLUGINS declares; ValueError naming a malformed entry (`..`, `.foo`, `a/b`)."""
    return parse_names(os.environ.get(PLUGINS_ENV, ""), PLUGINS_ENV)


def specs() -> list[StrategySpec]:
    """Every registered strategy, in registration order."""
    _load_plugins()
    return list(_SPECS.values())


def names() -> list[str]:
    return [s.name for s in specs()]


def accepted() -> list[str]:
    """What a scenario may write: names and aliases."""
    _load_plugins()
    return [*_SPECS, *_ALIASES]


class UnknownStrategy(ValueError):
    """A name that is no registered strategy or alias; `choices` (what a scenario may write) lets a caller say
    which one was probably meant (scenario/source.py's "did you mean")."""

    def __init__(self, message: str, choices: list[str]):
        super().__init__(message)
        self.choices = tuple(choices)


def resolve(name: str) -> str:
    """The strategy a name or alias stands for; UnknownStrategy (a ValueError) naming the choices when unknown."""
    _load_plugins()
    if name in _SPECS:
        return name
    if name in _ALIASES:
        return _ALIASES[name]
    aliases = ", ".join(f"{a} = {n}" for a, n in _ALIASES.items())
    raise UnknownStrategy(f"strategy {name!r} is unknown; registered: {', '.join(repr(n) for n in _SPECS)}"
                          + (f" (aliases: {aliases})" if aliases else ""), accepted())


def get(name: str) -> StrategySpec:
    """The entry of a strategy (aliases accepted)."""
    return _SPECS[resolve(name)]


def native(name: str) -> str:
    """The native strategy a strategy is measured against: its twin, or itself."""
    spec = get(name)
    return spec.twin or spec.name


def order() -> list[str]:
    """Report order: by family (dp, zero1, zero2, zero3), each native strategy followed by its hand-written
    twins in registration order, so a table pairs them."""
    listed = specs()
    position = {s.name: i for i, s in enumerate(listed)}
    return [s.name for s in sorted(listed, key=lambda s: (
        FAMILIES.index(s.family), position[native(s.name)], s.twin is not None, position[s.name]))]


for _spec in BUILTIN:
    register(_spec)
