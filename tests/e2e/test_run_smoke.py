"""The smoke scenario through the CLI with the real worker, interrupted during its second cell and resumed.

One scenario run covers: Ctrl-C keeps the finished cell and leaves no process; --resume completes the same
run folder; then every record is checked (all ok, gates passed, losses fall, memory ratios vs the planner,
overhead recorded, provenance).  The smoke scenario is copied with fewer steps to keep the test short.
"""

from __future__ import annotations

import re
import signal

import pytest

from tests.e2e.run_helpers import REPO, cell_results, env, run_cli, run_dirs, runlog

pytestmark = pytest.mark.slow


def test_smoke_interrupted_then_resumed(tmp_path):
    text = (REPO / "scenarios" / "smoke.yaml").read_text()
    text = re.sub(r"(?m)^steps: \d+", "steps: 8", text)
    text = re.sub(r"(?m)^warmup_steps: \d+", "warmup_steps: 2", text)
    scenario = tmp_path / "smoke.yaml"
    scenario.write_text(text)
    results = tmp_path / "results"
    sent = {}

    def interrupt_second_cell(proc):
        runs = run_dirs(results, "smoke")
        if sent or not runs:
            return
        done = list((runs[0] / "cells").glob("*.json"))
        started = [w for w in (runs[0] / "work").iterdir() if (w / "events.jsonl").exists()]
        if len(done) == 1 and len(started) == 2:  # the second cell's ranks are up and training
            proc.send_signal(signal.SIGINT)
            sent["at"] = [w.name for w in started]

    first = run_cli(["run", str(scenario), "--results", str(results)], tmp_path, env(), watch=interrupt_second_cell)
    assert sent, first.stderr
    assert first.returncode == 128 + signal.SIGINT, first.stderr
    assert len(first.workers()) >= 4 and not first.alive()  # both cells' ranks were seen, none is left
    (run,) = run_dirs(results, "smoke")
    kept = cell_results(run)
    assert [v["status"] for v in kept.values()] == ["ok"]
    kept_file = next((run / "cells").glob("*.json"))
    kept_bytes = kept_file.read_bytes()
    events = [e["event"] for e in runlog(run)]
    assert events[-2:] == ["cell_interrupted", "interrupted"]
    assert "--resume" in first.stderr

    second = run_cli(["run", str(scenario), "--results", str(results), "--resume"], tmp_path, env())
    assert second.returncode == 0, second.stderr
    assert not second.alive()
    assert run_dirs(results, "smoke") == [run]  # the same folder, completed
    assert kept_file.read_bytes() == kept_bytes  # the kept result was not rewritten
    got = cell_results(run)
    assert len(got) == 4 and {v["status"] for v in got.values()} == {"ok"}
    assert (run / "resume-01.json").is_file()
    assert sorted(v["extra"]["session"] for v in got.values()) == ["manifest.json"] + ["resume-01.json"] * 3
    interrupted_cell = next(r for r in got.values() if r["extra"]["work_dir"].endswith("-a2"))
    assert interrupted_cell["cell_id"] in sent["at"][1] or interrupted_cell["cell_id"] in sent["at"][0]
    assert str(run) in second.stdout and "smoke" in second.stdout

    by_strategy = {v["axes"]["strategy"]: v for v in got.values()}
    for strategy, r in by_strategy.items():
        names = {g["name"]: g["passed"] for g in r["gates"]}
        assert names == {"finite": True, "min_loss_drop": True, "match": True}, (strategy, r["gates"])
        assert r["losses"][-1] < r["losses"][0] - 0.5 and r["final_loss"] == r["losses"][-1]
        assert len(r["losses"]) == 8 and r["step_time"]["n"] == 6
        for key in ("parameters", "gradients", "optimizer_states"):  # exact byte counts vs the planner
            assert r["memory"]["ratio"][key] == pytest.approx(1.0, abs=0.05), (strategy, key, r["memory"])
        o = r["overhead_s"]
        assert min(o["launch"], o["setup"], o["train"]) > 0
        assert o["launch"] + o["setup"] + o["train"] + o["teardown"] == pytest.approx(o["wall"])
        assert r["mfu"]["value"] is None and r["mfu"]["flops_per_token"] > 0  # no MFU on CPUs
        assert [x["rank"] for x in r["ranks"]] == [0, 1]
    measured = {s: r["memory"]["measured"] for s, r in by_strategy.items()}
    assert measured["zero1"]["optimizer_states"] == pytest.approx(measured["ddp"]["optimizer_states"] / 2, rel=0.05)
    assert measured["zero2"]["gradients"] == pytest.approx(measured["ddp"]["gradients"] / 2, rel=0.05)
    assert measured["zero3"]["parameters"] == pytest.approx(measured["ddp"]["parameters"] / 2, rel=0.05)
    ddp = by_strategy["ddp"]["losses"]
    for r in by_strategy.values():
        assert r["losses"] == pytest.approx(ddp, rel=1e-4)
