"""What a sweep's results say to people: the report's schedule column, and compare's refusal to judge packed
timings that shared a node (suite/machine/policy.busy)."""

from __future__ import annotations

from pathlib import Path

from suite.machine.policy import busy, describe
from suite.machine.state import MachineState, Snapshot
from suite.report.tables import RUN_HEADERS, run_table, sweep_text
from suite.results.reader import Run
from suite.results.schema import Schedule
from suite.testing.builders import make_result
from suite.testing.results_factory import make_manifest


def _state(shared: list[str]) -> MachineState:
    snap = Snapshot(at=0.0, cpu_count=2)
    return MachineState(window="train", window_s=1.0, interval_s=0.5, samples=2, competing_cpu=0.0,
                        competing_cpu_peak=0.0, before=snap, after=snap, shared_with=shared)


def _swept(start: str, end: str, wall: float, shared: list[str] = (), attempts: int = 1, seed: int = 0):
    return make_result(axes={"seed": seed}, started_at=start, finished_at=end, extra={"wall_s": wall},
                       schedule=Schedule(mode="pack", node="n1", attempts=attempts), machine=_state(list(shared)))


def test_the_schedule_column_sets_the_sweeps_span_against_its_cells_time():
    results = [_swept("2026-12-06T02:00:00+00:00", "2026-12-06T02:00:10+00:00", 10.0, seed=0),
               _swept("2026-12-06T02:00:00+00:00", "2026-12-06T02:00:10+00:00", 10.0, ["x-r0"], seed=1),
               _swept("2026-12-06T02:00:10+00:00", "2026-12-06T02:00:20+00:00", 10.0, attempts=2, seed=2)]
    assert sweep_text(results) == "pack: 20 s for 30 s of cells, 1.50x, 1 shared a node, 1 retried"
    assert sweep_text([make_result()]) == "serial"


def test_the_column_appears_only_when_a_run_was_swept():
    manifest = make_manifest()
    plain = Run(Path("a"), manifest, [make_result()])
    swept = Run(Path("b"), manifest, [_swept("2026-12-06T02:00:00+00:00", "2026-12-06T02:00:04+00:00", 4.0)])
    assert run_table([plain])[0] == RUN_HEADERS
    headers, rows = run_table([plain, swept])
    assert headers == RUN_HEADERS + ["schedule"]
    assert [r[-1] for r in rows] == ["serial", "pack: 4 s for 4 s of cells, 1.00x"]


def test_a_timing_that_shared_its_node_is_busy_and_says_with_whom():
    assert busy(_state([])) == []
    (why,) = busy(_state(["a-r0", "b-r1"]))
    assert "shared its node with 2 other cell(s) of the sweep" in why and "a-r0, b-r1" in why
    assert describe([_state(["a-r0"])]).startswith("busy: shared its node")
