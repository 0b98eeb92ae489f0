"""`suite run --image` killed hard while its cell's container hangs: the container is removed, and no process
of the run is left, within 5 s (suite/launch/container_watch.py's watchdog)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.e2e.run_helpers import env, run_cli, write
from tests.e2e.test_container import TEST_LABEL, images, sh  # noqa: F401 - images is the session fixture

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SCENARIO = """
name: kill9c
model: gpt-tiny
seq_len: 16
strategy: ddp
gpus: 2
micro_batch_size: 2
global_batch_size: 4
steps: 20
warmup_steps: 1
device: cpu
timeout_s: 600
"""


def _containers() -> list[str]:
    return sh("docker", "ps", "-aq", "--filter", f"label={TEST_LABEL}").stdout.split()


def test_kill9_of_the_runner_removes_its_hanging_container(images, tmp_path):  # noqa: F811
    from suite.scenario import load_cells

    path = write(tmp_path / "kill9c.yaml", SCENARIO)
    (cell,) = load_cells(str(path))[1]
    results = tmp_path / "results"
    fired: dict = {}

    def watch(proc: subprocess.Popen) -> None:
        events = list(results.glob("kill9c/*/work/*/events.jsonl"))
        if "t" not in fired and events and '"step"' in events[0].read_text():  # step 0 done, hanging at 1
            time.sleep(1.0)
            os.kill(proc.pid, signal.SIGKILL)
            fired["t"] = time.monotonic()

    run = run_cli(["run", str(path), "--results", str(results), "--image", images["image"]], tmp_path,
                  env(SUITE_FAULT=f"{cell.id}:hang@1", SUITE_CONTAINER_LABELS=TEST_LABEL), timeout=600, watch=watch)
    assert run.returncode == -signal.SIGKILL, run.stderr
    while (_containers() or run.alive()) and time.monotonic() - fired["t"] < 30.0:  # generous: `took` is printed
        time.sleep(0.1)
    took = time.monotonic() - fired["t"]
    left, alive = _containers(), run.alive()
    if left:
        sh("docker", "rm", "-f", *left)  # not left to the session's leftover check: this assert says it
    assert not left and not alive, f"{took:.1f} s after the runner's SIGKILL: containers {left}, pids {alive}"
    print(f"container and {len(run.seen)} processes gone {took:.2f} s after the runner's SIGKILL")
