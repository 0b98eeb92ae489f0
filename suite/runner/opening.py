"""What `suite run` reads before it writes anything: the scenario (or the run folder to resume) and the cells
--only selects.  Every problem here is a RunError (or the scenario's own ScenarioError): nothing was run."""

from __future__ import annotations

from pathlib import Path

from suite.gates.band import band_references
from suite.gates.loss import is_reference, reference_of
from suite.results import reader
from suite.results.schema import CellResult
from suite.runner.resume import DamagedRun, read_stored
from suite.scenario import Cell, expand, load_cells, load_scenario, Scenario


class RunError(Exception):
    """A problem with the request itself (bad --only id, nothing to resume); nothing was run."""


def select_cells(cells: list[Cell], only: list[str]) -> tuple[list[Cell], list[str]]:
    """Cells named by --only (id or unique id prefix), plus the references their match and band gates need."""
    if not only:
        return cells, []
    chosen: list[Cell] = []
    for key in only:
        hits = [c for c in cells if c.id.startswith(key)]
        if len(hits) != 1:
            what = "no cell" if not hits else f"{len(hits)} cells"
            ids = ", ".join(c.id for c in cells)
            raise RunError(f"--only {key}: {what} of the scenario match; cell ids: {ids}")
        chosen += [h for h in hits if h not in chosen]
    notes = []
    for c in list(chosen):
        match = c.convergence.match if c.convergence else None
        ref = reference_of(c, cells, match) if match else None
        if ref is not None and ref not in chosen:
            chosen.append(ref)
            notes.append(f"added {ref.id}: the reference of {c.id}'s match gate ({match.axis}={match.value})")
        band = c.convergence.band if c.convergence else None
        if band is not None and not is_reference(c, band):
            for ref in band_references(c, cells, band):
                if ref not in chosen:
                    chosen.append(ref)
                    notes.append(f"added {ref.id}: seed {ref.seed} of {c.id}'s band ({band.axis}={band.value})")
    return [c for c in cells if c in chosen], notes


def open_scenario(file: Path | None,
                  opts) -> tuple[Path | None, Scenario, list[Cell], dict, list[CellResult]]:
    """opts: run.RunOptions.  (existing run folder or None, scenario, cells, options saved by the session that
    made the folder, its stored cell results).  A resume reads everything it needs here, before anything is
    written: a damaged run folder is a RunError naming the file, and leaves no resume-NN.json behind."""
    if not opts.resume:
        if file is None:
            raise RunError("a scenario file is needed (or --resume RUN_DIR)")
        scenario, cells = load_cells(str(file))
        return None, scenario, cells, {}, []
    run_dir = opts.resume_dir
    if run_dir is None:
        if file is None:
            raise RunError("--resume needs the scenario file or a run folder")
        name = load_scenario(file)[0].name
        run_dir = reader.latest_run_dir(opts.results, name)
        if run_dir is None:
            raise RunError(f"--resume: no run folder of scenario {name!r} under {opts.results}")
    if not reader.is_run_dir(run_dir):
        raise RunError(f"--resume: {run_dir} is not a run folder (NNNN_sha_utc with cells/)")
    try:
        stored, saved, previous = read_stored(run_dir)
    except DamagedRun as exc:
        raise RunError(str(exc)) from None
    if file is not None and load_scenario(file)[0].model_dump(mode="json") != stored.model_dump(mode="json"):
        raise RunError(f"--resume: {file} differs from {run_dir}/scenario.yaml; start a new run instead")
    return run_dir, stored, expand(stored), saved, previous
