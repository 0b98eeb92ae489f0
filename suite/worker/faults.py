"""Fault injection for testing the runner, compare and the gates:
SUITE_FAULT="<cell_id>:<kind>@<step>,<cell_id>:slow=<f>,<cell_id>:lr=<f>,...".

kind: raise (the step raises RuntimeError -> status failed), hang (the rank sleeps forever before the step ->
the runner's timeout), nan (the step's loss becomes NaN -> status diverged), and two planted gradient bugs for
testing the match gate's gradient-norm curve (the cell finishes ok; its gates must fail it at that step):
grad2x (the step's gradients are doubled after synchronisation, before the optimizer step: a missing divide
by the world size) and desync (the step's gradient synchronisation is skipped: every micro-batch runs under
the strategy's `no_sync()` and its `before_step` is not called, the two places the `Parallel` contract lets a
strategy synchronize gradients; each rank then steps with what it holds unsynchronized, see loop.py).
`slow=<factor>` (no step: it applies to every step) is a planted slowdown for testing regression detection:
each step's timed region is stretched to `factor` times its measured length by a sleep inside the timer, so
step times and throughput move by the factor while the cell id and the losses stay the same.  `lr=<factor>` is a planted change of
the mathematics for testing convergence gates: the cell trains with its learning rate times the factor while
its id and its recorded settings stay those of the scenario (as a bug would).  Entries for other cells are ignored;
every rank of the cell applies the same faults.  Nothing happens when the variable is unset.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: parsing a spec needs no torch
    import torch

KINDS = ("raise", "hang", "nan", "grad2x", "desync")
GRADIENT_KINDS = ("grad2x", "desync")
ENV = "SUITE_FAULT"


class InjectedFault(RuntimeError):
    """Raised by a `raise` fault (an ordinary failure as far as the worker's status goes)."""


def _entries(spec: str) -> list[str]:
    return [e for e in (e.strip() for e in spec.split(",")) if e]


# Factor entries (no step: they apply to the whole cell), with the factors each allows.
FACTORS = {"slow": (1.0, 100.0), "lr": (1e-3, 1e3)}


def _factor_kind(entry: str) -> str | None:
    kind = entry.rpartition(":")[2].partition("=")[0].strip()
    return kind if kind in FACTORS else None


def parse_factor(spec: str, cell_id: str, kind: str = "slow") -> float:
    """The `kind` factor planted for `cell_id` (1.0 when none); ValueError naming a malformed entry."""
    lo, hi = FACTORS[kind]
    factor = 1.0
    for entry in _entries(spec):
        if _factor_kind(entry) != kind:
            continue
        cid, _, rest = entry.rpartition(":")
        try:
            value = float(rest.partition("=")[2])
        except ValueError:
            value = None
        if not cid or value is None:
            raise ValueError(f"{ENV} entry {entry!r} is malformed; expected <cell_id>:{kind}=<factor>, e.g. "
                             f"abc123:{kind}=1.15")
        if not lo <= value <= hi:
            raise ValueError(f"{ENV} entry {entry!r}: {kind} factor {value} must be between {lo:g} and {hi:g}")
        if cid == cell_id:
            factor = value
    return factor


def parse_slow(spec: str, cell_id: str) -> float:
    """The slowdown factor planted for `cell_id` (1.0 when none)."""
    return parse_factor(spec, cell_id, "slow")


def parse(spec: str, cell_id: str, kinds: tuple[str, ...] | None = KINDS) -> dict[int, str]:
    """{step: kind} of the step faults for `cell_id` (factor entries are parse_factor's); ValueError naming a
    malformed entry.  `kinds`: the kinds the worker knows (None: any name; a stand-in worker knows its own)."""
    faults: dict[int, str] = {}
    for entry in _entries(spec):
        if _factor_kind(entry):
            continue
        try:
            cid, rest = entry.rsplit(":", 1)
            kind, step = rest.split("@")
            step_n = int(step)
        except ValueError:
            raise ValueError(f"{ENV} entry {entry!r} is malformed; expected <cell_id>:<kind>@<step>") from None
        if kinds is not None and kind not in kinds:
            raise ValueError(f"{ENV} entry {entry!r}: kind {kind!r} is not one of {', '.join(kinds)}")
        if not kind.isidentifier():
            raise ValueError(f"{ENV} entry {entry!r} is malformed; expected <cell_id>:<kind>@<step>")
        if step_n < 0:
            raise ValueError(f"{ENV} entry {entry!r}: step {step_n} is before the first step (steps count from 0)")
        if cid == cell_id:
            faults[step_n] = kind
    return faults


def check(spec: str, real_worker: bool = True) -> None:
    """ValueError naming the first malformed entry of a whole SUITE_FAULT value (every cell's entries): what
    the command line checks once, before any cell is launched.  With another worker module than suite's
    (SUITE_WORKER_MODULE: the tests' stand-in) a step fault's kind is that worker's to know."""
    if len(spec) > 100_000:
        raise ValueError(f"{ENV} is {len(spec)} characters long; it lists a few faults")
    parse(spec, "", KINDS if real_worker else None)
    for kind in FACTORS:
        parse_factor(spec, "", kind)


class Faults:
    """The loop's fault hook: `before_step(step)` before each step's timer, `on_loss(loss)` on the step's first
    micro-batch loss, `gradient_fault()` at the start of the step (grad2x / desync armed for it, or None).  The
    loop holds one of these and calls it; nothing about faults is passed through steps."""

    def __init__(self, cell_id: str, spec: str | None = None):
        text = os.environ.get(ENV, "") if spec is None else spec
        self.at = parse(text, cell_id)
        self.slow = parse_slow(text, cell_id)
        self.lr = parse_factor(text, cell_id, "lr")
        self._poison_next = False  # armed by before_step for a nan step, consumed by the next on_loss
        self._gradient_next: str | None = None  # armed by before_step for a grad2x / desync step

    def before_step(self, step: int) -> None:
        """Fire a raise / hang fault scheduled for this step, arm a nan one (called before the step's timer)."""
        kind = self.at.get(step)
        if kind == "raise":
            raise InjectedFault(f"injected fault: raise at step {step} ({ENV})")
        if kind == "hang":
            while True:  # until the runner kills the process group at the cell's timeout
                time.sleep(3600)
        self._poison_next = self.poison(step)
        self._gradient_next = kind if kind in GRADIENT_KINDS else None

    def gradient_fault(self) -> str | None:
        """The gradient fault armed for the step now starting ("grad2x", "desync" or None); consumed, so a step
        run outside the loop (the peaks pass) never repeats it."""
        kind, self._gradient_next = self._gradient_next, None
        return kind

    def planted(self, cell):
        """The cell as this rank trains it: its learning rate times a planted `lr` factor (the same cell else)."""
        if self.lr == 1.0:
            return cell
        return cell.model_copy(update={"optimizer": cell.optimizer.model_copy(
            update={"lr": cell.optimizer.lr * self.lr})})

    def stretch(self, t0: float) -> None:
        """Inside the step's timer, after the step's work: sleep so the timed region lasts `slow` times what
        the work took (a planted slowdown; nothing when no slow fault is set)."""
        if self.slow > 1.0:
            time.sleep((time.perf_counter() - t0) * (self.slow - 1.0))

    def on_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss as the step uses it: NaN once after a nan step was armed, as if the model had blown up."""
        if not self._poison_next:
            return loss
        # consumed here, so a step run outside the loop (the peaks pass) is never poisoned by a stale arm
        self._poison_next = False
        return loss * float("nan")

    def poison(self, step: int) -> bool:
        """Whether this step's loss must become NaN."""
        return self.at.get(step) == "nan"
