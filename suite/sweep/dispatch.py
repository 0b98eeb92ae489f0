"""Run a sweep's jobs on a Ray cluster: each job a Ray Core task on the node the ledger picked, results as they end.

    with Sweep(policy, address, progress) as sweep:   # connects (or starts a private cluster)
        for job, result, workdir in sweep.run(jobs, stop):
            ...                                     # the runner gates and stores each result as it comes back

The pieces, as the seed introduces Ray Core:
- **stateless tasks** - `_run_on_node(job, ledger)` runs one cell's launch (suite.runner.cell.execute: torchrun,
  or a container, from a fresh work folder) on the node it was sent to and returns the CellResult.  The task
  asks Ray for exactly the cell's resources (`resources`: its ranks' CPUs, or its GPUs) and is pinned to the
  ledger's node (NodeAffinitySchedulingStrategy, hard): a task is one process on one node, so a torchrun
  cell's ranks always share a node, as a one-bundle placement group would give.
- **one actor for shared state** - the `Ledger` (suite/sweep/ledger.py): the queue in its order, what runs
  where, each attempt's interval and timed steps; the tasks report to it, the driver asks it what to start.
- **`ray.wait` / `ray.get` to gather** - the driver (this process, `suite run`) waits for whichever task ends
  first and hands its result to the runner, which gates it (references before the cells they judge, as in
  a serial run) and writes it to the one append-only run folder.

A `launcher: ray` cell (`exclusive`) is not a task: its Ray Train job places its own workers, so the driver
runs it from a thread (the Ray launcher, against this cluster's address) when nothing else runs.

Faults: the tasks run with `max_retries=0` and the driver does the retrying - a task whose node or process
died comes back as a Ray system error, the ledger marks the attempt lost and puts the job back at the front of
the queue, and the next `assign` sends it to an alive node (up to `retries` more tries; the result records its
attempts and the nodes lost).  Ray's own retry would re-run it on *any* node, which would break `node`'s
promise.  Ctrl-C: every running task is cancelled with force (its worker process dies; the torchrun launcher
under it follows by its parent-death signal, suite/lifeline.py, and takes its ranks along).  When `suite run`
is killed hard, Ray ends the dead driver's job (its tasks' workers and the ledger), and a private cluster's
nodes die with the runner (LocalCluster's lifeline).

Paths: the run folder is given to the tasks as an absolute path; nodes must see it (loopback nodes share this
machine's disk; a real cluster needs the results folder on a shared file system).
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Iterator

from suite.launch import LaunchResult
from suite.launch.supervise import GRACE_S
from suite.launch.ray.cluster import PRIVATE_ENV, LocalCluster
from suite.results.schema import CellResult, Schedule
from suite.results.store import WriteError, append_runlog, create_work_dir
from suite.runner.opening import RunError
from suite.scenario import Cell
from suite.scenario.sweep import SweepPolicy
from suite.runner.cell import Job, build_result, execute, timed_window
from suite.sweep.ledger import ALL_NODES, Ledger, Want, queue_order

POLL_S = 0.2
NODES_EVERY_S = 2.0  # look at the cluster's nodes (and the queue) at least this often
ASK_STOP_EVERY_S = 0.5  # a task asks the ledger whether the sweep is stopping this often
STOP_WAIT_S = GRACE_S + 10.0  # Ctrl-C: how long the tasks get to stop their launches before they are killed


def resources(cell: Cell, device: str) -> dict[str, float]:
    """What a cell's task asks Ray for on one node: its GPUs (one CPU per rank beside them), or on the CPU its
    ranks' threads.  A `launcher: ray` cell's own workers ask for theirs (it is exclusive)."""
    if device == "cuda":
        return {"GPU": float(cell.gpus), "CPU": float(cell.gpus)}
    return {"CPU": float(cell.gpus * cell.threads_per_rank)}


def _need_ray():
    try:
        import ray
    except ImportError:
        raise RunError("a sweep (--schedule pack|node, or serial on a cluster) needs Ray; install suite's ray "
                       "extra: pip install 'suite[ray]'") from None
    return ray


def _answers(address: str, timeout_s: float = 5.0) -> None:
    """A RunError unless something listens at HOST:PORT (ray.init waits minutes on a dead address)."""
    if address in ("auto", "local"):
        return  # Ray finds (or starts) it itself
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
            return
    except ValueError:
        raise RunError(f"--ray-address {address!r}: expected HOST:PORT") from None
    except OSError as exc:
        raise RunError(f"no Ray cluster answers at {address} ({exc}); start one (`ray start --head`) or leave "
                       f"--ray-address out for a private one") from None


def _run_on_node(job: Job, ledger) -> tuple[CellResult, str]:
    """The task: launch the job's cell on this node, tell the ledger when it began, its timed steps, its end."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    stop, asked = threading.Event(), [0.0]

    def poll() -> None:  # the launcher's supervision loop calls this a few times a second
        if time.monotonic() - asked[0] >= ASK_STOP_EVERY_S:
            asked[0] = time.monotonic()
            if ray.get(ledger.should_stop.remote()):
                stop.set()  # the launcher stops torchrun and its ranks (SIGTERM, then SIGKILL) and says interrupted

    result, workdir = execute(job, stop, poll, on_workdir=lambda w: ray.get(ledger.begin.remote(job.key, node, w.name)))
    ray.get(ledger.finish.remote(job.key, timed_window(workdir, result)))
    return result, str(workdir)


class Sweep:
    """A connection to the sweep's cluster (started when private) and its ledger actor's maker."""

    def __init__(self, spec: SweepPolicy, address: str | None, progress, max_cpus: float = 1.0, max_gpus: int = 0):
        self.spec, self.progress = spec, progress
        self.given = address  # an existing cluster; None: a private one of spec.nodes loopback nodes
        self.ray = _need_ray()
        self.cluster: LocalCluster | None = None
        self.max_cpus, self.max_gpus = max_cpus, max_gpus
        self.lean = True  # a private cluster without the Ray processes only Ray Train cells need (LocalCluster)
        self.address: str | None = None
        self._task = None
        self._actor = None

    def prestart(self, max_cpus: float, max_gpus: int = 0, lean: bool = True) -> None:
        """Start the private cluster's nodes now (they come up while the run opens: its torch probe, its traces);
        `__enter__` waits for them.  Call it from the thread that runs the sweep (lifeline).  `max_gpus`: the
        GPUs the node gets unless the policy says (the machine's, so that pack can fill them).  `lean`: no cell
        runs Ray Train (`launcher: ray`), so the nodes leave out its log and autoscaler monitors."""
        spec = self.spec
        # default: this machine's cores shared out over the nodes (at least what the largest cell asks for)
        cpus = spec.cpus_per_node if spec.cpus_per_node is not None else max(
            max_cpus, 1.0, float((os.cpu_count() or 1) // spec.nodes))
        gpus = spec.gpus_per_node or max_gpus
        if gpus and spec.nodes > 1:  # nodes on one host would each number the same GPUs from 0
            raise RunError(f"a private cluster of {spec.nodes} nodes on GPUs would give every node the same "
                           f"{gpus} GPU(s): start one node per machine with `ray start` and pass --ray-address, "
                           f"or use --nodes 1")
        self.progress.note(f"starting a private Ray cluster: {spec.nodes} node(s) of {cpus:g} CPU(s)"
                           + (f", {gpus} GPU(s)" if gpus else "") + " on this machine ...")
        self.cluster = LocalCluster(nodes=spec.nodes, cpus_per_node=cpus, gpus_per_node=gpus, lean=lean)
        self.cluster.spawn()

    def close(self) -> None:
        """Stop a prestarted private cluster that never ran a sweep (the run failed to open)."""
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None

    def __enter__(self) -> "Sweep":
        try:
            return self._connect()
        except BaseException:
            if self.cluster is not None:
                self.cluster.stop()
            raise

    def _connect(self) -> "Sweep":
        spec, ray = self.spec, self.ray
        if self.given:
            self.address = self.given
            _answers(self.given)
        else:
            if self.cluster is None:
                self.prestart(self.max_cpus, self.max_gpus, self.lean)
            self.address = self.cluster.wait_up(1)  # work starts on the head; the others join meanwhile
            os.environ.update(PRIVATE_ENV)  # this process is the driver of a cluster without token authentication
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        main = threading.current_thread() is threading.main_thread()
        runners = signal.getsignal(signal.SIGTERM) if main else None
        try:
            ray.init(address=self.address, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise RunError(f"no Ray cluster to sweep on at {self.address}: {exc}") from None
        if main:  # ray.init puts its own SIGTERM handler (sys.exit) in place of the runner's, which stops the sweep
            signal.signal(signal.SIGTERM, runners)
        self._task = ray.remote(_run_on_node)
        self._actor = ray.remote(num_cpus=0, max_restarts=0)(Ledger)
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.ray.shutdown()
        finally:
            if self.cluster is not None:
                left = self.cluster.stop()
                if left:
                    self.progress.note(f"the private Ray cluster left processes behind: {left}")

    # -------------------------------------------------------------------------------------------- the cluster
    def nodes(self) -> dict[str, dict[str, float]]:
        """Alive nodes and their total CPU and GPU counts."""
        return {n["NodeID"]: {k: float(n["Resources"].get(k, 0.0)) for k in ("CPU", "GPU")}
                for n in self.ray.nodes() if n.get("Alive")}

    def open_ledger(self, wants: list[Want]):
        """The sweep's Ledger actor, on the driver's own node: a worker node may die mid-sweep, the driver's may not.

        The pin is hard. A soft NodeAffinity lets Ray place the actor elsewhere even when the driver's node has
        room (measured on Ray 2.x: every second actor went to the other node), and a ledger on a node that dies
        takes the whole sweep with it.
        """
        here = self.ray.get_runtime_context().get_node_id()
        strategy = self.ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(here, soft=False)
        return self._actor.options(scheduling_strategy=strategy).remote(self.spec.schedule, wants,
                                                                        1 + self.spec.retries)

    def run(self, jobs: list[Job], stop: threading.Event) -> Iterator[tuple[Job, CellResult, Path | None]]:
        """Every job once (more on lost nodes), results as they end; stops early when `stop` is set."""
        ray = self.ray
        by_key = {j.key: j for j in jobs}
        need = {j.key: resources(j.cell, j.device) for j in jobs}
        order = queue_order([(j.key, j.repeat, sum(need[j.key].values())) for j in jobs])
        wants = [Want(k, need[k], exclusive=by_key[k].cell.launcher == "ray", nodes=by_key[k].cell.nodes)
                 for k in order]
        ledger = self.open_ledger(wants)
        strategy = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy
        refs: dict = {}  # ObjectRef -> key
        threads: dict[str, threading.Thread] = {}
        answers: queue.Queue = queue.Queue()
        left = set(by_key)
        changed, looked, nodes = True, 0.0, {}  # ask the ledger only when something ended, or every NODES_EVERY_S

        def start_ready(nodes: dict) -> Iterator[tuple[Job, CellResult, None]]:
            """Send what the ledger assigns now to its nodes; yields the jobs no node can hold, failed (judged
            once a private cluster's nodes have all joined)."""
            joined = self.cluster is None or len(nodes) >= self.cluster.running_nodes()
            for key, why in ray.get(ledger.unplaceable.remote(nodes)) if joined else []:
                left.discard(key)
                yield by_key[key], self._failed(by_key[key], f"no node can run it: {why}", ledger), None
            for key, node in ray.get(ledger.assign.remote(nodes)):
                job = by_key[key]
                self.progress.sweep_started(job.cell, job.repeat, node)
                if node == ALL_NODES:
                    threads[key] = self._exclusive(job, ledger, answers, stop)
                    continue
                refs[self._task.options(num_cpus=need[key].get("CPU", 0), num_gpus=need[key].get("GPU", 0),
                                        max_retries=0,
                                        scheduling_strategy=strategy(node, soft=False)).remote(job, ledger)] = key
            self.progress.sweep_state(ray.get(ledger.running.remote()), ray.get(ledger.free.remote(nodes)))

        try:
            while left:
                if stop.is_set():
                    self._cancel(refs, by_key, ledger)
                    for key, thread in threads.items():  # a launcher: ray cell sees `stop` itself
                        thread.join()
                        append_runlog(by_key[key].run_dir, "cell_interrupted", cell=by_key[key].cell.id,
                                      repeat=by_key[key].repeat)
                    threads.clear()
                    return
                joining = self.cluster is not None and len(nodes) < self.cluster.running_nodes()  # still joining
                if changed or joining or time.monotonic() - looked > NODES_EVERY_S:
                    nodes, looked = self.nodes(), time.monotonic()
                    yield from start_ready(nodes)
                    changed = False
                ready = []
                if refs:
                    ready, _ = ray.wait(list(refs), num_returns=1, timeout=POLL_S)
                else:
                    time.sleep(POLL_S)
                finished = []
                for ref in ready:
                    key = refs.pop(ref)
                    out = self._gather(ref, by_key[key], ledger)
                    changed = True
                    if out is not None:  # None: lost and queued again
                        left.discard(key)
                        finished.append(out)
                while not answers.empty():
                    key, result, workdir = answers.get()
                    threads.pop(key).join()
                    left.discard(key)
                    changed = True
                    if isinstance(result, WriteError):
                        raise result
                    if isinstance(result, BaseException):
                        finished.append((by_key[key], self._failed(by_key[key], f"the sweep's launch raised "
                                                                   f"{type(result).__name__}: {result}", ledger), None))
                    else:
                        finished.append((by_key[key], self._scheduled(result, key, ledger), workdir))
                if finished and left:  # the freed resources get their next cells before the results are stored
                    nodes, looked, changed = self.nodes(), time.monotonic(), False
                    yield from start_ready(nodes)
                yield from finished
                self.progress.poll()
        finally:
            for t in threads.values():
                t.join()

    # ---------------------------------------------------------------------------------------------- helpers
    def _gather(self, ref, job: Job, ledger) -> tuple[Job, CellResult, Path | None] | None:
        """A task's answer: its result; a failed result when its code raised; None when its node or process died
        and the ledger queued it again (or a failed result when it has no tries left)."""
        ray = self.ray
        try:
            result, workdir = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:  # the task's code raised: suite's bug or a full disk
            cause = exc.as_instanceof_cause()
            if isinstance(cause, WriteError):
                raise cause from None
            ray.get(ledger.end.remote(job.key))
            return job, self._failed(job, f"the sweep's task raised: {exc}", ledger), None
        except ray.exceptions.RayError as exc:  # its process or node died: try again elsewhere (bounded)
            again = ray.get(ledger.lost.remote(job.key))
            first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
            self.progress.note(f"{job.key}: its node or task died ({type(exc).__name__}: {first}); "
                               + ("running it again on another node" if again else "no tries left"))
            append_runlog(job.run_dir, "cell_lost", cell=job.cell.id, repeat=job.repeat, error=first, again=again)
            if again:
                return None
            return job, self._failed(job, f"its node died under every try ({type(exc).__name__}: {first})",
                                     ledger), None
        return job, self._scheduled(result, job.key, ledger), Path(workdir)

    def _exclusive(self, job: Job, ledger, answers: queue.Queue, stop: threading.Event) -> threading.Thread:
        """A `launcher: ray` cell: launched from this process against the cluster, alone on it (the sweep's
        `stop` stops it as the serial loop's would)."""
        job = replace(job, ray_address=self.address)

        def body():
            try:
                result, workdir = execute(job, stop, None,
                                          on_workdir=lambda w: self.ray.get(ledger.begin.remote(job.key, ALL_NODES,
                                                                                                w.name)))
                self.ray.get(ledger.timed.remote(job.key, timed_window(workdir, result)))
                answers.put((job.key, result, workdir))
            except BaseException as exc:  # noqa: BLE001 - handed to the driver's loop, which raises or records it
                answers.put((job.key, exc, None))
            finally:
                self.ray.get(ledger.end.remote(job.key))

        thread = threading.Thread(target=body, name=f"suite-sweep-{job.key}", daemon=True)
        thread.start()
        return thread

    def _scheduled(self, result: CellResult, key: str, ledger) -> CellResult:
        """The result with where it ran, its tries, and the sweep's cells that shared its node (machine state)."""
        record = self.ray.get(ledger.record.remote(key))
        machine = result.machine
        if machine is not None:
            machine = machine.model_copy(update={"shared_with": record["shared_with"]})
        return result.model_copy(update={"machine": machine, "schedule": Schedule(
            mode=record["mode"], node=record["node"], attempts=max(1, record["attempts"]), lost_on=record["lost_on"])})

    def _failed(self, job: Job, why: str, ledger) -> CellResult:
        """A failed result for a job whose task never gave one (no node fits it, its nodes died, a bug)."""
        workdir = create_work_dir(job.run_dir, job.cell.id, job.repeat)
        now = time.time()
        result = build_result(job.cell, job.repeat, LaunchResult(launcher=job.cell.launcher, started=now, ended=now,
                                                                 error=why), workdir, job.run_dir, job.device,
                              job.session, {"forced_infeasible": job.forced} if job.forced else None, job.prediction)
        return self._scheduled(result.model_copy(update={"status": "failed", "error": why}), job.key, ledger)

    def _cancel(self, refs: dict, by_key: dict, ledger) -> None:
        """Ctrl-C / SIGTERM: the ledger tells every task to stop its launch (torchrun stops its ranks, SIGTERM then
        SIGKILL, as in a serial run); a task still running STOP_WAIT_S later is cancelled with force (its worker
        dies; the launcher under it follows by its parent-death signal).  The cells are noted, never stored."""
        self.ray.get(ledger.stop.remote())
        pending = list(refs)
        if pending:
            _, pending = self.ray.wait(pending, num_returns=len(pending), timeout=STOP_WAIT_S)
        for ref in pending:
            self.ray.cancel(ref, force=True)
        for ref, key in refs.items():
            job = by_key[key]
            workdir = None
            if ref not in pending:
                try:
                    workdir = Path(self.ray.get(ref)[1]).name
                except self.ray.exceptions.RayError:
                    workdir = None  # it died meanwhile: nothing more to say about it
            append_runlog(job.run_dir, "cell_interrupted", cell=job.cell.id, repeat=job.repeat, work_dir=workdir,
                          forced=ref in pending)
            self.progress.note(f"interrupted {key}: its processes were stopped; not recorded")
        if pending:
            self.ray.wait(pending, num_returns=len(pending), timeout=10)
