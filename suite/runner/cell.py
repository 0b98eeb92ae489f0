"""One cell, one repeat: decide whether it can run, launch it, read its records, and build its CellResult.

A launcher gets a `LaunchRequest` built here from the cell (`launch_request`), and the cell itself as the
worker's payload, WORKDIR/cell.json (`write_payload`).

The status comes from structured facts only, never from log text:
  interrupted / timeout      the launcher stopped it (Ctrl-C, or past timeout_s);
  oom / diverged / failed    a rank's record says so (the worker writes a record on failure too);
  failed                     a rank wrote no record, or the launcher exited non-zero, or (launcher: ray)
                             the ranks did not run on exactly `nodes` distinct nodes (their records' node_id);
  ok                         every rank recorded ok and the launcher exited 0 (gates may still fail it).
The worker's exit codes (3 diverged, 4 oom, 1 failed) decide only when no record says more (torchrun turns
any worker failure into its own exit code 1, so records are what carry the cause through it).
The tail of the worker's error or of the launcher's log is kept as `error`, for people, not for the status.
When the launcher reports which rank ended badly first (WORKDIR/launcher_failures.json, suite/launch/failures.py)
the error starts with it - "rank 1 (pid 4242) was killed by SIGKILL first" - because the other ranks' records
then only say that their peer went away; it is also kept as the typed CellResult.first_failure.
"""

from __future__ import annotations

import json
import os
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from pydantic import ValidationError

from suite.device import resolve_device as resolve_device_kind
from suite.launch import DEFAULT_WORKER, failures as launch_failures, LaunchRequest, LaunchResult, launch
from suite.machine.sampler import Sampler
from suite.plan import Prediction, predict
from suite.results.schema import Axes, CellResult, RankFailure, RankInfo, RankRecord
from suite.results.store import WriteError, append_runlog, create_work_dir, utc_iso, write_atomic, writing
from suite.runner import aggregate
from suite.scenario import Cell
from suite.scenario.pipeline import planned_only

EXIT_CODES = {3: "diverged", 4: "oom", 1: "failed"}


def resolve_device(cell, gpu_count: int) -> str:
    return resolve_device_kind(cell.device, gpu_count)


def launch_request(cell, workdir: Path, device: str, *, worker_module: str = DEFAULT_WORKER,
                   timeout_s: float | None = None, image: str | None = None,
                   ray_address: str | None = None) -> LaunchRequest:
    """What the launcher needs of `cell` (it never sees the cell itself; the worker reads it from the payload).

    `image`: run a torchrun cell in a fresh container of it (`suite run --image`); `ray_address`: the Ray
    cluster of a ray cell (`--ray-address`).  Pure: the payload file is written by write_payload."""
    data = cell.data
    download = getattr(data, "kind", None) == "cifar10" and getattr(data, "download", False)
    container = bool(image) and cell.launcher == "torchrun"
    rpw = cell.ray.resources_per_worker if cell.ray and cell.ray.resources_per_worker else None
    return LaunchRequest(
        launcher="container" if container else cell.launcher, workdir=Path(workdir),
        payload=Path(workdir) / "cell.json", timeout_s=cell.timeout_s if timeout_s is None else timeout_s,
        gpus=cell.gpus, nodes=cell.nodes, threads_per_rank=cell.threads_per_rank, device=device,
        worker_module=worker_module, label=cell.id, writable_dirs=(str(data.root),) if download else (),
        image=image if container else None, ray_address=ray_address if cell.launcher == "ray" else None,
        resources_per_worker=dict(rpw) if rpw else None)


def write_payload(cell, request: LaunchRequest) -> LaunchRequest:
    """Write the cell as the worker's payload (the request's cell.json), atomically: a full disk is a WriteError
    naming it (exit 3), never an empty cell.json a worker would fail on; returns the request."""
    with writing(request.payload):
        write_atomic(Path(request.payload), cell.model_dump_json(indent=1), overwrite=True)
    return request


def cpu_process_cap() -> int:
    """At most this many CPU ranks per cell: past it a 'benchmark' measures the scheduler, not training."""
    return max(4, 2 * (os.cpu_count() or 1))


class CellTraces:
    """The traced memory of measure_peaks / trace_memory cells, once per shape (suite/plan/trace.py), stored in
    their results' prediction beside what they measure.  torch is imported on the first such cell only."""

    def __init__(self):
        self._cache = None

    def _wanted(self, cell) -> bool:
        return cell.measure_peaks or cell.trace_memory

    def pending(self, cell) -> bool:
        """Whether get(cell) will run a trace (not traced yet): worth a progress line."""
        return self._wanted(cell) and (self._cache is None or not self._cache.has(cell))

    def get(self, cell):
        """The cell's Trace or TraceFailure; None for cells that do not ask for one."""
        if not self._wanted(cell):
            return None
        if self._cache is None:
            from suite.plan.trace_cache import TraceCache

            self._cache = TraceCache()
        return self._cache.get(cell)


def infeasible_reason(cell, prediction, gpu_count: int) -> str | None:
    """Why the cell cannot run here (None when it can): predicted memory, a layout suite plans but cannot run
    yet (pipeline, context parallelism), or missing devices."""
    reason = planned_only(cell)
    if reason:
        return f"planned (suite plan), not run: {reason}"
    if prediction.fits is False:
        return (f"predicted {prediction.fits_bytes / 1e9:.2f} GB per rank ({prediction.fits_by}) > gpu_memory_gb "
                f"{cell.gpu_memory_gb:g} GB")
    if cell.launcher != "torchrun":
        return None  # a Ray cluster's devices are the Ray launcher's to check
    if resolve_device(cell, gpu_count) == "cuda":
        if cell.gpus > gpu_count:
            return f"needs {cell.gpus} GPUs; this machine has {gpu_count}"
    elif cell.gpus > cpu_process_cap():
        return f"needs {cell.gpus} CPU ranks; the cap is {cpu_process_cap()} (2 x {os.cpu_count()} cores, min 4)"
    return None


def read_records(workdir: Path) -> tuple[list[RankRecord], list[str]]:
    """Valid rank records of a work folder (by rank), and a problem line per unreadable one."""
    records, problems = [], []
    for path in sorted(Path(workdir).glob("rank*.json")):
        try:
            records.append(RankRecord.model_validate_json(path.read_text(encoding="utf-8")))
        except (OSError, ValidationError, ValueError) as exc:
            # pydantic's first line only counts the errors; the next two name the field and the problem
            problems.append(f"{path.name}: unreadable record: {' '.join(str(exc).splitlines()[:3])}")
    return sorted(records, key=lambda r: r.rank), problems


def setup_done_time(workdir: Path) -> float | None:
    path = Path(workdir) / "events.jsonl"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a kill
        if event.get("event") == "setup_done":
            return float(event["t"])
    return None


def placement_problem(records: list[RankRecord], nodes: int, problems: list[str] | None = None) -> str | None:
    """The ranks must have run on exactly `nodes` distinct nodes, or the cell measured something else.
    An unreadable record counts as a rank on an unknown node."""
    seen = {r.node_id for r in records} | ({None} if problems else set())
    if len(seen) != nodes or None in seen:
        return f"placement: ranks ran on {len(seen - {None})} distinct node(s), the cell says nodes: {nodes}"
    return None


def classify(launch: LaunchResult, records: list[RankRecord], world: int,
             problems: list[str] | None = None, placement: str | None = None,
             first_failure: launch_failures.Failure | None = None) -> tuple[str, str | None]:
    """(status, error) of a launched cell; see the module docstring for the rules.

    `placement`: what placement_problem found wrong (launcher: ray).  Every rank may have finished, but the
    cell measured another layout than it names, so it fails with the placement problem as its error.
    `first_failure`: the rank the launcher saw end badly first; named on the error's first line."""
    status, error = _classify(launch, records, world, problems, placement)
    if first_failure is None or status in ("ok", "interrupted", "timeout"):
        return status, error  # stopped by us: torchrun's report would only list what we killed
    return status, "\n".join(filter(None, [f"{first_failure.describe()} first", error]))


def _classify(launch: LaunchResult, records: list[RankRecord], world: int,
              problems: list[str] | None, placement: str | None) -> tuple[str, str | None]:
    if launch.interrupted:
        return "interrupted", launch.error or "interrupted"
    if launch.timed_out:
        return "timeout", launch.error or "timeout"
    if launch.returncode is None:
        return "failed", launch.error or "the launcher did not start"
    for status in ("oom", "diverged", "failed"):
        bad = [r for r in records if r.status == status]
        if bad:
            lines = (bad[0].error or status).strip().splitlines() or [status]
            # the summary first (a traceback's last line is the exception), the rest of the error after it
            return status, "\n".join([f"rank {bad[0].rank}: {lines[-1]}", *lines[:-1]])
    missing = sorted(set(range(world)) - {r.rank for r in records})
    if missing:
        status = EXIT_CODES.get(launch.returncode, "failed") if launch.returncode else "failed"
        why = "; ".join(problems or []) or f"rank(s) {missing} wrote no record"
        return status, f"{why} (launcher exit code {launch.returncode})\n{launch.error or ''}".rstrip()
    if placement:
        return "failed", placement
    if launch.returncode != 0:
        return "failed", f"launcher exit code {launch.returncode} although every rank recorded ok\n{launch.error or ''}"
    return "ok", None


def infeasible_result(cell, repeat: int, reason: str, session: str, prediction: Prediction | None = None) -> CellResult:
    now = utc_iso()
    return CellResult(cell_id=cell.id, repeat=repeat, axes=Axes(**cell.axes()), cell=cell,
                      status="infeasible", error=reason, started_at=now, finished_at=now, launcher=cell.launcher,
                      prediction=(prediction or predict(cell)).model_dump(mode="json"), extra={"session": session})


def build_result(cell, repeat: int, launch: LaunchResult, workdir: Path, run_dir: Path, device: str,
                 session: str, extra: dict[str, Any] | None = None, prediction: Prediction | None = None) -> CellResult:
    """The CellResult of a launched cell, before gates (status ok, failed, oom, diverged, timeout, ...).
    `prediction`: the planner's numbers the runner checked feasibility with (with the cell's traced memory when it
    was traced); computed here when not given."""
    records, problems = read_records(workdir)
    checked = cell.launcher == "ray" and launch.returncode == 0  # torchrun's ranks are on one node by design
    placement = placement_problem(records, cell.nodes, problems) if checked else None
    failed, failures_problem = launch_failures.read(workdir)
    first = failed[0] if failed else None
    status, error = classify(launch, records, cell.gpus, problems, placement, first)
    prediction = (prediction or predict(cell)).model_dump(mode="json")
    numbers = aggregate.aggregate(records, prediction, cell.precision, launch.started, launch.ended,
                                  setup_done_time(workdir), stages=cell.pipeline_parallel)
    more = {"session": session, "work_dir": str(Path(workdir).relative_to(run_dir)), "device": device,
            "returncode": launch.returncode,
            "wall_s": launch.ended - launch.started if launch.started and launch.ended else None, **launch.extra,
            **(extra or {})}
    if problems:
        more["record_problems"] = problems
    if failures_problem:
        more["launcher_failures_problem"] = failures_problem
    if placement and isinstance(more.get("ray"), dict):
        more["ray"] = {**more["ray"], "placement_error": placement}
    restarts = max((r.restarts for r in records), default=0)
    return CellResult(
        cell_id=cell.id, repeat=repeat, axes=Axes(**cell.axes()), cell=cell, status=status,
        error=error, started_at=utc_iso(launch.started or time.time()), finished_at=utc_iso(launch.ended or None),
        launcher=launch.launcher, prediction=prediction,
        ranks=[RankInfo(rank=r.rank, hostname=r.hostname, node_ip=r.node_ip, node_id=r.node_id,
                        device_name=r.device_name)
               for r in records],
        restarts=restarts, extra=more, **numbers,
        first_failure=None if first is None else RankFailure(rank=first.rank, pid=first.pid, exitcode=first.exitcode,
                                                             signal=first.signal, timestamp=first.timestamp))


@dataclass(frozen=True)
class Job:
    """One (cell, repeat) decided to launch: everything a process needs to run it and build its result, on this
    machine (`suite run`) or on any node of a Ray cluster (suite/sweep/).  Picklable: plain values and models."""

    cell: Cell
    repeat: int
    run_dir: Path  # the run folder (shared by every node of a sweep: loopback nodes, or a shared file system)
    session: str  # the manifest of the session that launches it (manifest.json, resume-NN.json)
    device: str  # cuda | cpu, resolved
    worker: str  # the worker module
    prediction: Prediction
    image: str | None = None
    ray_address: str | None = None
    forced: str | None = None  # --force: why the planner said it would not fit

    @property
    def key(self) -> str:
        return f"{self.cell.id}-r{self.repeat}"


def timed_window(workdir: Path, result: CellResult) -> tuple[float, float] | None:
    """Unix (start, end) of the timed steps: from the worker's "setup done" for the training phase's length."""
    began, train = setup_done_time(workdir), result.overhead_s.train if result.overhead_s else None
    return (began, began + train) if began is not None and train is not None and train > 0 else None


def execute(job: Job, stop: threading.Event, on_poll: Callable[[], None] | None = None,
            on_workdir: Callable[[Path], None] | None = None) -> tuple[CellResult, Path]:
    """Launch the job's cell from a fresh work folder and build its result (status not yet gated), with the
    machine's state sampled around the launch; `on_workdir` hears of the folder before the launch starts.
    A launcher bug fails the cell (traceback kept), never the run; a results folder that cannot be written
    (store.WriteError) is raised."""
    cell = job.cell
    workdir = create_work_dir(job.run_dir, cell.id, job.repeat)
    append_runlog(job.run_dir, "cell_start", cell=cell.id, repeat=job.repeat, work_dir=workdir.name)
    if on_workdir is not None:
        on_workdir(workdir)
    request = launch_request(cell, workdir, job.device, worker_module=job.worker, image=job.image,
                             ray_address=job.ray_address)
    # the machine around the launch, sampled from outside the timed steps; the worker's command line names its
    # work folder, so a container's or Ray's processes are counted as the launch's, not as competitors
    sampler = Sampler(mark=workdir.name, interval=0.5, gpus=job.device != "cpu").start()
    try:
        launched = launch(write_payload(cell, request), stop=stop, on_poll=on_poll)
    except WriteError:  # the disk is full or read-only: the run cannot store anything more (exit 3)
        raise
    except Exception as exc:  # noqa: BLE001 - a launcher bug fails this cell with its traceback, not the run
        launched = LaunchResult(launcher=request.launcher, returncode=None,
                                error=f"the launcher raised {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    finally:
        sampler.stop()
    result = build_result(cell, job.repeat, launched, workdir, job.run_dir, job.device, job.session,
                          {"forced_infeasible": job.forced} if job.forced else None, job.prediction)
    return result.model_copy(update={"machine": sampler.state(timed_window(workdir, result))}), workdir
