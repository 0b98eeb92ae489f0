"""Runner logic in isolation, with the fake worker (no training): statuses through real torchrun launches,
infeasible cells, repeats and --only, SIGKILL escalation for a worker that ignores SIGTERM, results ls/show."""

from __future__ import annotations

import threading
import time

import psutil
import pytest

from tests.e2e.run_helpers import FAKE_WORKER, cell_results, env, run_cli, run_dirs, write

pytestmark = pytest.mark.slow

SCENARIO = """
name: fake
model: gpt-tiny
seq_len: 16
strategy: [ddp, zero1, zero2]
gpus: [2, 64]
micro_batch_size: 2
global_batch_size: 128
steps: 6
warmup_steps: 2
device: cpu
timeout_s: 600  # a hang guard only: nothing here is meant to time out
exclude: [{gpus: 64, strategy: zero1}, {gpus: 64, strategy: zero2}]
"""


def test_statuses_infeasible_repeats_and_results_commands(tmp_path, cli):
    from suite.scenario import load_cells

    path = write(tmp_path / "fake.yaml", SCENARIO)
    cells = {(c.strategy, c.gpus): c for c in load_cells(str(path))[1]}
    ok, oom, norec, big = (cells[("ddp", 2)], cells[("zero1", 2)], cells[("zero2", 2)], cells[("ddp", 64)])
    results = tmp_path / "results"
    faults = f"{oom.id}:oom@1,{norec.id}:norecord@2"
    run = run_cli(["run", str(path), "--results", str(results)], tmp_path, env(FAKE_WORKER, SUITE_FAULT=faults))
    assert run.returncode == 1, run.stderr  # some cells did not finish ok
    assert not run.alive()
    (folder,) = run_dirs(results, "fake")
    got = cell_results(folder)
    assert {k: v["status"] for k, v in got.items()} == {
        f"{ok.id}-r0": "ok", f"{oom.id}-r0": "oom", f"{norec.id}-r0": "failed", f"{big.id}-r0": "infeasible"}
    assert "OutOfMemoryError" in got[f"{oom.id}-r0"]["error"]
    assert "rank(s) [0, 1] wrote no record" in got[f"{norec.id}-r0"]["error"]
    assert "needs 64 CPU ranks" in got[f"{big.id}-r0"]["error"]
    assert not list((folder / "work").glob(f"{big.id}-*"))  # infeasible: never launched
    good = got[f"{ok.id}-r0"]
    assert good["losses"] and good["step_time"]["n"] == 4 and good["gates"][0]["name"] == "finite"
    o = good["overhead_s"]
    assert o["launch"] > 0 and abs(o["launch"] + o["setup"] + o["train"] + o["teardown"] - o["wall"]) < 1e-6
    assert (folder / "scenario.yaml").is_file() and (folder / "manifest.json").is_file()
    assert str(folder) in run.stdout and "infeasible" in run.stdout

    # --only an infeasible cell with --repeats 2: two records, no launch, a new run folder
    again = run_cli(["run", str(path), "--results", str(results), "--only", big.id[:6], "--repeats", "2"],
                    tmp_path, env(FAKE_WORKER))
    assert again.returncode == 0, again.stderr
    second = run_dirs(results, "fake")[-1]
    assert second != folder and second.name.startswith("0002_")
    assert sorted(cell_results(second)) == [f"{big.id}-r0", f"{big.id}-r1"]
    assert run_cli(["run", str(path), "--results", str(results), "--only", "zzz"], tmp_path,
                   env(FAKE_WORKER)).returncode == 2

    listing = cli("results", "ls", results)
    assert listing.exit_code == 0 and "0001_" in listing.stdout and "oom 1" in listing.stdout
    table = cli("results", "show", str(folder))
    assert table.exit_code == 0 and ok.id in table.stdout and "oom" in table.stdout
    detail = cli("results", "show", ok.id, "--results", str(results))
    assert detail.exit_code == 0 and "memory per rank" in detail.stdout and "MFU" in detail.stdout
    assert cli("results", "show", "nothing-like-this", "--results", str(results)).exit_code == 2


def test_worker_ignoring_sigterm_is_killed_and_reaped(tmp_path, monkeypatch):
    from suite.scenario import load_cells
    from suite.launch import torchrun
    from suite.runner.cell import launch_request, write_payload

    path = write(tmp_path / "fake.yaml", SCENARIO)
    cell = next(c for c in load_cells(str(path))[1] if c.gpus == 2)
    monkeypatch.setenv("SUITE_FAULT", f"{cell.id}:stubborn@0")
    for k, v in env(FAKE_WORKER).items():
        monkeypatch.setenv(k, v)
    work = tmp_path / "work"
    work.mkdir()
    stop, seen, cmdlines, started = threading.Event(), {}, {}, {}
    # Children this process had before the cell (a dockerd daemonized by the docker fixture, if this process
    # was a subreaper then) are not the cell's: only what appears during the run must be gone after it.
    before = {p.pid for p in psutil.Process().children(recursive=True)}

    def on_poll():
        for p in psutil.Process().children(recursive=True):
            if p.pid not in before:
                # read again on every poll: a process seen between its fork and its exec still shows its parent's
                # command line
                seen.setdefault(p.pid, p)
                cmdlines[p.pid] = " ".join(_cmdline(p)) or cmdlines.get(p.pid, "")
        if (work / "events.jsonl").exists():
            started.setdefault("t", time.monotonic())
            if time.monotonic() - started["t"] > 1.0 and not stop.is_set():  # the ranks now ignore SIGTERM
                started["stop"] = time.monotonic()
                stop.set()

    request = write_payload(cell, launch_request(cell, work, "cpu", worker_module=FAKE_WORKER, timeout_s=300))
    result = torchrun.run_cell(request, stop=stop, on_poll=on_poll, grace_s=2.0)
    assert result.interrupted and not result.timed_out
    assert time.monotonic() - started["stop"] >= 2.0  # SIGTERM was ignored: SIGKILL came after the grace period
    assert result.extra["sigkill_needed"] is True  # and it took the SIGKILL (stopped before the 300 s timeout)
    workers = [p for p in seen.values()
               if "fake_worker" in cmdlines[p.pid] and "suite.launch.torchrun" not in cmdlines[p.pid]]
    assert len(workers) == 2  # both ranks were seen, and both are gone now
    assert set(result.extra["killed_pids"]) >= {p.pid for p in workers}
    for p in seen.values():
        assert not p.is_running() or p.status() == psutil.STATUS_ZOMBIE, p


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def test_preflight_records_allreduce_busbw_in_the_manifest(tmp_path, cli):
    """`--preflight` measures all-reduce on the run's largest launchable world size (2 here, not the
    infeasible 64) and stores the numbers in manifest.extra.preflight."""
    import json

    from suite.scenario import load_cells

    path = write(tmp_path / "fake.yaml", SCENARIO)
    ok = {(c.strategy, c.gpus): c for c in load_cells(str(path))[1]}[("ddp", 2)]
    results = tmp_path / "results"
    run = run_cli(["run", str(path), "--results", str(results), "--only", ok.id, "--preflight"],
                  tmp_path, env(FAKE_WORKER))
    assert run.returncode == 0, run.stderr
    (folder,) = run_dirs(results, "fake")
    pre = json.loads((folder / "manifest.json").read_text())["extra"]["preflight"]
    assert "error" not in pre and "skipped" not in pre, pre
    assert pre["correct"] is True
    assert pre["world_size"] == 2 and pre["backend"] == "gloo"
    assert pre["max_busbw_GBps"] > 0 and set(pre["busbw_GBps"]) == {"1MiB", "16MiB", "64MiB"}
