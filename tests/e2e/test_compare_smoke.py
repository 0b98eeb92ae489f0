"""Rerun the CPU smoke scenario and compare it with the committed baseline (results/baselines/smoke).

The baseline is a history: 5 stored runs of smoke made on the development machine (scripts/noise-campaign's
history phase), so the timing checks are judged against those runs' own spread (docs/compare.md), and this
test checks they were.  A history made on one machine in one state says little about another state's speed,
so the timing thresholds absorb the machine states measured on the development machine (2026-12-02, commit
eade9f2, against this baseline): idle, a rerun's step medians were 35-67% *faster* (the history was recorded
under load); with a one-core busy loop beside it, -30% to +3%.  So step_time=100% and tokens_per_s=100% (the
same factor: half the tokens a second is twice the step time; tokens_per_s=50% flagged a rerun 41% lower while
its step time was 56% within its own threshold, on a 2-core machine running other tests beside it, 2026-12-07),
a margin on top of the history's own band (docs/compare.md: log(cur/base) > log(1 + threshold) + t*se, the
band here 25-69% wide): a cell fails when it is 2.5-3.4x slower than the history's median (900% before:
12-17x), and no machine state seen here comes near that.  That is all a cross-state check can hold: relative
to an idle run here, a cell must get about 4-10x slower to fail.  What is deterministic on CPU stays tight:
every cell must still run ok and pass its gates (the ZeRO curves match DDP's), the final loss must agree to
0.1 %, and the counted model-state bytes to 1 %.  Environment differences (another CPU model, another torch
build) are only shown.  Finer timing changes are the job of a same-machine comparison:
tests/e2e/test_compare_noise.py plants one.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "results" / "baselines" / "smoke"
WIDE = ["--threshold", "tokens_per_s=100%", "--threshold", "step_time=100%",
        "--threshold", "final_loss=0.1%", "--threshold", "peak_memory=1%"]


def suite(*args: str, timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "suite", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def test_smoke_rerun_matches_the_committed_baseline(tmp_path):
    assert len(list(BASELINE.glob("*/manifest.json"))) >= 5, f"the committed baseline {BASELINE} is not a history"
    run = suite("run", "scenarios/smoke.yaml", "--results", tmp_path, timeout=1800)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    junit = tmp_path / "compare.xml"
    cmp = suite("compare", BASELINE, tmp_path / "smoke", *WIDE, "--format", "junit", "--out", junit, timeout=300)
    assert cmp.returncode == 0, cmp.stderr[-5000:]

    import xml.etree.ElementTree as ET

    suite_el = ET.parse(junit).getroot().find("testsuite")
    cases = {c.get("name"): c for c in suite_el.findall("testcase")}
    cells = {name.split(".")[0] for name in cases}
    assert len(cells) == 4 and not [n for n in cases if n.endswith(".presence")]  # every smoke cell matched
    for cid in cells:  # the tight checks really ran (not skipped or inconclusive)
        for metric in ("status", "convergence", "final_loss", "peak_memory"):
            case = cases[f"{cid}.{metric}"]
            assert case.find("failure") is None and case.find("skipped") is None, (cid, metric)
        for metric in ("step_time", "tokens_per_s"):  # judged against the history, not against nothing
            noise = {p.get("name"): p.get("value") for p in cases[f"{cid}.{metric}"].iter("property")}["noise"]
            assert noise.startswith("night-to-night sd") and "history of 5 runs" in noise, (cid, metric, noise)

