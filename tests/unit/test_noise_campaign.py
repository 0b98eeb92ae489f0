"""The noise campaign replayed: real per-repeat numbers of smoke on the 2-core development machine, stored by
scripts/noise-report --fixture, judged again with noise.judge (pure; no runs).

It pins what the closing note and docs/compare.md report: identical-code pairs raise no alarm, a planted x1.3
slowdown is caught, a history of 5 stored runs keeps identical runs clean, and the counts equal those
`suite compare`'s own code gave on the stored run folders (the `summary` part of the fixture), so compare and
judge agree on real data.  A change to the statistics that brings back false alarms fails here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite.compare.comparison import DEFAULT_THRESHOLDS
from suite.compare.noise import judge

FIXTURE = Path(__file__).parent / "fixtures" / "noise_campaign.json"
METRICS = {"step_time": True, "tokens_per_s": False}  # metric -> higher is worse


@pytest.fixture(scope="module")
def campaign() -> dict:
    assert FIXTURE.exists(), f"{FIXTURE} is missing: make it with scripts/noise-report OUT --fixture {FIXTURE}"
    return json.loads(FIXTURE.read_text())


def flagged(base: list[dict], cur: dict, k: int) -> dict[str, bool]:
    """strategy -> whether step_time or tokens_per_s regressed (base: the baseline's runs, oldest first)."""
    out = {}
    for s in cur:
        out[s] = any(judge([run[s][m][:k] for run in base], cur[s][m][:k], DEFAULT_THRESHOLDS[m], 0.05,
                           worse).verdict == "worse" for m, worse in METRICS.items())
    return out


@pytest.mark.parametrize("k", [3, 5])
def test_identical_pairs_raise_no_alarm(campaign, k):
    clean = campaign["clean"]
    assert len(clean) >= 11
    alarms = {s: 0 for s in clean[0]}
    for a, b in zip(clean, clean[1:]):
        for s, hit in flagged([a], b, k).items():
            alarms[s] += hit
    assert alarms == campaign["summary"]["pairs"][str(k)]["false_alarms"]  # what compare found
    assert sum(alarms.values()) == 0, alarms


@pytest.mark.parametrize("k", [3, 5])
def test_planted_slowdowns_are_caught_as_compare_caught_them(campaign, k):
    hits = {s: 0 for s in campaign["clean"][0]}
    for a, b in zip(campaign["clean"], campaign["slow"]):
        for s, hit in flagged([a], b, k).items():
            hits[s] += hit
    summary = campaign["summary"]["pairs"][str(k)]
    assert hits == summary["flagged"]
    assert hits["zero3"] == 0  # x1.05 is at the threshold: never past it with confidence
    if k == 5:  # x1.3 in 9 of 10 pairs, the untouched cell never; with 3 repeats 8/10 and 1/10 (docs/compare.md)
        assert hits["zero1"] >= 9 and hits["ddp"] == 0


def test_a_history_keeps_identical_runs_clean_and_catches_x13(campaign):
    history = campaign["history"]
    assert len(history) == 5
    clean = [flagged(history, run, 1) for run in campaign["clean"]]
    slow = [flagged(history, run, 1) for run in campaign["slow"]]
    summary = campaign["summary"]["history"]
    assert sum(any(h.values()) for h in clean) == summary["clean_tries_with_alarm"] <= len(clean) // 10
    hits = {s: sum(h[s] for h in slow) for s in slow[0]}
    assert hits == summary["slow_flagged"]
    # 1-repeat nights of ~10% noise: x1.3 sits at the stated detectable change (~32%), so about half are flagged
    assert 3 <= hits["zero1"] <= 7 and hits["ddp"] == 0
