"""Where a cell's wall time went, per launcher: a Ray cell's phases beside the torchrun cell of the same work.

A torchrun cell's time is its Overhead (launch, setup, train, teardown: they add up to the wall).  A Ray cell's
is extra.ray.phases (suite/launch/ray/session.py), folded into the same four plus what only Ray has:
    start        torchrun: starting torchrun and its ranks;  Ray: waiting for nodes + Ray Train's worker-group
                 start (controller and worker actors, their imports, the process group) - up to suite's setup
    setup        suite's worker setup (model, strategy, data): the same code under both
    train        the steps (and evaluations); under Ray without the checkpoint writes, which come apart
    checkpoint   Ray only: gathering, writing and reporting checkpoints (the upload runs in the background)
    end          torchrun: teardown;  Ray: the group's shutdown, restoring the best checkpoint, the answer's
                 way back (`other`)
    one-time     Ray only: the private cluster's and the run's driver's start, outside the wall, on the cell
                 that paid them (0 on the others)
The torchrun twin of a Ray cell is a torchrun cell in the same report with the same axes, nodes and launcher aside (a
torchrun cell runs on one node); `x twin` is the Ray cell's wall over the twin's.  The section only appears
when the report holds Ray cells.
"""

from __future__ import annotations

from suite.axes import AXES
from suite.report.pivots import Pivot
from suite.report.tables import CellRow

HEADER = ["cell", "launcher", "start s", "setup s", "train s", "checkpoint s", "end s", "wall s", "x twin",
          "one-time s"]
_TWIN_AXES = tuple(a for a in AXES if a not in ("nodes", "launcher"))


def _num(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def split(result) -> dict[str, float | None] | None:
    """The five parts and the wall of one result (None without the facts: failed early, older results)."""
    ray = (result.extra or {}).get("ray") or {}
    ph = ray.get("phases")
    if result.launcher == "ray" and ph:
        start = (ph.get("wait_nodes") or 0.0) + (ph.get("worker_group_start") or 0.0)
        end = sum(ph.get(k) or 0.0 for k in ("worker_group_shutdown", "restore_best", "other"))
        return {"start": start, "setup": ph.get("setup"), "train": ph.get("train"), "checkpoint": ph.get("checkpoint"),
                "end": end, "wall": ph.get("wall"),
                "one_time": (ph.get("cluster_start") or 0.0) + (ph.get("driver_start") or 0.0)}
    o = result.overhead_s
    if o is None:
        return None
    return {"start": o.launch, "setup": o.setup, "train": o.train, "checkpoint": None, "end": o.teardown,
            "wall": o.wall, "one_time": None}


def launch_cost_pivot(rows: list[CellRow]) -> list[Pivot]:
    """[the section] when some row holds Ray results, else []."""
    results = [(row, r, split(r)) for row in rows for r in row.results]
    if not any(r.launcher == "ray" for _, r, _ in results):
        return []
    def key(row: CellRow) -> tuple:
        return tuple(row.get(a) for a in _TWIN_AXES)

    ray_keys = {key(row) for row, r, _ in results if r.launcher == "ray"}
    twins: dict[tuple, float] = {}
    for row, r, s in results:
        if r.launcher != "ray" and s is not None:
            twins.setdefault(key(row), s["wall"])
    body = []
    for row, r, s in results:
        if s is None or (r.launcher != "ray" and key(row) not in ray_keys):
            continue  # torchrun cells without a Ray cell of the same work are the cell table's business
        twin = twins.get(key(row)) if r.launcher == "ray" else None
        parts = [_num(s[k]) for k in ("start", "setup", "train", "checkpoint", "end", "wall")]
        body.append([f"{r.cell_id}-r{r.repeat}", r.launcher, *parts, _num(s["wall"] / twin if twin else None),
                     _num(s["one_time"])])
    notes = ["start: torchrun's launch / Ray's wait for nodes + worker-group start; end: torchrun's teardown / "
             "Ray's group shutdown + best-checkpoint restore + the answer's way back",
             "one-time: the private Ray cluster's and the run's driver's start, on the cell that paid them, "
             "outside its wall",
             "x twin: wall over the torchrun cell with the same axes (nodes aside) in this report"]
    return [Pivot("launch-cost", "Where a cell's time went, per launcher",
                  "What does a Ray cell cost beyond a torchrun cell of the same work, and in which phase?",
                  HEADER, body, notes)]
