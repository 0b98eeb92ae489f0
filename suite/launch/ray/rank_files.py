"""How a Ray cell's facts come back to suite's files: ranks' records, group starts, checkpoints, failures.

Two channels, one format (WORKDIR/rank<R>.json and WORKDIR/ray_events.jsonl, read by the driver and the runner):

    files     the usual case - the work folder is visible to every rank (one host, or a shared disk: the
              runner's cell.json is there; the ranks agree on it first, so none waits in a report the
              others never make): each rank writes its own `rank_start` file when it enters the training
              function and its RankRecord when it is done.  No ray.train.report call,
              so Ray Train's controller has nothing to wait for at the start and the end of a group;
    reports   the work folder is not there (ranks on machines without a shared disk): each rank reports
              {suite_event: start} and {suite_event: done, record} through ray.train.report, and the
              Reporter callback - which runs in the Train controller, on the driver's node - writes the same
              lines and files (`group_start`, rank<R>.json).

Checkpoints and worker failures always go through Ray (a report with the checkpoint; `after_exception`), so
the Reporter writes `checkpoint` and `worker_failure` lines in both cases.  `group_starts` turns either kind
of start into one list of ranks per attempt of the group (restarts = attempts - 1).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from ray.train import UserCallback

from suite.launch.ray.events import CHECKPOINT, DONE, START, RankFailed
from suite.results.schema import RankRecord
from suite.results.store import write_atomic

EVENTS = "ray_events.jsonl"
STARTS = "ray_starts"  # the files channel's rank starts, a file per rank and attempt




def append(file: Path, **event) -> None:
    """One JSON line (short lines appended with O_APPEND do not interleave between processes)."""
    with open(file, "a", encoding="utf-8") as f:
        f.write(json.dumps({**event, "t": event.get("t", time.time())}) + "\n")


def write_record(workdir: Path, record: RankRecord) -> None:
    write_atomic(workdir / f"rank{record.rank}.json", record.model_dump_json(indent=1), overwrite=True)


def read_events(workdir: Path) -> list[dict]:
    """The event lines (complete ones), then the files channel's `rank_start` events (one file each)."""
    path = workdir / EVENTS
    events = []
    if path.exists():
        events = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
                  if line.strip().endswith("}")]
    for f in sorted((workdir / STARTS).glob("rank*.json")):
        try:
            events.append(json.loads(f.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue  # being replaced right now: the next read has it
    return events


def note_start(workdir: Path, rank: int, facts: dict, t_enter: float) -> int:
    """The files channel's start of one rank: WORKDIR/ray_starts/rank<R>-<attempt>.json, a file per rank and
    attempt (no appends shared between hosts: O_APPEND is not atomic on NFS).  Returns the attempt: how many
    starts of this rank came before."""
    folder = workdir / STARTS
    folder.mkdir(exist_ok=True)
    attempt = len(list(folder.glob(f"rank{rank}-*.json")))
    event = {"event": "rank_start", "rank": rank, "attempt": attempt, **facts, "t": t_enter}
    write_atomic(folder / f"rank{rank}-{attempt}.json", json.dumps(event))  # never replaces an earlier start
    return attempt


def group_starts(events: list[dict]) -> list[list[dict]]:
    """The ranks of every start of the worker group, in order: `group_start` lines (reports channel) as they
    are, `rank_start` lines (files channel) grouped by attempt (a rank's k-th start belongs to attempt k)."""
    groups = [e["ranks"] for e in events if e["event"] == "group_start"]
    per_attempt: dict[int, list[dict]] = {}
    for e in events:
        if e["event"] == "rank_start":
            per_attempt.setdefault(e["attempt"], []).append({k: v for k, v in e.items() if k != "event"})
    groups += [sorted(ranks, key=lambda r: r["rank"]) for _, ranks in sorted(per_attempt.items())]
    return groups


class Reporter(UserCallback):
    """Runs in the Train controller (on the driver's node): turns ray.train.report calls into suite's files."""

    def __init__(self, workdir: str):
        self.workdir = workdir
        self.starts = 0  # group starts seen through reports (the reports channel only)
        self.failures_seen: set[tuple[int, int]] = set()

    def _with_restarts(self, record: RankRecord) -> RankRecord:
        """The record with how many times the group restarted before it (reports channel: the worker cannot
        know; the files channel's workers set it themselves), also in extra["restarts"] for older readers."""
        if not self.starts:
            return record
        restarts = max(0, self.starts - 1)
        return record.model_copy(update={"restarts": restarts, "extra": {**record.extra, "restarts": restarts}})

    def after_report(self, run_context, metrics, checkpoint) -> None:
        workdir, event = Path(self.workdir), metrics[0].get("suite_event")
        if event == START:
            self.starts += 1
            ranks = [{k: m.get(k) for k in ("node_id", "node_ip", "hostname", "pid", "t")} | {"rank": i}
                     for i, m in enumerate(metrics)]
            append(workdir / EVENTS, event="group_start", attempt=self.starts - 1, ranks=ranks)
        elif event == CHECKPOINT:
            append(workdir / EVENTS, event="checkpoint", step=metrics[0]["step"], loss=metrics[0]["loss"],
                   path=checkpoint.path if checkpoint else None)
        elif event == DONE:
            for m in metrics:
                write_record(workdir, self._with_restarts(RankRecord.model_validate_json(m["record"])))
            append(workdir / EVENTS, event="done", attempt=self.starts - 1)

    def after_exception(self, run_context, worker_exceptions) -> None:
        workdir = Path(self.workdir)
        for rank, exc in worker_exceptions.items():
            key = (len(group_starts(read_events(workdir))) if not self.starts else self.starts, rank)
            if key in self.failures_seen:
                continue  # the controller may poll the same failure more than once
            self.failures_seen.add(key)
            failed = find_rank_failed(exc)
            if failed is not None:
                write_record(workdir, self._with_restarts(RankRecord.model_validate_json(failed.record_json)))
            append(workdir / EVENTS, event="worker_failure", attempt=key[0] - 1, rank=rank,
                   error=f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1:] or ''}"[:500])


def find_rank_failed(exc: BaseException | None) -> RankFailed | None:
    """The RankFailed inside whatever Ray wrapped it in (cause chain, RayTaskError.cause)."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, RankFailed):
            return exc
        exc = getattr(exc, "cause", None) or exc.__cause__ or exc.__context__
        seen += 1
    return None


def from_events(workdir: Path, fit_started: float | None, fit_returned: float | None) -> dict:
    """Restarts, placement per attempt, worker-group start and shutdown times, from the event lines and the
    ranks' own timestamps (entered / returned the training function)."""
    events = read_events(workdir)
    starts = group_starts(events)
    facts: dict = {"attempts": len(starts), "restarts": max(0, len(starts) - 1),
                   "worker_failures": [e for e in events if e["event"] == "worker_failure"], "groups": starts}
    if starts and fit_started:
        facts["worker_group_setup_s"] = min(r["t"] for r in starts[0]) - fit_started
    returned = []
    for f in workdir.glob("rank*.json"):
        try:
            returned.append(json.loads(f.read_text(encoding="utf-8"))["extra"]["ray"]["returned_t"])
        except (KeyError, ValueError, OSError):
            continue
    if returned and fit_returned:
        facts["teardown_s"] = fit_returned - max(returned)
    return facts
