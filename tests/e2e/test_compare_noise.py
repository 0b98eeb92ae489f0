"""A planted slowdown end to end: two runs of a 2-cell scenario with 3 interleaved repeats each, the second
with one cell slowed x4 (SUITE_FAULT <cell>:slow=4), judged by `suite compare` on the repeats' spread.

The factor and the thresholds (20%) are wide so the test holds on any CI machine (a busy CI machine measured a
26% run-to-run sd over 3+3 repeats, which hid a planted x2: +73% against a detectable 109%); how small a slowdown is
caught at the default settings, and how often identical runs raise a false alarm, is the campaign's question
(scripts/noise-campaign, scripts/noise-report; numbers in docs/compare.md)."""

from __future__ import annotations

import json

import pytest

from tests.e2e.run_helpers import env, run_cli, run_dirs, write

pytestmark = pytest.mark.slow

SCENARIO = """
name: planted
model: gpt-tiny
seq_len: [32, 64]
strategy: ddp
gpus: 1
micro_batch_size: 4
global_batch_size: 4
steps: 12
warmup_steps: 2
device: cpu
repeats: 3
timeout_s: 180
"""


def test_a_planted_slowdown_is_flagged_and_only_there(tmp_path):
    from suite.scenario import load_cells

    path = write(tmp_path / "planted.yaml", SCENARIO)
    short, long = sorted(load_cells(str(path))[1], key=lambda c: c.seq_len)
    results = tmp_path / "results"
    for name, fault in (("base", ""), ("cur", f"{long.id}:slow=4")):
        run = run_cli(["run", str(path), "--results", str(results / name), "--shuffle", "1"], tmp_path,
                      env(SUITE_FAULT=fault))
        assert run.returncode == 0, run.stderr[-3000:]
    (base,), (cur,) = run_dirs(results / "base", "planted"), run_dirs(results / "cur", "planted")
    order = [json.loads(line)["cell"] for line in (cur / "runlog.jsonl").read_text().splitlines()
             if json.loads(line).get("event") == "cell_end"]
    assert sorted(order[:2]) == sorted(order[2:4]) == sorted([short.id, long.id])  # interleaved rounds
    out = tmp_path / "compare.json"
    # --strict: timings are judged even if the two runs' machine states differ (a CI machine busy with other work
    # during one of them would otherwise make this a "machine-differs" verdict, exit 0; tests/unit/test_machine.py
    # covers that verdict); the environments are the same, so --strict refuses nothing here
    cmp = run_cli(["compare", str(base), str(cur), "--threshold", "step_time=20%", "--threshold",
                   "tokens_per_s=20%", "--strict", "--format", "junit", "--out", str(out)], tmp_path, env())
    assert cmp.returncode == 1, cmp.stdout[-3000:] + cmp.stderr[-3000:]
    import xml.etree.ElementTree as ET

    cases = {c.get("name"): c for c in ET.parse(out).getroot().iter("testcase")}
    failed = {n for n, c in cases.items() if c.find("failure") is not None}
    assert failed == {f"{long.id}.step_time", f"{long.id}.tokens_per_s"}, failed
    props = {p.get("name"): p.get("value") for p in cases[f"{long.id}.step_time"].iter("property")}
    assert props["noise"].startswith("run-to-run sd") and "3+3 repeats" in props["noise"]
    assert "slower, beyond threshold and noise" in cases[f"{long.id}.step_time"].find("failure").get("message")
    # the losses did not change: the slowdown is in the timing only
    assert cases[f"{long.id}.final_loss"].find("failure") is None
