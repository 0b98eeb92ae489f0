"""A stand-in for suite.runner.cell.launch: no processes, rank records written as a worker would write them.

Shared by the in-process run-loop tests (test_run_loop.py) and the CLI resume tests (test_run_resume_cli.py),
so the two exercise the same launcher.  `behaviour[cell_id]` picks what a launch of that cell does:
  "ok" (default)    every rank records ok; the final loss is 1 + 1/global_batch_size (cells tell apart)
  "drift"           as ok, the final loss 0.5 higher (a match gate against its reference fails)
  "crash"           the launcher itself raises (a bug in suite, not a failed cell)
  "SIGINT"/"SIGTERM" the signal is sent to this process (as Ctrl-C / kill would), and the launch reports
                    itself interrupted once the runner's handler has set `stop`
"""

from __future__ import annotations

import os
import signal
import time

from suite.launch import LaunchResult
from suite.results.schema import RankRecord, SetupTimes
from suite.runner import cell as cell_mod, session as session_mod
from suite.scenario import Cell


def install(monkeypatch, tmp_path, scenario_text: str, name: str):
    """Write the scenario to tmp_path/<name>.yaml and put the stand-in in place of the runner's launcher;
    -> (scenario path, results root, launched cells in order, behaviour by cell id)."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(scenario_text)
    monkeypatch.setattr(session_mod, "torch_info", lambda: {"torch": "x", "cuda": None, "nccl": None, "devices": []})
    calls: list[Cell] = []
    behaviour: dict[str, str] = {}

    def fake_launch(request, *, stop, on_poll):
        cell, workdir = Cell.model_validate_json(request.payload.read_text()), request.workdir
        calls.append(cell)
        what = behaviour.get(cell.id, "ok")
        if what == "crash":
            raise RuntimeError("launcher bug")
        if what in ("SIGINT", "SIGTERM"):
            os.kill(os.getpid(), getattr(signal, what))  # the runner's handler sets `stop`
            assert stop.wait(5)
            return LaunchResult(launcher="torchrun", returncode=-15, interrupted=True, started=1.0, ended=2.0)
        t = time.time()
        (workdir / "events.jsonl").write_text(f'{{"event": "setup_done", "t": {t}}}\n')
        losses = [3.0, 2.0, 1.0 + (0.5 if what == "drift" else 0.0) + 1.0 / cell.global_batch_size]
        for rank in range(cell.gpus):
            (workdir / f"rank{rank}.json").write_text(RankRecord(
                cell_id=cell.id, rank=rank, world_size=cell.gpus, local_rank=rank, hostname="h", device="cpu",
                device_name="cpu", status="ok", losses=losses, step_times_s=[0.2, 0.1, 0.1], warmup_steps=1,
                tokens_per_step=64, samples_per_step=4, train_s=0.4,
                setup_s=SetupTimes(process_group=0, model_build=0, strategy=0, data=0, total=0.1)).model_dump_json())
        return LaunchResult(launcher="torchrun", returncode=0, started=t - 1.0, ended=t + 1.0)

    monkeypatch.setattr(cell_mod, "launch", fake_launch)
    return path, tmp_path / "results", calls, behaviour
