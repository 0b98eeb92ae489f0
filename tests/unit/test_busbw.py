"""NCCL-tests bandwidth conventions, size parsing and device resolution of `suite comm` (pure, no torch)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from suite.comm.busbw import algbw, busbw, busbw_factor, effective_bytes
from suite.comm.record import CommResult
from suite.comm.run import resolve
from suite.comm.sizes import CommArgError, format_size, parse_ops, parse_sizes

MiB = 2**20

# Hand-computed factors: 2(n-1)/n for all_reduce, (n-1)/n for the gather/scatter family, 1 for rooted ops.
HAND_FACTORS = {
    2: {"all_reduce": 1.0, "all_gather": 0.5, "reduce_scatter": 0.5, "all_to_all": 0.5, "broadcast": 1.0, "reduce": 1.0},
    3: {"all_reduce": 4 / 3, "all_gather": 2 / 3, "reduce_scatter": 2 / 3, "all_to_all": 2 / 3, "broadcast": 1.0,
        "reduce": 1.0},
    4: {"all_reduce": 1.5, "all_gather": 0.75, "reduce_scatter": 0.75, "all_to_all": 0.75, "broadcast": 1.0,
        "reduce": 1.0},
    8: {"all_reduce": 1.75, "all_gather": 0.875, "reduce_scatter": 0.875, "all_to_all": 0.875, "broadcast": 1.0,
        "reduce": 1.0},
}


@pytest.mark.parametrize("n", sorted(HAND_FACTORS))
def test_busbw_factor_matches_hand_computation(n):
    for op, factor in HAND_FACTORS[n].items():
        assert busbw_factor(op, n) == pytest.approx(factor, rel=1e-15), (op, n)


def test_one_rank_has_no_bus_traffic_except_rooted_ops():
    assert busbw_factor("all_reduce", 1) == 0.0
    assert busbw_factor("all_gather", 1) == 0.0
    assert busbw_factor("broadcast", 1) == 1.0


def test_busbw_is_algbw_times_factor_by_hand():
    # 64 MiB all-reduce in 1 ms on 8 ranks: algbw = 67108864 B / 1e-3 s = 67.108864 GB/s;
    # busbw = 67.108864 x 2 x 7 / 8 = 117.440512 GB/s.
    assert algbw(64 * MiB, 1e-3) == pytest.approx(67.108864e9)
    assert busbw("all_reduce", 64 * MiB, 1e-3, 8) == pytest.approx(117.440512e9)
    # 64 MiB all-gather (whole gathered buffer) in 2 ms on 4 ranks: 33.554432 GB/s x 3/4 = 25.165824 GB/s.
    assert busbw("all_gather", 64 * MiB, 2e-3, 4) == pytest.approx(25.165824e9)
    assert busbw("reduce_scatter", 64 * MiB, 2e-3, 4) == pytest.approx(25.165824e9)
    # broadcast: busbw = algbw whatever n.
    assert busbw("broadcast", 1000, 1e-6, 8) == pytest.approx(1e9)


def test_bandwidth_errors_name_the_value():
    with pytest.raises(ValueError, match="0 s for 1024 bytes"):
        algbw(1024, 0.0)
    with pytest.raises(ValueError, match="'allreduce'"):
        busbw_factor("allreduce", 2)
    with pytest.raises(ValueError, match="world_size must be >= 1, got 0"):
        busbw_factor("all_reduce", 0)


def test_effective_bytes_rounds_to_whole_chunks():
    assert effective_bytes("all_reduce", 1024, 3) == 1024  # not chunked: whole floats only
    assert effective_bytes("all_reduce", 1023, 3) == 1020
    assert effective_bytes("all_gather", 1024, 3) == 1020  # 3 chunks of 85 floats
    assert effective_bytes("reduce_scatter", 1024, 2) == 1024
    assert effective_bytes("all_to_all", 4, 2) == 8  # never below one float per rank
    assert effective_bytes("broadcast", 1, 8) == 4


def test_parse_sizes_ranges_and_lists():
    assert parse_sizes("1KiB..8KiB") == [1024, 2048, 4096, 8192]
    assert parse_sizes("1KiB..1GiB")[-1] == 2**30 and len(parse_sizes("1KiB..1GiB")) == 21
    assert parse_sizes("4MiB,64MiB") == [4 * MiB, 64 * MiB]
    assert parse_sizes("64MiB, 4MiB,4MiB") == [4 * MiB, 64 * MiB]  # sorted, unique
    assert parse_sizes("1000,1KB,1kB") == [1000]
    assert parse_sizes("0.5MiB") == [MiB // 2]
    assert parse_sizes("1KiB..3KiB") == [1024, 2048]  # doubling stops at or before the end


@pytest.mark.parametrize("text, fragment", [("12XB", "'12XB' is not a size"), ("4mib", "'4mib' is not a size"),
                                            ("8KiB..1KiB", "runs backwards"), ("1KiB,,2KiB", "empty item"),
                                            ("0", "'0' is 0 bytes"), ("0.3B", "'0.3B'"), ("1KiB..x", "'x'")])
def test_parse_sizes_errors_name_the_bad_value(text, fragment):
    with pytest.raises(CommArgError, match="--sizes") as info:
        parse_sizes(text)
    assert fragment in str(info.value)


def test_parse_ops():
    assert parse_ops("all_reduce,broadcast,all_reduce") == ["all_reduce", "broadcast"]
    with pytest.raises(CommArgError, match="--ops: unknown op 'allgather'"):
        parse_ops("all_reduce,allgather")


def test_format_size_is_exact():
    assert [format_size(b) for b in (1024, 3 * MiB, 2**30, 1000, 1536)] == ["1KiB", "3MiB", "1GiB", "1000B", "1536B"]


def test_resolve_device_and_ranks():
    assert resolve("auto", None, []) == ("cpu", "gloo", 2)
    assert resolve("auto", None, ["H200"] * 8) == ("cuda", "nccl", 8)
    assert resolve("cpu", 3, ["H200"]) == ("cpu", "gloo", 3)
    assert resolve("cuda", 2, ["H200"] * 8) == ("cuda", "nccl", 2)
    with pytest.raises(CommArgError, match="--gpus 4: only 2 CUDA device"):
        resolve("cuda", 4, ["A100", "A100"])
    with pytest.raises(CommArgError, match="--device cuda: torch sees no CUDA device"):
        resolve("cuda", None, [])
    with pytest.raises(CommArgError, match="--gpus: 0 ranks"):
        resolve("cpu", 0, [])
    with pytest.raises(CommArgError, match="--device: 'tpu'"):
        resolve("tpu", None, [])


def test_comm_result_has_fixed_keys():
    good = dict(op="all_reduce", bytes=1024, requested_bytes=1024, world_size=2, dtype="float32",
                time_s=dict(n=3, median=1e-3, p10=1e-3, p90=2e-3, mean=1.2e-3), algbw=1.024e6, busbw=1.024e6,
                busbw_factor=1.0, correct=True, device="cpu", device_name="x", backend="gloo")
    assert CommResult.model_validate(good).schema_version == 1
    with pytest.raises(ValidationError, match="surprise"):
        CommResult.model_validate({**good, "surprise": 1})
