"""The as-implemented memory model (suite/plan/implemented.py, the registry's `Holds`) against the code.

The registry says what each strategy holds per parameter; a trace of the real code counts it (count_bytes,
the function a real run records as tensor_bytes; tests/dist/test_trace_vs_measured.py shows the trace counts
what a 2-rank gloo run counts).  They must agree up to padding (flat buffers and FSDP2 shards padded to a
multiple of N) and ZeroRedundancyOptimizer's whole-tensor partitions."""

from __future__ import annotations

import pytest

from suite.plan import predict
from suite.plan.implemented import static_bytes
from suite.plan.memory import shard_world
from suite.plan.trace import trace_cell
from suite.strategies import registry
from suite.testing.builders import make_cell
from tests.tiers import covering

# wide enough that padding is small, small enough to trace in about a second
SHAPE = {"family": "gpt", "layers": 2, "hidden": 256, "heads": 4, "vocab": 512, "max_seq_len": 64}
KEYS = ("parameters", "gradients", "optimizer_states", "master_weights")


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
@pytest.mark.parametrize("strategy,world,shard", [(s, 2, None) for s in registry.names()] + [
    ("zero3", 4, None), ("scratch-zero3", 4, None), ("scratch-zero2", 4, None), ("hsdp", 4, 2), ("hsdp", 8, 2)])
def test_registry_holds_what_the_code_counts(strategy, world, shard, precision):
    cell = make_cell(model=SHAPE, strategy=strategy, precision=precision, gpus=world, global_batch_size=2 * world,
                     shard_size=shard)
    counted = trace_cell(cell).counted
    model = static_bytes(cell.model.num_parameters(), strategy, precision, shard_world(cell))
    # ZeroRedundancyOptimizer partitions whole tensors (the embedding alone is 1/7 of this model)
    tolerance = 0.06 if strategy == "zero1" else 0.01
    for key in KEYS:
        assert model[key] == pytest.approx(counted[key], rel=tolerance, abs=64), (key, model, counted)


def test_autocast_zero1_holds_fp32_parameters_and_gradients():
    """The issue's numbers: ZeRO-1 in bf16-mixed holds 8 + 8/N bytes per parameter, the textbook says 4 + 12/N
    (39% low at N = 8)."""
    cell = make_cell(model="llama3-8b", seq_len=128, strategy="zero1", precision="bf16-mixed", gpus=8,
                     micro_batch_size=1, global_batch_size=8)
    psi, p = cell.model.num_parameters(), predict(cell)
    static = {k: getattr(p.as_implemented, k) for k in KEYS}
    textbook = {k: getattr(p.memory_bytes, k) for k in KEYS}
    assert sum(static.values()) / psi == pytest.approx(8 + 8 / 8)
    assert sum(textbook.values()) / psi == pytest.approx(4 + 12 / 8)


def test_fused_attention_drops_the_quadratic_term():
    cell = make_cell(model="llama3-8b", seq_len=4096, strategy="zero3", precision="bf16-mixed", gpus=8,
                     micro_batch_size=1, global_batch_size=8)
    p = predict(cell)
    s, h, a, layers = 4096, 4096, 32, 32
    assert p.memory_bytes.activations == pytest.approx(s * h * (34 + 5 * a * s / h) * layers)
    # fused attention keeps O(s) per head: every as-implemented term is linear in the sequence
    longer = predict(cell.model_copy(update={"seq_len": 2 * s}))
    assert longer.as_implemented.activations == pytest.approx(2 * p.as_implemented.activations)
    assert longer.memory_bytes.activations > 2.5 * p.memory_bytes.activations


SMALL_LLAMA = {"family": "llama", "layers": 8, "hidden": 512, "heads": 8, "kv_heads": 2, "ffn": 1792,
               "vocab": 8192}


@pytest.mark.parametrize("strategy", covering(["ddp", "zero1", "zero2", "zero3"], {3}))
def test_as_implemented_is_within_10_percent_of_the_trace(strategy):
    """Without a trace, the as-implemented total (saved tensors counted from the code, the loss's gradients or
    autocast's weight copies at the peak, FSDP2's gradients absent there) is within 10% of the traced peak, for
    none, selective and full (every-2 and op-level passed too; they are left out to spare CI 70 seconds): the
    closing note of issue 32 has the same check at llama3-8b scale for every policy (within 3.4%).  The default
    tier checks zero3 (about 40 s on 2 cores a strategy); ddp, zero1 and zero2 are in the `long` tier."""
    for policy in ("none", "selective", "full"):
        cell = make_cell(model=SMALL_LLAMA, seq_len=512, strategy=strategy, activation_checkpointing=policy,
                         precision="bf16-mixed", gpus=8, micro_batch_size=1, global_batch_size=8)
        traced, guess = trace_cell(cell).peak, predict(cell).as_implemented.total
        assert abs(guess - traced) <= 0.10 * traced, (policy, guess, traced, guess / traced)


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
def test_fsdp2_unsharded_working_set_is_root_plus_one_block(precision):
    """FSDP2 zero3's largest unsharded set (FSDPMemTracker's 'Unsharded Param' maximum) is what the model says."""
    from suite.plan.implemented import unsharded_bytes

    cell = make_cell(model=SHAPE, strategy="zero3", precision=precision, gpus=4, global_batch_size=8)
    traced = trace_cell(cell).category_peaks["Unsharded Param"]
    assert traced == unsharded_bytes(cell.model, "zero3", precision)


LLAMA = {"family": "llama", "layers": 2, "hidden": 256, "heads": 4, "kv_heads": 2, "ffn": 512, "vocab": 512}


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
@pytest.mark.parametrize("strategy,world", [("ddp", 2), ("zero3", 2), ("zero3", 4)])
def test_tensor_parallel_holds_what_the_code_counts(strategy, world, precision):
    """t = 2: the blocks' projections split over 2 ranks, the rest replicated, ZeRO-3 over the world / 2."""
    cell = make_cell(model=LLAMA, seq_len=32, strategy=strategy, precision=precision, gpus=world,
                     tensor_parallel=2, micro_batch_size=1, global_batch_size=world)
    counted = trace_cell(cell).counted
    p = predict(cell).as_implemented
    from suite.plan.implemented import unsharded_bytes

    at_rest = p.parameters - unsharded_bytes(cell.model, strategy, precision, 2)
    for key, want in (("parameters", at_rest), ("gradients", p.gradients), ("optimizer_states", p.optimizer_states)):
        assert want == pytest.approx(counted[key], rel=0.01, abs=64), (key, want, counted)
