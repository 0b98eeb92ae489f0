"""A cell's container must not outlive its runner: a watchdog while it runs, and a sweep at the next start.

A container's processes are the Docker daemon's children, not the runner's, so parent-death signals
(suite/lifeline.py) cannot reach them.  Two things cover a runner that is killed hard:

- while a cell runs, a tiny watchdog process (`python -m suite.launch.container_watch CONTAINER_ID`, the
  runner's child, in a session of its own so a terminal's Ctrl-C or the runner's process group kill does not
  take it) polls its parent pid; when the runner is gone it removes the container (force) and exits.  The
  container launcher kills it when the cell ends normally;
- every container carries labels naming its runner (host, pid, the pid's start time, so a reused pid is not
  mistaken for it): `sweep_orphans` at the start of each container launch removes this host's suite
  containers whose runner is dead (a watchdog that was itself killed, a machine that lost power).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

RUNNER_HOST = "io.github.suite.runner-host"
RUNNER_PID = "io.github.suite.runner-pid"
RUNNER_STARTED = "io.github.suite.runner-started"  # psutil create_time of the runner, 0.01 s resolution
POLL_S = 0.1
CLOCK_SLACK_S = 5.0  # how far a runner's recorded start time may drift (clock steps) and still name it


def runner_labels(pid: int | None = None) -> dict[str, str]:
    """Labels naming this process (or `pid`) as a container's runner."""
    p = psutil.Process(pid or os.getpid())
    return {RUNNER_HOST: socket.gethostname(), RUNNER_PID: str(p.pid), RUNNER_STARTED: f"{p.create_time():.2f}"}


def runner_alive(labels: dict[str, str]) -> bool:
    """Whether the runner the labels name still runs (on this host; another host's runner is assumed alive)."""
    if labels.get(RUNNER_HOST) != socket.gethostname() or not labels.get(RUNNER_PID, "").isdigit():
        return True  # not ours to judge
    try:
        p = psutil.Process(int(labels[RUNNER_PID]))
        started = float(labels.get(RUNNER_STARTED, "nan"))
        # the same process if it started at the same time; psutil derives that time from the boot time, which
        # moves when the wall clock is stepped (NTP), so allow a few seconds (a reused pid is minutes apart)
        return abs(p.create_time() - started) < CLOCK_SLACK_S and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except ValueError:  # a label that is not a number: not a runner suite labelled, so not ours to judge
        return True


def remove_container(container) -> bool:
    """Remove a container (force); False when it is already gone or being removed (by the other of the
    watchdog and the sweep, which may race for the same dead runner's container)."""
    from docker.errors import APIError, NotFound  # the caller has a container, so the SDK is there

    try:
        container.remove(force=True)
    except NotFound:
        return False
    except APIError as exc:
        if exc.status_code != 409:  # 409: "removal already in progress"
            raise
        return False
    return True


def sweep_orphans(docker_client, label: str) -> list[str]:
    """Remove this host's containers carrying `label` whose runner is dead; their short ids."""
    removed = []
    for c in docker_client.containers.list(all=True, filters={"label": label}):
        if not runner_alive(c.labels or {}):
            remove_container(c)
            removed.append(c.short_id)
    return removed


def start_watchdog(container_id: str, log_path: Path) -> subprocess.Popen:
    """The watchdog for one running container (see the module docstring).  Its note goes to the cell's log:
    never to the runner's stderr, whose pipe (`suite run | tee`) it would otherwise hold open."""
    with open(log_path, "ab") as log:
        return subprocess.Popen([sys.executable, "-m", "suite.launch.container_watch", container_id,
                                 str(os.getpid())], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True)


def stop_watchdog(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


def watch(container_id: str, runner_pid: int) -> int:
    """Wait for the runner (our parent) to go away, then remove its container.  Exit 0."""
    while os.getppid() == runner_pid:
        time.sleep(POLL_S)
    import docker  # only now: the watchdog costs nothing while it waits

    try:
        container = docker.from_env().containers.get(container_id)
    except docker.errors.NotFound:
        container = None  # already gone (the daemon's --rm, or the cell had ended)
    if container is not None and remove_container(container):
        print(f"suite: runner {runner_pid} died; removed container {container_id}", file=sys.stderr)
    else:
        print(f"suite: runner {runner_pid} died; container {container_id} was already gone", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(watch(sys.argv[1], int(sys.argv[2])))
