"""How long the reading commands take on 10,000 stored cells, as a user runs them (scripts/report-speed).

The tree is 25 nightly runs of a 400-cell sweep (suite.testing.results_factory: real Cells, synthetic
measurements, the runner's own aggregation): `suite report` in Markdown and in HTML of all 25 runs, and
`suite compare` of the 24 older nights against the newest.  Each command is a fresh process (its start-up
counts), timed by the wall clock, `rounds` times; the record (JSON) says on what machine, with which commit and
how busy the machine was (load average before and after), so a number is never read without its conditions.
Issue 35's measure: each <= 5 s on the 2-core development machine when it is otherwise idle.

`publish night` is the nightly site's cost: a 1,000-cell sweep (the same axes on 1, 2, 4, 8 and 16 GPUs) with ten
nights already published, and `suite publish` of the eleventh into a copy of that site, which re-renders every
cell page (each got a point, with its trend figure).  Issue 35's measure: <= 60 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from suite.testing.results_factory import make_cells, make_manifest, make_result, write_run

NIGHTLY = dict(model=["gpt-tiny", "llama-tiny"], seq_len=[32, 64, 96, 128, 256], strategy=["ddp", "zero1", "zero2",
               "zero3"], activation_checkpointing=["none", "selective", "full", "every-2", "every-4"], gpus=[1, 2],
               precision="fp32", global_batch_size=64, micro_batch_size=4)
NIGHTS = 25
SITE_NIGHTS = 10  # published before the timed night


def nightly_tree(root: Path) -> Path:
    """<root>/base/sweep/<24 runs> and <root>/current/sweep/<1 run>: 10,000 cell files on disk."""
    cells = make_cells(**NIGHTLY)
    results = [make_result(c, step_time_s=0.05 * c.seq_len / 64 / c.gpus) for c in cells]
    for n in range(1, NIGHTS + 1):
        write_run(root / ("current" if n == NIGHTS else "base"), make_manifest("sweep", n), results)
    return root


def site_tree(root: Path) -> Path:
    """<root>/base/sweep/<10 runs> and <root>/next/sweep/<1 run> of a 1,000-cell sweep."""
    cells = make_cells(**{**NIGHTLY, "gpus": [1, 2, 4, 8, 16]})
    results = [make_result(c, step_time_s=0.05 * c.seq_len / 64 / c.gpus) for c in cells]
    for n in range(1, SITE_NIGHTS + 2):
        write_run(root / ("next" if n == SITE_NIGHTS + 1 else "base"), make_manifest("sweep", n), results)
    return root


def commands(root: Path, out: Path) -> dict[str, list[str]]:
    both = [str(root / "base"), str(root / "current")]
    return {"report md": ["report", *both, "--format", "md", "--out", str(out / "md")],
            "report html": ["report", *both, "--format", "html", "--out", str(out / "html")],
            "compare": ["compare", *both]}


def suite_cli(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "suite", *args], capture_output=True, text=True, timeout=600)


def timed(args: list[str]) -> float:
    t0 = time.perf_counter()
    proc = suite_cli(args)
    took = time.perf_counter() - t0
    if proc.returncode not in (0, 1):  # compare exits 1 on a regression: there is none here
        raise SystemExit(f"report-speed: suite {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return round(took, 3)


def measure(rounds: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="suite-report-speed-") as tmp:
        root = nightly_tree(Path(tmp) / "tree")
        sites = site_tree(Path(tmp) / "sites")
        timed(["publish", str(sites / "base"), "--out", str(sites / "site")])  # the ten nights before: untimed
        timings: dict[str, list[float]] = {}
        load = [os.getloadavg()[0]]
        for r in range(rounds):
            for name, args in commands(root, Path(tmp) / "out").items():
                timings.setdefault(name, []).append(timed(args))
            shutil.copytree(sites / "site", sites / f"site{r}")
            timings.setdefault("publish night", []).append(
                timed(["publish", str(sites / "next"), "--out", str(sites / f"site{r}")]))
        load.append(os.getloadavg()[0])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    return {"what": "wall seconds of each command on 10,000 stored cells (25 runs x 400), a fresh process each; "
                    "publish night: one more 1,000-cell night into a site of 10",
            "cells": NIGHTS * len(make_cells(**NIGHTLY)), "rounds": rounds, "commit": commit or None,
            "host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "load_average_before_after": load, "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seconds": timings, "median_s": {k: sorted(v)[len(v) // 2] for k, v in timings.items()}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, help="append the record to this JSON-lines file")
    a = p.parse_args(argv)
    record = measure(a.rounds)
    for name, values in record["seconds"].items():
        print(f"{name:13} median {record['median_s'][name]:6.2f} s   rounds {values}")
    print(f"load average before/after: {record['load_average_before_after']}")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        with open(a.out, "a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"appended to {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
