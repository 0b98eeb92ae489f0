"""suite/testing/peaks.py: a real peak matches its trace within 5%, or within 5% once one late all-gather
buffer (a block's fp32 parameters, for strategies that gather parameters) is taken off; nothing else."""

from suite.testing.builders import make_cell
from suite.testing.peaks import late_gather_bytes, peak_matches_trace

LLAMA = {"family": "llama", "layers": 4, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn": 172, "vocab": 256}


def test_only_strategies_that_gather_parameters_have_a_late_buffer_and_it_is_one_block():
    attention = 2 * 64 * 64 + 2 * 64 * 32  # q and o; k and v (2 kv heads of 16)
    block = 4 * (attention + 3 * 64 * 172 + 2 * 64)  # fp32: attention, the mlp's 3 matrices, 2 norms
    assert late_gather_bytes(make_cell(model=LLAMA, strategy="zero3")) == block == 181_760
    hsdp = make_cell(model=LLAMA, strategy="hsdp", gpus=4, shard_size=2, global_batch_size=8)
    assert late_gather_bytes(hsdp) == block
    assert late_gather_bytes(make_cell(model=LLAMA, strategy="zero3", tensor_parallel=2, gpus=4)) == block // 2
    assert late_gather_bytes(make_cell(model=LLAMA, strategy="ddp")) == 0
    assert late_gather_bytes(make_cell(model=LLAMA, strategy="zero2")) == 0


def test_a_peak_matches_its_trace_or_the_trace_plus_one_late_buffer_only():
    zero3, ddp = make_cell(model=LLAMA, strategy="zero3"), make_cell(model=LLAMA, strategy="ddp")
    traced = 2_000_000
    assert peak_matches_trace(2_090_000, traced, zero3) and peak_matches_trace(1_910_000, traced, zero3)
    assert peak_matches_trace(traced + 181_760 + 50_000, traced, zero3)  # the late buffer, within 5%
    assert not peak_matches_trace(traced + 2 * 181_760, traced, zero3)  # two buffers are not the race
    assert not peak_matches_trace(traced + 181_760, traced, ddp)  # no all-gather, no late buffer
    assert not peak_matches_trace(1_800_000, traced, zero3)
