"""Fault injection for testing the runner: SUITE_FAULT="<cell_id>:<kind>@<step>,...".

kind: raise (the step raises RuntimeError -> status failed), hang (the rank sleeps forever before the step ->
the runner's timeout), nan (the step's loss becomes NaN -> status diverged).  Entries for other cells are
ignored; every rank of the cell applies the same faults.  Nothing happens when the variable is unset.
"""

from __future__ import annotations

import os
import time

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
    def __init__(self, cell_id: str, spec: str | None = None):
        self.at = parse(os.environ.get(ENV, "") if spec is None else spec, cell_id)

    def before_step(self, step: int) -> None:
        """Fire a raise / hang fault scheduled for this step (called before the step's timer starts)."""
        kind = self.at.get(step)
        if kind == "raise":
            raise InjectedFault(f"injected fault: raise at step {step} ({ENV})")
        if kind == "hang":
            while True:  # until the runner kills the process group at the cell's timeout
                time.sleep(3600)

    def poison(self, step: int) -> bool:
        """Whether this step's loss must become NaN."""
        return self.at.get(step) == "nan"
