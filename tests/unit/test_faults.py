"""SUITE_FAULT parsing and the planted slowdown (slow=<factor>): pure, no torch process group."""

from __future__ import annotations

import types

import pytest

from suite.worker.faults import Faults, parse, parse_slow


def test_slow_entries_combine_with_step_faults():
    spec = "a:raise@3, b:slow=1.3, a:slow=1.15, a:nan@5"
    assert parse(spec, "a") == {3: "raise", 5: "nan"}
    assert parse_slow(spec, "a") == 1.15 and parse_slow(spec, "b") == 1.3 and parse_slow(spec, "c") == 1.0


@pytest.mark.parametrize("entry", ["a:slow=x", "a:slow", "a:slow=0.5", "a:slow=1e9", "slow=1.3"])
def test_bad_slow_entries_are_errors_naming_the_entry(entry):
    with pytest.raises(ValueError, match="slow"):
        parse_slow(entry, "a")


def test_a_kind_that_only_starts_with_slow_is_not_a_slowdown():
    with pytest.raises(ValueError, match="malformed"):  # a step fault without @step: an error, not a slowdown
        parse("a:slowdown=2", "a")
    assert parse_slow("a:slowdown=2", "a") == 1.0


def test_stretch_lengthens_the_timed_region_by_the_factor(monkeypatch):
    # on a fake clock: the sleep asked for is exact, whatever the machine's speed (no wall-clock assertion)
    from suite.worker import faults

    slept = []
    clock = types.SimpleNamespace(perf_counter=lambda: 10.05, sleep=slept.append)  # the step's work took 50 ms
    monkeypatch.setattr(faults, "time", clock)
    Faults("a", "a:slow=2.0").stretch(10.0)
    Faults("a", "a:slow=3.5").stretch(10.0)
    Faults("b", "a:slow=2.0").stretch(10.0)  # another cell: no sleep
    assert slept == [pytest.approx(0.05), pytest.approx(0.125)]


def test_a_planted_lr_factor_changes_the_cell_as_trained_but_not_its_id():
    from suite.scenario import expand
    from suite.scenario import Scenario
    from suite.worker.faults import Faults, parse_factor

    (cell,) = expand(Scenario.model_validate({"name": "x", "model": "gpt-tiny", "seq_len": 16}))
    spec = f"{cell.id}:lr=10, other:lr=0.5, {cell.id}:slow=1.2"
    assert parse_factor(spec, cell.id, "lr") == 10 and parse_factor(spec, "other", "lr") == 0.5
    planted = Faults(cell.id, spec).planted(cell)
    assert planted.optimizer.lr == pytest.approx(cell.optimizer.lr * 10) and planted.id == cell.id
    assert Faults("other-cell", spec).planted(cell) is cell
    with pytest.raises(ValueError, match="lr factor 5000.0 must be between"):
        parse_factor(f"{cell.id}:lr=5000", cell.id, "lr")


def test_gradient_faults_parse_and_arm_only_their_step_once():
    spec = "a:grad2x@2, a:desync@4, b:desync@1, a:slow=1.1"
    assert parse(spec, "a") == {2: "grad2x", 4: "desync"} and parse(spec, "b") == {1: "desync"}
    with pytest.raises(ValueError, match="kind 'grad3x' is not one of"):
        parse("a:grad3x@2", "a")
    with pytest.raises(ValueError, match="malformed"):
        parse("a:desync", "a")
    f = Faults("a", spec)
    seen = []
    for step in range(6):
        f.before_step(step)
        seen.append(f.gradient_fault())
        assert f.gradient_fault() is None  # consumed: a step run outside the loop (peaks pass) sees nothing
    assert seen == [None, None, "grad2x", None, "desync", None]
    assert Faults("c", spec).gradient_fault() is None
