"""Seed bands end to end: DDP over three seeds draws the band, ZeRO-3 with the same seeds is judged against it
at every evaluation.  A learning rate planted ten times too high on one ZeRO-3 seed (SUITE_FAULT lr=10: the
cell's id and recorded settings unchanged, as a bug would leave them) falls outside the band and fails its
gate; the unchanged seeds pass."""

from __future__ import annotations

import pytest

from tests.e2e.run_helpers import cell_results, env, run_cli, run_dirs, write

# `long` (72 s on 2 cores): tests/unit/test_band.py judges curves against seed bands in CI's tier
pytestmark = [pytest.mark.slow, pytest.mark.long]
SCENARIO = """
name: band
model: gpt-tiny
seq_len: 16
strategy: [ddp, zero3]
gpus: 2
micro_batch_size: 4
global_batch_size: 8
seed: [0, 1, 2]
steps: 30
warmup_steps: 1
device: cpu
optimizer: {lr: 0.001}
eval: {every_steps: 10, batches: 4}
convergence:
  band: {reference: {strategy: ddp}, k: 3}
timeout_s: 300
"""


def test_a_planted_lr_change_falls_outside_the_ddp_seed_band_and_the_unchanged_seeds_pass(tmp_path):
    from suite.scenario import load_cells

    path = write(tmp_path / "band.yaml", SCENARIO)
    cells = load_cells(str(path))[1]
    by = {(c.strategy, c.seed): c for c in cells}
    assert len(by) == 6
    planted = by[("zero3", 1)]
    results = tmp_path / "results"
    run = run_cli(["run", str(path), "--results", str(results)], tmp_path,
                  env(SUITE_FAULT=f"{planted.id}:lr=10"), timeout=600)
    assert run.returncode == 1, run.stderr  # one cell gate-failed
    (folder,) = run_dirs(results, "band")
    got = {(r["axes"]["strategy"], r["axes"]["seed"]): r for r in cell_results(folder).values()}
    band = {k: next(g for g in r["gates"] if g["name"] == "band") for k, r in got.items()}
    for seed in (0, 1, 2):
        assert got[("ddp", seed)]["status"] == "ok"
        assert band[("ddp", seed)]["detail"] == "this cell is one of the 3 reference seeds (strategy=ddp)"
    for seed in (0, 2):
        assert got[("zero3", seed)]["status"] == "ok", band[("zero3", seed)]
        assert band[("zero3", seed)]["detail"].startswith("3 evaluations inside the band of strategy=ddp over seeds "
                                                          "0, 1, 2 (mean +- 3 sd)")
        # the same seed under another strategy is the same mathematics: its curve lies on the reference's
        ours, ref = got[("zero3", seed)]["eval"], got[("ddp", seed)]["eval"]
        assert [p["loss"] for p in ours] == pytest.approx([p["loss"] for p in ref], rel=1e-4)
    bad = got[("zero3", 1)]
    assert bad["status"] == "gate-failed" and bad["cell"]["optimizer"]["lr"] == 0.001  # planted: settings unchanged
    assert bad["error"].startswith("gate band failed: step 10: eval_loss ")
    assert "outside the band of strategy=ddp over seeds 0, 1, 2" in bad["error"]
    assert band[("zero3", 1)]["step"] == 10

    # the report draws the band: one figure for the one band of this run
    report = run_cli(["report", str(folder), "--format", "html", "--out", str(tmp_path / "rep")], tmp_path, env())
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "rep" / "plots" / "band_1.png").stat().st_size > 10_000
    assert "Held-out curves against the seed band of strategy=ddp" in (tmp_path / "rep" / "report.html").read_text()
