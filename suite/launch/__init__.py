"""Launchers: start one cell's ranks, enforce its timeout, stop it on request, and say how it ended.

A launcher knows processes, not metrics: it returns a `LaunchResult` (exit code, timed out or interrupted,
start/end times, where its log is) and leaves the worker's records in the cell's work folder, where the runner
reads them.  Every launcher has the same call:

    run_cell(cell, workdir, *, timeout_s, stop, on_poll, worker_module, device) -> LaunchResult

- `stop`: a threading.Event the runner sets on Ctrl-C / SIGTERM; the launcher then stops the cell's
  processes and returns with `interrupted=True`.
- `on_poll`: called a few times a second while the cell runs (the runner updates its progress display).
- `device`: the resolved device kind ("cuda" or "cpu").

`launch()` picks the launcher named by the cell (`torchrun`, or `ray` from suite.launch.ray), or the one the
runner asks for (`container`, for `suite run --image IMAGE`: the same torchrun command inside a fresh container).
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

DEFAULT_WORKER = "suite.worker"


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


def launch(cell, workdir: Path, *, timeout_s: float, stop: threading.Event,
           on_poll: Callable[[], None] | None = None, worker_module: str = DEFAULT_WORKER,
           device: str = "cpu", launcher: str | None = None, **options: Any) -> LaunchResult:
    """Run one cell with the launcher its scenario names, or `launcher` (e.g. "container" for --image);
    `options` go to that launcher only (e.g. image=...)."""
    name = launcher or cell.launcher
    try:
        module = importlib.import_module(f"suite.launch.{name}")
    except ModuleNotFoundError as exc:
        return LaunchResult(launcher=name, returncode=None,
                            error=f"launcher {name!r} is not available ({exc}); is suite/launch/{name}.py installed?")
    return module.run_cell(cell, workdir, timeout_s=timeout_s, stop=stop, on_poll=on_poll,
                           worker_module=worker_module, device=device, **options)
