"""The parent side: a `Runner` keeps one child (child.py) and runs commands in it; `run_subprocess` starts one.

`Runner.run` writes a request line, waits HARD_S at most for the answer line and returns a `Reply`: the exit
code, seconds, peak megabytes, the tail of stdout, the stderr (its head and tail when longer than STDERR_KEPT,
its whole size kept for the classification), the child's note (a timeout, an exception that escaped the CLI)
and its counts of refused launches and stray processes.  A child that dies or stops answering is killed with
its whole session and replaced, and the reply says so; so is a child interrupted mid-command, whose state may
be half-changed.  The child's environment names a missing worker module, drops RAY_ADDRESS, and keeps the
cache and temporary files in the runner's scratch folder.

`run_subprocess` is the spot check: the command as its own `python -m suite` (`run` through the disarmed `cli`
entry), under the same limits, its memory from ru_maxrss less the interpreter's own SUBPROCESS_BASE_MB.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from suite.testing.results_fuzz.values import AS_LIMIT, HARD_S, LIMIT_S, NO_WORKER, REPO, SUBPROCESS_BASE_MB


@dataclass
class Reply:
    code: int | None
    seconds: float
    megabytes: float
    stdout_tail: str
    stderr: str
    note: str | None = None  # "timeout", "escaped ...", "runner died ...", "hung ..."
    launches: int = 0
    strays: list[str] = field(default_factory=list)
    stderr_bytes: int = -1  # the whole stderr's size (-1: len(stderr))


def _tail(path: Path, n: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


STDERR_KEPT = 16_000  # of a longer stderr, its head and tail (the classification counts the whole)


def _stderr(path: Path) -> tuple[str, int]:
    """(stderr, or its head and tail joined by a marker line when longer than STDERR_KEPT; its size in bytes)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            if size <= STDERR_KEPT:
                return f.read().decode("utf-8", "replace"), size
            head = f.read(STDERR_KEPT // 2)
            f.seek(size - STDERR_KEPT // 2)
            tail = f.read()
        return f"{head.decode('utf-8', 'replace')}\n[... {size - STDERR_KEPT} bytes ...]\n" \
               f"{tail.decode('utf-8', 'replace')}", size
    except OSError:
        return "", 0


class Runner:
    """One long-lived child running commands in-process (see the package docstring); replaced when it dies."""

    def __init__(self, python: str | None = None, scratch: Path | None = None):
        self.python = python or sys.executable
        self.scratch = scratch
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self._pending = b""  # what the child wrote past the last line read

    def _env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTEST_CURRENT_TEST")}
        env.update(SUITE_WORKER_MODULE=NO_WORKER, MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1",
                   PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep))
        if self.scratch is not None:
            env.setdefault("SUITE_CACHE_DIR", str(self.scratch / "cache"))
            env["TMPDIR"] = str(self.scratch / "tmp")
            (self.scratch / "tmp").mkdir(parents=True, exist_ok=True)
        return env

    def start(self) -> None:
        log = open(self.scratch / "runner.log", "ab") if self.scratch else subprocess.DEVNULL
        self.proc = subprocess.Popen([self.python, "-m", "suite.testing.results_fuzz", "serve"], cwd=REPO,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=self._env(),
                                     start_new_session=True, bufsize=0)
        self._pending = b""
        line = self._readline(120)
        if not line or "ready" not in line:
            self.close()
            raise RuntimeError(f"the fuzz runner did not start: {line!r}")

    def _readline(self, timeout: float) -> str | None:
        """The child's next line within `timeout` seconds: None when none came in time, "" at end of file.  Read
        from the raw descriptor with a deadline (a buffered readline after select could wait for ever on a
        partial line)."""
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return ""
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line.decode("utf-8", "replace") + "\n"

    def close(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: the child and whatever it started
        with contextlib.suppress(Exception):
            self.proc.wait(10)
        for f in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(Exception):
                f.close()
        self.proc = None

    def restart(self) -> None:
        self.close()
        self.restarts += 1
        self.start()

    def run(self, args: list[str], cwd: Path, out: Path, err: Path, fault: str | None = None,
            limit: float = LIMIT_S) -> Reply:
        """One command in the child; `fault`: make `suite report` fail that way (FAULTS; the self-tests); `limit`:
        its alarm (a self-test of a hang need not wait LIMIT_S)."""
        if self.proc is None or self.proc.poll() is not None:
            self.restart() if self.proc is not None else self.start()
        req = {"args": args, "cwd": str(cwd), "out": str(out), "err": str(err), "fault": fault, "limit": limit}
        died = None
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            line = self._readline(HARD_S)
        except (BrokenPipeError, OSError) as exc:
            line, died = None, f"runner died ({exc})"
        if not line:
            if line == "":  # end of file: the child is gone (or going)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(5)
            alive = self.proc.poll() is None
            rc = self.proc.returncode
            note = died or (f"hung: no answer in {HARD_S:.0f} s, killed" if alive else f"runner died (exit {rc})")
            self.restart()
            return Reply(None, HARD_S if alive else 0.0, 0.0, _tail(out, 2000), *_stderr(err)[:1], note)
        r = json.loads(line)
        text, size = _stderr(err)
        reply = Reply(r["code"], r["seconds"], r["megabytes"], _tail(out, 2000), text, r["note"],
                      r["launches"], r["strays"], size)
        if reply.note:  # interrupted mid-command: its state may be half-changed; start clean
            self.restart()
        return reply


def _hwm_kb(pid: int) -> int:
    """VmHWM of a running process in KiB (0 once it is gone or a zombie)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(line.split()[1]) for line in f if line.startswith("VmHWM:")), 0)
    except (OSError, ValueError):
        return 0


def run_subprocess(args: list[str], cwd: Path, out: Path, err: Path, python: str | None = None) -> Reply:
    """The command as a fresh process (`python -m suite`; `run` through the disarmed entry), same limits."""
    python = python or sys.executable
    entry = ["-m", "suite.testing.results_fuzz", "cli"] if args[:1] == ["run"] else ["-m", "suite"]

    def limits():
        resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, resource.getrlimit(resource.RLIMIT_AS)[1]))

    env = Runner()._env()
    start = time.perf_counter()
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen([python, *entry, *args], cwd=cwd, stdout=o, stderr=e, stdin=subprocess.DEVNULL,
                                env=env, preexec_fn=limits, start_new_session=True)
        deadline, note, rusage, status = start + LIMIT_S + 5, None, None, None  # + 5: the interpreter's start
        peak_kb = 0  # the child's own peak since exec (VmHWM), sampled while it runs: its rusage's ru_maxrss
        while True:  # would count the pages it shared with this (forking, possibly large) process before exec
            peak_kb = max(peak_kb, _hwm_kb(proc.pid))
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                note = "timeout"
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                _, status, rusage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(status)
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)  # anything of its session still running
    code = None if note else proc.returncode
    if code is not None and code < 0:
        code, note = None, f"killed by signal {-code}"
    text, size = _stderr(err)
    return Reply(code, time.perf_counter() - start, max(0.0, (peak_kb or rusage.ru_maxrss) / 1024 - SUBPROCESS_BASE_MB),
                 _tail(out, 2000), text, note, stderr_bytes=size)
