"""Traces kept: in memory for one plan, and on disk so that a second plan of the same shapes is instant.

A trace depends on the cell's shape (trace.trace_key: model, sequence, strategy, checkpointing, precision,
ranks, micro-batch, ...), on suite's code and on torch.  The disk key hashes all three: the code's digest is
the digest of every .py file of the suite packages a trace runs (TRACED_CODE), so a change to a strategy, the
tracker or a model misses the cache instead of answering from an older code's trace.  A transformers model's key also holds
transformers' version; a model built by your own factory (code outside suite, which can change without the key
knowing) is cached in memory only.

    $SUITE_CACHE_DIR/traces/<key>.json      (default: $XDG_CACHE_HOME/suite or ~/.cache/suite)

One file per trace, written atomically (a reader sees the old file or the whole new one).  A file is data from
a stranger: read at most MAX_ENTRY_BYTES, validated as a `Trace`, and on any problem it is a miss (counted as
`unreadable`) that the next trace overwrites.  Failures are cached in memory only (they may depend on this
machine's torch).  A cache folder that cannot be created or written turns the disk cache off with one note.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from pydantic import ValidationError

from suite.plan import trace as tracing
from suite.plan.trace import TraceError, cell_notes, trace_key
from suite.plan.trace_record import Trace, TraceFailure
from suite.results.store import write_atomic

MAX_ENTRY_BYTES = 4 * 2**20
FORMAT = 1  # of the files; a new format misses every older file


def cache_root() -> Path:
    """Where suite keeps its caches: $SUITE_CACHE_DIR, else $XDG_CACHE_HOME/suite, else ~/.cache/suite."""
    if os.environ.get("SUITE_CACHE_DIR"):
        return Path(os.environ["SUITE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "suite"


# The packages whose code a trace runs (the rest — report, compare, publish, cli, runner, launch — cannot change
# a trace; editing them keeps the cache)
TRACED_CODE = ("models", "strategies", "techniques", "worker", "plan", "data", "scenario", "results", "gates")


@lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of the suite source a trace runs: suite's top-level modules and the TRACED_CODE packages."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    files = [*root.glob("*.py"), *(p for pkg in TRACED_CODE for p in (root / pkg).rglob("*.py"))]
    for path in sorted(files):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


@lru_cache(maxsize=4)
def _version(package: str) -> str:
    """An installed package's version, from its metadata: importing torch costs seconds, and a plan answered
    from the cache needs no torch at all."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "absent"


def disk_key(cell) -> str | None:
    """The file name of a cell's trace on disk; None when it is not cached on disk (your own factory's model)."""
    family = getattr(cell.model, "family", None)
    if family == "python":
        return None
    builder = f"/transformers {_version('transformers')}" if family == "hf" else ""  # it builds hf models
    text = f"{FORMAT}/{trace_key(cell)}/{code_digest()}/{_version('torch')}{builder}"
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class TraceCache:
    """Traces by trace_key: a plan of 1,000 cells traces each distinct shape once, and a shape traced by an
    earlier plan (same code, same torch) is read from disk.  `counts` says how each was answered."""

    def __init__(self, trace: Callable[[Any], Trace] | None = None, disk: Path | bool | None = None):
        """`trace`: the tracer (None: trace_cell).  `disk`: a cache root, True for cache_root(), False for
        memory only; None: cache_root() for the real tracer, memory only for another one (a test's stand-in
        must never leave traces a real plan would read)."""
        self._trace = trace  # None: tracing.trace_cell, looked up at each call
        self._by_key: dict[str, Trace | TraceFailure] = {}
        if disk is None:
            disk = trace is None
        root = cache_root() if disk is True else disk or None
        self.folder: Path | None = None if root is None else Path(root) / "traces"
        self.counts = {"traced": 0, "disk": 0, "memory": 0, "unreadable": 0}
        self.note: str | None = None  # why the disk cache is off, once it is
        self._read: dict[str, Trace | None] = {}  # disk lookups already made (has() then get() read once)

    @property
    def traced(self) -> int:
        """How many traces actually ran."""
        return self.counts["traced"]

    def has(self, cell) -> bool:
        """Whether get(cell) answers without tracing (memory or disk)."""
        return trace_key(cell) in self._by_key or self._load(cell) is not None

    def get(self, cell) -> Trace | TraceFailure:
        key = trace_key(cell)
        found = self._by_key.get(key)
        if found is not None:
            self.counts["memory"] += 1
        else:
            found = self._load(cell)
            if found is not None:
                self.counts["disk"] += 1
            else:
                self.counts["traced"] += 1
                try:
                    found = (self._trace or tracing.trace_cell)(cell)
                    self._save(cell, found)
                except TraceError as exc:
                    found = TraceFailure(error=str(exc))
            self._by_key[key] = found
        extra = cell_notes(cell) if isinstance(found, Trace) else []
        return found.model_copy(update={"notes": found.notes + extra}) if extra else found

    # ------------------------------------------------------------------------------------------- disk
    def _path(self, cell) -> Path | None:
        if self.folder is None:
            return None
        name = disk_key(cell)
        return None if name is None else self.folder / f"{name}.json"

    def _load(self, cell) -> Trace | None:
        key = trace_key(cell)
        if key not in self._read:
            self._read[key] = self._read_file(self._path(cell))
        return self._read[key]

    def _read_file(self, path: Path | None) -> Trace | None:
        if path is None or not path.is_file():
            return None
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_ENTRY_BYTES + 1)
            if len(raw) > MAX_ENTRY_BYTES:
                raise ValueError(f"over {MAX_ENTRY_BYTES} bytes")
            entry = json.loads(raw)
            if not isinstance(entry, dict) or entry.get("format") != FORMAT:
                raise ValueError("not a trace cache entry of this format")
            found = Trace.model_validate(entry.get("trace"))
        except (OSError, ValueError, ValidationError, RecursionError):  # JSONDecodeError is a ValueError
            self.counts["unreadable"] += 1
            return None
        return found

    def _save(self, cell, found: Trace) -> None:
        path = self._path(cell)
        if path is None:
            return
        entry = {"format": FORMAT, "trace_key": trace_key(cell), "code": code_digest(), "torch": _version("torch"),
                 "trace": found.model_dump(mode="json")}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, json.dumps(entry), overwrite=True)
        except OSError as exc:  # the store's WriteError is one; its cause is the system's reason
            cause = exc.__cause__ or exc
            self.note = f"trace cache off: cannot write {path.parent} ({getattr(cause, 'strerror', None) or cause})"
            self.folder = None
