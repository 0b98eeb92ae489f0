"""The one reader of stored results: finding run folders, and loading their manifests and cell results.

Every command that reads results goes through here: `suite results ls/show`, `report`, `compare`, `export`
and `run --resume`.  store.py (the writer) re-exports the read functions the runner uses.

A run folder is a folder named <NNNN>_<gitsha7>_<utc> (RUN_NAME); store.create_run_dir makes it, with cells/
and work/, and the runner writes scenario.yaml and manifest.json into it right after.  Run folders are found
by that name, and only by it, in one of two scopes:
- iter_run_dirs(root): the runs of a results root, root/<scenario>/<run> (`results ls/show`, the latest run
  that `--resume` continues); a run without a readable manifest is still listed, so `ls` can say so;
- find_run_dirs(path): the runs at or below any path (a run folder, a scenario folder, a results tree) that
  hold their manifest.json (`report`, `compare`, `export`): a run folder without one is a run still starting,
  or one killed while starting, and has nothing to read yet.
Every record is validated against suite.results.schema; one without schema_version is version 1 (the first);
one written by a newer suite is refused rather than misread.  This module never imports torch.
"""

from __future__ import annotations

import gc
import os
import re
import contextlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, TypeVar

from pydantic import BaseModel, ValidationError

from suite.results import bounded
from suite.results.bounded import FIX, StoreError  # noqa: F401  (re-exported: every reader's error)
from suite.results.schema import SCHEMA_VERSION, CellResult, Manifest

RUN_NAME = re.compile(r"^(\d{4,})_([0-9a-z]+)_(\d{8}T\d{6}Z)$")
MANIFEST = "manifest.json"
DEFAULT_SCHEMA_VERSION = 1  # records from before the field existed are the first version's
Record = TypeVar("Record", bound=BaseModel)


@dataclass
class Run:
    """One run folder: its manifest, its cell results (sorted by cell id, repeat) and where it lives."""

    path: Path
    manifest: Manifest
    results: list[CellResult] = field(default_factory=list)
    scenario_yaml: str | None = None

    @property
    def label(self) -> str:
        """Short name for tables: <scenario>/<NNNN> (the run number is unique within a scenario folder)."""
        return f"{self.manifest.scenario}/{self.manifest.run_id.split('_')[0]}"


def read_record(model: type[Record], path: Path, what: str, *, within: Path | None = None,
                parent_checked: bool = False) -> Record:
    """One JSON record of `model` (`what` names it in errors, and its size cap: bounded.LIMITS) read through the
    bounded reader, inside the folder `within` (default: the file's own): unreadable, newer or invalid ->
    StoreError.

    A well-formed record is parsed and validated in one pass by pydantic's JSON parser (twice as fast as
    json.loads and then validating, which counts at 20,000 cells); one that fails is read again the careful way,
    to say precisely what is wrong with it."""
    kind = what if what in bounded.LIMITS else "record"
    try:
        text = bounded.read_text(path, kind, within=os.path.dirname(path) if within is None else within,
                                 parent_checked=parent_checked)
    except FileNotFoundError as exc:
        raise StoreError(f"{path}: cannot read {what}: no such file; {FIX}") from exc
    if not bounded.too_deep(text) and not bounded.has_surrogate_escape(text):
        try:
            record = model.model_validate_json(text)
        except ValidationError:
            pass  # below: the careful way names the problem
        else:
            _check_version(path, getattr(record, "schema_version", DEFAULT_SCHEMA_VERSION))
            return record
    data = bounded.parse_json(text, path, kind)
    if not isinstance(data, dict):
        raise StoreError(f"{path}: expected a JSON object, got {type(data).__name__}; {FIX}")
    _check_version(path, data.get("schema_version", DEFAULT_SCHEMA_VERSION))
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])[:120] or '<record>'}: {e['msg'][:200]}"
                             for e in errors[:3])
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        raise StoreError(f"{path}: not a valid {model.__name__}: {problems}{more}; {FIX}") from exc


def _check_version(path: Path, version: object) -> None:
    if not isinstance(version, int) or isinstance(version, bool) or version > SCHEMA_VERSION:
        raise StoreError(f"{path}: schema_version {str(version)[:20]} is newer than this suite reads "
                         f"({SCHEMA_VERSION}); upgrade suite to read it")


def read_cell_result(path: Path, parent_checked: bool = False) -> CellResult:
    """cells/<id>-r<k>.json of a run folder (links may point anywhere inside the run folder, not out of it)."""
    run = os.path.dirname(os.path.dirname(path))
    return read_record(CellResult, path, "cell result", within=run, parent_checked=parent_checked)


def cell_files(run: Path) -> list[Path]:
    """A run's cells/*.json in file-name order; hidden names are skipped (write_atomic's temp files).  Whatever
    else has such a name (a FIFO, a link, a folder) is listed too: reading it names what is wrong, where
    skipping it silently would make `--resume` train that cell again."""
    cells = Path(run) / "cells"
    if not cells.is_dir():
        return []
    with os.scandir(cells) as entries:  # names as strings: sorting 20,000 Paths costs more than reading one
        names = sorted(e.name for e in entries if e.name.endswith(".json") and not e.name.startswith("."))
    return [cells / n for n in names]


def read_cell_results(run: Path) -> list[CellResult]:
    """Every cell result of a run folder, in file-name order (cells/ checked once to lie inside the run)."""
    files = cell_files(run)
    if files:
        bounded.check_inside(Path(run) / "cells", run)
    if len(files) < MANY:
        return [read_cell_result(f, parent_checked=True) for f in files]
    with _no_gc_pauses():
        return [read_cell_result(f, parent_checked=True) for f in files]


MANY = 500  # records: from here on, reading pauses the cyclic garbage collector (below)


@contextmanager
def _no_gc_pauses():
    """Reading thousands of records makes millions of objects, none of them garbage: Python's cyclic collector
    would walk them again and again, while reading and in everything done with them after (more than half of
    `results show`'s time on 20,000 cells).  Off while reading; then what was read is frozen (gc.freeze: kept
    out of later collections; reference counting still frees it).  Garbage there is already is collected first:
    frozen, it would never be (a long-lived process reading many runs would grow without end)."""
    enabled = gc.isenabled()
    if not enabled:  # already paused (load_runs of many runs, or the caller's choice): nothing to add
        yield
        return
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def read_manifest(run: Path) -> Manifest:
    return read_record(Manifest, Path(run) / MANIFEST, "manifest")


def is_run_name(name: str) -> bool:
    return RUN_NAME.match(name) is not None


def run_number(path: Path) -> int:
    return int(RUN_NAME.match(Path(path).name).group(1))


def is_run_dir(path: Path) -> bool:
    """A run folder that holds cells/ (what `results show` and `--resume` accept as a folder given to them)."""
    path = Path(path)
    return path.is_dir() and (path / "cells").is_dir() and is_run_name(path.name)


def iter_run_dirs(root: Path) -> Iterator[Path]:
    """Run folders of a results root (root/<scenario>/<run>/), oldest number first per scenario."""
    root = Path(root)
    if not root.is_dir():
        return
    for scenario in sorted(p for p in root.iterdir() if p.is_dir()):
        yield from sorted((p for p in scenario.iterdir() if p.is_dir() and is_run_name(p.name)), key=run_number)


def latest_run_dir(root: Path, scenario: str) -> Path | None:
    runs = [p for p in iter_run_dirs(root) if p.parent.name == scenario]
    return runs[-1] if runs else None


def find_run_dirs(path: Path) -> list[Path]:
    """Every run folder at or below path, sorted: a folder holding manifest.json, whatever its name (a copied
    baseline may be renamed), or an NNNN_sha_utc folder (one whose manifest is not written yet is skipped)."""
    path = Path(path)
    if not path.exists():
        raise StoreError(f"{path}: no such file or folder")
    if not path.is_dir():
        raise StoreError(f"{path}: not a folder (give a run folder, a scenario folder or a results tree)")
    found = []
    for dirpath, dirnames, _ in os.walk(path):
        here = Path(dirpath)
        has_manifest = os.path.lexists(here / MANIFEST)  # even a FIFO or a link: reading it names the problem
        if has_manifest or is_run_name(here.name):
            dirnames[:] = []  # a run folder holds no further runs
            if has_manifest:
                found.append(here)
            continue
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
    return sorted(found)


def load_run(path: Path) -> Run:
    """One run folder: its manifest and every cell result, sorted by (cell id, repeat)."""
    path = Path(path)
    manifest = read_manifest(path)
    results = sorted(read_cell_results(path), key=lambda r: (r.cell_id, r.repeat))
    return Run(path, manifest, results, read_scenario_copy(path))


def read_scenario_copy(run: Path) -> str | None:
    """The run folder's scenario.yaml as text (bounded, UTF-8), None when it has none; StoreError if damaged."""
    path = Path(run) / "scenario.yaml"
    if not os.path.lexists(path):
        return None
    try:
        return bounded.read_text(path, "scenario copy", within=run)
    except FileNotFoundError:  # a dangling link: read_bytes names it; a file removed meanwhile: none
        return None


def load_runs(paths: Iterable[Path | str]) -> list[Run]:
    """All runs under the given paths, each once, oldest first (by manifest created_at, then run id)."""
    found: dict[Path, Path] = {}
    for p in paths:
        dirs = find_run_dirs(Path(p))
        if not dirs:
            raise StoreError(f"{p}: no run folders (folders with a manifest.json) found below it")
        for d in dirs:
            found.setdefault(d.resolve(), d)
    # many small runs count like one large one: the collector pauses once for all of them (see _no_gc_pauses)
    many = sum(len(cell_files(d)) for d in found.values()) >= MANY
    with _no_gc_pauses() if many else contextlib.nullcontext():
        seen = {key: load_run(d) for key, d in found.items()}
    return sorted(seen.values(), key=lambda r: (r.manifest.created_at, r.manifest.run_id, str(r.path)))

