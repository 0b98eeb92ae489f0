"""The report's per-launcher cost section (suite/report/launch_cost.py) on real runs: tests/fixtures/ray-cost
holds the shipped Ray CPU scenario (private 2-node cluster, checkpoints every 6 steps) and its torchrun twin,
recorded on the 2-core development machine by tests/fixtures/ray-cost/remake."""

from __future__ import annotations

from pathlib import Path

import pytest

from suite.report.launch_cost import launch_cost_pivot, split
from suite.report.render import render
from suite.report.tables import cell_rows
from suite.results.reader import load_runs

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "ray-cost"


def _rows(*names: str):
    return cell_rows(load_runs([FIXTURE / n for n in names]))


def test_a_ray_cell_beside_its_torchrun_twin():
    rows = _rows("ray-multinode-cpu", "ray-cost-twin")
    (pivot,) = launch_cost_pivot(rows)
    body = {(line[0], line[1]): dict(zip(pivot.header, line)) for line in pivot.rows}
    assert sorted(launcher for _, launcher in body) == ["ray", "ray", "torchrun", "torchrun"]
    results = {(r.cell_id, r.launcher): r for row in rows for r in row.results}
    by_axes = {}
    for row in rows:
        for r in row.results:
            by_axes.setdefault(row.get("strategy"), {})[r.launcher] = r
    for strategy, pair in by_axes.items():
        ray, torchrun = pair["ray"], pair["torchrun"]
        line = body[(f"{ray.cell_id}-r0", "ray")]
        parts = split(ray)
        # the parts add up to the wall; checkpoints are apart from training; the ratio is against the twin
        assert sum(parts[k] for k in ("start", "setup", "train", "checkpoint", "end")) == pytest.approx(parts["wall"])
        assert parts["checkpoint"] > 0 and float(line["checkpoint s"]) == pytest.approx(parts["checkpoint"], abs=0.005)
        assert float(line["x twin"]) == pytest.approx(parts["wall"] / torchrun.overhead_s.wall, abs=0.005)
        assert body[(f"{torchrun.cell_id}-r0", "torchrun")]["checkpoint s"] == "-"
        assert parts["setup"] == pytest.approx(ray.overhead_s.setup)  # the worker's own setup, as torchrun's
    one_time = sorted(float(line["one-time s"]) for (_, launcher), line in body.items() if launcher == "ray")
    assert one_time[0] == 0.0 < one_time[1]  # the private cluster and the driver: paid by the first cell only
    assert len(results) == 4


def test_no_ray_cells_no_section_and_the_section_reaches_markdown_and_json():
    assert launch_cost_pivot(_rows("ray-cost-twin")) == []
    texts = render(load_runs([FIXTURE]), ["md"], None, [])
    assert "## Where a cell's time went, per launcher" in texts["md"]
    assert '"name": "launch-cost"' in render(load_runs([FIXTURE]), ["json"], None, [])["json"]
