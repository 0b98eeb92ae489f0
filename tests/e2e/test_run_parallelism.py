"""The shipped CPU twin of parallelism.yaml, run by `suite run`: zero3, hsdp 2 x 2 and their CPU-offloaded
variants on 4 gloo ranks, each curve equal to zero3's (the scenario's match gate, fp32, rtol 1e-4), the
mesh and the host bytes recorded, and the plan's numbers stored beside them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.run_helpers import cell_results, env, run_cli, run_dirs

pytestmark = pytest.mark.slow
SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "parallelism-cpu.yaml"


def test_hsdp_and_offload_match_zero3_end_to_end(tmp_path):
    results = tmp_path / "results"
    run = run_cli(["run", str(SCENARIO), "--results", str(results)], tmp_path, env(), timeout=600)
    assert run.returncode == 0, run.stderr
    (folder,) = run_dirs(results, "parallelism-cpu")
    got = {r["axes"]["strategy"]: r for r in cell_results(folder).values()}
    assert set(got) == {"zero3", "hsdp", "zero3-offload", "hsdp-offload"}
    for name, r in got.items():
        match = next(g for g in r["gates"] if g["name"] == "match")
        assert r["status"] == "ok" and match["passed"], (name, r["error"])
        assert r["axes"]["shard_size"] == (2 if name.startswith("hsdp") else None)
        host = r["prediction"]["as_implemented"]["host"]
        assert (host > 0) == name.endswith("-offload")
    assert got["hsdp"]["losses"] == pytest.approx(got["zero3"]["losses"], rel=1e-4)
