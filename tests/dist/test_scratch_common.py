"""In-process checks of what the hand-written strategies share (suite/strategies/scratch/common.py) and of how
the planner treats them; no process launch, so not marked slow."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from suite.plan import predict
from suite.strategies import get_strategy, registry
from suite.strategies.scratch.common import FlatLayout, SyncSwitch, buckets_by_size, storage_bytes
from suite.testing.builders import make_cell

TWINS = {"scratch-dp": "ddp", "scratch-dp-overlap": "ddp", "scratch-dp-bucketed": "ddp",
         "scratch-zero1": "zero1", "scratch-zero2": "zero2", "scratch-zero3": "zero3"}


def test_buckets_follow_reverse_order_and_respect_the_cap():
    params = [nn.Parameter(torch.zeros(n)) for n in (10, 20, 30, 300, 5)]  # fp32: 40, 80, 120, 1200, 20 bytes
    buckets = buckets_by_size(params, cap_mb=200 / 2**20)  # 200 bytes
    sizes = [[p.numel() for p in b] for b in buckets]
    assert sizes == [[5], [300], [30, 20], [10]]  # last parameter first; 1200 B alone; 120 + 80 <= 200 < +40
    assert [p for b in buckets for p in b] == params[::-1]


def test_buckets_never_mix_dtypes():
    params = [nn.Parameter(torch.zeros(4)), nn.Parameter(torch.zeros(4, dtype=torch.bfloat16))]
    assert [[p.dtype for p in b] for b in buckets_by_size(params, cap_mb=1.0)] == [[torch.bfloat16], [torch.float32]]


def test_flat_layout_pads_to_the_world_and_shards_contiguously():
    params = [nn.Parameter(torch.arange(6.0).view(2, 3)), nn.Parameter(torch.tensor([7.0]))]
    layouts = [FlatLayout(params, world=3, rank=r) for r in range(3)]
    assert layouts[0].numel == 9 and layouts[0].shard_numel == 3  # 7 elements padded to 9
    flat = layouts[0].pack([p.data for p in params], torch.float32, torch.device("cpu"))
    assert flat.tolist() == [0, 1, 2, 3, 4, 5, 7, 0, 0]
    assert torch.cat([layout.shard(flat) for layout in layouts]).tolist() == flat.tolist()
    views = layouts[0].views(flat)
    assert views[0].shape == (2, 3) and views[0].data_ptr() == flat.data_ptr()  # views, not copies
    assert layouts[0].pack([None, torch.tensor([1.0])], torch.float32, torch.device("cpu")).tolist()[6] == 1.0


def test_storage_bytes_counts_aliased_memory_once():
    flat = torch.zeros(100)
    assert storage_bytes([flat, flat[10:20], flat[50:].view(5, 10), None]) == 400
    assert storage_bytes([flat, torch.zeros(10, dtype=torch.bfloat16)]) == 420
    flat.untyped_storage().resize_(0)  # a freed ZeRO-3 buffer holds nothing
    assert storage_bytes([flat]) == 0


def test_sync_switch_is_off_only_inside_no_sync_even_when_backward_raises():
    class Reducer(SyncSwitch):
        pass

    a, b = Reducer(), Reducer()
    assert a.sync and b.sync
    with a.no_sync():
        assert not a.sync and b.sync  # per instance, not shared through the class
    assert a.sync
    with pytest.raises(RuntimeError), a.no_sync():
        raise RuntimeError("backward failed")
    assert a.sync  # a failed micro-batch must not leave the next step silently unsynchronized


def test_every_scratch_strategy_is_registered_and_valid_in_a_scenario():
    for name in TWINS:
        assert name in registry.names() and callable(get_strategy(name))
        assert make_cell(strategy=name).strategy == name


def test_planner_treats_a_scratch_strategy_like_its_native_twin():
    for name, twin in TWINS.items():
        for precision in ("fp32", "bf16-mixed"):
            ours = predict(make_cell(strategy=name, precision=precision, global_batch_size=8))
            theirs = predict(make_cell(strategy=twin, precision=precision, global_batch_size=8))
            assert ours.memory_bytes == theirs.memory_bytes
            assert ours.comm_bytes_per_step == theirs.comm_bytes_per_step
    psi = predict(make_cell(strategy="scratch-zero1")).num_parameters
    assert predict(make_cell(strategy="scratch-zero1")).comm_bytes_per_step == 3 * psi * 4  # all-reduce + gather
