"""Several nights of the smoke scenario on four machines, for the site tests, made from real runs of this machine.

- machine A (`vm`, this machine: cpu AMD EPYC, suite 0.1.0): the five committed baseline runs
  (results/baselines/smoke), then the planted slow night (tests/fixtures/slow-night: a real smoke run with
  SUITE_FAULT="d70ece84c0:slow=2", its zero2 cell twice as slow; the manifest's env says so), then a clean
  night after it (baseline run 3 again, an hour later);
- machine B (`ci-runner-2`): the five baseline runs a day later with the host changed — same device kind and
  suite major, so comparable: it sits beside A;
- machine C (`gpu-1`): two baseline runs relabelled as 2 x NVIDIA H200 — another device kind, never beside A;
- machine D (`vm` again): two baseline runs relabelled suite 1.0.0 — another major version, never beside A.
Only manifest fields change (host, devices, suite version, times, run names); the cell results are the runs'.
copy_run(..., evals=...) also gives cells held-out evaluations (`eval`, `time_to_target`), for the eval tests.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "results" / "baselines" / "smoke"
SLOW_NIGHT = ROOT / "tests" / "fixtures" / "slow-night"
SLOW_CELL = "d70ece84c0"  # zero2: slowed x2 in the slow night


def baseline_runs() -> list[Path]:
    return sorted(p.parent for p in BASELINE.glob("*/manifest.json"))


def slow_run() -> Path:
    return next(p.parent for p in SLOW_NIGHT.glob("smoke/*/manifest.json"))


def copy_run(src: Path, root: Path, number: int | None = None, when: datetime | None = None,
             evals: dict[str, dict] | None = None, **fields) -> Path:
    """A copy of run folder `src` under root/<scenario>/ (manifest, scenario.yaml, cells): renamed when `number`
    or `when` is given, with manifest `fields` changed; evals: cell id -> fields set in that cell's records
    (every repeat), e.g. {"eval": [EvalPoint dicts], "time_to_target": {...}}."""
    manifest = json.loads((src / "manifest.json").read_text())
    if when is not None:
        manifest["created_at"] = when.isoformat()
    if number is not None or when is not None:
        n, sha, stamp = manifest["run_id"].split("_")
        stamp = when.strftime("%Y%m%dT%H%M%SZ") if when else stamp
        manifest["run_id"] = f"{number if number is not None else int(n):04d}_{sha}_{stamp}"
    manifest.update(fields)
    dest = root / manifest["scenario"] / manifest["run_id"]
    (dest / "cells").mkdir(parents=True)
    for name in ("scenario.yaml", "runlog.jsonl"):
        if (src / name).is_file():
            shutil.copy(src / name, dest / name)
    for f in sorted((src / "cells").glob("*.json")):
        record = json.loads(f.read_text())
        if evals and record["cell_id"] in evals:  # held-out evaluations came with schema version 3
            record.update(evals[record["cell_id"]], schema_version=max(3, record.get("schema_version", 1)))
            (dest / "cells" / f.name).write_text(json.dumps(record, indent=1) + "\n")
        else:
            shutil.copy(f, dest / "cells" / f.name)
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return dest


def when_of(run: Path) -> datetime:
    return datetime.fromisoformat(json.loads((run / "manifest.json").read_text())["created_at"])


def make_nights(tmp: Path) -> dict[str, Path]:
    """Results roots, one per machine: {"a": ..., "b": ..., "c": ..., "d": ...}."""
    base, slow = baseline_runs(), slow_run()
    assert len(base) >= 5, f"expected the 5 committed smoke baseline runs under {BASELINE}"
    roots = {m: tmp / f"machine-{m}" for m in "abcd"}
    for src in base[:5]:
        copy_run(src, roots["a"])
    copy_run(slow, roots["a"], number=6)
    copy_run(base[2], roots["a"], number=7, when=when_of(slow) + timedelta(hours=1))
    for i, src in enumerate(base[:5]):
        copy_run(src, roots["b"], when=when_of(src) + timedelta(days=1), hostname="ci-runner-2")
    for i, src in enumerate(base[:2]):
        copy_run(src, roots["c"], when=when_of(src) + timedelta(days=1, hours=2), hostname="gpu-1",
                 devices=["NVIDIA H200", "NVIDIA H200"], device_count=2, driver="580.65.06")
    for i, src in enumerate(base[3:5]):
        copy_run(src, roots["d"], when=when_of(src) + timedelta(days=2), suite_version="1.0.0")
    return roots
