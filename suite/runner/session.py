"""Opening a run: a new run folder (or a reopened one, for --resume), its scenario and this session's manifest,
and what the session decided for its cells (a `Session`): their run order, repeats, shuffle, --force, the
worker module, the image, the Ray address, the quiet policy and the sweep (with its private cluster started
early, while the run opens).  Reading the scenario and --only is opening.py's; a resume's checks resume.py's.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import ValidationError

from suite.launch import DEFAULT_WORKER
from suite.machine.policy import QuietPolicy, busy, probe
from suite.plan import predict
from suite.results import store
from suite.results.env import build_manifest, git_info, torch_info
from suite.results.schema import CellResult
from suite.scenario import Cell
from suite.scenario.sweep import SweepPolicy
from suite.runner.cell import CellTraces, infeasible_reason
from suite.gates.loss import run_order
from suite.runner.opening import RunError, open_scenario, select_cells
from suite.sweep.dispatch import Sweep, resources


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
