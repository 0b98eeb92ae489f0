"""`suite run` killed hard in the middle of a cell: no process of the run outlives it by more than 5 s (checked
by pid), whether the cell was training or hanging in ranks that ignore SIGTERM, and `--resume` completes the
run.  And a rank killed by SIGKILL is named, with its signal, at the top of its cell's error."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.e2e.run_helpers import FAKE_WORKER, cell_results, env, run_cli, run_dirs, write

pytestmark = pytest.mark.slow

ORPHAN_LIMIT_S = 30.0  # a hang guard, generous on a loaded 2-core machine: the lifeline acts at once (`took` is printed)
SCENARIO = """
name: kill9
model: gpt-tiny
seq_len: 16
strategy: [ddp, zero1]
gpus: 2
micro_batch_size: 2
global_batch_size: 4
steps: {steps}
warmup_steps: 1
device: cpu
timeout_s: 300
"""


def _steps_seen(results: Path) -> int:
    """Step events of the cell running now (rank 0's events.jsonl in the newest work folder)."""
    events = sorted(results.glob("kill9/*/work/*/events.jsonl"))
    if not events:
        return 0
    return sum('"step"' in line for line in events[-1].read_text().splitlines())


def _kill_when(results: Path, steps: int, fired: dict):
    """A run_cli watcher: SIGKILL the CLI once the current cell has logged `steps` steps."""
    def watch(proc: subprocess.Popen) -> None:
        if "t" not in fired and _steps_seen(results) >= steps:
            time.sleep(0.5)  # well inside the step (or the hang) that follows
            os.kill(proc.pid, signal.SIGKILL)
            fired["t"] = time.monotonic()
    return watch


def _wait_all_gone(run, since: float, limit: float) -> tuple[float, list[int]]:
    """Seconds from `since` (the kill) until every pid the run ever had is gone (zombies count as gone), and
    those still alive `limit` seconds after it."""
    while run.alive() and time.monotonic() - since < limit:
        time.sleep(0.02)
    return time.monotonic() - since, run.alive()


# the default tier: a training cell and one that hangs ignoring SIGTERM; the plain hang (a case between the two)
# is in the `long` tier
@pytest.mark.parametrize("fault", [None, pytest.param("hang@2", marks=pytest.mark.long), "stubborn@2"],
                         ids=["training", "hanging", "hanging-ignoring-sigterm"])
def test_kill9_of_the_runner_takes_the_cell_along_and_resume_completes(tmp_path, fault):
    from suite.scenario import load_cells

    path = write(tmp_path / "kill9.yaml", SCENARIO.format(steps=40))
    first = load_cells(str(path))[1][0]
    results = tmp_path / "results"
    extra = {"FAKE_STEP_S": "0.5"}  # 20 s of training per cell: the kill lands mid-cell
    if fault:
        extra["SUITE_FAULT"] = f"{first.id}:{fault}"
    fired: dict = {}
    run = run_cli(["run", str(path), "--results", str(results)], tmp_path, env(FAKE_WORKER, **extra),
                  timeout=300, watch=_kill_when(results, 2, fired))
    assert run.returncode == -signal.SIGKILL, run.stderr
    workers = run.workers(FAKE_WORKER)
    assert len(workers) == 2, run.cmdlines  # the first cell's two ranks were running when the runner died
    took, alive = _wait_all_gone(run, fired["t"], ORPHAN_LIMIT_S)
    survivors = {pid: run.cmdlines.get(pid) for pid in alive}
    for pid in alive:
        psutil.Process(pid).kill()  # do not leave them to the next test
    assert not survivors, f"alive {ORPHAN_LIMIT_S} s after the runner's SIGKILL: {survivors}"
    print(f"all {len(run.seen)} processes of the run gone at most {took:.2f} s after the runner's SIGKILL")

    (folder,) = run_dirs(results, "kill9")
    killed_work = sorted((folder / "work").iterdir())
    again = run_cli(["run", str(path), "--results", str(results), "--resume"], tmp_path,
                    env(FAKE_WORKER, FAKE_STEP_S="0.01"), timeout=300)
    assert again.returncode == 0, again.stderr
    assert run_dirs(results, "kill9") == [folder]  # resumed in place, no new run folder
    got = cell_results(folder)
    assert {k: v["status"] for k, v in got.items()} == {f"{c.id}-r0": "ok" for c in load_cells(str(path))[1]}
    assert got[f"{first.id}-r0"]["extra"]["work_dir"] not in {f"work/{p.name}" for p in killed_work}
    assert not again.alive()


def _kill_rank(rank: str, results: Path, fired: dict):
    """A run_cli watcher: SIGKILL the rank with RANK=`rank` once the cell has logged two steps."""
    def watch(proc: subprocess.Popen) -> None:
        if "pid" in fired or _steps_seen(results) < 2:
            return
        for p in psutil.Process(proc.pid).children(recursive=True):
            try:
                if p.environ().get("RANK") == rank and "suite.launch.torchrun" not in " ".join(p.cmdline()):
                    p.kill()
                    fired["pid"] = p.pid
                    return
            except psutil.Error:
                continue  # another process, gone meanwhile
    return watch


@pytest.mark.parametrize("worker", [FAKE_WORKER, None], ids=["fake", "real-gloo"])
def test_a_rank_killed_by_sigkill_is_named_first(tmp_path, worker):
    """Rank 1 gets SIGKILL mid-training.  With real gloo ranks rank 0 then fails too ("Connection reset by
    peer" or similar) and records it; the cell's error must still start with rank 1 and its signal."""
    from suite.scenario import load_cells

    path = write(tmp_path / "kill9.yaml", SCENARIO.format(steps=400 if worker is None else 40))
    ddp = next(c for c in load_cells(str(path))[1] if c.strategy == "ddp")
    results = tmp_path / "results"
    fired: dict = {}
    run = run_cli(["run", str(path), "--results", str(results), "--only", ddp.id], tmp_path,
                  env(worker, FAKE_STEP_S="0.2"), timeout=400, watch=_kill_rank("1", results, fired))
    assert run.returncode == 1, run.stderr
    assert not run.alive()
    (folder,) = run_dirs(results, "kill9")
    ((_, result),) = cell_results(folder).items()
    assert result["status"] == "failed"
    assert result["error"].splitlines()[0] == f"rank 1 (pid {fired['pid']}) was killed by SIGKILL first"
    assert result["first_failure"]["rank"] == 1 and result["first_failure"]["signal"] == "SIGKILL"
    stored = json.loads((folder / result["extra"]["work_dir"] / "launcher_failures.json").read_text())
    assert stored["failures"][0]["pid"] == fired["pid"] and stored["failures"][0]["exitcode"] == -9
