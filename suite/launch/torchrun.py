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
   runner a child subreaper (Linux prctl) while the cell runs, so orphans are re-parented to it instead of
   init (and reaped: no zombies are left behind);
3. to stop a cell (timeout, Ctrl-C): SIGTERM to every remembered process and its process group, waits a grace
   period, then SIGKILLs whatever is left, and reaps it;
4. after a normal exit, kills any remembered process still alive (recorded in extra["stray_killed"]);
5. when the runner itself dies hard (SIGKILL, OOM killer), the launcher process and the ranks die with it:
   suite/lifeline.py (parent-death signals; the launcher learns the runner's pid from PARENT_ENV).
When a rank fails, the launcher process writes which rank died first and how (torchrun's ChildFailedError)
to WORKDIR/launcher_failures.json for the runner: suite/launch/failures.py.
The watching, the deadline and the SIGTERM -> grace -> SIGKILL order are suite/launch/supervise.py's, as for
every launcher; `TreeHandle` here says what "every process of the cell" is.
"""

from __future__ import annotations

import contextlib
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

from suite import lifeline
from suite.launch import LaunchRequest, LaunchResult, failures
from suite.launch.supervise import GRACE_S, alive, outcome_error, supervise

_PR_SET_CHILD_SUBREAPER = 36


def command(request: LaunchRequest) -> list[str]:
    """torchrun's command line, started through this module's __main__ (torchrun's own main, see below)."""
    return [sys.executable, "-m", "suite.launch.torchrun", "--standalone", f"--nproc_per_node={request.gpus}",
            "-m", request.worker_module, str(request.payload), str(request.workdir)]


def torchrun_main(argv: list[str]) -> int:
    """`python -m torch.distributed.run ARGV`, minus the interpreter's teardown.

    torchrun's work is over when its main() returns (every worker has exited), but the Python interpreter then
    spends seconds unloading torch (measured here: 3.5-6 s on a busy 2-core machine; 0.3 s with os._exit),
    which every cell would pay as overhead.  Same arguments, same output, same exit code (1 when a worker
    failed, as torchrun); the process just leaves without the teardown once its output is flushed.
    """
    import logging
    import traceback

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main

    code = 0
    try:
        main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except ChildFailedError as exc:  # a rank failed: say which first and how, as data; print it as torchrun
        _write_failures(exc)
        traceback.print_exc()
        code = 1
    except BaseException:  # printed as the interpreter would, exit code 1 as torchrun
        traceback.print_exc()
        code = 1
    finally:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    return code


def _write_failures(exc) -> None:
    """WORKDIR/launcher_failures.json from torchrun's ChildFailedError (path from FAILURES_ENV)."""
    path = os.environ.get(failures.FAILURES_ENV)
    if not path:
        return  # started by hand, not by run_cell: torchrun's own printout is all there is
    try:
        failures.write(failures.from_child_failed(exc), Path(path))
    except OSError as err:  # the runner then falls back to the records; say why the file is missing
        print(f"suite: could not write {path}: {err}", file=sys.stderr)


def environment(request: LaunchRequest, base: dict[str, str] | None = None) -> dict[str, str]:
    """The launcher's environment: the runner's, plus one thread count per rank on CPU (set explicitly:
    torchrun only sets OMP_NUM_THREADS=1 for more than one process, and two ranks with two threads each run
    2.5x slower on a 2-core machine), plus the request's own additions."""
    env = dict(os.environ if base is None else base)
    env["PYTHONUNBUFFERED"] = "1"
    env[failures.FAILURES_ENV] = str(Path(request.workdir) / failures.FILE_NAME)
    if request.device == "cpu":
        env["OMP_NUM_THREADS"] = str(request.threads_per_rank)
    env.update(request.env)
    return env


_PR_GET_CHILD_SUBREAPER = 37
_subreaper_lock = threading.Lock()
_subreaper_users = 0  # cells running now (run_cell from several threads)
_subreaper_owned = False  # whether this module turned subreaping on, and so turns it off again


def is_subreaper() -> bool:
    """Whether orphaned descendants are re-parented to this process now (Linux; False elsewhere)."""
    value = ctypes.c_int(0)
    return lifeline.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(value)) and value.value != 0


@contextlib.contextmanager
def subreaper():
    """Be a child subreaper while a cell runs, and only then (Linux; best effort).

    Only while: a process that stays a subreaper adopts every orphan of everything it ever starts, long after
    its cells — a `dockerd` that scripts/docker-setup daemonizes from a pytest fixture, the processes a Ray
    cluster leaves behind — and never reaps them (zombies pile up; tests that look for leftover children
    find a daemon). Counted, so that overlapping cells keep it on until the last one ends; a process that
    was a subreaper before the first (set by someone else) stays one.
    """
    global _subreaper_users, _subreaper_owned
    with _subreaper_lock:
        if _subreaper_users == 0:
            _subreaper_owned = not is_subreaper() and lifeline.prctl(_PR_SET_CHILD_SUBREAPER, 1)
        _subreaper_users += 1
    try:
        yield
    finally:
        with _subreaper_lock:
            _subreaper_users -= 1
            if _subreaper_users == 0 and _subreaper_owned:
                lifeline.prctl(_PR_SET_CHILD_SUBREAPER, 0)


def _reap_adopted(procs) -> list[int]:
    """Reap the cell's processes that were re-parented to us and have exited (else they stay zombies until
    this process exits); only those: other zombies among our children belong to whoever started them."""
    reaped = []
    for p in procs:
        try:
            if p.is_running() and p.ppid() == os.getpid() and p.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(p.pid, os.WNOHANG)
                reaped.append(p.pid)
        except (psutil.NoSuchProcess, ChildProcessError):
            continue  # already reaped (psutil.wait_procs, or subprocess for the launcher itself)
    return reaped


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
    """`sig` to each process and to its process group (workers run in sessions of their own), never ours."""
    own_group = os.getpgrp()
    for p in procs:
        try:
            pgid = os.getpgid(p.pid)
            if pgid != own_group:
                os.killpg(pgid, sig)
            p.send_signal(sig)
        except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
            continue


class TreeHandle:
    """torchrun and every process it starts (supervise.Handle): the descendants seen while it runs are
    remembered, so that stopping reaches workers in their own sessions and orphans re-parented to us."""

    def __init__(self, proc: subprocess.Popen, since: float):
        self.proc, self.since = proc, since
        self.known: dict[int, psutil.Process] = {proc.pid: psutil.Process(proc.pid)}
        self._signalled: list[psutil.Process] = []  # alive when terminate() asked them to stop

    def _remember(self, procs: list[psutil.Process]) -> None:
        for p in procs:
            self.known.setdefault(p.pid, p)

    def poll(self) -> int | None:
        code = self.proc.poll()
        if code is None:
            self._remember(_descendants(self.known[self.proc.pid], self.since))
        return code

    def running(self) -> bool:
        self.proc.poll()  # reap the launcher as soon as it exits (a zombie would count as running)
        return any(alive(p) for p in self.known.values())

    def terminate(self) -> list[int]:
        try:
            root = psutil.Process(self.proc.pid)
            self._remember([root] + _descendants(root, self.since))
        except psutil.NoSuchProcess:  # the launcher is gone: its orphans are among our own children
            self._remember(_descendants(psutil.Process(), self.since))
        self._signalled = [p for p in self.known.values() if alive(p)]
        _signal_all(self._signalled, signal.SIGTERM)
        return [p.pid for p in self._signalled]

    def kill(self) -> None:
        _signal_all([p for p in self._signalled if alive(p)], signal.SIGKILL)

    def wait(self) -> int | None:
        code = self.proc.wait()
        psutil.wait_procs(self._signalled, timeout=5)
        _reap_adopted([p for pid, p in self.known.items() if pid != self.proc.pid])
        return code


def run_cell(request: LaunchRequest, *, stop: threading.Event, on_poll: Callable[[], None] | None = None,
             grace_s: float = GRACE_S) -> LaunchResult:
    """Launch torchrun, supervise it (timeout, `stop`), and never leave a process behind."""
    log_path = Path(request.workdir) / "launcher.log"
    cmd = command(request)
    result = LaunchResult(launcher="torchrun", log_path=log_path, extra={"command": cmd})
    with subreaper(), open(log_path, "wb") as log:
        result.started = time.time()
        env = environment(request)
        env[lifeline.PARENT_ENV] = str(os.getpid())  # here only: inside a container this pid means nothing
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
        handle = TreeHandle(proc, result.started)
        result.take(supervise(handle, timeout_s=request.timeout_s, stop=stop, on_poll=on_poll, grace_s=grace_s))
    result.error = outcome_error(result, request.timeout_s, log_path)
    return result


if __name__ == "__main__":
    lifeline.guard_launcher()  # first: the runner may die while torch is still importing
    os._exit(torchrun_main(sys.argv[1:]))
