"""Run folders on disk: created exclusively, written atomically, never overwritten.

Layout of one invocation of `suite run` (a *run folder*):

    results/<scenario>/<NNNN>_<gitsha7>_<utcstamp>/
        scenario.yaml           the resolved scenario (every default filled in)
        manifest.json           the environment (Manifest); resume-<NN>.json for each --resume
        runlog.jsonl            the runner's own events: run/cell start and end, interruption, resume
        cells/<cell>-r<k>.json  one CellResult per cell and repeat
        work/<cell>-r<k>-a<n>/  attempt n of that cell: cell.json, launcher.log, rank<R>.json, events.jsonl

NNNN is one more than the highest number already taken in the scenario's folder.  A number is taken by
creating `.NNNN.reserved` there with O_EXCL (which fails when the file exists), before the folder is made:
the folder's name also holds the second it was made, so mkdir alone would let two runs started in different
seconds both be 0001.  A run that finds the number reserved, or (once it holds the reservation) finds a
folder of that number, tries the next one; the reservation is removed once the folder exists.  Every JSON record is first
written to a temp file in the same folder, flushed to disk, then linked to its final name: a reader sees
either nothing or the whole record, and `os.link` refuses an existing name, so no record is ever replaced.
Reading them back is reader.py's.

Any OSError while writing (a full disk, a read-only folder, a file where a folder should be) is raised as
WriteError, naming the path: the CLI tells "suite could not write its results" (exit 3) from a bad input (2)
and a failed cell (1).
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

# Reading lives in reader.py (one reader for every command); the names the runner reads through are re-exported.
from suite.results.reader import (RUN_NAME, StoreError, is_run_dir, iter_run_dirs, latest_run_dir,  # noqa: F401
                                  read_cell_result, read_cell_results, read_manifest)
from suite.results.schema import CellResult, Manifest


RESERVED = ".{number:04d}.reserved"  # a run number's reservation in the scenario folder (hidden: readers skip it)
WHAT_TO_DO = "free some space, or give a writable --results folder"


class WriteError(OSError):
    """suite could not write under its results folder; the message names the path and what to do."""


def _cannot_write(path: Path, exc: OSError) -> WriteError:
    where = exc.filename or path
    return WriteError(f"{where}: cannot write results ({exc.strerror or exc}); {WHAT_TO_DO}")


@contextmanager
def writing(path: Path):
    """Any OSError but a WriteError (already naming its path) inside becomes a WriteError naming `path`."""
    try:
        yield
    except WriteError:
        raise
    except OSError as exc:
        raise _cannot_write(Path(path), exc) from exc


def write_file(path: Path, data: str | bytes) -> Path:
    """A report's, an export's or a site's file: its folder made, written atomically over what was there, any
    OS refusal (read-only, full, a file where a folder should be) one WriteError naming the path (exit 3)."""
    path = Path(path)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            raise WriteError(f"{path}: cannot write results (a folder is in the way); {WHAT_TO_DO}")
        written = write_atomic(path, data, overwrite=True)
        written.chmod(0o644)  # made to be shared (mkstemp's 0600 would keep it from others)
        return written


def utc_stamp(now: datetime | None = None) -> str:
    return (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")


def utc_iso(t: float | None = None) -> str:
    stamp = datetime.fromtimestamp(t, timezone.utc) if t is not None else datetime.now(timezone.utc)
    return stamp.isoformat(timespec="seconds")


def write_atomic(path: Path, text: str | bytes, *, overwrite: bool = False) -> Path:
    """Write `text` (str: UTF-8; or bytes) to `path` atomically; refuse (StoreError) when it exists unless
    `overwrite`.

    The temp file lives in the target folder (same file system, so the final link/rename is atomic) and is
    removed on every path out of this function, success or failure.
    """
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise _cannot_write(path, exc) from exc
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8") if isinstance(text, str) else text)
            f.flush()
            os.fsync(f.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # fails with FileExistsError instead of replacing
    except FileExistsError:
        raise StoreError(f"{path}: exists already; results are never overwritten") from None
    except OSError as exc:
        raise _cannot_write(path, exc) from exc
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _number_used(base: Path, number: int) -> bool:
    return any((m := RUN_NAME.match(p.name)) and int(m.group(1)) == number for p in base.iterdir())


def _taken(base: Path) -> int:
    """The highest run number used in a scenario folder: run folders (any suite version) and reservations."""
    numbers = [0]
    for p in base.iterdir():
        m = RUN_NAME.match(p.name)
        if m:
            numbers.append(int(m.group(1)))
        elif p.name.startswith(".") and p.name.endswith(".reserved") and p.name[1:-9].isdigit():
            numbers.append(int(p.name[1:-9]))
    return max(numbers)


def create_run_dir(root: Path, scenario: str, git_commit: str | None, now: datetime | None = None) -> Path:
    """Make results/<scenario>/<NNNN>_<sha7>_<utc>/ with the next free number (reserved with O_EXCL first)."""
    base = Path(root) / scenario
    sha = (git_commit or "nogit")[:7]
    stamp = utc_stamp(now)
    try:
        base.mkdir(parents=True, exist_ok=True)
        number = _taken(base) + 1
        for _ in range(1000):  # another run may reserve a number between our listing and our reservation
            reservation = base / RESERVED.format(number=number)
            try:
                os.close(os.open(reservation, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                number += 1
                continue
            try:
                # Holding the reservation, look again: a run that reserved this number before us has made its
                # folder before it released the reservation, so its folder is visible now.
                if _number_used(base, number):
                    number += 1
                    continue
                run = base / f"{number:04d}_{sha}_{stamp}"
                run.mkdir()
                (run / "cells").mkdir()
                (run / "work").mkdir()
                return run
            finally:
                reservation.unlink(missing_ok=True)  # the folder now holds the number: no litter left behind
    except FileExistsError as exc:  # base (or a folder above it) is a file: mkdir(exist_ok) says "exists"
        raise WriteError(f"{base}: cannot make the results folder, a file is in the way; {WHAT_TO_DO}") from exc
    except OSError as exc:
        raise _cannot_write(base, exc) from exc
    raise StoreError(f"{base}: could not find a free run number near {number}")


LOCK = ".lock"  # hidden: no reader lists it, pack leaves it out


def lock_run(run: Path) -> int:
    """Hold `run`'s lock for this session (an flock on <run>/.lock; the kernel drops it when the process ends,
    kill -9 included): the file descriptor, to give to unlock_run.  Another session holding it is a
    StoreError naming its pid (exit 2), before this one writes anything."""
    path = Path(run) / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        raise _cannot_write(path, exc) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
        os.close(fd)
        raise StoreError(f"{run}: another suite session (pid {holder[:12]}) is running this run folder; wait for "
                         "it to end (or stop it), then --resume") from None
    except OSError as exc:
        os.close(fd)
        raise _cannot_write(path, exc) from exc
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def unlock_run(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)  # closing the descriptor releases the flock


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
        except OSError as exc:
            raise _cannot_write(work, exc) from exc


def cell_path(run: Path, cell_id: str, repeat: int) -> Path:
    return run / "cells" / f"{cell_id}-r{repeat}.json"


def write_cell_result(run: Path, result: CellResult) -> Path:
    path = cell_path(run, result.cell_id, result.repeat)
    with writing(path):
        return write_atomic(path, result.model_dump_json(indent=1))


def write_manifest(run: Path, manifest: Manifest, name: str = "manifest.json") -> Path:
    with writing(Path(run) / name):
        return write_atomic(Path(run) / name, manifest.model_dump_json(indent=1))


def next_resume_name(run: Path) -> str:
    n = 1
    while (Path(run) / f"resume-{n:02d}.json").exists():
        n += 1
    return f"resume-{n:02d}.json"


def append_runlog(run: Path, event: str, **fields) -> None:
    """One JSON line per runner event; appends only (O_APPEND), so earlier lines are never rewritten."""
    line = json.dumps({"event": event, "t": datetime.now(timezone.utc).timestamp(), **fields}, default=str)
    path = Path(run) / "runlog.jsonl"
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    except OSError as exc:
        raise _cannot_write(path, exc) from exc
