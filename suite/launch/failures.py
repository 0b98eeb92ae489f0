"""Which rank died first, and how: torchrun's own knowledge, written down as data for the runner.

When a rank dies, the others usually fail too a moment later ("Connection reset by peer" from rank 0's
all-reduce), and their records then blame the wrong rank.  torchrun's elastic agent knows better: it raises
`ChildFailedError` whose `.failures` maps global ranks to a `ProcessFailure` (pid, exit code, negative for a
signal, timestamp in whole seconds).  Its order is the order torchrun noticed them in: first the ranks that had
ended badly when its monitor looked (in local-rank order), then - for bookkeeping, torch >= 2.8 - the ranks it
then stopped itself with SIGTERM.  The launcher process (suite.launch.torchrun's main) writes them, with that
position as `noticed`, to WORKDIR/launcher_failures.json (the path is in FAILURES_ENV):

    {"failures": [{"rank": 1, "pid": 4242, "exitcode": -9, "local_rank": 1, "signal": "SIGKILL",
                   "timestamp": 1764582000.0, "noticed": 0}, ...]}      # first one first (see `ordered`)

and the runner reads it back (`read`) to name the culprit at the top of the cell's error.
"""

from __future__ import annotations

import json
import signal
from dataclasses import asdict, dataclass
from pathlib import Path

FAILURES_ENV = "SUITE_LAUNCHER_FAILURES"
FILE_NAME = "launcher_failures.json"


@dataclass(frozen=True)
class Failure:
    """One rank that ended badly, as the launcher saw it."""

    rank: int
    pid: int
    exitcode: int  # the process's exit status; negative: killed by signal -exitcode
    local_rank: int | None = None
    signal: str | None = None  # e.g. SIGKILL, when exitcode < 0
    timestamp: float | None = None  # unix time the launcher noticed (whole seconds from torchrun)
    noticed: int = 0  # position in torchrun's report (the order it noticed the failures in)

    def describe(self) -> str:
        """'rank 1 (pid 4242) was killed by SIGKILL' / 'rank 0 (pid 17) exited with code 1'."""
        how = f"was killed by {self.signal}" if self.signal else f"exited with code {self.exitcode}"
        return f"rank {self.rank} (pid {self.pid}) {how}"


def signal_name(exitcode: int) -> str | None:
    """SIGKILL for -9 (the convention of subprocess and torchrun), None for a plain exit code."""
    if exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"signal {-exitcode}"


def stopped_by_launcher(f: Failure) -> bool:
    """A SIGTERM that torchrun noticed after another failure: its own stop of the remaining ranks."""
    return f.signal == "SIGTERM" and f.noticed > 0


def ordered(failures: list[Failure]) -> list[Failure]:
    """First failure first: ranks torchrun stopped itself last; then the earliest timestamp; at the same time
    (whole seconds), a rank killed by a signal before one that exited with an error (a killed peer is what
    makes the others fail, never the other way round - and torchrun lists the ranks of one look by local
    rank, not by time); then torchrun's order."""
    return sorted(failures, key=lambda f: (stopped_by_launcher(f), f.timestamp or 0.0, f.signal is None,
                                           f.noticed, f.rank))


def from_child_failed(exc) -> list[Failure]:
    """The failures of a torch.distributed.elastic ChildFailedError (anything with `.failures`), ordered."""
    out = []
    for i, (rank, pf) in enumerate((getattr(exc, "failures", None) or {}).items()):
        out.append(Failure(rank=int(rank), pid=int(pf.pid), exitcode=int(pf.exitcode),
                           local_rank=getattr(pf, "local_rank", None), signal=signal_name(int(pf.exitcode)),
                           timestamp=float(pf.timestamp) if getattr(pf, "timestamp", None) else None, noticed=i))
    return ordered(out)


def write(failures: list[Failure], path: Path) -> None:
    """Write the failures atomically with the store's writer (a reader never sees half a file; a failure to
    write is its WriteError, an OSError naming the path)."""
    from suite.results.store import write_atomic

    write_atomic(Path(path), json.dumps({"failures": [asdict(f) for f in failures]}, indent=1), overwrite=True)


def read(workdir: Path) -> tuple[list[Failure], str | None]:
    """(failures first-first, problem): none and no problem when the file is absent (every rank was fine, or
    the launcher was stopped, or it is not torchrun); a problem line when it cannot be read."""
    path = Path(workdir) / FILE_NAME
    if not path.is_file():
        return [], None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return ordered([Failure(**item) for item in data["failures"]]), None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [], f"{FILE_NAME}: unreadable ({type(exc).__name__}: {exc})"
