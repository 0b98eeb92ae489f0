"""Fault injection for testing the runner and compare: SUITE_FAULT="<cell_id>:<kind>@<step>,<cell_id>:slow=<f>,...".

kind: raise (the step raises RuntimeError -> status failed), hang (the rank sleeps forever before the step ->
the runner's timeout), nan (the step's loss becomes NaN -> status diverged).  `slow=<factor>` (no step: it
applies to every step) is a planted slowdown for testing regression detection: each step's timed region is
stretched to `factor` times its measured length by a sleep inside the timer, so step times and throughput
move by the factor while the cell id and the losses stay the same.  Entries for other cells are ignored;
every rank of the cell applies the same faults.  Nothing happens when the variable is unset.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: parsing a spec needs no torch
    import torch

KINDS = ("raise", "hang", "nan")
ENV = "SUITE_FAULT"


class InjectedFault(RuntimeError):
    """Raised by a `raise` fault (an ordinary failure as far as the worker's status goes)."""


def _entries(spec: str) -> list[str]:
    return [e for e in (e.strip() for e in spec.split(",")) if e]


def _is_slow(entry: str) -> bool:
    return entry.rpartition(":")[2].partition("=")[0].strip() == "slow"


def parse_slow(spec: str, cell_id: str) -> float:
    """The slowdown factor planted for `cell_id` (1.0 when none); ValueError naming a malformed entry."""
    factor = 1.0
    for entry in _entries(spec):
        if not _is_slow(entry):
            continue
        cid, _, rest = entry.rpartition(":")
        try:
            value = float(rest.partition("=")[2])
        except ValueError:
            value = None
        if not cid or value is None:
            raise ValueError(f"{ENV} entry {entry!r} is malformed; expected <cell_id>:slow=<factor>, e.g. "
                             "abc123:slow=1.15")
        if not 1.0 <= value <= 100.0:
            raise ValueError(f"{ENV} entry {entry!r}: slow factor {value} must be between 1 and 100")
        if cid == cell_id:
            factor = value
    return factor


def parse(spec: str, cell_id: str) -> dict[int, str]:
    """{step: kind} of the step faults for `cell_id` (slow entries are parse_slow's); ValueError naming a
    malformed entry."""
    faults: dict[int, str] = {}
    for entry in _entries(spec):
        if _is_slow(entry):
            continue
        try:
            cid, rest = entry.rsplit(":", 1)
            kind, step = rest.split("@")
            step_n = int(step)
        except ValueError:
            raise ValueError(f"{ENV} entry {entry!r} is malformed; expected <cell_id>:<kind>@<step>") from None
        if kind not in KINDS:
            raise ValueError(f"{ENV} entry {entry!r}: kind {kind!r} is not one of {', '.join(KINDS)}")
        if cid == cell_id:
            faults[step_n] = kind
    return faults


class Faults:
    """The loop's fault hook: `before_step(step)` before each step's timer, `on_loss(loss)` on the step's first
    micro-batch loss.  The loop holds one of these and calls it; nothing about faults is passed through steps."""

    def __init__(self, cell_id: str, spec: str | None = None):
        text = os.environ.get(ENV, "") if spec is None else spec
        self.at = parse(text, cell_id)
        self.slow = parse_slow(text, cell_id)
        self._poison_next = False  # armed by before_step for a nan step, consumed by the next on_loss

    def before_step(self, step: int) -> None:
        """Fire a raise / hang fault scheduled for this step, arm a nan one (called before the step's timer)."""
        kind = self.at.get(step)
        if kind == "raise":
            raise InjectedFault(f"injected fault: raise at step {step} ({ENV})")
        if kind == "hang":
            while True:  # until the runner kills the process group at the cell's timeout
                time.sleep(3600)
        self._poison_next = self.poison(step)

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
