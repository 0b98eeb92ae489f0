"""`suite report` on the hand-written strategies: rows pair each with its native twin, and the scratch pivot."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from report_fixtures import make_cells, make_manifest, make_result, write_run

from suite.report.markdown import report_markdown
from suite.report.pivots import pivots
from suite.report.tables import cell_rows
from suite.results.reader import load_runs
from suite.scenario import load_cells

SHIPPED = Path(__file__).resolve().parents[2] / "scenarios" / "scratch-vs-native.yaml"
# Issue 5: "its report shows them paired" -- each native strategy, then its hand-written twins.
PAIRED = ["ddp", "scratch-dp", "scratch-dp-overlap", "scratch-dp-bucketed", "zero1", "scratch-zero1",
          "zero2", "scratch-zero2", "zero3", "scratch-zero3"]


def test_shipped_scenario_rows_pair_each_scratch_strategy_with_its_native_twin(tmp_path):
    _, cells = load_cells(str(SHIPPED))
    random.Random(0).shuffle(cells)  # the order of the stored files must not matter
    runs = load_runs([write_run(tmp_path, make_manifest("scratch-vs-native"), [make_result(c) for c in cells])])
    rows = cell_rows(runs)
    assert [r.get("strategy") for r in rows] == PAIRED
    md = report_markdown(runs, rows, pivots(rows), [])
    table = [line for line in md.split("## Cells", 1)[1].splitlines() if "| ok |" in line]
    assert [line.split("|")[2].strip() for line in table] == PAIRED  # column 1 is the cell id, 2 the strategy


def test_order_holds_within_every_configuration(tmp_path):
    cells = make_cells(strategy=["zero3", "scratch-zero1", "ddp", "scratch-dp", "zero1"], gpus=[2, 4])
    rows = cell_rows(load_runs([write_run(tmp_path, make_manifest(), [make_result(c) for c in cells])]))
    # strategy is an earlier axis than gpus, so each strategy's GPU counts stay together
    assert [(r.get("strategy"), r.get("gpus")) for r in rows] == [
        (s, g) for s in ["ddp", "scratch-dp", "zero1", "scratch-zero1", "zero3"] for g in (2, 4)]


def test_scratch_pivot_pairs_step_time_memory_and_loss(tmp_path):
    cells = make_cells(strategy=["ddp", "scratch-dp-overlap", "zero3", "scratch-zero3"], gpus=[2, 4])
    slow = {"scratch-dp-overlap": 0.15, "scratch-zero3": 0.2}
    results = [make_result(c, step_time_s=slow.get(c.strategy, 0.1), noise=0.0, memory="states",
                           memory_scale=1.10 if c.strategy.startswith("scratch") else 1.05,
                           loss_end=2.501 if c.strategy == "scratch-zero3" else 2.5) for c in cells]
    rows = cell_rows(load_runs([write_run(tmp_path, make_manifest(), results)]))
    pv = {p.name: p for p in pivots(rows)}["scratch"]
    assert pv.header == ["pair", "step median native / scratch (ms)", "scratch / native",
                         "memory native / scratch (MiB)", "final loss scratch - native"]
    assert [line[0] for line in pv.rows] == ["scratch-dp-overlap vs ddp, gpus=2", "scratch-zero3 vs zero3, gpus=2",
                                            "scratch-dp-overlap vs ddp, gpus=4", "scratch-zero3 vs zero3, gpus=4"]
    by_label = {line[0]: line for line in pv.rows}
    overlap, z3 = by_label["scratch-dp-overlap vs ddp, gpus=2"], by_label["scratch-zero3 vs zero3, gpus=4"]
    assert overlap[1] == "100.00 / 150.00" and overlap[2] == "x1.50"
    assert z3[1] == "100.00 / 200.00" and z3[2] == "x2.00"
    row = {(r.get("strategy"), r.get("gpus")): r for r in rows}
    native, mine = row[("zero3", 4)], row[("scratch-zero3", 4)]
    assert z3[3] == f"{native.memory_measured_mib:,.1f} / {mine.memory_measured_mib:,.1f} (states)"
    assert mine.memory_measured_mib / native.memory_measured_mib == pytest.approx(1.10 / 1.05, rel=1e-5)  # integer bytes
    diff = mine.final_loss - native.final_loss
    assert 5e-4 < diff < 2e-3 and z3[4] == f"{diff:+.2e}"  # the planted 1e-3 shift of the curve's floor
    assert abs(float(overlap[4])) < 1e-5  # same curve up to the fixture's 1e-6 noise


def test_scratch_pivot_only_with_a_twin_to_pair(tmp_path):
    native_only = make_cells(strategy=["ddp", "zero1"])
    rows = cell_rows(load_runs([write_run(tmp_path / "a", make_manifest(), [make_result(c) for c in native_only])]))
    assert "scratch" not in [p.name for p in pivots(rows)]
    unpaired = make_cells(strategy=["scratch-dp", "zero1"])  # scratch-dp's twin is ddp, which did not run
    rows = cell_rows(load_runs([write_run(tmp_path / "b", make_manifest(), [make_result(c) for c in unpaired])]))
    assert "scratch" not in [p.name for p in pivots(rows)]
    failed_twin = make_cells(strategy=["ddp", "scratch-dp"])
    res = [make_result(c, status="oom" if c.strategy == "ddp" else "ok") for c in failed_twin]
    rows = cell_rows(load_runs([write_run(tmp_path / "c", make_manifest(), res)]))
    assert "scratch" not in [p.name for p in pivots(rows)]  # only cells that ran are paired
