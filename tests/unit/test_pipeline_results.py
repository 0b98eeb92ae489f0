"""What a pipeline cell stores and reports: the measured bubble (the busiest rank's share of the pipeline's time
spent waiting for another stage, its median measured step's, that time being the longest any rank spent in the
schedule; 1 - busy / that time where the waits were not timed) beside the planner's, the schedule's own work
apart, each stage's model states (the first rank of each stage: the mesh is (pp, dp)), the report's
columns only where a pipeline ran, and a match gate's reference without stages."""

from __future__ import annotations

import pytest

from suite.plan.pipeline import bubble_fraction
from suite.report.pivots import pipeline_pivot
from suite.report.tables import cell_row, display_columns
from suite.results.schema import TensorBytes
from suite.runner.aggregate import aggregate, pipeline_measured
from suite.scenario.references import reference_axes
from suite.testing.builders import make_cell, make_result
from suite.testing.results_factory import make_record

DEEP = {"family": "llama", "layers": 4, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn": 172, "vocab": 256}


def _cell():
    return make_cell(model=DEEP, gpus=4, strategy="zero3", pipeline_parallel=2, pipeline_schedule="1f1b",
                     micro_batch_size=1, global_batch_size=8, steps=6, warmup_steps=2)


def _records(cell, busy_share: list[float], left_early: dict[int, float] | None = None,
             wait_share: list[float] | None = None):
    """One record per rank, stage i = rank // 2, each stage's bytes its own; busy = share x the schedule's time
    after warm-up (and warm-up steps whose busy time must not count).  `left_early`: ranks whose schedule time
    is that much shorter (a last stage leaves before the first stage's final backward).  `wait_share`: each
    rank's waits for messages as a share of its own schedule time (None: waits not timed, as in older records)."""
    out = []
    for rank, share in enumerate(busy_share):
        r = make_record(cell, step_time_s=0.1, noise=0.0, n_steps=4)
        stage = rank // 2
        tb = TensorBytes(parameters=100 + stage, gradients=100, optimizer_states=200, master_weights=0)
        wall = [0.8 * t for t in r.step_times_s]  # the optimizer step is outside the schedule's time
        busy = [0.0] * cell.warmup_steps + [share * t for t in wall[cell.warmup_steps:]]
        wall = [w * (1 - (left_early or {}).get(rank, 0.0)) for w in wall]
        waits = [] if wait_share is None else [1.0] * cell.warmup_steps + [
            wait_share[rank] * t for t in wall[cell.warmup_steps:]]
        out.append(r.model_copy(update={"rank": rank, "tensor_bytes": tb, "pipeline_busy_s": busy,
                                        "pipeline_s": wall, "pipeline_wait_s": waits}))
    return out


def test_the_bubble_is_the_busiest_ranks_idle_share_after_warm_up():
    cell = _cell()
    prediction = {"pipeline": {"bubble_fraction": bubble_fraction(cell)}}
    got = pipeline_measured(_records(cell, [0.8, 0.8, 0.7, 0.7]), prediction, 2)
    assert got.bubble == pytest.approx(0.2)
    assert got.rank_idle == pytest.approx([0.2, 0.2, 0.3, 0.3])
    assert got.bubble_predicted == pytest.approx(1 / 5)  # (p - 1) / (m + p - 1), m = 4
    assert got.stage_states == [400, 401]  # rank 0 (stage 0) and rank 2 (stage 1)


def test_a_rank_that_leaves_the_schedule_early_idles_until_the_pipeline_ends():
    """The last stage's schedule ends before the first stage's final backward: its wait for it counts (over
    its own schedule time, rank 2 and 3 would be 0.9 / 0.9 = 100% busy)."""
    cell = _cell()
    got = pipeline_measured(_records(cell, [0.8, 0.8, 0.9, 0.9], left_early={2: 0.1, 3: 0.1}), {}, 2)
    assert got.rank_idle == pytest.approx([0.2, 0.2, 0.1, 0.1])
    assert got.bubble == pytest.approx(0.1)


def test_with_timed_waits_only_waiting_is_idle_and_the_schedules_own_work_is_overhead():
    """Ranks 0-1 compute 70% of the pipeline's time and wait 25%: the other 5% is the schedule's own work, not
    bubble.  Ranks 2-3 leave the schedule 10% early after waiting 10% of it: idle 0.09 + 0.1 = 0.19."""
    cell = _cell()
    got = pipeline_measured(_records(cell, [0.7, 0.7, 0.8, 0.8], left_early={2: 0.1, 3: 0.1},
                                     wait_share=[0.25, 0.25, 0.1, 0.1]), {}, 2)
    assert got.rank_idle == pytest.approx([0.25, 0.25, 0.19, 0.19])
    assert got.rank_overhead == pytest.approx([0.05, 0.05, 0.01, 0.01])
    assert got.bubble == pytest.approx(0.19)
    untimed = pipeline_measured(_records(cell, [0.7, 0.7, 0.8, 0.8], left_early={2: 0.1, 3: 0.1}), {}, 2)
    assert untimed.rank_idle == pytest.approx([0.3, 0.3, 0.2, 0.2]) and untimed.rank_overhead == []


def test_a_ranks_share_is_its_median_step_so_one_long_wait_does_not_move_it():
    """Ranks 0-1 wait 10% of three of the 4 measured steps and 30% of the second; ranks 2-3 30% of three and 10%
    of the second.  Shares are the median step's: 0.1 and 0.3, the bubble the busiest rank's 0.1 (over the
    steps' sums, schema 11: 0.15 and 0.25)."""
    cell = _cell()
    records = _records(cell, [0.5, 0.5, 0.5, 0.5], wait_share=[0.0] * 4)
    shares = {0: [0.1, 0.3, 0.1, 0.1], 1: [0.1, 0.3, 0.1, 0.1], 2: [0.3, 0.1, 0.3, 0.3], 3: [0.3, 0.1, 0.3, 0.3]}
    records = [r.model_copy(update={"pipeline_wait_s": r.pipeline_wait_s[:cell.warmup_steps] + [
        share * wall for share, wall in zip(shares[r.rank], r.pipeline_s[cell.warmup_steps:])]}) for r in records]
    got = pipeline_measured(records, {}, 2)
    assert got.rank_idle == pytest.approx([0.1, 0.1, 0.3, 0.3])
    assert got.bubble == pytest.approx(0.1)
    assert got.rank_overhead == pytest.approx([0.4, 0.4, 0.2, 0.2])  # neither busy (0.5) nor waiting


def test_no_pipeline_no_measure():
    cell = make_cell(model=DEEP, gpus=2, micro_batch_size=1, global_batch_size=2)
    record = make_record(cell)
    assert pipeline_measured([record], {}, 1) is None
    assert aggregate([record], {"flops_per_token": 1.0, "memory_bytes": {}}, "fp32", 0.0, 1.0, None)["pipeline"] is None


def test_the_report_shows_the_pipeline_columns_only_where_a_pipeline_ran():
    cell = _cell()
    measured = pipeline_measured(_records(cell, [0.75, 0.75, 0.7, 0.7]), {"pipeline": {"bubble_fraction": 0.2}}, 2)
    with_pipe = make_result(cell, pipeline=measured)
    plain = make_result(make_cell(model=DEEP, gpus=2, micro_batch_size=1, global_batch_size=2))
    rows = [cell_row(_run(with_pipe), [with_pipe]), cell_row(_run(plain), [plain])]
    assert rows[0].bubble_pct == pytest.approx(25.0) and rows[0].bubble_predicted_pct == pytest.approx(20.0)
    assert rows[0].stage_states_mib == "0.0 / 0.0"
    assert rows[1].bubble_pct is None and rows[1].stage_states_mib is None
    keys = [c.key for c in display_columns(rows)]
    assert {"bubble_pct", "bubble_predicted_pct", "stage_states_mib"} <= set(keys)
    assert not {"bubble_pct", "stage_states_mib"} & {c.key for c in display_columns(rows[1:])}


def _run(result):
    from types import SimpleNamespace

    return SimpleNamespace(label="0001", manifest=SimpleNamespace(created_at="t0"), results=[result])


def test_a_reference_without_stages_has_no_schedule():
    axes = {"pipeline_parallel": 2, "pipeline_schedule": "1f1b", "strategy": "zero3"}
    assert reference_axes(axes, "pipeline_parallel", 1) == {"pipeline_parallel": 1, "pipeline_schedule": None,
                                                           "strategy": "zero3"}


def test_the_pipeline_pivot_puts_step_time_and_bubble_by_schedule():
    rows = []
    for schedule, step, bubble in (("gpipe", 0.2, 0.30), ("1f1b", 0.1, 0.25)):
        cell = make_cell(model=DEEP, gpus=2, strategy="ddp", pipeline_parallel=2, pipeline_schedule=schedule,
                         micro_batch_size=1, global_batch_size=4)
        result = make_result(cell, step_times_s=[step] * 3,
                             pipeline={"bubble": bubble, "bubble_predicted": 0.2, "stage_states": [1, 2]})
        rows.append(cell_row(_run(result), [result]))
    pivot = pipeline_pivot(rows, ["pipeline_schedule"])
    assert pivot is not None and pivot.header[1:] == ["sched gpipe", "sched 1f1b"]  # the schedules' table order
    assert pivot.rows[0][1:] == ["200.0 ms, bubble 30.0 / 20.0 %", "100.0 ms, bubble 25.0 / 20.0 %"]
    assert "lowest step time" in pivot.marked
    assert pipeline_pivot(rows, ["strategy"]) is None
