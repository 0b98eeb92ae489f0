"""One (cell, repeat) of a run, in three steps that the serial loop and a sweep share:

    prepare      its (traced) prediction; infeasible (a final result, no launch) or a `Job`; waits for a quiet
                 machine first when asked (--require-quiet; the serial loop only)
    execute      the launch (suite/runner/cell.py; in a sweep, inside a Ray task on the node it was given)
    gate         its gates, with the results of the cells it is judged against

`run_one` is the serial loop's: the three in a row.  An interrupted launch is only noted (`interrupted`).
"""

from __future__ import annotations

import threading
from pathlib import Path

from suite.machine.policy import wait_until_quiet
from suite.plan import predict
from suite.results import store
from suite.results.schema import CellResult
from suite.scenario import Cell
from suite.runner.cell import Job, execute, infeasible_reason, infeasible_result, resolve_device
from suite.gates.band import band_gate, band_references
from suite.gates.loss import first_failure, loss_gates, match_gate, reference_of
from suite.gates.quality import quality_gates
from suite.runner.progress import RunProgress
from suite.runner.session import NotQuiet, Session


def gate(cell: Cell, result: CellResult, cells: list[Cell], done: dict) -> CellResult:
    """The cell's gates on its result (references' results looked up in `done`, same repeat else repeat 0)."""
    gates = loss_gates(result.losses, cell.convergence)
    match = cell.convergence.match if cell.convergence else None
    if match is not None and gates[0].passed:
        ref = reference_of(cell, cells, match)
        ref_result = None if ref is None else done.get((ref.id, result.repeat)) or done.get((ref.id, 0))
        gates.append(match_gate(cell, result.losses, match, ref, ref_result, result.grad_norms))
    quality, ttt = quality_gates(result.eval, cell.convergence, cell.steps) if gates[0].passed else ([], None)
    gates += quality
    band = cell.convergence.band if cell.convergence else None
    if band is not None and gates[0].passed:
        refs = [(c, done.get((c.id, result.repeat)) or done.get((c.id, 0))) for c in band_references(cell, cells, band)]
        gates.append(band_gate(cell, result.eval, band, refs))
    failed = first_failure(gates)
    if failed is None:
        return result.model_copy(update={"gates": gates, "time_to_target": ttt})
    return result.model_copy(update={"gates": gates, "status": "gate-failed", "time_to_target": ttt,
                                     "error": f"gate {failed.name} failed: {failed.detail}"})


def prepare(s: Session, cell: Cell, repeat: int, stop: threading.Event, progress: RunProgress,
            quiet: bool = True) -> Job | CellResult | None:
    """Decide one cell's repeat before its launch: its (traced) prediction, infeasible (a final result, no
    launch), or a Job to launch; None when interrupted meanwhile.  `quiet`: wait for a quiet machine first
    (--require-quiet) - the serial loop does; a cluster sweep judges purity per node instead (suite/sweep/)."""
    if s.traces.pending(cell):
        progress.note(f"tracing the memory of {cell.id} on fake tensors (seconds for an 8B model; cached on disk) ...")
    trace = s.traces.get(cell)
    if stop.is_set():  # Ctrl-C during the trace: the runner's handler only sets `stop`
        return None
    prediction = predict(cell, trace)  # once per launch: the feasibility check and the stored result share it
    reason = infeasible_reason(cell, prediction, s.gpu_count)
    if reason and not s.force:
        return infeasible_result(cell, repeat, reason, s.name, prediction)
    if quiet and s.quiet is not None:
        go, reasons, _ = wait_until_quiet(s.quiet, progress.note, stopped=stop.is_set)
        if stop.is_set():  # Ctrl-C while waiting for a quiet machine: nothing launched, nothing to record
            return None
        if not go:
            store.append_runlog(s.run_dir, "not_quiet", cell=cell.id, repeat=repeat, reasons=reasons)
            waited = f" after waiting up to {s.quiet.max_wait_s:.0f} s" if s.quiet.mode == "wait" else ""
            raise NotQuiet(f"the machine is busy{waited}: {'; '.join(reasons)}; --require-quiet {s.quiet.mode} will "
                           f"not time {cell.id}-r{repeat} on it (the cells done so far are kept: --resume goes on)")
    return Job(cell, repeat, s.run_dir.resolve(), s.name, resolve_device(cell, s.gpu_count), s.worker, prediction,
               s.image, s.ray_address, reason)


def interrupted(s: Session, result: CellResult, workdir: Path, progress: RunProgress) -> bool:
    """An interrupted launch is only noted in the runlog (never a final result); True when it was one."""
    if result.status != "interrupted":
        return False
    store.append_runlog(s.run_dir, "cell_interrupted", cell=result.cell_id, repeat=result.repeat,
                        work_dir=workdir.name)
    progress.note(f"interrupted {result.cell_id}-r{result.repeat}: its processes were stopped; not recorded")
    return True


def run_one(s: Session, cell: Cell, repeat: int, stop: threading.Event, progress: RunProgress,
            done: dict) -> CellResult | None:
    """One cell, one repeat: infeasible, or launched and classified and gated.  None when it was interrupted
    (then it is only noted in the runlog: an interrupted cell is never a final result)."""
    job = prepare(s, cell, repeat, stop, progress)
    if not isinstance(job, Job):
        return job
    result, workdir = execute(job, stop, progress.poll,
                              on_workdir=lambda w: progress.start_cell(cell, repeat, w))
    if interrupted(s, result, workdir, progress):
        return None
    return gate(cell, result, s.cells, done) if result.status == "ok" else result
