"""Aggregation on hand-made rank records: step statistics, throughput, MFU accounting, memory, overhead."""

from __future__ import annotations

import math

import pytest

from suite.plan.flops import PEAK_SOURCE
from suite.results.schema import CudaMemory, PeakMemory, RankRecord, SetupTimes, StepStats, TensorBytes
from suite.runner import aggregate as agg
from suite.stats import percentile


def _record(rank=0, **kw) -> RankRecord:
    base = dict(cell_id="c", rank=rank, world_size=2, local_rank=rank, hostname="h", device="cuda:0",
                device_name="NVIDIA H100 80GB HBM3", status="ok", losses=[4.0, 3.0, 2.0],
                step_times_s=[9.0, 9.0, 1.0, 2.0, 3.0, 4.0, 5.0], warmup_steps=2, tokens_per_step=6000,
                samples_per_step=12)
    base.update(kw)
    return RankRecord(**base)


PREDICTION = {"flops_per_token": 1.0e9, "memory_bytes": {
    "parameters": 400.0, "gradients": 400.0, "optimizer_states": 800.0, "master_weights": 0.0,
    "activations": 1000.0, "total": 2600.0}}


def test_percentile_matches_linear_interpolation():
    xs = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert percentile(xs, 50) == 3.0
    assert percentile(xs, 10) == pytest.approx(1.4)
    assert percentile(xs, 90) == pytest.approx(4.6)
    assert percentile([7.0], 90) == 7.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_percentile_is_the_report_quantile():
    from suite.stats import quantile

    xs = [0.7, 0.1, 0.4, 0.9, 0.25, 0.33]
    assert all(percentile(xs, q) == quantile(xs, q / 100) for q in (0, 10, 25, 50, 90, 99, 100))


def test_step_stats_exclude_warmup():
    r = _record()
    times = agg.measured_steps(r)
    assert times == [1.0, 2.0, 3.0, 4.0, 5.0]
    s = StepStats.of(times)
    assert (s.n, s.median, s.mean) == (5, 3.0, 3.0)
    assert (s.p10, s.p90) == (pytest.approx(1.4), pytest.approx(4.6))
    assert StepStats.of([]) is None


def test_throughput_is_per_mean_step_and_per_device():
    r = _record()
    tp = agg.throughput(r, agg.measured_steps(r))
    assert tp.tokens_per_s == pytest.approx(2000.0)  # 6000 tokens / 3 s mean step
    assert tp.tokens_per_s_per_device == pytest.approx(1000.0)
    assert tp.samples_per_s == pytest.approx(4.0)


def test_mfu_accounting_known_device_and_none_otherwise():
    r = _record()
    out = agg.aggregate([_record(rank=1), r], PREDICTION, "bf16-mixed", 100.0, 130.0, None)
    m = out["mfu"]
    assert m.peak_flops == 989e12 and m.peak_source == PEAK_SOURCE and m.precision == "bf16-mixed"
    assert m.value == pytest.approx(1.0e9 * 1000.0 / 989e12)
    assert "6 x params" in m.formula
    fp32 = agg.aggregate([r], PREDICTION, "fp32", 100.0, 130.0, None)["mfu"]
    assert fp32.value is None and fp32.peak_flops is None and fp32.flops_per_token == 1.0e9
    # a CPU never gets a peak, whatever its model name says
    cpu = agg.aggregate([_record(device="cpu", device_name="H100 lookalike CPU")], PREDICTION, "bf16-mixed",
                        100.0, 130.0, None)["mfu"]
    assert cpu.value is None and cpu.peak_source is None
    unknown = agg.aggregate([_record(device_name="Mystery GPU 9000")], PREDICTION, "bf16-mixed", 0, 1, None)["mfu"]
    assert unknown.value is None


def test_memory_beside_prediction_with_ratios():
    r = _record(tensor_bytes=TensorBytes(parameters=200, gradients=400, optimizer_states=400, master_weights=100),
                cuda_memory=CudaMemory(max_memory_allocated=5200, max_memory_reserved=6000, num_alloc_retries=0,
                                       num_ooms=0),
                peaks=PeakMemory(activations=500, total=1300))
    m = agg.memory(r, PREDICTION["memory_bytes"])
    assert m.measured["parameters"] == 200 and m.measured["total_cuda"] == 5200
    assert m.ratio == {"parameters": 0.5, "gradients": 1.0, "optimizer_states": 0.5, "activations": 0.5,
                       "master_weights": None, "total_tracker": 0.5, "total_cuda": 2.0,  # none predicted: no ratio
                       "tracker_vs_traced": None, "cuda_vs_traced": None}  # not traced
    assert m.measured["master_weights"] == 100
    assert m.predicted == PREDICTION["memory_bytes"]
    traced = agg.memory(r, PREDICTION["memory_bytes"], traced_peak=1040)  # the traced peak of the same code
    assert traced.ratio["tracker_vs_traced"] == 1.25 and traced.ratio["cuda_vs_traced"] == 5.0
    assert traced.predicted["traced_peak"] == 1040
    bare = agg.memory(_record(), PREDICTION["memory_bytes"])  # CPU without tracker: nothing measured, no ratio
    assert bare.ratio["total_cuda"] is None and bare.measured["parameters"] is None


def test_overhead_splits_the_wall_time():
    r = _record(setup_s=SetupTimes(process_group=1.0, model_build=1.0, strategy=0.5, data=0.5, total=3.0),
                train_s=20.0)
    o = agg.overhead(launch_start=100.0, launch_end=131.0, setup_done_t=110.0, record=r)
    assert (o.launch, o.setup, o.train, o.wall) == (7.0, 3.0, 20.0, 31.0)
    assert o.teardown == pytest.approx(1.0)
    assert math.isclose(o.launch + o.setup + o.train + o.teardown, o.wall)
    assert agg.overhead(100.0, 131.0, None, r) is None  # no setup_done event: no split, rather than a guess


def test_aggregate_uses_rank_zero_and_handles_no_records():
    out = agg.aggregate([_record(rank=1, losses=[9.0]), _record(rank=0)], PREDICTION, "fp32", 0.0, 1.0, None)
    assert out["losses"] == [4.0, 3.0, 2.0] and out["final_loss"] == 2.0
    assert out["step_times_s"] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert agg.aggregate([], PREDICTION, "fp32", 0.0, 1.0, None) == {}
