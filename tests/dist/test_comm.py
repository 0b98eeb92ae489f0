"""`suite comm` on 2 gloo ranks through the CLI (one launch, four ops), and the checks that can fail."""

from __future__ import annotations

import json

import pytest

from suite.comm.record import CommRun
from suite.results.schema import Manifest

# n = 2: all_reduce 2(n-1)/n = 1, all_gather and reduce_scatter (n-1)/n = 1/2, broadcast 1.
HAND_FACTORS = {"all_reduce": 1.0, "all_gather": 0.5, "reduce_scatter": 0.5, "broadcast": 1.0}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_suite_comm_two_gloo_ranks(cli, tmp_path, monkeypatch):
    result = cli("comm", "--ops", "all_reduce,all_gather,reduce_scatter,broadcast", "--sizes", "1KiB,64KiB",
                 "--gpus", "2", "--iters", "3", "--warmup", "1", "--device", "cpu", "--results", tmp_path)
    assert result.exit_code == 0, result.output
    assert "busbw (GB/s)" in result.output and "all_gather" in result.output

    (run_dir,) = (tmp_path / "comm").iterdir()
    assert run_dir.name.startswith("0001_")
    manifest = Manifest.model_validate_json((run_dir / "manifest.json").read_text())
    assert manifest.scenario == "comm" and manifest.extra["comm"]["world_size"] == 2
    assert manifest.extra["comm"]["args"]["backend"] == "gloo"
    assert (run_dir / "work" / "comm" / "launcher.log").is_file()
    assert json.loads((run_dir / "work" / "comm" / "cell.json").read_text()) == manifest.extra["comm"]["args"]
    run = CommRun.model_validate_json((run_dir / "comm.json").read_text())
    assert run == CommRun.model_validate_json((run_dir / "work" / "comm" / "comm.json").read_text())

    assert [(r.op, r.bytes) for r in run.results] == [(op, b) for op in HAND_FACTORS for b in (1024, 65536)]
    for r in run.results:
        assert r.correct, r
        assert (r.world_size, r.device, r.backend, r.time_s.n) == (2, "cpu", "gloo", 3)
        assert 0 < r.time_s.p10 <= r.time_s.median <= r.time_s.p90
        assert r.busbw_factor == HAND_FACTORS[r.op]
        assert r.algbw == r.bytes / r.time_s.median
        assert r.busbw / r.algbw == pytest.approx(HAND_FACTORS[r.op], rel=1e-12)

    # The preflight dict, built from this launch's all-reduce records (no second process group).
    from suite.comm import preflight as pf

    all_reduce_only = run.model_copy(update={"results": [r for r in run.results if r.op == "all_reduce"]})
    monkeypatch.setattr(pf, "launch", lambda args, n, out, timeout_s, stop: all_reduce_only)
    probe = pf.preflight(world_size=2, device="cpu", cuda_devices=[], work_dir=tmp_path / "pf")
    assert probe["correct"] is True and probe["backend"] == "gloo"
    assert probe["busbw_GBps"] == {"1KiB": round(all_reduce_only.results[0].busbw / 1e9, 4),
                                   "64KiB": round(all_reduce_only.results[1].busbw / 1e9, 4)}
    json.dumps(probe)  # goes into manifest.extra: must be plain JSON


def test_preflight_skips_one_rank():
    from suite.comm.preflight import preflight

    assert "skipped" in preflight(world_size=1, device="cpu", cuda_devices=[])


def test_cli_rejects_bad_sizes(cli, tmp_path):
    result = cli("comm", "--sizes", "1KiB..12XB", "--device", "cpu", "--results", tmp_path)
    assert result.exit_code == 2
    assert "'12XB' is not a size" in result.output
    assert not (tmp_path / "comm").exists()  # nothing stored for a command that never ran


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all"])
def test_bench_checks_catch_a_wrong_result(op, tmp_path):
    """One in-process gloo rank: the op's result passes its check, then a corrupted result fails it."""
    import torch
    import torch.distributed as dist

    from suite.comm.bench import make_case

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        case = make_case(op, 64, 1, 0, torch.device("cpu"))
        case.reset()
        if op in ("all_gather", "reduce_scatter", "all_to_all"):
            assert bool(case.bad()), "an output that the collective never wrote (-1) must fail"
        case.run()
        assert not bool(case.bad())
        case.result[-1] += 0.5  # one wrong element
        assert bool(case.bad())
    finally:
        dist.destroy_process_group()
