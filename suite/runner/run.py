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

In code: `open_run` (a new or reopened run folder, its manifest: a `Session`; reading the scenario and --only
is opening.py's), `run_one` per cell and repeat (a launch request from the cell -> suite.launch ->
CellResult), `finish` (the outcome and exit code); `run_sessions` strings them together for one run folder or
several and owns the Ctrl-C / SIGTERM handlers.  Options reach the launchers
in the request (image, Ray address), never through os.environ.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml
from pydantic import ValidationError

from suite.console import EXIT_FAILED, EXIT_OK
from suite.launch import DEFAULT_WORKER
from suite.machine.policy import QuietPolicy, busy, probe, wait_until_quiet
from suite.plan import predict
from suite.results import store
from suite.results.env import build_manifest, git_info, torch_info
from suite.results.schema import FINAL_STATUSES, CellResult
from suite.scenario import Cell
from suite.scenario.sweep import SweepPolicy
from suite.runner.cell import CellTraces, Job, execute, infeasible_reason, infeasible_result, resolve_device
from suite.gates.band import band_gate, band_references
from suite.gates.loss import first_failure, loss_gates, match_gate, reference_of, run_order
from suite.gates.quality import quality_gates
from suite.runner.opening import RunError, open_scenario, select_cells
from suite.runner.progress import RunProgress
from suite.sweep.dispatch import Sweep, resources

__all__ = ["NotQuiet", "RunError", "RunOptions", "RunOutcome", "run_ab", "run_scenario"]


class NotQuiet(RunError):
    """--require-quiet (or the scenario's `quiet:`) found the machine busy and would not time a cell on it."""


@dataclass
class RunOptions:
    results: Path = Path("results")
    only: list[str] = field(default_factory=list)
    resume: bool = False
    resume_dir: Path | None = None
    repeats: int | None = None
    shuffle: int | None = None  # seed: shuffle the cells within each round of repeats (gates.run_order)
    force: bool = False
    worker_module: str | None = None  # default: $SUITE_WORKER_MODULE or suite.worker (tests swap in a fake)
    image: str | None = None  # run torchrun cells in fresh containers of this image (suite/launch/container.py)
    ray_address: str | None = None  # an existing Ray cluster for `launcher: ray` cells (else a private one)
    live: bool | None = None  # progress panel: None = when stderr is a terminal
    preflight: bool = False  # measure all-reduce busbw first and record it in the manifest (suite.comm.preflight)
    quiet: QuietPolicy | None = None  # --require-quiet: check the machine before each timed launch (else the scenario's)
    command: list[str] = field(default_factory=list)
    schedule: str | None = None  # --schedule serial|pack|node (else the scenario's sweep:, else serial)
    nodes: int | None = None  # --nodes: a private sweep cluster's nodes (else the scenario's sweep:)
    cpus_per_node: float | None = None  # --cpus-per-node: a private sweep cluster's CPUs per node


@dataclass
class RunOutcome:
    run_dir: Path
    results: list[CellResult]  # final results of the selected cells, in run order (earlier sessions too)
    interrupted_by: str | None
    exit_code: int


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


def _with_image(manifest, image: str):
    """The manifest names the image the cells ran in, and its digest (local image id when never pushed)."""
    from suite.launch.container import image_identity

    try:
        ref, digest = image_identity(image)
    except (RuntimeError, ImportError) as exc:  # the cells will fail to launch and say why; keep the reason
        return manifest.model_copy(update={"container_image": image, "container_image_digest": None,
                                           "extra": {**manifest.extra, "image_error": str(exc)}})
    return manifest.model_copy(update={"container_image": ref, "container_image_digest": digest})


@dataclass
class Session:
    """One session of a run folder (the first, or a resume): what opening it decided, for its cells."""

    run_dir: Path
    name: str  # its manifest: manifest.json, or resume-NN.json
    cells: list[Cell]  # every cell of the scenario (match gates look up their references here)
    plan: list[tuple[Cell, int]]  # (cell, repeat) in run order
    notes: list[str]
    force: bool
    worker: str
    image: str | None
    ray_address: str | None
    gpu_count: int
    previous: list[CellResult] = field(default_factory=list)  # results stored by earlier sessions (a resume)
    traces: CellTraces = field(default_factory=CellTraces)
    lock: int | None = None  # the run folder's lock (store.lock_run), held until the session ends
    quiet: QuietPolicy | None = None  # check the machine before each timed launch (machine/policy.py)
    sweep: SweepPolicy | None = None  # run the plan as a sweep over a Ray cluster (suite/sweep/); None: serially here
    sweeper: Sweep | None = None  # its private cluster, started while the run opened (run_sweep connects to it)


def open_run(file: Path | None, opts: RunOptions, console) -> Session:
    """Make a run folder (or reopen one for --resume), write its scenario and this session's manifest; the
    session holds the run folder's lock from before its first write (a second session on it exits 2)."""
    run_dir, scenario, cells, saved, previous = open_scenario(file, opts)
    selected, notes = select_cells(cells, opts.only or saved.get("only", []))  # a bad --only: no folder made
    new = run_dir is None
    if new:
        run_dir = store.create_run_dir(opts.results, scenario.name, git_info()[0])
    lock = store.lock_run(run_dir)
    try:
        return _open_session(file, opts, console, run_dir, new, scenario, cells, selected, notes, saved, previous,
                             lock)
    except BaseException:
        store.unlock_run(lock)
        raise


def _open_session(file, opts, console, run_dir, new, scenario, cells, selected, notes, saved, previous,
                  lock) -> Session:
    repeats = opts.repeats or saved.get("repeats")
    shuffle = opts.shuffle if opts.shuffle is not None else saved.get("shuffle")
    force = opts.force or saved.get("force", False)
    worker = opts.worker_module or os.environ.get("SUITE_WORKER_MODULE") or DEFAULT_WORKER
    image = opts.image or saved.get("image")
    ray_address = opts.ray_address or saved.get("ray_address")
    quiet = opts.quiet or scenario.quiet
    sweep = _sweep_policy(scenario.sweep, opts, saved, ray_address)
    options = {"repeats": repeats, "shuffle": shuffle, "only": opts.only or saved.get("only", []),
               "force": force, "worker_module": worker, "scenario_file": str(file) if file else None, "image": image,
               "ray_address": ray_address, "quiet": quiet.model_dump(mode="json") if quiet else None,
               "sweep": sweep.model_dump(mode="json") if sweep else None}
    sweeper = _prestart(sweep, ray_address, selected, console)
    try:
        facts = torch_info()
        gpu_count = len(facts.get("devices") or [])
        if new:
            with store.writing(run_dir / "scenario.yaml"):
                store.write_atomic(run_dir / "scenario.yaml",
                                   yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False))
            session = "manifest.json"
        else:
            session = store.next_resume_name(run_dir)
        extra: dict = {"options": options}
        runnable = ([c for c in selected if infeasible_reason(c, predict(c), gpu_count) is None] if opts.preflight
                    else [])
        if runnable:
            from suite.comm.preflight import preflight

            world = max(c.gpus for c in runnable)  # the largest world size this run will actually launch
            console.print(f"preflight: all-reduce bus bandwidth on {world} ranks", highlight=False)
            extra["preflight"] = preflight(world_size=world, device=runnable[0].device,
                                           cuda_devices=facts.get("devices") or [],
                                           work_dir=run_dir / "work" / "preflight")
        if opts.preflight:  # the node's state before the run, beside its bus bandwidth (what `suite machine` shows)
            node = probe(2.0, gpus=gpu_count > 0)
            reasons = busy(node, quiet.thresholds if quiet else None)
            console.print("preflight: the machine is " + ("busy: " + "; ".join(reasons) if reasons else "quiet"),
                          highlight=False, markup=False)
            extra["machine"] = node.model_dump(mode="json")
        manifest = build_manifest(run_dir.name, scenario.name, scenario.seed, opts.command or sys.argv,
                                  extra=extra, torch_facts=facts)
        if image:
            manifest = _with_image(manifest, image)
        if ray_address:  # the Ray drivers get it as RAY_ADDRESS: part of the environment the cells ran in
            env = dict(sorted({**manifest.env, "RAY_ADDRESS": ray_address}.items()))
            manifest = manifest.model_copy(update={"env": env})
        store.write_manifest(run_dir, manifest, session)
        store.append_runlog(run_dir, "resume" if session != "manifest.json" else "run_start", session=session)
        plan = run_order(selected, repeats, shuffle)
        return Session(run_dir, session, cells, plan, notes, force, worker, image, ray_address, gpu_count, previous,
                       lock=lock, quiet=quiet, sweep=sweep, sweeper=sweeper)
    except BaseException:
        if sweeper is not None:
            sweeper.close()
        raise


class _Notes:
    """Where a sweep's notes go before the run's progress display exists."""

    def __init__(self, console):
        self.console = console

    def note(self, message: str) -> None:
        self.console.print(message, highlight=False, markup=False, soft_wrap=True)


def _prestart(sweep: SweepPolicy | None, ray_address: str | None, cells: list[Cell], console) -> Sweep | None:
    """A sweep on a private cluster of CPU cells starts its nodes now, while the run opens (the torch probe, the
    traces): seconds off every sweep.  Cells that may want a GPU wait for the probe's device count."""
    if sweep is None or ray_address or os.environ.get("RAY_ADDRESS") or sweep.gpus_per_node:
        return None
    gpus_here = Path("/dev/nvidiactl").exists()
    if not cells or any(c.device == "cuda" or (c.device == "auto" and gpus_here) for c in cells):
        return None
    sweeper = Sweep(sweep, None, _Notes(console))
    sweeper.prestart(max(resources(c, "cpu")["CPU"] for c in cells), lean=all(c.launcher != "ray" for c in cells))
    return sweeper


def _sweep_policy(declared: SweepPolicy | None, opts: RunOptions, saved: dict,
                  ray_address: str | None) -> SweepPolicy | None:
    """The run's sweep, or None for today's serial loop here: --schedule/--nodes/--cpus-per-node over the
    scenario's `sweep:` (a resume keeps the first session's).  `serial` runs on a cluster only when one is named
    (--ray-address, $RAY_ADDRESS, or more than one private node); pack and node always do."""
    if saved.get("sweep") and not (opts.schedule or opts.nodes or opts.cpus_per_node):
        return SweepPolicy.model_validate(saved["sweep"])
    base = declared or SweepPolicy()
    update = {k: v for k, v in (("schedule", opts.schedule), ("nodes", opts.nodes),
                                ("cpus_per_node", opts.cpus_per_node)) if v is not None}
    try:
        policy = SweepPolicy.model_validate({**base.model_dump(), **update})
    except ValidationError as exc:
        raise RunError("; ".join(f"--{'-'.join(map(str, e['loc'])).replace('_', '-')}: {e['msg']}"
                                 for e in exc.errors())) from None
    cluster = ray_address or os.environ.get("RAY_ADDRESS") or policy.nodes > 1
    if policy.schedule == "serial" and not (cluster and (opts.schedule or declared)):
        return None
    return policy


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
