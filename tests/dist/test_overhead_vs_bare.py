"""suite's training step costs what a bare PyTorch loop costs (DEVELOPERS.md, "Speed").

The same cell (a small GPT, fp32, one CPU rank, DDP at world size one) is trained by suite's worker and by
the bare loop of tests/dist/bare.py in one fresh process, alternating three times; the ratio of the median
post-warm-up step times is the per-step harness overhead.  The bound, 1.25, is looser than Ray Train's
harness check (1.15x vanilla PyTorch, ../shared/reference.md) because this runs on a shared 2-core CPU where
a single step is ~20 ms and DDP's per-bucket hooks still run at world size one; the measured ratio is printed.
The losses must agree exactly: the bare loop is the same mathematics.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import pytest

from tests.dist.spawn import ROOT, make_cell, worker_env

pytestmark = pytest.mark.slow


def test_suite_step_costs_what_a_bare_loop_costs(tmp_path):
    cell = make_cell(model={"family": "gpt", "layers": 2, "hidden": 128, "heads": 4, "vocab": 256,
                            "max_seq_len": 128},
                     seq_len=128, gpus=1, strategy="ddp", micro_batch_size=8, global_batch_size=8,
                     steps=25, warmup_steps=5)
    path = tmp_path / "cell.json"
    path.write_text(cell.model_dump_json())
    proc = subprocess.run([sys.executable, "-m", "tests.dist.overhead_probe", str(path)], cwd=ROOT,
                          env=worker_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # same mathematics: DDP at world size one is the plain model
    assert out["suite_losses"] == pytest.approx(out["bare_losses"], rel=1e-6, abs=1e-7)
    suite = min(statistics.median(t[cell.warmup_steps:]) for t in out["suite"])
    bare = min(statistics.median(t[cell.warmup_steps:]) for t in out["bare"])
    ratio = suite / bare
    print(f"median step: suite {suite * 1e3:.2f} ms, bare {bare * 1e3:.2f} ms, ratio {ratio:.3f}")
    assert ratio < 1.25, f"suite's step costs {ratio:.2f}x a bare loop ({suite * 1e3:.1f} vs {bare * 1e3:.1f} ms)"
