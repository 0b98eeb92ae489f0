"""Fuzzing scenario files: mutated copies of the shipped scenarios either load, expand and plan, or fail with a
clean ScenarioError, within 2 s and 500 MB each.

The mutator and the check are suite/testing/scenario_fuzz.py (scripts/fuzz-scenarios uses them too, with a
seeded `random.Random` for thousands of files); here hypothesis draws the choices, so failures shrink.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from suite.testing.scenario_fuzz import REPO, check, mutate


# ---------------------------------------------------------------- the property

@pytest.fixture(autouse=True, scope="module")
def _warm_imports():
    """Reading an hf config (own-model.yaml) imports transformers, and its config module per model type, once
    per process (seconds on this machine): a cost of the process, not of any input, paid before the clock."""
    from suite.models.own import read_config

    for config in sorted((REPO / "scenarios" / "models").glob("*.json")):
        read_config(str(config))


_SCRATCH: list[Path] = []


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_mutated_scenarios_load_or_fail_cleanly_in_bounded_time_and_memory(tmp_path_factory, data):
    if not _SCRATCH:  # one folder for all examples (a function-scoped tmp_path would be shared anyway)
        _SCRATCH.append(tmp_path_factory.mktemp("fuzz") / "s.yaml")
    text = mutate(lambda n: data.draw(st.integers(0, n - 1)) if n > 1 else 0)
    outcome = check(text, _SCRATCH[0])
    assert outcome.kind in ("valid", "error"), (outcome, text[:500])


def test_the_mutator_reaches_every_outcome_it_should(tmp_path):
    """The fuzzer is only as good as its inputs: across seeds it produces valid files and many error kinds."""
    import random

    scratch = tmp_path / "s.yaml"
    kinds, messages = set(), set()
    for seed in range(150):
        rng = random.Random(seed)
        outcome = check(mutate(rng.randrange), scratch)
        kinds.add(outcome.kind)
        messages.add(re.sub(r"^\S+:\d+: ", "", outcome.detail)[:25])
    assert kinds == {"valid", "error"}, kinds
    assert len(messages) > 20, messages
