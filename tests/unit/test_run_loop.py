"""The run loop in-process with a stand-in launcher (no processes): order, gates, launcher crashes, SIGINT,
resume, --only.  The real launches are covered by tests/e2e/test_run_*.py."""

from __future__ import annotations

import io
import json
import os
import signal

import pytest
from rich.console import Console

from suite.results import store
from suite.runner import run as run_mod
from suite.runner.run import RunError, RunOptions, run_scenario
from stand_in_launcher import install

SCENARIO = """\
name: loop
model: gpt-tiny
seq_len: 16
strategy: [zero1, ddp]
gpus: 2
micro_batch_size: 2
global_batch_size: [4, 8]
steps: 3
warmup_steps: 1
device: cpu
convergence: {match: {strategy: ddp}}
"""


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A scenario file, a results root, the stand-in launcher's calls and behaviours, a quiet console."""
    path, results, calls, behaviour = install(monkeypatch, tmp_path, SCENARIO, "loop")
    return path, results, calls, behaviour, Console(file=io.StringIO(), width=200)


def _cells(path):
    from suite.scenario import load_cells

    return {(c.strategy, c.global_batch_size): c for c in load_cells(str(path))[1]}


def test_references_first_gates_and_a_crashing_launcher(world):
    path, results, calls, behaviour, console = world
    cells = _cells(path)
    behaviour[cells[("zero1", 8)].id] = "crash"
    behaviour[cells[("ddp", 4)].id] = "drift"  # the zero1/4 cell no longer matches its reference
    out = run_scenario(path, RunOptions(results=results, live=False), console)
    assert [c.strategy for c in calls] == ["ddp", "ddp", "zero1", "zero1"]
    status = {(r.axes.strategy, r.axes.global_batch_size): r.status for r in out.results}
    assert status == {("ddp", 4): "ok", ("ddp", 8): "ok", ("zero1", 4): "gate-failed", ("zero1", 8): "failed"}
    crashed = next(r for r in out.results if r.status == "failed")
    assert crashed.error.startswith("the launcher raised RuntimeError: launcher bug")
    assert out.exit_code == 1 and out.interrupted_by is None
    ok = next(r for r in out.results if r.axes.as_dict() == cells[("ddp", 8)].axes())
    assert ok.overhead_s.launch == pytest.approx(0.9) and ok.step_time.n == 2
    last = (out.run_dir / "runlog.jsonl").read_text().splitlines()[-1]
    assert json.loads(last)["event"] == "run_end"


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_signal_keeps_finished_cells_and_resume_completes(world, sig):
    path, results, calls, behaviour, console = world
    cells = _cells(path)
    second = cells[("ddp", 8)]
    behaviour[second.id] = sig
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    out = run_scenario(path, RunOptions(results=results, live=False), console)
    assert out.interrupted_by == sig and out.exit_code == 128 + getattr(signal, sig)
    assert [r.cell_id for r in out.results] == [cells[("ddp", 4)].id]
    assert {s: signal.getsignal(s) for s in before} == before  # handlers restored
    assert [p.name for p in (out.run_dir / "cells").iterdir()] == [f"{cells[('ddp', 4)].id}-r0.json"]

    del behaviour[second.id]
    calls.clear()
    again = run_scenario(path, RunOptions(results=results, resume=True, live=False), console)
    assert again.run_dir == out.run_dir and again.exit_code == 0
    assert [c.id for c in calls] == [second.id, cells[("zero1", 4)].id, cells[("zero1", 8)].id]
    assert len(again.results) == 4 and {r.status for r in again.results} == {"ok"}
    assert (out.run_dir / "work" / f"{second.id}-r0-a2").is_dir()  # the rerun got a fresh attempt folder
    assert store.read_manifest(out.run_dir).run_id == out.run_dir.name and (out.run_dir / "resume-01.json").exists()
    with pytest.raises(RunError, match="no run folder"):
        run_scenario(path, RunOptions(results=results / "elsewhere", resume=True, live=False), console)


def test_only_adds_the_match_reference_and_repeats(world):
    path, results, calls, behaviour, console = world
    cells = _cells(path)
    target = cells[("zero1", 8)]
    out = run_scenario(path, RunOptions(results=results, only=[target.id[:5]], repeats=2, live=False), console)
    assert [(c.strategy, c.global_batch_size) for c in calls] == [("ddp", 8), ("zero1", 8)] * 2  # interleaved
    assert sorted((r.cell_id, r.repeat) for r in out.results) == sorted(
        [(cells[("ddp", 8)].id, 0), (cells[("ddp", 8)].id, 1), (target.id, 0), (target.id, 1)])
    assert all(r.status == "ok" for r in out.results)
    with pytest.raises(RunError, match="--only nope"):
        run_scenario(path, RunOptions(results=results, only=["nope"], live=False), console)


def test_trace_memory_cells_store_their_trace_once_per_shape(world, monkeypatch):
    """trace_memory: each cell's prediction carries its trace; 4 cells x 2 repeats trace 4 times (each cell is
    its own shape: the strategies differ, and so does accumulation, 1 vs 2 micro-batches), not 8."""
    path, results, calls, behaviour, console = world
    path.write_text(SCENARIO + "trace_memory: true\nrepeats: 2\n")
    traced = []
    from suite.plan import trace as trace_mod

    real = trace_mod.trace_cell
    monkeypatch.setattr(trace_mod, "trace_cell", lambda cell: traced.append(cell.id) or real(cell))
    out = run_scenario(path, RunOptions(results=results, live=False), console)
    assert len(out.results) == 8 and len(traced) == 4
    for r in out.results:
        assert r.prediction["fits_by"] == "traced" and r.prediction["traced"]["world"] == 2
        assert r.memory.predicted["traced_peak"] == r.prediction["traced"]["peak"] > 0


def test_infeasible_by_the_traced_peak(world):
    path, results, calls, behaviour, console = world
    path.write_text(SCENARIO + "trace_memory: true\ngpu_memory_gb: 0.001\n")  # 1 MB: the trace needs ~2.5
    out = run_scenario(path, RunOptions(results=results, live=False), console)
    assert calls == [] and {r.status for r in out.results} == {"infeasible"}
    assert all("(traced) > gpu_memory_gb 0.001 GB" in r.error for r in out.results)


def test_ctrl_c_during_a_trace_records_nothing(world, monkeypatch):
    """The runner's SIGINT handler only sets `stop`: a trace runs to its end, then the cell is dropped (not
    written as infeasible or launched) and the run ends interrupted."""
    path, results, calls, behaviour, console = world
    path.write_text(SCENARIO + "trace_memory: true\ngpu_memory_gb: 0.001\n")
    from suite.plan import trace as trace_mod

    real = trace_mod.trace_cell
    monkeypatch.setattr(trace_mod, "trace_cell", lambda cell: os.kill(os.getpid(), signal.SIGINT) or real(cell))
    out = run_scenario(path, RunOptions(results=results, live=False), console)
    assert out.interrupted_by == "SIGINT" and out.results == [] and calls == []
    assert not (out.run_dir / "cells").exists() or not any((out.run_dir / "cells").iterdir())


def test_ab_runs_each_image_into_its_own_run_folder_alternated(world, monkeypatch):
    path, results, calls, behaviour, console = world
    images = []
    real_one = run_mod.run_one
    monkeypatch.setattr(run_mod, "run_one", lambda s, cell, r, *a: images.append((s.image, cell.strategy, r))
                        or real_one(s, cell, r, *a))
    outs = run_mod.run_ab(path, RunOptions(results=results, repeats=2, live=False), ["img-a", "img-b"], console)
    assert [o.exit_code for o in outs] == [0, 0] and outs[0].run_dir != outs[1].run_dir
    assert all(len(o.results) == 8 for o in outs)  # 4 cells x 2 repeats in each image
    # cell by cell, both images, the order rotating from one launch pair to the next: a b, b a, a b, ...
    assert [i for i, _, _ in images] == ["img-a", "img-b", "img-b", "img-a"] * 4
    pairs = [images[k:k + 2] for k in range(0, 16, 2)]
    assert all(a[1:] == b[1:] for a, b in pairs)  # the same cell and repeat in both images, one after the other
    for out, image in zip(outs, ["img-a", "img-b"]):
        manifest = json.loads((out.run_dir / "manifest.json").read_text())
        assert manifest["container_image"] == image and manifest["extra"]["options"]["image"] == image
    with pytest.raises(RunError, match="same image"):
        run_mod.run_ab(path, RunOptions(results=results, live=False), ["img-a", "img-a"], console)
    with pytest.raises(RunError, match="--resume"):
        run_mod.run_ab(path, RunOptions(results=results, resume=True, live=False), ["img-a", "img-b"], console)
