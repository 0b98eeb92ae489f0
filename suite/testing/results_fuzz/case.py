"""One case, and what an edit works on.

A `Case` is the folders of one mutated run folder (kind "folder") or archive (kind "archive"), all below
`where`: the mutated run and the results root holding it, an untouched run of the same scenario (compare's
other side), and `outside/`, the decoys that links out of the run point at (SECRET, written by `_decoy`).
Every edit gets a `_Ctx`: the case, the `choose` that decides everything, and for an archive case the members
being rebuilt.  `_Ctx.safe(path)` is the mutator's one guard: an edit replaces a link but never writes through
one, so a path whose folder resolves outside the case raises `_Unsafe` (the edit is skipped, its reason noted).
The readers every edit shares (`_plain`, `_cells`, `_load`) look only at regular files of a bounded size,
never at a FIFO, a device or a 200 MB file an earlier edit left behind.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from suite.testing.results_fuzz.values import REPO, Choose


@dataclass
class Case:
    """One mutated run folder (kind "folder") or archive (kind "archive"), and what the commands compare it to."""

    where: Path  # everything of the case lives below it
    kind: str
    source: Path  # the real run folder it started from
    run: Path  # the (mutated) run folder; for an archive case, the copy that was packed
    root: Path  # the results root holding `run` (results ls)
    clean: Path  # an untouched run of the same scenario: compare's other side
    archive: Path | None = None
    edits: list[str] = field(default_factory=list)
    swap: bool = False  # compare: the mutated side as the baseline
    leak: bytes | None = None  # bytes of a file outside the run (a link's target) that no output may hold

    @property
    def outside(self) -> Path:
        """Decoys outside the run folder that links point at (see SECRET); no command may write there."""
        return self.where / "outside"

    def describe(self) -> str:
        return f"{self.kind} {self.source.relative_to(REPO)}: " + ("; ".join(self.edits) or "no edit")


# Links out of the run folder point at decoys in the case's own `outside/` folder, never at the system's files:
# the fuzzer runs `run --resume` (which appends and writes), often as root, on folders whose runlog.jsonl or
# cells/ may be links.  A decoy looks like what it stands for; whether a command copied its bytes into an output
# (a leak) or wrote through the link (the decoy changed) is checked after every command.
SECRET = b"root:x:0:0:fuzz-secret-7f3a9c:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"


class _Unsafe(Exception):
    """An edit that would touch something outside the case's folder (through a link an earlier edit made)."""


class _Ctx:
    """What an edit works on: the run folder (its path may change: a rename) and the archive's members."""

    def __init__(self, case: Case, choose: Choose):
        self.case, self.choose = case, choose
        self.members: list[dict] | None = None  # archive cases, after packing: {"name", "type", "data", ...}
        self.sums_stale = False
        self.gzip_edit: Callable[[bytes], bytes] | None = None

    @property
    def run(self) -> Path:
        return self.case.run

    def pick(self, items):
        return items[self.choose(len(items))] if len(items) > 1 else items[0]

    def safe(self, path: Path) -> Path:
        """`path`, if it lies in the case's folder once every link on the way is followed, ready to be written:
        a link, FIFO, socket or device node an earlier edit put at its name is removed first (edits replace such
        things, never write through them: opening an earlier edit's FIFO to write would wait for ever for a
        reader); a folder stays (an edit may mean it); else _Unsafe."""
        base = os.path.realpath(self.case.where)
        real = os.path.realpath(Path(path).parent)
        if real != base and not real.startswith(base + os.sep):
            raise _Unsafe(f"{Path(path).name!r} is outside the case")
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return Path(path)
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            os.unlink(path)
        return Path(path)


MAX_EDIT_BYTES = 8 << 20  # the mutator reads (and copies) only plain files up to this size: never a FIFO, a device


def _plain(p: Path) -> bool:
    """A regular file (not a link) small enough for the mutator to read: what edits may read or copy."""
    try:
        return p.is_file() and not p.is_symlink() and p.stat().st_size <= MAX_EDIT_BYTES
    except OSError:
        return False


def _real_dir(p: Path) -> bool:
    return p.is_dir() and not p.is_symlink()


def _cells(run: Path) -> list[Path]:
    d = run / "cells"
    if not _real_dir(d):
        return []
    try:
        return sorted(p for p in d.iterdir() if p.suffix == ".json" and _plain(p))
    except OSError:
        return []


def _load(path: Path):
    if not _plain(path):
        return None
    try:
        return json.loads(path.read_bytes())
    except (ValueError, RecursionError):
        return None


def _rel(ctx: _Ctx, path: Path) -> str:
    try:
        return str(path.relative_to(ctx.run))
    except ValueError:
        return str(path)


def _remove(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path)


def _decoy(ctx: _Ctx) -> Path:
    """The case's stand-in for /etc/passwd, outside the run folder (see SECRET)."""
    ctx.case.outside.mkdir(exist_ok=True)
    decoy = ctx.case.outside / "passwd"
    if not decoy.exists():
        decoy.write_bytes(SECRET)
    return decoy
