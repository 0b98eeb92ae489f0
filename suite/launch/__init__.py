"""Launchers: start one cell's ranks, enforce its timeout, stop it on request, and say how it ended.

A launcher knows processes, not metrics and not cells.  It receives a `LaunchRequest` - the few typed facts it
needs (world size, nodes, threads per rank, the payload file the runner wrote, the worker module, timeout,
device, and its own options such as the container image or the Ray address) - and returns a `LaunchResult`
(exit code, timed out or interrupted, start/end times, where its log is).  The worker's records stay in the
work folder, where the runner reads them and decides the cell's status.  Every launcher has the same call:

    run_cell(request, *, stop, on_poll=None, grace_s=GRACE_S) -> LaunchResult

- `stop`: a threading.Event the runner sets on Ctrl-C / SIGTERM; the launcher then stops the cell's
  processes and returns with `interrupted=True`.
- `on_poll`: called a few times a second while the cell runs (the runner updates its progress display).
Watching, timeouts and stopping are the same for all of them: suite/launch/supervise.py.

`launch()` picks the launcher the request names: `torchrun`, `ray` (suite.launch.ray.launcher), or `container`
(`suite run --image IMAGE`: the same torchrun command inside a fresh container).  The runner builds requests
from cells (suite.runner.cell.launch_request); other callers (suite.comm.launch) build their own.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

DEFAULT_WORKER = "suite.worker"
# The module whose `run_cell` runs each launcher's cells (imported on first use: Ray and the docker SDK are
# optional extras).  A launcher not listed here lives in suite/launch/<name>.py.
LAUNCHERS = {"torchrun": "suite.launch.torchrun", "container": "suite.launch.container",
             "ray": "suite.launch.ray.launcher"}


@dataclass(frozen=True)
class LaunchRequest:
    """What a launcher needs to start one cell's ranks (the worker itself reads the payload file)."""

    launcher: str  # torchrun | container | ray
    workdir: Path  # the cell's work folder: launcher.log goes here, the ranks write their records here
    payload: Path  # the JSON the worker receives as its first argument (the runner's cell.json)
    timeout_s: float
    gpus: int = 1  # world size: ranks in all
    nodes: int = 1
    threads_per_rank: int = 1  # OMP_NUM_THREADS per rank on CPU
    device: str = "cpu"  # the resolved device kind, cuda or cpu
    worker_module: str = DEFAULT_WORKER
    label: str = ""  # names the launch for people and tools (the cell id: a container label)
    env: dict[str, str] = field(default_factory=dict)  # environment additions for the launcher's processes
    writable_dirs: tuple[str, ...] = ()  # folders the ranks write outside workdir (a dataset download root)
    image: str | None = None  # container: the image to run in
    ray_address: str | None = None  # ray: an existing cluster (else $RAY_ADDRESS, else a private one)
    resources_per_worker: dict[str, float] | None = None  # ray: the cell's per-worker resources


@dataclass
class LaunchResult:
    """How one launch of one cell ended (no metrics here; those are in the rank records)."""

    launcher: str
    returncode: int | None = None  # the launcher process's exit code; None when it never started
    timed_out: bool = False
    interrupted: bool = False
    started: float = 0.0  # unix time just before the launcher process started
    ended: float = 0.0  # unix time when it had exited
    log_path: Path | None = None
    error: str | None = None  # why the launch itself failed, or the tail of the launcher's log
    extra: dict[str, Any] = field(default_factory=dict)

    def take(self, outcome) -> "LaunchResult":
        """Take over how a supervised launch ended (a suite.launch.supervise.Outcome); returns self."""
        self.returncode, self.timed_out, self.interrupted = outcome.returncode, outcome.timed_out, outcome.interrupted
        self.ended = outcome.ended
        if outcome.killed_pids is not None:
            self.extra["killed_pids"] = outcome.killed_pids
            self.extra["sigkill_needed"] = outcome.sigkill_needed  # False: SIGTERM alone stopped everything
        if outcome.stray_killed is not None:
            self.extra["stray_killed"] = outcome.stray_killed
        return self


def launch(request: LaunchRequest, *, stop: threading.Event,
           on_poll: Callable[[], None] | None = None) -> LaunchResult:
    """Run one cell with the launcher its request names."""
    name = request.launcher
    where = LAUNCHERS.get(name, f"suite.launch.{name}")
    try:
        module = importlib.import_module(where)
    except ModuleNotFoundError as exc:
        return LaunchResult(launcher=name, returncode=None,
                            error=f"launcher {name!r} is not available ({exc}); is {where} installed?")
    return module.run_cell(request, stop=stop, on_poll=on_poll)
