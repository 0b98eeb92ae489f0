"""A sweep's results come back in any order; the runner still gates each as the serial loop would (run.run_sweep):
a cell judged against a reference waits for the reference's result, and sees only what a serial run would have
stored before it.  The cluster is a stand-in that runs each job in this process (stand_in_launcher) and hands the
results back in reverse order."""

from __future__ import annotations

import io
import threading

from rich.console import Console

from suite.runner import session, sweep_run
from suite.runner.cell import execute
from suite.runner.run import RunOptions, run_scenario
from stand_in_launcher import install
from test_run_loop import SCENARIO as LOOP

# the run loop's scenario (its match gate against ddp included), as a sweep
SCENARIO = LOOP.replace("name: loop", "name: sweepgate") + "sweep: {schedule: pack, nodes: 2}\n"


class BackwardsSweep:
    """Sweep's interface, no Ray: every job runs here, and the results come back last first."""

    order: list[str] = []

    def __init__(self, spec, address, progress):
        self.spec, self.progress, self.cluster = spec, progress, None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def close(self):
        return None

    def run(self, jobs, stop):
        done = [(job, *execute(job, threading.Event())) for job in jobs]
        for job, result, workdir in reversed(done):
            BackwardsSweep.order.append(job.key)
            yield job, result, workdir


def test_results_in_reverse_order_are_gated_against_their_references_as_in_a_serial_run(tmp_path, monkeypatch):
    path, results, calls, behaviour = install(monkeypatch, tmp_path, SCENARIO, "sweepgate")
    monkeypatch.setattr(sweep_run, "Sweep", BackwardsSweep)
    monkeypatch.setattr(session, "_prestart", lambda *a: None)
    from suite.scenario import load_cells

    cells = {(c.strategy, c.global_batch_size): c for c in load_cells(str(path))[1]}
    behaviour[cells[("ddp", 4)].id] = "drift"  # zero1/4 no longer matches its reference
    out = run_scenario(path, RunOptions(results=results, live=False), Console(file=io.StringIO(), width=200))
    assert BackwardsSweep.order[0].startswith(cells[("zero1", 8)].id)  # a judged cell came back before its reference
    status = {(r.axes.strategy, r.axes.global_batch_size): r.status for r in out.results}
    assert status == {("ddp", 4): "ok", ("ddp", 8): "ok", ("zero1", 4): "gate-failed", ("zero1", 8): "ok"}
    match = {(r.axes.strategy, r.axes.global_batch_size): [g for g in r.gates if g.name == "match"]
             for r in out.results}
    assert match[("zero1", 8)][0].passed and not match[("zero1", 4)][0].passed
    assert "steps within" in match[("zero1", 8)][0].detail  # compared with the reference's curve, not "no result"
