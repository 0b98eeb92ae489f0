"""What `suite run --resume` reads from a run folder before it writes anything: the stored scenario, the
first session's options, and the cell results already there.

Everything is read and checked here, up front, so a damaged folder (scenario.yaml or manifest.json missing
or invalid, a truncated cell file) is one DamagedRun error naming the file and what to do, and the resume
writes nothing (no resume-NN.json, no runlog line).  Reading goes through results/reader.py, the one reader.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from suite.results import bounded, reader
from suite.results.schema import CellResult
from suite.scenario import Scenario, ScenarioError
from suite.scenario.yaml_loader import parse_text


Text = Annotated[str, Field(max_length=4096)]


class SavedOptions(BaseModel):
    """The options open_run carries over from the first session (manifest.json extra.options), typed and bounded:
    a resume reads them from a file a stranger may have edited (a list of nulls for --only, 2**53 repeats)."""

    # strict: a "2" is not a number of repeats; other keys (the quiet policy, the scenario file...) are a record
    # of the first session, not carried over, so not judged here
    model_config = ConfigDict(extra="ignore", strict=True)
    repeats: Annotated[int, Field(gt=0, le=10_000)] | None = Field(None, description="--repeats (as Scenario.repeats).")
    shuffle: Annotated[int, Field(ge=-(1 << 63), lt=1 << 63)] | None = Field(None, description="--shuffle SEED.")
    only: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        default_factory=list, max_length=100_000, description="--only cell ids or prefixes.")
    force: bool = Field(False, description="--force.")
    worker_module: Text | None = Field(None, description="The worker module the cells ran.")
    image: Text | None = Field(None, description="--image.")
    ray_address: Text | None = Field(None, description="--ray-address.")


class DamagedRun(Exception):
    """A run folder --resume cannot continue; the message names the file and what to do."""


def _damaged(run_dir: Path, problem: str, missing: bool = False) -> DamagedRun:
    """`problem` names the file and, from the reader, says to repair or move it; add the other way out.
    A missing scenario.yaml or manifest cannot be repaired by moving anything: only a new run helps."""
    if missing:
        return DamagedRun(f"--resume: {problem}: this run folder cannot be resumed; start a new run from the "
                          f"scenario file ({run_dir} stays as it is)")
    if reader.FIX not in problem:
        problem = f"{problem}; {reader.FIX}"
    return DamagedRun(f"--resume: {problem}, or start a new run from the scenario file ({run_dir} stays as it is)")


def stored_scenario(run_dir: Path) -> Scenario:
    """The resolved scenario.yaml the run folder was made with."""
    path = Path(run_dir) / "scenario.yaml"
    try:
        text = bounded.read_text(path, "scenario copy", within=run_dir)
        data = parse_text(str(path), text, lambda root: None)[1]
    except FileNotFoundError:
        raise _damaged(run_dir, f"{path} is missing", missing=True) from None
    except reader.StoreError as exc:
        raise _damaged(run_dir, str(exc)) from exc
    except ScenarioError as exc:
        raise _damaged(run_dir, f"{path}: cannot read it ({' '.join(' '.join(exc.problems).split())[:300]})") from exc
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()  # one line: the first few problems are enough to see the file is not suite's
        problems = "; ".join(f"{'.'.join(str(x) for x in e['loc']) or '<file>'}: {e['msg']}" for e in errors[:3])
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        raise _damaged(run_dir, f"{path}: {problems}{more}") from exc


def check_writable_layout(run_dir: Path) -> None:
    """What a resume appends to must be what suite made: cells/ and work/ real folders, runlog.jsonl absent or a
    regular file (a FIFO would block the append forever; a link could write outside the run folder)."""
    for name, want in (("cells", stat.S_ISDIR), ("work", stat.S_ISDIR), ("runlog.jsonl", stat.S_ISREG)):
        path = run_dir / name
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            if name != "cells":  # runlog and work/ are made when first needed
                continue
            raise _damaged(run_dir, f"{path} is missing", missing=True) from None
        if not want(mode):
            what = "a link" if stat.S_ISLNK(mode) else "not a folder" if want is stat.S_ISDIR else "not a regular file"
            raise _damaged(run_dir, f"{path} is {what}, not what suite wrote there; suite appends to it only as it "
                                    "made it")


def read_stored(run_dir: Path) -> tuple[Scenario, dict, list[CellResult]]:
    """(scenario, options saved by the first session, stored cell results) or DamagedRun."""
    run_dir = Path(run_dir)
    scenario = stored_scenario(run_dir)
    check_writable_layout(run_dir)
    if not os.path.lexists(run_dir / reader.MANIFEST):
        raise _damaged(run_dir, f"{run_dir / reader.MANIFEST} is missing", missing=True)
    try:
        saved = reader.read_manifest(run_dir).extra.get("options", {})
        previous = reader.read_cell_results(run_dir)
    except reader.StoreError as exc:
        raise _damaged(run_dir, str(exc)) from exc
    for path, result in zip(reader.cell_files(run_dir), previous):
        # a record under another cell's name (a copy, a link to another record) would leave its own cell looking
        # undone: resumed, trained, then refused when its result cannot take the name
        if path.name != f"{result.cell_id}-r{result.repeat}.json":
            raise _damaged(run_dir, f"{path} holds the result of {result.cell_id[:40]}-r{result.repeat}, not of "
                                    f"the cell its name says")
    if not isinstance(saved, dict):
        raise _damaged(run_dir, f"{run_dir / reader.MANIFEST}: extra.options is not a mapping")
    try:
        options = SavedOptions.model_validate(saved)
    except ValidationError as exc:
        e = exc.errors()[0]
        where = ".".join(str(x) for x in e["loc"])
        raise _damaged(run_dir, f"{run_dir / reader.MANIFEST}: extra.options.{where}: {e['msg'][:200]}") from None
    return scenario, options.model_dump(include=set(saved) & set(SavedOptions.model_fields)), previous
