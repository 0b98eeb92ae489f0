"""Checkpoints (suite/launch/ray/checkpoint.py) round-trip for DDP, ZeRO-1, FSDP (ZeRO-2/3) and the hand-written
DP on 2 gloo ranks:
a run restored from a checkpoint continues exactly as the run that wrote it, and the saved model loads
strictly into a plain, unwrapped model.  One spawned group of 2 processes for all strategies."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from suite.testing.builders import make_cell

from suite.testing.spawn import ROOT, free_ports, worker_env

pytestmark = pytest.mark.slow
STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "scratch-dp")


def test_checkpoint_round_trip_every_strategy(tmp_path):
    cells = [make_cell(strategy=s, steps=6, global_batch_size=4, micro_batch_size=2) for s in STRATEGIES]
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"cells": [c.model_dump(mode="json") for c in cells], "out": str(tmp_path)}))
    (port,) = free_ports(1)
    procs = []
    for r in range(2):
        env = worker_env({"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                          "MASTER_PORT": str(port)})
        procs.append(subprocess.Popen([sys.executable, "-m", "tests.dist.ckpt_group_worker", str(spec)], cwd=ROOT,
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=400)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-3000:] for o in outs)
    for cell in cells:
        got = json.loads((tmp_path / f"{cell.id}.json").read_text())
        assert got["meta_step"] == 3 and got["meta_losses"] == got["first"]
        # the restored run continues exactly where the original went (same data per step, same state)
        assert got["b"] == pytest.approx(got["a"], rel=1e-6, abs=1e-7), (cell.strategy, got)
        assert got["a"][-1] < got["first"][0], (cell.strategy, "the loss should fall in 5 steps")
        assert got["strict_ok"], cell.strategy
        assert got["changed"] > 0.5 * got["tensors"], (cell.strategy, "checkpoint holds trained weights")
