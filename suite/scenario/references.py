"""Checks of a scenario's cross-cell gates (convergence.match and convergence.band) against its matrix: the
reference value is among the axis values, and every gated cell has its reference cells (an `exclude` may have
dropped them).  Each problem names the field's line and the cell."""

from __future__ import annotations

from typing import Any

from suite.axes import LATER_AXES
from suite.scenario.experiment import Scenario
from suite.scenario.source import SourceMap
from suite.scenario.yaml_loader import clip
from suite.strategies import registry


def reference_axes(axes: dict[str, Any], axis: str, value: Any) -> dict[str, Any]:
    """The axes of the reference cell of a cell with `axes`: `axis` at `value`.  A reference strategy without
    shard groups has no shard_size (hsdp with shard_size 2 matches zero3, whose shard_size is None); a reference
    without pipeline stages has no schedule."""
    want = {**axes, axis: value}
    if axis == "pipeline_parallel" and value == 1:  # without stages a cell has no schedule
        want["pipeline_schedule"] = None
    if axis == "strategy" and isinstance(value, str) and value in registry.names() and \
            not registry.get(value).shard_group:
        want["shard_size"] = None
    return want


def check_match(scenario: Scenario, src: SourceMap) -> list[str]:
    match = scenario.convergence.match if scenario.convergence else None
    if match is None:
        return []
    values, value = scenario.axis_values(match.axis), match.value
    if value not in values:
        return [f"{src.where('convergence', 'match')}: match {match.axis}: {clip(repr(match.value))} is not among "
                f"the scenario's {match.axis} values {clip(repr(values))}"]
    return []


def _match_references(scenario: Scenario, cells: list, src: SourceMap) -> list[str]:
    """Every cell gated by `match` needs its reference cell in the matrix (an `exclude` may have dropped it)."""
    match = scenario.convergence.match if scenario.convergence else None
    if match is None:
        return []
    value = match.value
    present = {tuple(c.axes().items()) for c in cells}
    for c in cells:
        if tuple(reference_axes(c.axes(), match.axis, value).items()) not in present:
            return [f"{src.where('convergence', 'match')}: match {match.axis}: {clip(repr(value))}: the reference of "
                    f"cell {c.id} ({describe(c.axes())}) is not in the matrix (dropped by exclude?)"]
    return []


def check_band(scenario: Scenario, src: SourceMap) -> list[str]:
    band = scenario.convergence.band if scenario.convergence else None
    if band is None:
        return []
    where = src.where("convergence", "band")
    seeds, values = scenario.axis_values("seed"), scenario.axis_values(band.axis)
    problems = []
    if len(seeds) < 2:
        problems.append(f"{where}: band is drawn over seeds: seed needs at least 2 values (3 or more give a steadier "
                        f"band), got seed: {clip(repr(scenario.seed))}")
    if band.value not in values:
        problems.append(f"{where}: band reference {band.axis}: {clip(repr(band.value))} is not among the scenario's "
                        f"{band.axis} values {clip(repr(values))}")
    return problems


def band_key(axes: dict[str, Any], band) -> tuple:
    """What a cell shares with its band's reference cells: every axis but seed, the reference axis at its value."""
    return tuple(sorted(({**reference_axes(axes, band.axis, band.value), "seed": None}).items(), key=lambda kv: kv[0]))


def _band_references(scenario: Scenario, cells: list, src: SourceMap) -> list[str]:
    band = scenario.convergence.band if scenario.convergence else None
    if band is None:
        return []
    refs: dict[tuple, int] = {}
    for c in cells:
        if c.axes()[band.axis] == band.value:
            refs[band_key(c.axes(), band)] = refs.get(band_key(c.axes(), band), 0) + 1
    for c in cells:
        n = refs.get(band_key(c.axes(), band), 0)
        if n < 2:
            return [f"{src.where('convergence', 'band')}: band reference {band.axis}: {clip(repr(band.value))}: cell "
                    f"{c.id} ({describe(c.axes())}) has {n} reference seed(s) in the matrix, the band needs 2 or more "
                    "(dropped by exclude?)"]
    return []


def check_gate_references(scenario: Scenario, cells: list, src: SourceMap) -> list[str]:
    return _match_references(scenario, cells, src) + _band_references(scenario, cells, src)


def describe(combo: dict[str, Any]) -> str:
    """The axes that tell a cell apart in an error; the later axes only where they are not at their defaults."""
    return ", ".join(f"{k}={v}" for k, v in combo.items() if k in ("model", "seq_len", "strategy", "gpus",
                                                                     "micro_batch_size", "global_batch_size", "nodes")
                     or (k in LATER_AXES and v != LATER_AXES[k]))
