"""Run folders on disk: created exclusively, written atomically, never overwritten.

Layout of one invocation of `suite run` (a *run folder*):

    results/<scenario>/<NNNN>_<gitsha7>_<utcstamp>/
        scenario.yaml           the resolved scenario (every default filled in)
        manifest.json           the environment (Manifest); resume-<NN>.json for each --resume
        runlog.jsonl            the runner's own events: run/cell start and end, interruption, resume
        cells/<cell>-r<k>.json  one CellResult per cell and repeat
        work/<cell>-r<k>-a<n>/  attempt n of that cell: cell.json, launcher.log, rank<R>.json, events.jsonl

NNNN is one more than the highest number already in the scenario's folder; the folder is made with mkdir
(which fails when it exists), so two runs started at once never share a folder.  Every JSON record is first
written to a temp file in the same folder, flushed to disk, then linked to its final name: a reader sees
either nothing or the whole record, and `os.link` refuses an existing name, so no record is ever replaced.
Reading them back is reader.py's.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path

# Reading lives in reader.py (one reader for every command); the names the runner reads through are re-exported.
from suite.results.reader import (RUN_NAME, StoreError, is_run_dir, iter_run_dirs, latest_run_dir,  # noqa: F401
                                  read_cell_result, read_cell_results, read_manifest)
from suite.results.schema import CellResult, Manifest


def utc_stamp(now: datetime | None = None) -> str:
    return (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")


def utc_iso(t: float | None = None) -> str:
    stamp = datetime.fromtimestamp(t, timezone.utc) if t is not None else datetime.now(timezone.utc)
    return stamp.isoformat(timespec="seconds")


def write_atomic(path: Path, text: str, *, overwrite: bool = False) -> Path:
    """Write `text` to `path` atomically; refuse (StoreError) when it exists unless `overwrite`.

    The temp file lives in the target folder (same file system, so the final link/rename is atomic) and is
    removed on every path out of this function, success or failure.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # fails with FileExistsError instead of replacing
            except FileExistsError:
                raise StoreError(f"{path}: exists already; results are never overwritten") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def create_run_dir(root: Path, scenario: str, git_commit: str | None, now: datetime | None = None) -> Path:
    """Make results/<scenario>/<NNNN>_<sha7>_<utc>/ with the next free number (exclusive mkdir)."""
    base = Path(root) / scenario
    base.mkdir(parents=True, exist_ok=True)
    sha = (git_commit or "nogit")[:7]
    stamp = utc_stamp(now)
    number = 1 + max((int(m.group(1)) for m in (RUN_NAME.match(p.name) for p in base.iterdir()) if m), default=0)
    for _ in range(1000):  # another process may take a number between our listing and our mkdir
        run = base / f"{number:04d}_{sha}_{stamp}"
        try:
            run.mkdir()
        except FileExistsError:
            number += 1
            continue
        (run / "cells").mkdir()
        (run / "work").mkdir()
        return run
    raise StoreError(f"{base}: could not find a free run number near {number}")


def create_work_dir(run: Path, cell_id: str, repeat: int) -> Path:
    """A fresh folder for one attempt of a cell (a resumed cell gets the next attempt number)."""
    attempt = 1
    while True:
        work = run / "work" / f"{cell_id}-r{repeat}-a{attempt}"
        try:
            work.mkdir(parents=True)
            return work
        except FileExistsError:
            attempt += 1


def cell_path(run: Path, cell_id: str, repeat: int) -> Path:
    return run / "cells" / f"{cell_id}-r{repeat}.json"


def write_cell_result(run: Path, result: CellResult) -> Path:
    return write_atomic(cell_path(run, result.cell_id, result.repeat), result.model_dump_json(indent=1))


def write_manifest(run: Path, manifest: Manifest, name: str = "manifest.json") -> Path:
    return write_atomic(Path(run) / name, manifest.model_dump_json(indent=1))


def next_resume_name(run: Path) -> str:
    n = 1
    while (Path(run) / f"resume-{n:02d}.json").exists():
        n += 1
    return f"resume-{n:02d}.json"


def append_runlog(run: Path, event: str, **fields) -> None:
    """One JSON line per runner event; appends only (O_APPEND), so earlier lines are never rewritten."""
    line = json.dumps({"event": event, "t": datetime.now(timezone.utc).timestamp(), **fields}, default=str)
    with open(Path(run) / "runlog.jsonl", "a", encoding="utf-8") as f:
        f.write(line + "\n")
