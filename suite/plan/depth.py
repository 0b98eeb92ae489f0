"""Fast traces: trace two shallow copies of the model and extrapolate every phase to the real depth.

A decoder (or encoder) stack repeats one block L times.  What a rank holds at any moment of a training step is
a sum of terms that are each constant or proportional to a count of blocks: the parameters, gradients and
optimizer states of L blocks; the activations saved by the j blocks forward has passed (or backward has not
yet reached); one block's unsharded parameters and temporaries.  So the memory at "the same moment" of the
step is affine in L — and the peak is the largest of these affine functions, which is why extrapolating the
peak itself can be wrong (a phase that grows faster may overtake another one deeper down) and extrapolating
each phase is not.

Phases.  A moment of the traced steps is named by where the code is, independently of the depth:

    (step, micro-batch, stage, region)     stage: forward, backward, optimizer step
    region inside a block:   blocks.first / blocks.mid / blocks.last + the submodule path (".attn.qkv")
    region outside blocks:   the innermost module ("LlamaModel.head", "Global") + the last block seen in
                             this stage ("@first", "@mid", "@last", "@none": before or after the blocks)

Within one phase the memory over the blocks it covers (all the middle blocks) is affine in the block index,
so its maximum sits at an end of the range — again affine in L.  For each phase the trace keeps its largest
total, every tracker label at that moment, and each label's own largest value; these are traced at
depths `SHALLOW` = (3, 4) — the smallest with a middle block at both — and carried to L along the line
through the two.  A layer-level policy (every-k: every k-th block checkpointed) repeats with period k, so its
two depths are k apart, congruent to L modulo k and deep enough for a middle block of each kind (L = 32,
k = 4: 6 + 2 = 8 and 12; k = 2: 4 and 6): the wrapped and the plain blocks are phases of their own (the
wrapper is in their module path), each in the same place relative to L.  The peak is the largest
extrapolated phase total; the labels at the peak are that phase's; each label's peak is its largest
extrapolated value.  Both shallow traces must name the same phases, or the
extrapolation is refused (`DepthError`) and the caller traces in full.

Pipelines: each pipeline rank runs its own stages, so its two shallow traces are of the model at p x v x d
layers for d in SHALLOW (v model chunks per rank), and every phase is carried to the stage's own depth
L / (p v).  A stage's blocks are numbered from 0 in it, and a phase's moments are every micro-batch of the
step at that place of the code (the largest counts): each is affine in the stage's depth, and so is their
largest, as long as the same moment is the largest at both depths, which the tests check against full
traces (exact on 1f1b, gpipe and interleaved-1f1b, ddp and zero3, with TP).  Layer-level policies
(every-k) are traced in full in a pipeline: where a stage's k-th blocks fall depends on how the stages cut
the stack.

Where it does not apply (`why_full`): models that are not a stack of identical blocks suite can rebuild at
another depth (your own modules, transformers configs: traced in full), strategies whose per-rank bytes are
not affine in the depth (the registry's `depth_affine`: ZeroRedundancyOptimizer gives whole tensors to
ranks, so rank 0's share of a 4-block model is not a 32-block model's), and stacks so shallow the full trace
costs no more.  tests/ checks the fast trace against full traces at several depths (within 1%).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from suite.axes import checkpoint_every
from suite.plan.pipeline import pipeline
from suite.strategies import registry

SHALLOW = (3, 4)  # depths traced: the smallest pair with a middle block at both (period 1)
REBUILDABLE = ("gpt", "llama", "vit")  # families whose shape has a `layers` field the builders honour


class DepthError(Exception):
    """The two shallow traces do not line up (different phases): extrapolating would be a guess."""


def shallow_depths(cell) -> tuple[int, int]:
    """The two depths to trace: SHALLOW, or for a policy of period k the smallest d >= k + 2 (a plain and a
    checkpointed middle block) with d = L (mod k), and d + k."""
    k = checkpoint_every(cell.activation_checkpointing) or 1
    if k == 1:
        return SHALLOW
    low = k + 2  # the first depth with both a plain and a checkpointed middle block
    first = low + (cell.model.layers - low) % k
    return first, first + k


def stage_chunks(cell) -> int:
    """How many equal runs of blocks the stack is cut into: p x v stages in a pipeline (v model chunks per
    pipeline rank), else 1; a trace's depths are per chunk."""
    p, v, _ = pipeline(cell)
    return p * v


def why_full(cell) -> str | None:
    """Why `cell` is traced in full rather than extrapolated from shallow copies, or None."""
    family = getattr(cell.model, "family", None)
    if family not in REBUILDABLE:
        return f"model family {family}: suite cannot rebuild it at another depth"
    spec = registry.get(cell.strategy)
    if not spec.depth_affine:
        return f"strategy {cell.strategy}: {spec.extra.get('not_depth_affine', 'per-rank bytes not affine in depth')}"
    chunks = stage_chunks(cell)
    if chunks > 1 and checkpoint_every(cell.activation_checkpointing):
        return (f"pipeline with checkpointing {cell.activation_checkpointing}: where a stage's checkpointed blocks "
                "fall depends on the cut")
    depth = cell.model.layers // chunks
    if depth <= sum(shallow_depths(cell)):
        per = " per pipeline stage" if chunks > 1 else ""
        return f"{depth} layers{per}: the full trace costs no more than two shallow ones"
    return None


@dataclass
class Phase:
    """One phase's numbers (bytes): its largest total, the labels at that moment, each label's own maximum."""

    total: int = -1
    at: dict[str, int] = field(default_factory=dict)
    label_max: dict[str, int] = field(default_factory=dict)


class PhaseLog:
    """Names every tracker update with its phase and keeps each phase's maxima (see the module docstring).

    `observe(tracker, labels)` is called by the tracker after each allocation, free or resize; `next_micro()`
    after each micro-batch's backward, `next_step()` before each step."""

    def __init__(self, layers: int, block_prefix: str):
        self.layers = layers
        self._block = re.compile(r"\." + re.escape(block_prefix) + r"\.(\d+)(.*)$")
        self.phases: dict[str, Phase] = {}
        self.step, self.micro = -1, 0
        self._stage: tuple | None = None
        self._last_block = "none"
        self._cache: dict[frozenset, tuple[str, str | None]] = {}

    def next_step(self) -> None:
        self.step, self.micro = self.step + 1, 0

    def next_micro(self) -> None:
        self.micro += 1

    def _position(self, index: int) -> str:
        return "first" if index == 0 else "last" if index == self.layers - 1 else "mid"

    def _region(self, parents) -> tuple[str, str | None]:
        """(region, block position or None) of the innermost active module."""
        key = frozenset(parents)
        found = self._cache.get(key)
        if found is None:
            inner, position = "Global", None
            in_block = [(m, p) for p in parents if (m := self._block.search(p))]
            if in_block:
                match, _ = max(in_block, key=lambda mp: (len(mp[1]), mp[1]))  # ties: by name, not set order
                position = self._position(int(match.group(1)))
                inner = f"blocks.{position}{match.group(2)}"
            elif parents:
                inner = max(parents, key=lambda p: (len(p), p))
            found = self._cache[key] = (inner, position)
        return found

    def key(self, tracker) -> str:
        mods = tracker._mod_tracker
        stage = "optimizer" if tracker._in_opt else "backward" if mods.is_bw else "forward"
        where = (self.step, self.micro, stage)
        if where != self._stage:
            self._stage, self._last_block = where, "none"
        region, position = self._region(mods.parents)
        if position is not None:
            self._last_block = position
            return f"{self.step}/{self.micro}/{stage}/{region}"
        return f"{self.step}/{self.micro}/{stage}/{region}@{self._last_block}"

    def observe(self, tracker, labels: dict[str, int]) -> None:
        phase = self.phases.get(k := self.key(tracker))
        if phase is None:
            phase = self.phases[k] = Phase()
        total = labels.get("Total", 0)
        if total > phase.total:
            phase.total, phase.at = total, dict(labels)
        for name, value in labels.items():
            if value > phase.label_max.get(name, -1):
                phase.label_max[name] = value


@dataclass
class Shallow:
    """What one shallow trace found: its depth, its phases and the strategy's byte count after step 1."""

    depth: int
    phases: dict[str, Phase]
    counted: dict[str, int]


def _line(a: int, b: int, da: int, db: int, depth: int) -> int:
    """The value at `depth` on the line through (da, a) and (db, b), never below 0."""
    return max(0, round(b + (b - a) * (depth - db) / (db - da)))


def _lines(a: dict[str, int], b: dict[str, int], da: int, db: int, depth: int) -> dict[str, int]:
    return {k: _line(a.get(k, 0), b.get(k, 0), da, db, depth) for k in sorted(set(a) | set(b))}


@dataclass
class Extrapolated:
    """The trace at the real depth: what trace.Trace records."""

    peak: int
    at_peak: dict[str, int]
    category_peaks: dict[str, int]
    counted: dict[str, int]
    phase: str  # the phase the peak falls in


def extrapolate(a: Shallow, b: Shallow, depth: int) -> Extrapolated:
    """Carry every phase of two shallow traces to `depth` (see the module docstring); DepthError when the
    two traces do not name the same phases."""
    if set(a.phases) != set(b.phases):
        only = sorted(set(a.phases) ^ set(b.phases))
        raise DepthError(f"the traces at depths {a.depth} and {b.depth} differ in their phases "
                         f"({len(only)} only in one, e.g. {only[0]})")
    best_key, best = None, None
    label_peaks: dict[str, int] = {}
    for key in a.phases:
        pa, pb = a.phases[key], b.phases[key]
        total = _line(pa.total, pb.total, a.depth, b.depth, depth)
        if best is None or total > best[0]:
            best_key, best = key, (total, _lines(pa.at, pb.at, a.depth, b.depth, depth))
        for name, value in _lines(pa.label_max, pb.label_max, a.depth, b.depth, depth).items():
            label_peaks[name] = max(label_peaks.get(name, 0), value)
    total, at = best
    at["Total"] = total  # the labels' lines sum to the total's line; rounding aside
    label_peaks.pop("Total", None)
    return Extrapolated(peak=total, at_peak=at, category_peaks=label_peaks,
                        counted=_lines(a.counted, b.counted, a.depth, b.depth, depth), phase=best_key)
