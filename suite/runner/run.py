"""`suite run`: every cell of a scenario, one after another, into one append-only run folder (two for an A/B).

    scenario -> cells -> (cell, repeat) in interleaved rounds A0 B0 A1 B1 ... (references of a match gate first
    in each round; --shuffle SEED shuffles each round) -> per cell and repeat:
        infeasible? record it (no launch, unless --force)
        else launch (torchrun / ray) -> rank records -> status -> numbers -> gates -> cells/<id>-r<k>.json

A cell that fails never stops the run (exit code 1 at the end); a results folder that cannot be written
(store.WriteError: disk full, read-only) does, and the CLI exits 3.  Ctrl-C or SIGTERM stops the current
cell's processes and ends the run (exit code 128 + signal); the interrupted cell is NOT written to cells/ (so
results stay final and are never overwritten), only noted in runlog.jsonl with its work folder.  `--resume`
continues the latest (or a given) run folder: the stored scenario.yaml is expanded again and cells that
already have a final result are skipped; a resumed cell runs in a new work folder (attempt a2, a3, ...), and
each resume adds a manifest `resume-NN.json` for the environment of that session (results name their session
in extra.session); a damaged run folder is refused before anything is written (runner/resume.py).
The options of the first session (--only, --repeats, --shuffle, --force, --image, --ray-address) carry over
to a resume.

`--image A --image B` (`run_ab`) runs the scenario in both images into two run folders, alternating launches
cell by cell, for `suite compare RUN_A RUN_B`.

In code: `open_run` (session.py: a new or reopened run folder, its manifest: a `Session`; reading the scenario
and --only is opening.py's), `run_one` per cell and repeat (steps.py: prepare -> launch -> gate), or
`run_sweep` for a sweep over a Ray cluster (sweep_run.py), `finish` (the outcome and exit code);
`run_sessions` strings them together for one run folder or several and owns the Ctrl-C / SIGTERM handlers.  Options reach the launchers
in the request (image, Ray address), never through os.environ.
"""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from suite.console import EXIT_FAILED, EXIT_OK
from suite.results import store
from suite.results.schema import FINAL_STATUSES, CellResult
from suite.scenario import Cell
from suite.runner.opening import RunError
from suite.runner.progress import RunProgress
from suite.runner.session import NotQuiet, RunOptions, Session, open_run
from suite.runner.steps import run_one
from suite.runner.sweep_run import run_sweep

__all__ = ["NotQuiet", "RunError", "RunOptions", "RunOutcome", "run_ab", "run_scenario"]


@dataclass
class RunOutcome:
    run_dir: Path
    results: list[CellResult]  # final results of the selected cells, in run order (earlier sessions too)
    interrupted_by: str | None
    exit_code: int


def finish(s: Session, done: dict, received: list[int]) -> RunOutcome:
    """The run's outcome: its final results in run order, and the exit code (128 + signal when stopped)."""
    results = [done[(c.id, r)] for c, r in s.plan if (c.id, r) in done]
    if received:
        name = signal.Signals(received[0]).name
        store.append_runlog(s.run_dir, "interrupted", signal=name)
        return RunOutcome(s.run_dir, results, name, 128 + received[0])
    store.append_runlog(s.run_dir, "run_end", statuses=[x.status for x in results])
    bad = any(x.status not in ("ok", "infeasible") for x in results)
    return RunOutcome(s.run_dir, results, None, EXIT_FAILED if bad else EXIT_OK)


def run_scenario(file: Path | None, opts: RunOptions, console) -> RunOutcome:
    """Run (or resume) a scenario; see the module docstring.  Raises RunError / ScenarioError before running."""
    return run_sessions([open_run(file, opts, console)], opts, console)[0]


def run_ab(file: Path, opts: RunOptions, images: list[str], console) -> list[RunOutcome]:
    """The same scenario in each image, one run folder per image, launches alternated cell by cell: every
    (cell, repeat) runs in every image before the next, the images' order rotating from one to the next (A B,
    then B A), so a slow spell of the machine hits every image alike.  Then `suite compare RUN_A RUN_B`."""
    if opts.resume:
        raise RunError("--resume takes one run folder: resume each image's run folder on its own")
    if len(set(images)) != len(images):
        raise RunError(f"--image given twice with the same image: {', '.join(images)}")
    sessions = [open_run(file, replace(opts, image=img), console) for img in images]
    for s in sessions[1:]:  # the same cells in every image: trace each shape's memory once
        s.traces = sessions[0].traces
    return run_sessions(sessions, opts, console)


def _steps(sessions: list[Session]) -> list[tuple[int, Cell, int]]:
    """(session index, cell, repeat): every session's plan, alternated launch by launch; the sessions' order
    rotates with each plan position (A B, B A, A B, ...), so every image runs first as often as second (one
    session: its plan)."""
    n = len(sessions)
    return [((i + k) % n, cell, repeat) for k, (cell, repeat) in enumerate(sessions[0].plan) for i in range(n)]


def run_sessions(sessions: list[Session], opts: RunOptions, console) -> list[RunOutcome]:
    """The one loop over launches (with its Ctrl-C / SIGTERM handlers) for one run folder or several."""
    dones = [{(x.cell_id, x.repeat): x for x in s.previous if x.status in FINAL_STATUSES} for s in sessions]
    progress = RunProgress(sum(len(s.plan) for s in sessions), console, opts.live)
    for s in sessions:
        progress.note(f"run folder: {s.run_dir}" + (f" (image {s.image})" if len(sessions) > 1 else ""))
    for note in sessions[0].notes:
        progress.note(note)
    stop, received = threading.Event(), []

    def on_signal(signum, _frame):
        received.append(signum)
        stop.set()

    handlers = {}
    if threading.current_thread() is threading.main_thread():
        handlers = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if sessions[0].sweep is not None:
            if len(sessions) > 1:
                raise RunError("--image twice (A/B) alternates launches one by one: run it with --schedule serial")
            run_sweep(sessions[0], stop, progress, dones[0])
            return [finish(sessions[0], dones[0], received)]
        for k, cell, repeat in _steps(sessions):
            s, done = sessions[k], dones[k]
            if stop.is_set():
                break
            if (cell.id, repeat) in done:
                progress.end_cell(done[(cell.id, repeat)])
                continue
            result = run_one(s, cell, repeat, stop, progress, done)
            if result is None:
                break
            store.write_cell_result(s.run_dir, result)
            done[(cell.id, repeat)] = result
            store.append_runlog(s.run_dir, "cell_end", cell=cell.id, repeat=repeat, status=result.status)
            progress.end_cell(result)
        return [finish(s, done, received) for s, done in zip(sessions, dones)]
    finally:
        progress.close()
        for sig, h in handlers.items():
            signal.signal(sig, h)
        for s in sessions:
            store.unlock_run(s.lock)
            s.lock = None
            if s.sweeper is not None:  # prestarted, never swept (stopped before, or nothing to launch)
                s.sweeper.close()
                s.sweeper = None
