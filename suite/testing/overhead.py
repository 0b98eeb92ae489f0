"""suite's per-step harness overhead against a bare PyTorch loop: a measurement, reported, never asserted.

The same cell (a small GPT, fp32, one CPU rank, DDP at world size one) is trained by suite's worker and by the
bare loop of bare_loop.py in one fresh process (overhead_probe.py), alternating three times; the ratio of the
median post-warm-up step times is the overhead.  Ray Train's harness check allows 1.15x vanilla PyTorch
(../shared/reference.md); on a shared 2-core CPU a step is ~20 ms and the ratio moves with the machine's load,
so no test bounds it: tests/dist/test_overhead_vs_bare.py records it (and checks the losses agree exactly),
`scripts/overhead-vs-bare` prints it.  No torch import here.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

from suite.testing.builders import make_cell

from suite.testing.spawn import ROOT, worker_env


def probe_cell():
    return make_cell(model={"family": "gpt", "layers": 2, "hidden": 128, "heads": 4, "vocab": 256, "max_seq_len": 128},
                     seq_len=128, gpus=1, strategy="ddp", micro_batch_size=8, global_batch_size=8,
                     steps=25, warmup_steps=5)


def measure(folder: Path, timeout_s: float = 600) -> dict:
    """Run the probe once; -> its raw output plus `suite_s`, `bare_s` (best of the three medians) and `ratio`."""
    cell = probe_cell()
    path = folder / "cell.json"
    path.write_text(cell.model_dump_json())
    proc = subprocess.run([sys.executable, "-m", "suite.testing.overhead_probe", str(path)], cwd=ROOT,
                          env=worker_env(), capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"the overhead probe exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["suite_s"] = min(statistics.median(t[cell.warmup_steps:]) for t in out["suite"])
    out["bare_s"] = min(statistics.median(t[cell.warmup_steps:]) for t in out["bare"])
    out["ratio"] = out["suite_s"] / out["bare_s"]
    return out


def line(out: dict) -> str:
    return (f"median step: suite {out['suite_s'] * 1e3:.2f} ms, bare {out['bare_s'] * 1e3:.2f} ms, "
            f"ratio {out['ratio']:.3f} (Ray Train's harness bar: 1.15)")
