"""Read stored results: find run folders under the given paths and return validated, typed records.

A run folder is what `suite run` writes, results/<scenario>/<NNNN>_<gitsha7>_<utc>/:
    manifest.json            Manifest (the environment)
    scenario.yaml            the resolved scenario (kept as text; the report does not need it)
    cells/<cell_id>-r<repeat>.json   CellResult, one per cell and repeat
A path given to the report may be a run folder, a scenario folder or a whole results tree: every folder with a
manifest.json below it is a run.  Records are validated against suite.results.schema; a record written by a
newer suite (schema_version above ours) is refused rather than misread.  This module never imports torch.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from pydantic import BaseModel, ValidationError

from suite.results.schema import SCHEMA_VERSION, CellResult, Manifest


class LoadError(Exception):
    """Stored results that cannot be read; the message names the file and the problem."""


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


def _validate(model: type[BaseModel], path: Path) -> BaseModel:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LoadError(f"{path}: cannot read JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise LoadError(f"{path}: expected a JSON object, got {type(data).__name__}")
    version = data.get("schema_version", 1)
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise LoadError(f"{path}: schema_version {version!r} is newer than this suite reads ({SCHEMA_VERSION}); "
                        "upgrade suite to read it")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '<record>'}: {e['msg']}" for e in exc.errors())
        raise LoadError(f"{path}: not a valid {model.__name__}: {problems}") from exc


def find_run_dirs(path: Path) -> list[Path]:
    """Every run folder (a folder holding manifest.json) at or below path, sorted."""
    path = Path(path)
    if not path.exists():
        raise LoadError(f"{path}: no such file or folder")
    if not path.is_dir():
        raise LoadError(f"{path}: not a folder (give a run folder, a scenario folder or a results tree)")
    if (path / "manifest.json").is_file():
        return [path]
    found = []
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        if "manifest.json" in filenames:
            found.append(Path(dirpath))
            dirnames[:] = []  # a run folder's cells/ holds no further runs
    return sorted(found)


def load_run(path: Path) -> Run:
    """Load one run folder: its manifest and every cells/*.json record (temp and hidden files skipped)."""
    path = Path(path)
    manifest = _validate(Manifest, path / "manifest.json")
    results = []
    cells = path / "cells"
    if cells.is_dir():
        for f in sorted(cells.iterdir()):
            if f.suffix == ".json" and not f.name.startswith(".") and f.is_file():
                results.append(_validate(CellResult, f))
    results.sort(key=lambda r: (r.cell_id, r.repeat))
    scenario = path / "scenario.yaml"
    return Run(path, manifest, results, scenario.read_text(encoding="utf-8") if scenario.is_file() else None)


def load_runs(paths: Iterable[Path | str]) -> list[Run]:
    """All runs under the given paths, each once, oldest first (by manifest created_at, then run id)."""
    seen: dict[Path, Run] = {}
    for p in paths:
        dirs = find_run_dirs(Path(p))
        if not dirs:
            raise LoadError(f"{p}: no run folders (folders with a manifest.json) found below it")
        for d in dirs:
            key = d.resolve()
            if key not in seen:
                seen[key] = load_run(d)
    return sorted(seen.values(), key=lambda r: (r.manifest.created_at, r.manifest.run_id, str(r.path)))
