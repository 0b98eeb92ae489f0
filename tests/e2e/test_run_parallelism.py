"""The shipped CPU twin of parallelism.yaml, run by `suite run`: zero3, hsdp 2 x 2 and their CPU-offloaded
variants on 4 gloo ranks, each curve equal to zero3's (the scenario's match gate, fp32, rtol 1e-4), the
mesh and the host bytes recorded, and the plan's numbers stored beside them."""

from __future__ import annotations

import pytest

from tests.e2e.run_helpers import run_shipped

# `long` (80 s on 2 cores): tests/dist/test_hsdp.py checks hsdp and offload against the one-rank reference in CI's
# tier; this is the same through `suite run`
pytestmark = [pytest.mark.slow, pytest.mark.long]


def test_hsdp_and_offload_match_zero3_end_to_end(tmp_path):
    _, results = run_shipped("parallelism-cpu", tmp_path)
    got = {r["axes"]["strategy"]: r for r in results.values()}
    assert set(got) == {"zero3", "hsdp", "zero3-offload", "hsdp-offload"}
    for name, r in got.items():
        match = next(g for g in r["gates"] if g["name"] == "match")
        assert r["status"] == "ok" and match["passed"], (name, r["error"])
        assert r["axes"]["shard_size"] == (2 if name.startswith("hsdp") else None)
        host = r["prediction"]["as_implemented"]["host"]
        assert (host > 0) == name.endswith("-offload")
    assert got["hsdp"]["losses"] == pytest.approx(got["zero3"]["losses"], rel=1e-4)
