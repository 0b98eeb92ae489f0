"""suite's training step is the same mathematics as a bare PyTorch loop, and its overhead is reported.

The overhead (suite's median step over the bare loop's, suite/testing/overhead.py) is a speed ratio on a shared
CPU: it is recorded (the JUnit property `suite_over_bare_ratio`, printed with -s) and not asserted; track it
with `scripts/overhead-vs-bare`.  The losses must agree exactly: DDP at world size one is the plain model.
"""

from __future__ import annotations

import pytest

from suite.testing.overhead import line, measure

pytestmark = pytest.mark.slow


def test_suite_step_is_a_bare_loop_and_its_overhead_is_reported(tmp_path, record_property):
    out = measure(tmp_path)
    assert out["suite_losses"] == pytest.approx(out["bare_losses"], rel=1e-6, abs=1e-7)
    assert out["suite_s"] > 0 and out["bare_s"] > 0  # both sides timed their steps
    record_property("suite_over_bare_ratio", round(out["ratio"], 4))
    record_property("suite_step_ms", round(out["suite_s"] * 1e3, 3))
    record_property("bare_step_ms", round(out["bare_s"] * 1e3, 3))
    print(line(out))
