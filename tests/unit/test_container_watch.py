"""Containers whose runner died are found by their labels (host, pid, the pid's start time) and removed; those
of live runners, or of other hosts, are left alone.  No Docker needed: a stand-in client."""

from __future__ import annotations

import socket
import subprocess
import sys

from suite.launch import container_watch as cw


class _Container:
    def __init__(self, short_id: str, labels: dict[str, str]):
        self.short_id, self.labels, self.removed = short_id, labels, False

    def remove(self, force: bool = False) -> None:
        assert force
        self.removed = True


class _Client:
    def __init__(self, containers):
        self.containers = self
        self._all, self.filters = containers, None

    def list(self, all: bool, filters: dict):
        self.filters = filters
        return self._all


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_runner_alive_by_pid_and_start_time():
    mine = cw.runner_labels()
    assert mine[cw.RUNNER_HOST] == socket.gethostname() and cw.runner_alive(mine)
    assert not cw.runner_alive({**mine, cw.RUNNER_PID: str(_dead_pid())})
    assert not cw.runner_alive({**mine, cw.RUNNER_STARTED: "12.00"})  # same pid, another process (reused pid)
    assert cw.runner_alive({**mine, cw.RUNNER_HOST: "elsewhere", cw.RUNNER_PID: str(_dead_pid())})
    assert cw.runner_alive({})  # not a labelled container: never ours to judge


def test_sweep_removes_only_orphans():
    mine = cw.runner_labels()
    orphan = _Container("orphan", {**mine, cw.RUNNER_PID: str(_dead_pid())})
    live = _Container("live", mine)
    foreign = _Container("foreign", {**orphan.labels, cw.RUNNER_HOST: "elsewhere"})
    client = _Client([orphan, live, foreign])
    assert cw.sweep_orphans(client, "io.github.suite.launcher") == ["orphan"]
    assert client.filters == {"label": "io.github.suite.launcher"}
    assert (orphan.removed, live.removed, foreign.removed) == (True, False, False)


def test_a_clock_step_does_not_make_a_live_runner_look_dead_and_a_racing_removal_is_fine():
    mine = cw.runner_labels()
    stepped = f"{float(mine[cw.RUNNER_STARTED]) + 2.0:.2f}"  # NTP moved the boot time psutil derives it from
    assert cw.runner_alive({**mine, cw.RUNNER_STARTED: stepped})
    from docker.errors import NotFound

    class Gone(_Container):
        def remove(self, force: bool = False) -> None:  # its own watchdog removed it first
            raise NotFound("no such container")

    gone = Gone("gone", {**mine, cw.RUNNER_PID: str(_dead_pid())})
    assert cw.sweep_orphans(_Client([gone]), "lbl") == ["gone"]
