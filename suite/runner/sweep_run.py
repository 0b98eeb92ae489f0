"""A run's plan as a sweep over a Ray cluster (`suite run --schedule pack|node|serial` on a cluster; suite/sweep/
schedules it): every launch prepared here first, then the jobs run as the schedule allows, and each result is
gated and stored in the order a serial run would have (docs/sweeps.md).
"""

from __future__ import annotations

import os
import threading

from suite.results import store
from suite.results.schema import CellResult
from suite.scenario import Cell
from suite.runner.cell import Job
from suite.gates.band import band_references
from suite.gates.loss import reference_of
from suite.runner.progress import RunProgress
from suite.runner.session import Session
from suite.runner.steps import gate, interrupted, prepare
from suite.sweep.dispatch import Sweep, resources


def run_sweep(s: Session, stop: threading.Event, progress: RunProgress, done: dict) -> None:
    """The plan as a sweep over a Ray cluster (suite/sweep/): every launch prepared here first (traces,
    infeasible cells recorded at once), then the jobs run as the schedule allows; each result is gated once the
    references it is judged against are in (as in a serial run, whose order puts them first) and stored."""
    def record(result: CellResult) -> None:
        store.write_cell_result(s.run_dir, result)
        done[(result.cell_id, result.repeat)] = result
        store.append_runlog(s.run_dir, "cell_end", cell=result.cell_id, repeat=result.repeat, status=result.status)
        progress.end_cell(result)

    jobs: list[Job] = []
    for cell, repeat in s.plan:
        if stop.is_set():
            return
        if (cell.id, repeat) in done:
            progress.end_cell(done[(cell.id, repeat)])
            continue
        job = prepare(s, cell, repeat, stop, progress, quiet=False)
        if job is None:
            return
        if isinstance(job, Job):
            jobs.append(job)
        else:
            record(job)
    if not jobs:
        return
    outstanding = {(j.cell.id, j.repeat) for j in jobs}
    held: list[tuple[Cell, CellResult]] = []

    position = {(c.id, r): i for i, (c, r) in enumerate(s.plan)}

    def release() -> None:
        """Gate and store every held result as the serial loop would have: once every reference that comes
        before it in the run order is stored, and seeing only the results a serial run would have had by then."""
        progressed = True
        while progressed:
            progressed = False
            waiting = outstanding | {(c.id, r.repeat) for c, r in held}
            for cell, result in list(held):
                here = position[(cell.id, result.repeat)]
                earlier = {(ref, rep) for ref in references(cell, s.cells) for rep in (result.repeat, 0)
                           if position.get((ref, rep), here) < here}
                if earlier & waiting:
                    continue
                held.remove((cell, result))
                seen = {k: v for k, v in done.items() if position.get(k, -1) < here}
                record(gate(cell, result, s.cells, seen))
                progressed = True
                break

    need = [resources(j.cell, j.device) for j in jobs]
    sweeper, s.sweeper = s.sweeper or Sweep(s.sweep, s.ray_address or os.environ.get("RAY_ADDRESS"), progress), None
    sweeper.progress = progress
    sweeper.max_cpus = max(n.get("CPU", 0.0) for n in need)
    sweeper.lean = all(j.cell.launcher != "ray" for j in jobs)
    sweeper.max_gpus = max(s.gpu_count, int(max(n.get("GPU", 0.0) for n in need)))  # a private node gets them all
    with sweeper as sweep:
        for job, result, workdir in sweep.run(jobs, stop):
            outstanding.discard((job.cell.id, job.repeat))
            if workdir is not None and interrupted(s, result, workdir, progress):
                continue
            if result.status == "ok":
                held.append((job.cell, result))
            else:
                record(result)
            release()
    for cell, result in held:  # stopped early: their references never ran; the gates say so
        here = position[(cell.id, result.repeat)]
        record(gate(cell, result, s.cells, {k: v for k, v in done.items() if position.get(k, -1) < here}))


def references(cell: Cell, cells: list[Cell]) -> list[str]:
    """Ids of the cells this cell's gates judge it against (a match gate's reference, a band's references)."""
    conv = cell.convergence
    if conv is None:
        return []
    out = []
    if conv.match is not None and (ref := reference_of(cell, cells, conv.match)) is not None:
        out.append(ref.id)
    if conv.band is not None:
        out += [c.id for c in band_references(cell, cells, conv.band)]
    return out
