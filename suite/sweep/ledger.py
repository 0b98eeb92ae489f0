"""The sweep's state: which jobs wait, which run on which node, and who shared a node with whom.

One `Ledger` per `suite run --schedule pack|node|serial` on a Ray cluster, kept by one Ray actor
(suite/sweep/dispatch.py makes it one with `ray.remote`); the driver asks it which job to start where, and
the tasks on the nodes tell it when their launch began, when their timed steps ran, and when they ended.
Plain Python (no Ray here): the rules are tested without a cluster.

    ledger = Ledger("pack", [Want("a-r0", {"CPU": 2}), Want("b-r0", {"CPU": 1}), ...])   # queue order
    ledger.assign({"n1": {"CPU": 2}, "n2": {"CPU": 1}})  ->  [("a-r0", "n1"), ("b-r0", "n2")]
    ledger.begin("a-r0", "n1", "a-r0-a1")                ->  1      (the attempt's number)
    ledger.timed("a-r0", (t0, t1)); ledger.end("a-r0")
    ledger.shared_with("a-r0")                           ->  ["b-r0"] if b ran on n1 during a's timed steps

The three modes decide only what `assign` hands out:
  serial  one job at a time in the whole cluster (today's order, on a cluster);
  node    at most one job per node: nothing shares a node with a cell's timed steps (timing-grade);
  pack    every job as soon as a node has its resources free, the queue's order first (largest first within
          a round of repeats, see `queue_order`), smaller jobs filling what a larger one leaves.
A job that needs the whole cluster (`exclusive`: a `launcher: ray` cell, whose Ray Train workers Ray places
itself) starts only when nothing else runs, and nothing starts past it while it waits at the head of the queue.

Who shared a node: every attempt's interval on its node, [launch began, launch ended) - the whole launch,
not only the other cell's timed steps, because its setup competes too.  A cell's neighbours are the attempts
of *other* jobs on its node (an exclusive job is on every node) whose interval overlaps its own timed steps
(its whole launch when the worker did not report them).  An attempt on a node that died is `lost`: its job
goes back to the front of the queue and its interval ends at the loss.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

ALL_NODES = "*"  # an exclusive job's node: it spans the cluster


@dataclass(frozen=True)
class Want:
    """One job in the queue: its key (cell-rK) and the resources its task asks for on one node."""

    key: str
    resources: dict[str, float]
    exclusive: bool = False
    nodes: int = 1  # an exclusive job's nodes (its Ray Train workers spread over them)


@dataclass
class Attempt:
    """One try of a job on one node."""

    key: str
    node: str
    number: int
    began: float
    ended: float | None = None
    timed: tuple[float, float] | None = None
    workdir: str | None = None
    lost: bool = False


def fits(need: dict[str, float], free: dict[str, float]) -> bool:
    return all(free.get(k, 0.0) + 1e-9 >= v for k, v in need.items() if v > 0)


@dataclass
class Ledger:
    mode: str  # pack | node | serial
    queue: list[Want]
    max_attempts: int = 3
    attempts: list[Attempt] = field(default_factory=list)
    placed: dict[str, str] = field(default_factory=dict)  # key -> node, assigned and not yet ended
    needs: dict[str, Want] = field(default_factory=dict)
    stopping: bool = False  # the driver was told to stop (Ctrl-C / SIGTERM): running tasks stop their launches

    def __post_init__(self) -> None:
        self.needs = {w.key: w for w in self.queue}

    def stop(self) -> None:
        """Ask every running task to stop its launch (they poll `should_stop`); nothing new is assigned."""
        self.stopping = True
        self.queue.clear()

    def should_stop(self) -> bool:
        return self.stopping

    # ----------------------------------------------------------------------------------------- scheduling
    def assign(self, nodes: dict[str, dict[str, float]]) -> list[tuple[str, str]]:
        """Jobs to start now and the node of each, given the alive nodes' total resources; they count as
        placed from here on.  Jobs no alive node could ever hold are left in the queue (see `unplaceable`)."""
        if ALL_NODES in self.placed.values():
            return []  # an exclusive job has the cluster
        free = self.free(nodes)
        out: list[tuple[str, str]] = []
        for want in list(self.queue):
            if want.exclusive:
                if self.placed:
                    break  # it waits for the cluster to empty, and nothing passes it meanwhile
                out.append((want.key, ALL_NODES))
                self._place(want, ALL_NODES)
                break
            if self.mode == "serial" and self.placed:
                break
            idle = [n for n in free if all(v != n for v in self.placed.values())] if self.mode == "node" else free
            node = next((n for n in sorted(idle) if fits(want.resources, free[n])), None)
            if node is None:
                continue  # a later, smaller job may fit what is free (pack); node/serial: no idle node fits it
            for k, v in want.resources.items():
                free[node][k] = free[node].get(k, 0.0) - v
            out.append((want.key, node))
            self._place(want, node)
            if self.mode == "serial":
                break
        return out

    def _place(self, want: Want, node: str) -> None:
        self.queue.remove(want)
        self.placed[want.key] = node

    def unplaceable(self, nodes: dict[str, dict[str, float]]) -> list[tuple[str, str]]:
        """(key, why) for queued jobs that no alive node holds even when idle; they leave the queue."""
        out = []
        for want in list(self.queue):
            if want.exclusive and want.nodes > len(nodes):
                out.append((want.key, f"it spreads over {want.nodes} nodes; the cluster has {len(nodes)} alive "
                                      f"(--nodes N for a private one)"))
                self.queue.remove(want)
                continue
            if want.exclusive or any(fits(want.resources, r) for r in nodes.values()):
                continue
            biggest = ", ".join(f"{k} {max((r.get(k, 0.0) for r in nodes.values()), default=0):g}"
                                for k in want.resources)
            out.append((want.key, f"it asks for {_fmt(want.resources)} on one node; the cluster's largest "
                                  f"alive node has {biggest or 'nothing'} ({len(nodes)} node(s) alive)"))
            self.queue.remove(want)
        return out

    # ------------------------------------------------------------------------------------ what tasks report
    def begin(self, key: str, node: str, workdir: str | None = None, at: float | None = None) -> int:
        """A task's launch of `key` begins on `node`; returns the attempt's number (1 for the first)."""
        number = 1 + sum(1 for a in self.attempts if a.key == key)
        self.attempts.append(Attempt(key, node, number, time.time() if at is None else at, workdir=workdir))
        if self.placed.get(key) not in (node, ALL_NODES):
            self.placed[key] = node
        return number

    def timed(self, key: str, window: tuple[float, float] | None) -> None:
        last = self._last(key)
        if last is not None and window is not None:
            last.timed = (float(window[0]), float(window[1]))

    def finish(self, key: str, window: tuple[float, float] | None, at: float | None = None) -> None:
        """A task's launch ended (`timed` and `end` in one call: one round trip from the node)."""
        self.timed(key, window)
        self.end(key, at)

    def end(self, key: str, at: float | None = None) -> None:
        last = self._last(key)
        if last is not None and last.ended is None:
            last.ended = time.time() if at is None else at
        self.placed.pop(key, None)

    def lost(self, key: str, at: float | None = None) -> bool:
        """The job's node (or its task's process) died: the attempt ends here and the job goes back to the
        front of the queue; False when it has had max_attempts already (then it stays out)."""
        last = self._last(key)
        if last is not None and last.ended is None:
            last.ended, last.lost = time.time() if at is None else at, True
        self.placed.pop(key, None)
        if sum(1 for a in self.attempts if a.key == key) >= self.max_attempts:
            return False
        self.queue.insert(0, self.needs[key])
        return True

    def _last(self, key: str) -> Attempt | None:
        return next((a for a in reversed(self.attempts) if a.key == key), None)

    # ----------------------------------------------------------------------------------------- reading it
    def record(self, key: str) -> dict:
        """The job's last attempt as the result stores it: node, attempt count, nodes lost, neighbours."""
        last = self._last(key)
        tries = [a for a in self.attempts if a.key == key]
        return {"mode": self.mode, "node": last.node if last else None, "attempts": len(tries),
                "lost_on": [a.node for a in tries if a.lost], "shared_with": self.shared_with(key)}

    def shared_with(self, key: str) -> list[str]:
        """Other jobs that ran on this job's node while its timed steps ran (its launch, when not reported)."""
        me = self._last(key)
        if me is None:
            return []
        start, end = me.timed or (me.began, me.ended if me.ended is not None else math.inf)
        out = set()
        for a in self.attempts:
            if a.key == key or not (a.node == me.node or ALL_NODES in (a.node, me.node)):
                continue
            a_end = a.ended if a.ended is not None else math.inf
            if a.began < end and a_end > start:
                out.add(a.key)
        return sorted(out)

    def running(self) -> list[tuple[str, str, float]]:
        """(key, node, began) of every attempt still running."""
        return [(a.key, a.node, a.began) for a in self.attempts if a.ended is None]

    def free(self, nodes: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        """What the sweep leaves free on each node (its own placements only; other users' are Ray's)."""
        free = {n: dict(r) for n, r in nodes.items()}
        for key, node in self.placed.items():
            for n in (free if node == ALL_NODES else [node]):
                if n in free:
                    for k, v in self.needs[key].resources.items():
                        free[n][k] = free[n].get(k, 0.0) - v
        return free


def _fmt(resources: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in sorted(resources.items())) or "nothing"


def queue_order(keys: list[tuple[str, int, float]]) -> list[str]:
    """(key, round, size) in run order -> the keys largest first within each round of repeats (stable: the run
    order - references first, a --shuffle - decides among equals)."""
    return [k for k, _, _ in sorted(keys, key=lambda x: (x[1], -x[2]))]
