"""The fast trace (suite/plan/depth.py) against full traces: two shallow copies of the model, every phase
carried to the real depth, equal to tracing every layer — peak and every category — within 1%.

The grid: a covering slice (GRID) of every strategy family (dp, zero1, zero2, zero3) x every checkpointing
policy x gpt and llama x fp32 and bf16, every family in it (the `long` tier, scripts/test-long, runs all 24),
two micro-batches per step; each pair of shallow traces is checked against full traces at several depths (so
each model is checked at three or more).  Shallow traces are shared by the depths."""

from __future__ import annotations

import itertools

import pytest

from suite.axes import CHECKPOINTING, checkpoint_every
from suite.plan.depth import DepthError, Phase, Shallow, extrapolate, why_full
from suite.plan.trace import from_shallow, shallow_traces, trace_cell
from suite.testing.builders import make_cell
from tests.tiers import covering

FAMILIES = {"dp": "ddp", "zero1": "scratch-zero1", "zero2": "zero2", "zero3": "zero3"}
MODELS = {"gpt": {"family": "gpt", "hidden": 32, "heads": 2, "vocab": 128, "max_seq_len": 64},
          "llama": {"family": "llama", "hidden": 32, "heads": 4, "kv_heads": 2, "ffn": 96, "vocab": 128}}
FULL_GRID = [(family, policy, model, precision) for (family, policy), model, precision in zip(
    itertools.product(FAMILIES, CHECKPOINTING), itertools.cycle(["gpt", "llama", "llama", "gpt"]),
    itertools.cycle(["fp32", "fp32", "bf16-mixed"]))]
# The default tier's slice (each case costs tens of seconds of full traces; all 24 took 11 minutes of a CI run):
# every family once, both models, both precisions, a whole-model, a layer-level, an op-level and the selective
# policy.  The `long` tier (scripts/test-long) runs the whole product.
GRID = covering(FULL_GRID, {0, 8, 16, 21})


def _cell(model: str, layers: int, **settings):
    return make_cell(model={**MODELS[model], "layers": layers}, seq_len=16, gpus=4, micro_batch_size=1,
                     global_batch_size=8, **settings)  # 2 micro-batches per step


def _targets(policy: str, index: int) -> list[int]:
    """Depths to check in full: deeper than the shallow pair, congruent modulo a layer-level policy's period."""
    k = checkpoint_every(policy) or 1
    base = [7, 9, 12][index % 3] if k == 1 else 3 * k + 2 + (index % 2) * k
    return [base, base + k] if index % 6 == 0 else [base]


def _close(fast, full) -> list[str]:
    """What differs by more than 1% (of the full trace's peak for the categories at the peak)."""
    bad = []
    if abs(fast.peak - full.peak) > 0.01 * full.peak:
        bad.append(f"peak {fast.peak} vs {full.peak}")
    for key, value in full.at_peak.items():
        if abs(fast.at_peak[key] - value) > 0.01 * full.peak:
            bad.append(f"at_peak[{key}] {fast.at_peak[key]} vs {value}")
    for key, value in full.category_peaks.items():
        if abs(fast.category_peaks.get(key, 0) - value) > 0.01 * max(value, 1):
            bad.append(f"category_peaks[{key}] {fast.category_peaks.get(key, 0)} vs {value}")
    for key, value in full.counted.items():
        if abs(fast.counted[key] - value) > 0.01 * max(value, 1):
            bad.append(f"counted[{key}] {fast.counted[key]} vs {value}")
    return bad


@pytest.mark.parametrize("family,policy,model,precision", GRID)
def test_fast_trace_equals_full_trace(family, policy, model, precision):
    targets = _targets(policy, FULL_GRID.index((family, policy, model, precision)))
    settings = dict(strategy=FAMILIES[family], activation_checkpointing=policy, precision=precision)
    deep = _cell(model, max(targets), **settings)
    shallow = shallow_traces(deep)
    assert [s.depth for _, s in shallow] == sorted(s.depth for _, s in shallow) and shallow[0][1].phases
    for depth in targets:
        cell = _cell(model, depth, **settings)
        fast = from_shallow(cell, shallow)
        full = trace_cell(cell, full=True)
        assert fast.method == "extrapolated" and full.method == "full" and full.depths == [depth]
        assert not _close(fast, full), f"depth {depth}: {_close(fast, full)}"


def test_zero1_and_own_models_are_traced_in_full():
    cell = _cell("llama", 12, strategy="zero1")
    assert "ZeroRedundancyOptimizer gives each rank whole tensors" in why_full(cell)
    assert "costs no more" in why_full(_cell("llama", 6, strategy="zero3"))
    assert why_full(_cell("llama", 12, strategy="zero3")) is None


def test_a_600_layer_model_traces_from_two_shallow_copies():
    """A full trace refuses more than 512 layers (it builds every one); the fast trace builds 3 and 4."""
    trace = trace_cell(_cell("gpt", 600, strategy="zero3", activation_checkpointing="full"))
    assert trace.method == "extrapolated" and trace.depths == [3, 4] and trace.peak > 0


def _phase(total: int, **labels: int) -> Phase:
    return Phase(total=total, at={"Total": total, **labels}, label_max={"Total": total, **labels})


def test_each_phase_is_extrapolated_so_a_steeper_one_can_overtake():
    """At depths 3 and 4 the forward phase peaks higher; it grows by 1 a layer, backward by 10: at 32 layers the
    backward phase is the peak.  Extrapolating the peak itself (100 -> 101 -> 129) would miss it."""
    a = Shallow(3, {"fw": _phase(100, Activation=100), "bw": _phase(50, Temp=50)}, {"parameters": 30})
    b = Shallow(4, {"fw": _phase(101, Activation=101), "bw": _phase(60, Temp=60)}, {"parameters": 40})
    got = extrapolate(a, b, 32)
    assert got.peak == 340 and got.phase == "bw" and got.at_peak == {"Temp": 340, "Total": 340}
    assert got.category_peaks == {"Activation": 129, "Temp": 340} and got.counted == {"parameters": 320}
    with pytest.raises(DepthError, match="differ in their phases"):
        extrapolate(a, Shallow(4, {"fw": _phase(101)}, {}), 32)


# (TP 2 + SP x zero3 was checked the same way once, and so was the 512-rank 405B cell of scenarios/frontier.yaml,
# every rank exact: tracing either costs more than CI can spend on it.)  The default tier traces 1f1b; interleaved
# (206 s on a 2-core machine) and gpipe (114 s) are in the `long` tier.
PIPELINES = [("1f1b", "ddp", "none", "fp32", 2, 1), ("interleaved-1f1b", "zero3", "full", "bf16-mixed", 4, 1),
             ("gpipe", "zero2", "selective", "fp32", 4, 1)]


@pytest.mark.parametrize("schedule,strategy,policy,precision,gpus,tp",
                         covering(PIPELINES, {0}))
def test_a_pipeline_traces_each_rank_from_two_shallow_copies(schedule, strategy, policy, precision, gpus, tp):
    """Every pipeline rank's stages at 3 and 4 blocks each, carried to 8 (v = 2 chunks for interleaved): each
    rank's peak and the worst rank's categories equal the full trace's."""
    chunks = 2 * (2 if schedule == "interleaved-1f1b" else 1)
    cell = _cell("llama", 8 * chunks, strategy=strategy, activation_checkpointing=policy, precision=precision,
                 pipeline_parallel=2, pipeline_schedule=schedule, tensor_parallel=tp, sequence_parallel=tp > 1)
    cell = cell.model_copy(update={"gpus": gpus, "global_batch_size": 2 * gpus // (2 * tp)})  # 2 micro-batches
    fast, full = trace_cell(cell), trace_cell(cell, full=True)
    assert fast.method == "extrapolated" and fast.depths == [3 * chunks, 4 * chunks] and full.method == "full"
    assert [s.peak for s in fast.stages] == pytest.approx([s.peak for s in full.stages], rel=0.01)
    assert fast.peak_stage == full.peak_stage and not _close(fast, full), _close(fast, full)


def test_pipelines_with_layer_level_policies_or_short_stages_are_traced_in_full():
    pp = dict(pipeline_parallel=2, pipeline_schedule="1f1b", strategy="zero3")
    assert "where a stage's checkpointed blocks fall" in why_full(_cell("llama", 24, activation_checkpointing="every-2",
                                                                        **pp))
    assert why_full(_cell("llama", 14, **pp)) == "7 layers per pipeline stage: the full trace costs no more than two " \
                                               "shallow ones"
    assert why_full(_cell("llama", 16, **pp)) is None
