"""The site's memory: `index.json`, every run ever published, and which pages were rendered from what.

A published run is keyed by a digest of its manifest (the manifest names the run, its machine and its time, so
two machines' run 0001 of one scenario are two keys).  The site keeps the manifest whole and a *slim* copy of
each cell result: every field `suite compare` and the pages read, with the per-step lists cut down — losses
and gradient norms dropped (the final loss stays), the measured step times replaced by their median.  The
timing checks judge one value per repeat, that median, so compare gives the same verdicts on slim records as
on the full ones (tests/unit/test_publish.py checks it).  The held-out evaluations (`eval`, a point per
evaluation: small) and `time_to_target` are kept whole: the held-out checks and columns read the last point.
Any other float that is not finite (a NaN held-out loss, an infinite perplexity) is kept as the string "NaN" /
"Infinity" / "-Infinity", which the record's model reads back as the float, so index.json stays plain JSON.  Publishing
again skips a run folder whose key is known and whose cells are unchanged (same file names and sizes): only
new nights are read from disk.

index.json is also the site's machine-readable face: besides `runs` and `pages` (the state) it holds what the
pages show (`scenarios`, `flagged`, `series`), rewritten on every publish.  A site written by another format
version is refused rather than misread.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

from pydantic import ValidationError

from suite import __version__, stats
from suite.results import bounded, reader
from suite.results.reader import Run
from suite.results.schema import CellResult, Manifest
from suite.results.store import WriteError, write_atomic

FORMAT, VERSION = "suite-site", 1
INDEX = "index.json"
KEY = re.compile(r"[0-9a-f]{16}")
ERROR_TAIL = 500  # characters of a failed cell's error kept (the run folder has all of it)


class SiteError(Exception):
    """A site folder that cannot be published into (not a site, another format, damaged index.json)."""


@dataclass
class SiteState:
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> path, fingerprint, manifest, results
    pages: dict[str, str] = field(default_factory=dict)            # site-relative path -> digest of its data


def run_key(manifest: Manifest) -> str:
    return hashlib.sha256(manifest.model_dump_json().encode()).hexdigest()[:16]


def fingerprint(run_dir: Path) -> list[list[Any]]:
    """What decides whether a known run must be read again: its cell files' names and sizes."""
    return [[f.name, f.stat().st_size] for f in reader.cell_files(run_dir)]


def slim(result: CellResult) -> CellResult:
    """The result without its per-step lists (see the module docstring); `eval` and `time_to_target` stay.  A
    final loss that is not finite (a diverged cell) becomes None, as compare reads it anyway."""
    times = [stats.median(result.step_times_s)] if result.step_times_s else []
    error = result.error[-ERROR_TAIL:] if result.error else result.error
    loss = result.final_loss if result.final_loss is not None and math.isfinite(result.final_loss) else None
    return result.model_copy(update={"losses": [], "grad_norms": [], "step_times_s": times, "error": error,
                                     "final_loss": loss})


def _plain(value: Any) -> Any:
    """A record's JSON with every non-finite float as the string pydantic reads back as it: plain JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def record(result: CellResult) -> dict[str, Any]:
    """The slim result as index.json keeps it."""
    return _plain(json.loads(slim(result).model_dump_json()))


def load_state(site: Path) -> SiteState:
    """The state of an existing site; an empty one for a missing or empty folder; SiteError for anything else."""
    index = site / INDEX
    if site.exists() and not site.is_dir():
        raise WriteError(f"{site}: a file is in the way of the site folder; give --out a folder (new, empty, or "
                         "an earlier site)")
    if not index.is_file():
        if site.exists() and (not site.is_dir() or any(site.iterdir())):
            raise SiteError(f"{site}: not a suite site (no {INDEX}) and not empty: publish into a new or empty "
                            "folder, or into a folder an earlier `suite publish` wrote")
        return SiteState()
    try:
        doc = bounded.read_json(index, "site index", within=site)
    except (OSError, reader.StoreError) as exc:
        raise SiteError(f"{index}: cannot read the site's index: {exc}; publish into a new folder") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        found = repr(doc.get("format"))[:40] if isinstance(doc, dict) else "'?'"
        raise SiteError(f"{index}: not a suite site index (format {found})")
    if doc.get("version") != VERSION:
        raise SiteError(f"{index}: site format version {repr(doc.get('version'))[:40]}, this suite writes {VERSION}: "
                        "publish into a new folder")
    runs, pages = doc.get("runs"), doc.get("pages")
    if not isinstance(runs, dict) or not isinstance(pages, dict):
        raise SiteError(f"{index}: damaged (runs / pages missing); publish into a new folder")
    # keys become file names (runs/<key>.html): only what run_key makes
    bad = next((k for k, v in runs.items() if not KEY.fullmatch(str(k)) or not isinstance(v, dict)), None)
    if bad is not None:
        raise SiteError(f"{index}: damaged (run {str(bad)[:40]!r} is not a run key with a record); publish into a "
                        "new folder")
    return SiteState(runs=runs, pages={str(k): str(v) for k, v in pages.items()})


def ingest(paths: Iterable[Path], state: SiteState, progress: Callable[[str], None]) -> tuple[list[str], int]:
    """Add the run folders at or below `paths` to the state: (keys added or refreshed, runs already known)."""
    added: list[str] = []
    known = 0
    for path in paths:
        found = reader.find_run_dirs(path)
        if not found:  # a typo, or a night that wrote nothing: say so rather than publish without it
            raise SiteError(f"{path}: no run folders (with a manifest.json) at or below it")
        for run_dir in found:
            manifest = reader.read_manifest(run_dir)
            key, fp = run_key(manifest), fingerprint(run_dir)
            if key in added:  # the same run twice in one call (a copy of it): the first one read counts
                progress(f"skipped {run_dir}: the same run as one read already (same manifest)")
                continue
            if key in state.runs and state.runs[key].get("fingerprint") == fp:
                known += 1
                continue
            results = reader.read_cell_results(run_dir)
            state.runs[key] = {"path": str(run_dir), "fingerprint": fp,
                               "manifest": _plain(manifest.model_dump(mode="json")),
                               "results": [record(r) for r in results]}
            added.append(key)
            progress(f"read {run_dir} ({len(results)} result(s))")
    return added, known


def runs_of(state: SiteState, site: Path) -> dict[str, Run]:
    """key -> Run (path: where it was published from; the folder need not exist any more)."""
    out: dict[str, Run] = {}
    for key, entry in state.runs.items():
        try:
            manifest = Manifest.model_validate(entry["manifest"])
            results = [CellResult.model_validate(r) for r in entry["results"]]
        except (KeyError, TypeError, ValidationError) as exc:
            raise SiteError(f"{site / INDEX}: run {key} is damaged ({str(exc).splitlines()[0]}); publish into a "
                            "new folder") from exc
        out[key] = Run(path=Path(str(entry.get("path", key))), manifest=manifest,
                       results=sorted(results, key=lambda r: (r.cell_id, r.repeat)))
    return out


def _finite(value: Any) -> Any:
    """JSON for other tools: NaN / inf (a diverged cell's loss) become null outside the runs' own records."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def save_state(site: Path, state: SiteState, shown: dict[str, Any]) -> Path:
    doc = {"format": FORMAT, "version": VERSION, "suite_version": __version__,
           "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), **_finite(shown),
           "runs": state.runs, "pages": state.pages}
    path = write_atomic(site / INDEX, json.dumps(doc, separators=(",", ":"), allow_nan=False) + "\n", overwrite=True)
    path.chmod(0o644)  # served with the pages
    return path
