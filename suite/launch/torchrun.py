"""Run one cell on one node with torchrun, and make sure none of its processes outlives it.

    python -m torch.distributed.run --standalone --nproc_per_node=N -m suite.worker CELL_JSON WORKDIR

(started as `python -m suite.launch.torchrun ...`, which is torchrun's main without the interpreter's slow
teardown; see torchrun_main).

`--standalone` starts a private rendezvous on a free local port, so several runs on one machine do not meet.
The worker takes positional arguments only (torchrun would take a worker flag that abbreviates one of its own).

Process hygiene.  torchrun starts every worker in a *new session* (its own process group), so signalling
torchrun's group does not reach the workers, and killing torchrun hard orphans them.  So the launcher:
1. starts torchrun in a new session too (a Ctrl-C in the terminal reaches the runner only, which decides);
2. remembers every descendant it sees while the cell runs (psutil, a few times a second), and makes the
   runner a child subreaper (Linux prctl) so orphans are re-parented to it instead of init;
3. to stop a cell (timeout, Ctrl-C): SIGTERM to every remembered process and its process group, waits a grace
   period, then SIGKILLs whatever is left, and reaps it;
4. after a normal exit, kills any remembered process still alive (recorded in extra["stray_killed"]).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import psutil

from suite.launch import DEFAULT_WORKER, LaunchResult

GRACE_S = 10.0  # SIGTERM -> SIGKILL
POLL_S = 0.2
LOG_TAIL_LINES = 40
_PR_SET_CHILD_SUBREAPER = 36


def command(cell, cell_json: Path, workdir: Path, worker_module: str = DEFAULT_WORKER) -> list[str]:
    """torchrun's command line, started through this module's __main__ (torchrun's own main, see below)."""
    return [sys.executable, "-m", "suite.launch.torchrun", "--standalone", f"--nproc_per_node={cell.gpus}",
            "-m", worker_module, str(cell_json), str(workdir)]


def torchrun_main(argv: list[str]) -> int:
    """`python -m torch.distributed.run ARGV`, minus the interpreter's teardown.

    torchrun's work is over when its main() returns (every worker has exited), but the Python interpreter then
    spends seconds unloading torch (measured here: 3.5-6 s on a busy 2-core machine; 0.3 s with os._exit),
    which every cell would pay as overhead.  Same arguments, same output, same exit code (1 when a worker
    failed, as torchrun); the process just leaves without the teardown once its output is flushed.
    """
    import logging
    import traceback

    from torch.distributed.run import main

    code = 0
    try:
        main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # e.g. ChildFailedError: printed as the interpreter would, exit code 1 as torchrun
        traceback.print_exc()
        code = 1
    finally:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    return code


def environment(cell, device: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The launcher's environment: the runner's, plus one thread count per rank on CPU (set explicitly:
    torchrun only sets OMP_NUM_THREADS=1 for more than one process, and two ranks with two threads each run
    2.5x slower on a 2-core machine)."""
    env = dict(os.environ if base is None else base)
    env["PYTHONUNBUFFERED"] = "1"
    if device == "cpu":
        env["OMP_NUM_THREADS"] = str(cell.threads_per_rank)
    return env


def become_subreaper() -> bool:
    """Have orphaned descendants re-parented to this process (Linux only; best effort)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _descendants(root: psutil.Process, since: float) -> list[psutil.Process]:
    """root's descendants, plus our own children started since `since` (orphans re-parented to us)."""
    found = []
    try:
        found += root.children(recursive=True)
    except psutil.NoSuchProcess:
        pass  # root exited: its orphans are found among our own children below
    me = psutil.Process()
    for child in me.children(recursive=True):
        try:
            if child.pid != root.pid and child.create_time() >= since - 1:
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def _signal_all(procs: list[psutil.Process], sig: int) -> None:
    own_group = os.getpgrp()
    for p in procs:
        try:
            pgid = os.getpgid(p.pid)
            if pgid != own_group:
                os.killpg(pgid, sig)
            p.send_signal(sig)
        except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
            continue


def stop_tree(proc: subprocess.Popen, known: dict[int, psutil.Process], since: float, grace_s: float) -> list[int]:
    """SIGTERM the launcher and every process of the cell, SIGKILL after `grace_s`; returns the pids killed."""
    try:
        root = psutil.Process(proc.pid)
        everyone = [root] + _descendants(root, since)
    except psutil.NoSuchProcess:
        everyone = _descendants(psutil.Process(), since)
    for p in everyone:
        known.setdefault(p.pid, p)
    procs = [p for p in known.values() if _alive(p)]
    _signal_all(procs, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(p) for p in procs):
        proc.poll()  # reap the launcher as soon as it exits
        time.sleep(0.05)
    left = [p for p in procs if _alive(p)]
    _signal_all(left, signal.SIGKILL)
    proc.wait()
    psutil.wait_procs(procs, timeout=5)
    return sorted(p.pid for p in procs)


def _tail(path: Path, lines: int = LOG_TAIL_LINES, limit: int = 4000) -> str | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    tail = "\n".join(text.rstrip().splitlines()[-lines:])
    return tail[-limit:] or None


def run_cell(cell, workdir: Path, *, timeout_s: float, stop: threading.Event,
             on_poll: Callable[[], None] | None = None, worker_module: str = DEFAULT_WORKER,
             device: str = "cpu", grace_s: float = GRACE_S) -> LaunchResult:
    """Launch the cell, wait for it (polling), stop it on timeout or `stop`; never leaves a process behind."""
    workdir = Path(workdir)
    cell_json = workdir / "cell.json"
    cell_json.write_text(cell.model_dump_json(indent=1), encoding="utf-8")
    log_path = workdir / "launcher.log"
    cmd = command(cell, cell_json, workdir, worker_module)
    result = LaunchResult(launcher="torchrun", log_path=log_path, extra={"command": cmd})
    become_subreaper()
    known: dict[int, psutil.Process] = {}
    with open(log_path, "wb") as log:
        result.started = time.time()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=environment(cell, device), start_new_session=True)
        root = psutil.Process(proc.pid)
        known[proc.pid] = root
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None:
            for p in _descendants(root, result.started):
                known.setdefault(p.pid, p)
            if on_poll is not None:
                on_poll()
            if stop.is_set() or time.monotonic() > deadline:
                result.interrupted = stop.is_set()
                result.timed_out = not result.interrupted
                result.extra["killed_pids"] = stop_tree(proc, known, result.started, grace_s)
                break
            stop.wait(POLL_S)
        result.ended = time.time()
        result.returncode = proc.wait()
        stray = [p for p in known.values() if _alive(p)]
        if stray:  # e.g. a worker that ignored its launcher's exit: never leave it running
            result.extra["stray_killed"] = stop_tree(proc, {p.pid: p for p in stray}, result.started, grace_s)
    if on_poll is not None:
        on_poll()
    result.error = outcome_error(result, timeout_s, log_path)
    return result


def outcome_error(result: LaunchResult, timeout_s: float, log_path: Path) -> str | None:
    """What went wrong with a finished launch, for CellResult.error (None when it exited 0)."""
    if result.timed_out:
        return f"timeout: killed after {timeout_s:g} s (timeout_s)\n" + (_tail(log_path) or "")
    if result.interrupted:
        return "interrupted (Ctrl-C / SIGTERM)"
    if result.returncode != 0:
        return _tail(log_path)
    return None


if __name__ == "__main__":
    os._exit(torchrun_main(sys.argv[1:]))
