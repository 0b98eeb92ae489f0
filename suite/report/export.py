"""`suite export --format pytest-benchmark`: step-time statistics in pytest-benchmark's JSON format.

Then `pytest-benchmark compare FILE...` and tools built on its storage (CI dashboards, codspeed-style
trackers) can read suite's numbers.  One benchmark per cell and run: a round is one measured optimizer step
(warm-up excluded, repeats pooled), iterations = 1.  The statistics follow pytest-benchmark's own definitions
(pytest_benchmark/stats.py: sample stddev, quartiles by Wikipedia's methods 2/3, Tukey fences for outliers),
so its tables show what its own runs would.  Cells without measured steps (failed, oom, ...) are left out
and listed in each benchmark file's top-level "suite" key.  Pure Python: pytest-benchmark is not imported.
"""

from __future__ import annotations

import statistics
from bisect import bisect_left, bisect_right
from typing import Any

from suite.axes import AXES, LATER_AXES
from suite.results.reader import Run

FORMAT_VERSION = "5.1.0"  # the pytest-benchmark file format this writes (unchanged since 3.x apart from 'ops')


def _quartiles(data: list[float]) -> tuple[float, float]:
    """pytest-benchmark's q1, q3 of sorted data (median of halves for even n, method 3 for odd n)."""
    n = len(data)
    if n == 1:
        return data[0], data[0]
    if n % 2 == 0:
        return statistics.median(data[: n // 2]), statistics.median(data[n // 2:])
    k, q = n // 4, n % 4
    if q == 1:
        return 0.25 * data[k - 1] + 0.75 * data[k], 0.75 * data[3 * k] + 0.25 * data[3 * k + 1]
    return 0.75 * data[k] + 0.25 * data[k + 1], 0.25 * data[3 * k + 1] + 0.75 * data[3 * k + 2]


def bench_stats(times: list[float]) -> dict[str, Any]:
    """The 'stats' object of one pytest-benchmark entry, data included."""
    data = sorted(times)
    mean = statistics.mean(data)
    stddev = statistics.stdev(data) if len(data) > 1 else 0.0
    q1, q3 = _quartiles(data)
    iqr = q3 - q1
    iqr_out = sum(1 for v in data if v < q1 - 1.5 * iqr or v > q3 + 1.5 * iqr)
    sd_out = sum(1 for v in data if v < mean - stddev or v > mean + stddev)
    if len(data) == 1:
        ld, hd = data[0], data[0]
    else:
        ld = data[bisect_left(data, q1 - 1.5 * iqr)]
        hd = data[bisect_right(data, q3 + 1.5 * iqr) - 1]
    return {"min": data[0], "max": data[-1], "mean": mean, "stddev": stddev, "rounds": len(data),
            "median": statistics.median(data), "iqr": iqr, "q1": q1, "q3": q3, "iqr_outliers": iqr_out,
            "stddev_outliers": sd_out, "outliers": f"{sd_out};{iqr_out}", "ld15iqr": ld, "hd15iqr": hd,
            "ops": 1 / mean if mean else 0.0, "total": sum(data), "data": list(times), "iterations": 1}


def _machine_info(run: Run) -> dict[str, Any]:
    m = run.manifest
    return {"node": m.hostname, "processor": m.cpu_model, "machine": "", "python_compiler": "",
            "python_implementation": "CPython", "python_implementation_version": m.python,
            "python_version": m.python, "python_build": ["", ""], "release": "", "system": "",
            "cpu": {"brand_raw": m.cpu_model},
            "suite": {"devices": m.devices, "device_count": m.device_count, "torch": m.torch, "cuda": m.cuda,
                      "nccl": m.nccl, "container_image_digest": m.container_image_digest}}


def to_pytest_benchmark(runs: list[Run]) -> dict[str, Any]:
    """One pytest-benchmark document for the given runs (machine and commit from the latest run)."""
    if not runs:
        raise ValueError("no runs to export")
    latest = runs[-1].manifest
    benchmarks, left_out = [], []
    for run in runs:
        by_cell: dict[str, list] = {}
        for r in run.results:
            by_cell.setdefault(r.cell_id, []).append(r)
        for cell_id, results in by_cell.items():
            times = [t for r in results for t in r.step_times_s]
            first = results[0]
            if not times:
                left_out.append({"run": run.label, "cell": cell_id, "status": first.status})
                continue
            # axes added later are left out at their defaults (and seed unless swept), so a cell keeps the
            # benchmark name it had before they existed
            swept_seed = isinstance(run.manifest.seed, list)
            params = {a: first.axes.get(a) for a in AXES
                      if not (a in LATER_AXES and first.axes.get(a) == LATER_AXES[a]) and (a != "seed" or swept_seed)}
            param = "-".join(str(v) for v in params.values())
            tps = [r.throughput.tokens_per_s for r in results if r.throughput]
            benchmarks.append({
                "group": run.manifest.scenario,
                "name": f"{cell_id}[{param}]",
                "fullname": f"{run.label}::{cell_id}[{param}]",
                "params": params,
                "param": param,
                "extra_info": {"run": run.label, "status": first.status, "repeats": len(results),
                               "unit": "seconds per optimizer step",
                               "tokens_per_s": statistics.median(tps) if tps else None,
                               "final_loss": first.final_loss},
                "options": {"disable_gc": False, "timer": "suite: device-synchronized wall time per step",
                            "min_rounds": len(times), "max_time": 0.0, "min_time": 0.0,
                            "warmup": bool(first.cell.warmup_steps)},
                "stats": bench_stats(times),
            })
    return {
        "machine_info": _machine_info(runs[-1]),
        "commit_info": {"id": latest.git_commit or "unversioned", "time": latest.created_at,
                        "author_time": latest.created_at, "dirty": bool(latest.git_dirty), "project": "suite",
                        "branch": "(unknown)"},
        "benchmarks": benchmarks,
        "datetime": latest.created_at,
        "version": FORMAT_VERSION,
        "suite": {"runs": [r.label for r in runs], "left_out": left_out},
    }
