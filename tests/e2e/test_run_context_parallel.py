"""The shipped CPU twin of frontier-long-context.yaml, run by `suite run`: each 64-token sequence split over 1, 2
or 4 gloo ranks (zero3 over the data- and context-parallel ranks), every context-parallel loss and
gradient-norm curve equal to the unsplit one's (the scenario's match gate, fp32), and every curve falling."""

from __future__ import annotations

import pytest

from tests.e2e.run_helpers import run_shipped

# `long` (76 s on 2 cores): tests/dist/test_context_parallel.py checks CP against the one-rank reference in CI's
# tier; this is the same through `suite run`
pytestmark = [pytest.mark.slow, pytest.mark.long]


def test_context_parallel_cells_match_the_unsplit_sequence(tmp_path):
    results, stored = run_shipped("frontier-long-context-cpu", tmp_path)
    got = {r["axes"]["context_parallel"]: r for r in stored.values()}
    assert set(got) == {1, 2, 4}
    for c in (2, 4):
        r = got[c]
        match = next(g for g in r["gates"] if g["name"] == "match")
        assert r["status"] == "ok" and match["passed"], (c, r["error"], match)
        assert r["losses"] == pytest.approx(got[1]["losses"], rel=1e-4)
        assert r["losses"][-1] < r["losses"][0] - 0.1
