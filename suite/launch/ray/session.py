"""The run's Ray driver process, kept for every Ray cell of the run, and one cell's job on it as a Handle.

    driver = Driver(address, env, log_dir); driver.start()      # imports + ray.init once: its facts
    handle = driver.submit(job, workdir)                        # one cell: supervise(handle, ...)

The driver (suite/launch/ray/driver.py --serve) reads one JSON job per line on its stdin and answers each by
writing WORKDIR/ray_driver.json (with its exit code) last.  A job's handle (supervise.Handle) therefore says
"ended" when that file is there - the driver itself goes on, ready for the next cell - or when the driver
process died.  Stopping a job (timeout, Ctrl-C) stops the whole driver's process group: Ray then ends the dead
driver's job (its Train controller and worker actors), and the run's next Ray cell starts a fresh driver.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from suite import lifeline

DRIVER = "suite.launch.ray.driver"
ANSWER = "ray_driver.json"  # WORKDIR/ANSWER: the driver's facts about one job, written last (its exit code)
READY_TIMEOUT_S = 180.0  # importing torch and Ray and connecting: seconds here, minutes on a loaded machine
CLOSE_S = 15.0  # end of stdin -> the driver disconnects and exits; then its group is killed


class Interrupted(RuntimeError):
    """The run was interrupted before the cell's job started."""


def group_pids(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group."""
    pids = []
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                pids.append(p.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return sorted(pids)


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


class Driver:
    """One `suite.launch.ray.driver --serve` process: its own session and process group (stopping it signals only that
    group, never the run's Ray cluster), tied to this process's life (lifeline)."""

    def __init__(self, address: str, env: dict[str, str], log_dir: Path, module: str = DRIVER):
        self.address, self.env, self.module = address, env, module
        self.log_path = Path(log_dir) / "ray_driver.log"
        self.ready_path = Path(log_dir) / f".ray_driver_ready.{os.getpid()}.{time.time_ns()}"
        self.proc: subprocess.Popen | None = None
        self.broken = False  # stopped or dead: never given another job
        self.jobs = 0

    def start(self, stop: threading.Event | None = None) -> dict:
        """Start the driver and wait until it is connected; its facts (pid, import_s, connect_s, start_s).
        `stop` set meanwhile (Ctrl-C): the driver is stopped and Interrupted raised."""
        t0 = time.monotonic()
        cmd = [sys.executable, "-m", self.module, "--serve", str(self.log_path), str(self.ready_path)]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                         env={**self.env, lifeline.PARENT_ENV: str(os.getpid())},
                                         start_new_session=True)
        while not self.ready_path.exists():
            if stop is not None and stop.is_set():
                self.stop(wait_s=0)
                raise Interrupted("interrupted (Ctrl-C / SIGTERM) while the Ray driver started")
            if self.proc.poll() is not None or time.monotonic() - t0 > READY_TIMEOUT_S:
                self.stop(wait_s=0)
                raise RuntimeError(f"the Ray driver did not connect to {self.address} (exit code "
                                   f"{self.proc.returncode}, after {time.monotonic() - t0:.0f} s); see {self.log_path}")
            time.sleep(0.05)
        facts = read_json(self.ready_path)
        self.ready_path.unlink(missing_ok=True)
        return {**facts, "start_s": time.monotonic() - t0}

    def usable(self, address: str) -> bool:
        return not self.broken and self.address == address and self.proc is not None and self.proc.poll() is None

    def submit(self, job: dict, workdir: Path) -> "JobHandle":
        (workdir / ANSWER).unlink(missing_ok=True)
        try:
            self.proc.stdin.write((json.dumps(job) + "\n").encode())
            self.proc.stdin.flush()
        except OSError as exc:  # it died since usable() looked (BrokenPipeError)
            self.broken = True
            raise RuntimeError(f"the Ray driver (pid {self.proc.pid}) is gone ({exc}); see {self.log_path}") from None
        self.jobs += 1
        return JobHandle(self, workdir / ANSWER)

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):  # the whole group has exited already
            os.killpg(self.proc.pid, sig)

    def stop(self, wait_s: float = CLOSE_S) -> list[int]:
        """Close stdin (the driver disconnects and exits within `wait_s`), then kill whatever of its group is
        left."""
        self.broken = True
        if self.proc is None:
            return []
        with contextlib.suppress(OSError):  # a driver that died already: its pipe is broken
            self.proc.stdin.close()
        deadline = time.monotonic() + wait_s
        while self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # it disconnects from Ray and exits; past the deadline it is killed below
        left = group_pids(self.proc.pid)
        self.signal(signal.SIGKILL)
        self.proc.wait()
        return left


class JobHandle:
    """One cell's job on the driver, as supervise() sees it (see the module docstring)."""

    def __init__(self, driver: Driver, answer: Path):
        self.driver, self.answer = driver, answer
        self.stopped = False

    def poll(self) -> int | None:
        if self.answer.exists():
            return int(read_json(self.answer).get("exit_code", 1))
        return self.driver.proc.poll()

    def running(self) -> bool:
        if self.stopped or self.driver.proc.poll() is not None:
            return self.driver.proc.poll() is None or bool(group_pids(self.driver.proc.pid))
        return not self.answer.exists()

    def terminate(self) -> list[int]:
        """SIGTERM the driver's group: Ray then ends the dead driver's job (its controller and actors)."""
        self.stopped = self.driver.broken = True
        pids = group_pids(self.driver.proc.pid)
        self.driver.signal(signal.SIGTERM)
        return pids

    def kill(self) -> None:
        self.driver.signal(signal.SIGKILL)

    def wait(self) -> int | None:
        if self.stopped or self.driver.proc.poll() is not None:
            self.driver.broken = True
            return self.driver.proc.wait()
        return self.poll()


def phases(facts: dict, cluster: dict, driver: dict, workdir: Path, wall_s: float) -> dict[str, float | None]:
    """Where a Ray cell's time went, seconds, in order (see suite/launch/ray/launcher.py).  The first two are the run's
    one-time costs, outside the cell's wall and 0 on every cell but the one that paid them; the others add up
    to `wall` (`other`: submitting the job, building the TorchTrainer, rank 0's record and the answer's way
    back - what is left).  Rank 0's setup and train times are the torchrun cell's `setup` and `train`."""
    rank0 = read_json(workdir / "rank0.json")
    ray0 = (rank0.get("extra") or {}).get("ray") or {}
    checkpoint = float(ray0.get("checkpoint_save_s") or 0.0)
    inside = {
        "wait_nodes": facts.get("wait_nodes_s"),
        "worker_group_start": facts.get("worker_group_setup_s"),
        "setup": (rank0.get("setup_s") or {}).get("total"),
        "train": (rank0.get("train_s") or 0.0) - checkpoint if rank0 else None,
        "checkpoint": checkpoint if rank0 else None,
        "worker_group_shutdown": facts.get("teardown_s"),
        "restore_best": (facts.get("best") or {}).get("restore_s", 0.0),
    }
    known = sum(v for v in inside.values() if v is not None)
    return {"cluster_start": (cluster.get("start_s") or 0.0) if cluster.get("started_by") == "this cell" else 0.0,
            "driver_start": driver.get("start_s", 0.0) if driver.get("started_by") == "this cell" else 0.0,
            **inside, "other": wall_s - known, "wall": wall_s}
