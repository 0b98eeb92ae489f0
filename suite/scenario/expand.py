"""Matrix expansion: a Scenario becomes a list of Cells (cell.py), each fully resolved, checked and stably named.

Every problem names the field's line and the numbers (`gpus 3 is not divisible by nodes 2`); problems of many
cells are reported once per distinct message, with the first cell named.
"""

from __future__ import annotations

import itertools
from typing import Any

from suite.axes import AXES
from suite.models.own import fixed_seq_len
from suite.models.presets import GptShape, resolve
from suite.scenario.cell import SHARED, Cell, cell_id, model_label
from suite.scenario.experiment import Scenario
from suite.scenario.pipeline import check_pipeline_and_context, layout_ranks
from suite.scenario.references import check_band, check_gate_references, check_match, describe as _describe
from suite.scenario.source import SourceMap, load_scenario
from suite.scenario.tensor_parallel import check_tensor_parallel, data_ranks
from suite.scenario.yaml_loader import ScenarioError
from suite.strategies import registry

# The most cells one scenario may expand to, checked from the product of the axis lengths before expanding:
# expand + plan of 4,096 cells take well under a second, and a run of that many launches takes days already.
MAX_CELLS = 4096

def _matches(entry: dict[str, Any], axes: dict[str, Any]) -> bool:
    """Whether an `exclude` entry (a partial cell) matches (its strategy aliases were resolved on validation)."""
    return all(axes.get(k) == v for k, v in entry.items())


def _shard_size(combo: dict[str, Any]) -> int | None:
    """hsdp's shard group: as written, else the GPUs of one node; None for strategies without shard groups."""
    if not registry.get(combo["strategy"]).shard_group:
        return None
    # the ranks of one node that tensor parallelism leaves (tensor-parallel groups stay within a node)
    return combo["shard_size"] or max(1, combo["gpus"] // combo["nodes"] // layout_ranks(combo))


def _check(combo: dict[str, Any], shape: Any, scenario: Scenario, src: SourceMap) -> list[str]:
    """Problems that make one combination impossible, each naming the field's line and the numbers."""
    problems = []
    gpus, micro, glob = combo["gpus"], combo["micro_batch_size"], combo["global_batch_size"]
    tp, dp = combo["tensor_parallel"], data_ranks(combo)
    problems += check_tensor_parallel(combo, shape, src)  # also: tp must divide gpus (else dp is meaningless)
    layout = layout_ranks(combo)
    world_factors, batch_divides = gpus % layout == 0, glob % (micro * dp) == 0
    micro_batches = glob // (micro * dp) if world_factors and batch_divides else None
    problems += check_pipeline_and_context(combo, shape, micro_batches, src)
    if world_factors and not batch_divides:
        ranks = (f"gpus {gpus}" if layout == 1 else
                 f"data-parallel ranks {dp} (gpus {gpus} / tensor_parallel {tp}" +
                 "".join(f" / {a} {combo[a]}" for a in ("pipeline_parallel", "context_parallel") if combo[a] > 1) + ")")
        problems.append(
            f"{src.where('global_batch_size')}: global_batch_size {glob} is not divisible by "
            f"micro_batch_size {micro} x {ranks}"
        )
    if combo["nodes"] > 1 and combo["launcher"] != "ray":
        problems.append(f"{src.where('nodes')}: nodes {combo['nodes']} > 1 needs launcher: ray (got "
                        f"{combo['launcher']})")
    if gpus % combo["nodes"]:
        problems.append(f"{src.where('gpus')}: gpus {gpus} is not divisible by nodes {combo['nodes']}")
    shard = combo["shard_size"]
    if shard is not None and gpus % (shard * tp):
        group, factors = ((f"shard_size {shard}", "replicas x shard_size") if tp == 1 else
                          (f"shard_size {shard} x tensor_parallel {tp}", "replicas x shard_size x tensor_parallel"))
        problems.append(f"{src.where('shard_size')}: {group} does not divide gpus {gpus}: the world must factor as "
                        f"{factors}")
    seq, fixed = combo["seq_len"], fixed_seq_len(shape)
    if fixed is not None:
        if seq is not None and seq != fixed:
            why = "((image_size/patch_size)^2 + 1)" if shape.family == "vit" else "(an image is one sample)"
            problems.append(f"{src.where('seq_len')}: seq_len {seq} does not fit {model_label(shape)}: it is fixed "
                            f"at {fixed} {why}; leave seq_len out")
        if scenario.data.kind == "text":
            problems.append(f"{src.where('data')}: data kind text needs a token model, not {model_label(shape)}")
    else:
        limit = shape.max_seq_len if isinstance(shape, GptShape) else getattr(shape, "max_positions", None)
        if seq is None:
            problems.append(f"{src.where('seq_len')}: seq_len is required for {shape.family} models")
        elif limit is not None and seq > limit:
            what = "max_seq_len" if isinstance(shape, GptShape) else "max_position_embeddings"
            problems.append(
                f"{src.where('seq_len')}: seq_len {seq} exceeds {what} {limit} "
                f"of model {model_label(shape)}{' (learned positions)' if isinstance(shape, GptShape) else ''}"
            )
        if scenario.data.kind == "cifar10":
            problems.append(f"{src.where('data')}: data kind cifar10 needs an image model, not {shape.family}")
        if scenario.data.kind == "text" and shape.vocab < 256:
            problems.append(f"{src.where('data')}: data kind text is byte-level: vocab {shape.vocab} < 256")
        accuracy = [k for k in ("min_accuracy", "target") if scenario.convergence and (
            getattr(scenario.convergence, k) is not None and (k != "target" or scenario.convergence.target.metric
                                                              == "accuracy"))]
        if scenario.convergence and scenario.convergence.band and scenario.convergence.band.metric == "accuracy":
            accuracy.append("band")
        if scenario.ray and scenario.ray.checkpoint_score_attribute == "accuracy":
            accuracy.append("ray.checkpoint_score_attribute")
        for what in accuracy:  # accuracy is a classifier's: a language model has eval_loss and perplexity
            problems.append(f"{src.where(*what.split('.')) if '.' in what else src.where('convergence', what)}: "
                            f"{what}: accuracy is a classifier's metric and needs an image model, not {shape.family} (use "
                            "eval_loss or perplexity)")
    return problems


def expand(scenario: Scenario, source: SourceMap | None = None) -> list[Cell]:
    """All cells of the scenario, excluded ones dropped; ScenarioError if any remaining cell is impossible."""
    src = source or SourceMap(f"<{scenario.name}>", {})
    _check_size(scenario, src)
    problems: list[str] = check_match(scenario, src) + check_band(scenario, src)
    shared = {
        "scenario": scenario.name,
        **{k: getattr(scenario, k) for k in SHARED},
    }
    cells: list[Cell] = []
    seen: set[str] = set()
    problems += _label_clashes(scenario, src)
    for values in itertools.product(*(scenario.axis_values(a) for a in AXES)):
        combo = dict(zip(AXES, values))
        shape = resolve(combo["model"])
        combo["model"] = model_label(shape)
        if any(_matches(entry, combo) for entry in scenario.exclude):
            continue
        ignored = combo["shard_size"] is not None and not registry.get(combo["strategy"]).shard_group
        combo["shard_size"] = _shard_size(combo)
        if combo["pipeline_parallel"] == 1:  # a schedule means nothing without stages: one cell, no schedule
            ignored = ignored or len(scenario.axis_values("pipeline_schedule")) > 1
            combo["pipeline_schedule"] = None
        issues = _check(combo, shape, scenario, src)
        if issues:
            problems.extend(f"{p} (cell {_describe(combo)})" for p in issues)
            continue
        resolved = {
            **shared,
            **combo,
            "model": shape,
            "seq_len": fixed_seq_len(shape) or combo["seq_len"],
            "grad_accum": combo["global_batch_size"] // (combo["micro_batch_size"] * data_ranks(combo)),
        }
        cell = Cell(**resolved)
        cell = cell.model_copy(update={"id": cell_id(cell.settings())})
        if cell.id in seen and ignored:  # a shard_size sweep, for a strategy without shard groups: one cell
            continue
        if cell.id in seen:  # two cells would share one results folder: refuse
            problems.append(f"{src.where()}: cell {cell.id} ({_describe(combo)}) appears twice: an axis lists the "
                            f"same value twice (fsdp is zero3; an inline shape may equal a preset)")
            continue
        seen.add(cell.id)
        cells.append(cell)
    if not cells and not problems:
        problems.append(f"{src.where('exclude')}: exclude drops every cell of the scenario")
    if not problems:
        problems.extend(check_gate_references(scenario, cells, src))
    if problems:
        raise ScenarioError(_dedupe(problems))
    return cells


def _label_clashes(scenario: Scenario, src: SourceMap) -> list[str]:
    """Two different models under one label would be one value on the model axis: gates would compare one
    with the other's reference, excludes and reports would merge them."""
    shapes: dict[str, Any] = {}
    problems = []
    for model in scenario.axis_values("model"):
        shape = resolve(model)
        label = model_label(shape)
        other = shapes.setdefault(label, shape)
        if other is not shape and other.model_dump(exclude={"preset", "config"}) != shape.model_dump(
                exclude={"preset", "config"}):
            problems.append(f"{src.where('model')}: two different models are both labelled {label} (a label is the "
                            "config's file or folder name, or the factory's function and args): rename one")
    return problems


def _check_size(scenario: Scenario, src: SourceMap) -> None:
    """Refuse a matrix of more than MAX_CELLS cells before building any (a 1,000 x 1,000 sweep is 10^6)."""
    lengths = {axis: len(scenario.axis_values(axis)) for axis in AXES}
    total = 1
    for n in lengths.values():
        total *= n
    if total > MAX_CELLS:
        longest = max(lengths, key=lengths.get)
        product = " x ".join(f"{axis} {n}" for axis, n in lengths.items() if n > 1)
        raise ScenarioError([f"{src.where(longest)}: {longest}: the axes expand to {total:,} cells ({product}); the "
                             f"limit is {MAX_CELLS:,}: sweep fewer values or split the scenario into several files"])


def _dedupe(problems: list[str], limit: int = 20) -> list[str]:
    """The same problem in many cells is reported once per distinct message, with the first cell named."""
    seen: dict[str, str] = {}
    for p in problems:
        key = p.split(" (cell ")[0]
        seen.setdefault(key, p)
    out = list(seen.values())
    if len(out) > limit:
        out = out[:limit] + [f"... and {len(out) - limit} more problems"]
    return out


def load_cells(path: str) -> tuple[Scenario, list[Cell]]:
    """Load, validate and expand a scenario file (ScenarioError on any problem)."""
    scenario, source = load_scenario(path)
    return scenario, expand(scenario, source)
