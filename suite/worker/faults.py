"""Fault injection for testing the runner: SUITE_FAULT="<cell_id>:<kind>@<step>,...".

kind: raise (the step raises RuntimeError -> status failed), hang (the rank sleeps forever before the step ->
the runner's timeout), nan (the step's loss becomes NaN -> status diverged).  Entries for other cells are
ignored; every rank of the cell applies the same faults.  Nothing happens when the variable is unset.
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


def parse(spec: str, cell_id: str) -> dict[int, str]:
    """{step: kind} of the faults for `cell_id`; ValueError naming a malformed entry."""
    faults: dict[int, str] = {}
    for entry in filter(None, (e.strip() for e in spec.split(","))):
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
        self.at = parse(os.environ.get(ENV, "") if spec is None else spec, cell_id)
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
