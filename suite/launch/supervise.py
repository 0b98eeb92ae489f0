"""One supervision loop for every launcher: watch a started launch, stop it on timeout or Ctrl-C, say how it ended.

A launcher starts its processes (torchrun, a container, a Ray driver) and wraps them in a *handle*; from then
on everything is the same and lives here:

    outcome = supervise(handle, timeout_s=..., stop=stop_event, on_poll=progress.poll, grace_s=GRACE_S)

- while `handle.poll()` says it runs: call `on_poll`, and when `stop` is set (interrupted) or the deadline
  has passed (timed out), stop it with `stop_gracefully` and leave the loop;
- `handle.wait()` gives the exit code;
- if anything of the launch is still alive after a normal exit (a worker that ignored its launcher's end),
  it is stopped the same way: a cell never leaves a process behind.

`stop_gracefully` is the one SIGTERM -> grace period -> SIGKILL routine (the Ray cluster's stop uses it too):
`terminate()` asks politely, `running()` is polled until it says nothing is left or the grace period is over,
then `kill()` forces whatever is left and `wait()` reaps it.  What "the launch" is - a process tree, a
container, a process group - is the handle's business; the timing and the order are this module's.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

import psutil

GRACE_S = 10.0  # SIGTERM -> SIGKILL
POLL_S = 0.2
LOG_TAIL_LINES = 40


class Handle(Protocol):
    """A started launch, as supervise() and stop_gracefully() see it."""

    def poll(self) -> int | None:
        """The main process's exit code once it has ended, None while it runs (cheap; called a few times a
        second, so a handle may also take note of new descendants here)."""

    def running(self) -> bool:
        """Whether any process of the launch is still alive (the main one or anything it started)."""

    def terminate(self) -> list[int] | None:
        """Ask every process of the launch to stop (SIGTERM); returns the pids asked, or None when the launch
        has no host pids to report (a container's processes belong to the Docker daemon)."""

    def kill(self) -> None:
        """Force whatever is still alive to stop (SIGKILL)."""

    def wait(self) -> int | None:
        """Block until the main process has exited and is reaped; its exit code."""


@dataclass
class Outcome:
    """How a supervised launch ended: the facts a LaunchResult takes over (see LaunchResult.take)."""

    returncode: int | None = None
    timed_out: bool = False
    interrupted: bool = False
    ended: float = 0.0  # unix time when it had exited
    killed_pids: list[int] | None = None  # stopped on timeout / Ctrl-C
    sigkill_needed: bool | None = None  # when stopped: something still ran at the end of the grace period
    stray_killed: list[int] | None = None  # still alive after a normal exit, then stopped


def alive(p: psutil.Process) -> bool:
    """Whether a process still runs (a zombie has ended: it only waits to be reaped)."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def stop_gracefully(handle: Handle, grace_s: float) -> list[int] | None:
    """SIGTERM (handle.terminate), wait up to `grace_s` for everything to exit, SIGKILL what is left, reap.

    The grace period lets ranks flush their records and torchrun stop its workers itself; the SIGKILL makes
    sure a process that ignores SIGTERM cannot hold the run.  Returns the pids that were asked to stop."""
    return _stop(handle, grace_s)[0]


def _stop(handle: Handle, grace_s: float) -> tuple[list[int] | None, bool]:
    """stop_gracefully's work; also whether SIGKILL was needed (a fact, not a clock: tests read it)."""
    pids = handle.terminate()
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and handle.running():
        time.sleep(0.05)
    forced = handle.running()
    handle.kill()
    handle.wait()
    return (None if pids is None else sorted(pids)), forced


def supervise(handle: Handle, *, timeout_s: float, stop: threading.Event,
              on_poll: Callable[[], None] | None = None, grace_s: float = GRACE_S) -> Outcome:
    """Watch a started launch until it ends, is past `timeout_s`, or `stop` is set; see the module docstring."""
    outcome = Outcome()
    deadline = time.monotonic() + timeout_s
    while handle.poll() is None:
        if on_poll is not None:
            on_poll()
        if stop.is_set() or time.monotonic() > deadline:
            outcome.interrupted = stop.is_set()
            outcome.timed_out = not outcome.interrupted
            outcome.killed_pids, outcome.sigkill_needed = _stop(handle, grace_s)
            break
        stop.wait(POLL_S)
    outcome.ended = time.time()
    outcome.returncode = handle.wait()
    if handle.running():  # e.g. a worker that ignored its launcher's exit: never leave it running
        outcome.stray_killed = stop_gracefully(handle, grace_s)
    if on_poll is not None:
        on_poll()
    return outcome


def tail(path: Path, lines: int = LOG_TAIL_LINES, limit: int = 4000) -> str | None:
    """The last `lines` lines of a log (at most `limit` characters), or None when it is missing or empty."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    last = "\n".join(text.rstrip().splitlines()[-lines:])
    return last[-limit:] or None


def outcome_error(outcome, timeout_s: float, log_path: Path, detail: str | None = None) -> str | None:
    """What went wrong with a finished launch, for CellResult.error (None when it exited 0).

    `outcome` is anything with timed_out / interrupted / returncode (an Outcome or a LaunchResult);
    `detail` is a launcher's own first line for a failed exit (the Ray driver's error), put before the log."""
    if outcome.timed_out:
        return f"timeout: killed after {timeout_s:g} s (timeout_s)\n" + (tail(log_path) or "")
    if outcome.interrupted:
        return "interrupted (Ctrl-C / SIGTERM)"
    if outcome.returncode != 0:
        return "\n".join(filter(None, [detail, tail(log_path)])) or None
    return None
