"""A private Ray cluster (suite/launch/ray/cluster.py) dies with the process that started it, even when that
process is killed hard: no orphaned `ray start`, gcs_server or raylet holds the machine afterwards."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.e2e.run_helpers import REPO, env

pytestmark = pytest.mark.slow
pytest.importorskip("ray")

# Stands for `suite run` with a ray cell: starts the run's private cluster, prints every pid of it, waits.
RUNNER = """
import json, time
from suite.launch.ray.cluster import LocalCluster
cluster = LocalCluster(nodes=1, cpus_per_node=1)
cluster.start()
time.sleep(2)  # Ray's own helper processes (dashboard agent, log monitor) start after the node is alive
print(json.dumps(cluster.pids()), flush=True)
time.sleep(600)
"""


def test_a_private_cluster_dies_with_its_runner():
    runner = subprocess.Popen([sys.executable, "-c", RUNNER], cwd=REPO, env=env(), stdout=subprocess.PIPE,
                              text=True)
    procs = []
    try:
        pids = json.loads(runner.stdout.readline())
        procs = [psutil.Process(pid) for pid in pids]
        assert len(procs) >= 3  # the node launcher (ray start --block), gcs_server, raylet at least
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 30.0 and any(_alive(p) for p in procs):  # generous; the time is printed
            time.sleep(0.05)
        left = {p.pid: _name(p) for p in procs if _alive(p)}
        assert not left, f"alive 30 s after the runner's SIGKILL: {left}"
        print(f"{len(procs)} cluster processes gone {time.monotonic() - t0:.2f} s after the runner's SIGKILL")
    finally:
        runner.kill()
        for p in procs:
            if _alive(p):
                p.kill()


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _name(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())[:120]
    except psutil.Error:
        return "?"
