"""Scenario files: what a user declares, checked, and expanded into the cells suite runs.

The public face: `load_cells(path) -> (Scenario, [Cell])` (load, validate, expand), `Scenario` (the file's
pydantic model), `Cell` (one resolved point of its matrix, what a worker trains), `ScenarioError` (every
problem as a `file:line: field: message` line), and `load_scenario` / `expand`, the two halves of load_cells.

    yaml_loader.py      the one bounded YAML loader (size, encoding, depth, aliases, node count)
    source.py           where each key was written (SourceMap) and pydantic errors as file:line lines
    fields.py           `Strict` (the base of every model) and `StrategyName` (checked against the registry)
    data.py             the data kinds, `eval:` and the quality `target`
    convergence.py      the `convergence:` block: the gates a scenario declares (match, band, quality)
    experiment.py       `Scenario`, its optimizer and Ray settings; the axes come from suite/axes.py
    cell.py             `Cell`, its stable id and label
    tensor_parallel.py  what tensor (sequence, loss) parallelism requires of a cell (heads, gpus, strategy)
    pipeline.py         what pipeline and context parallelism require (world, stages, micro-batches, sequence)
    references.py       a gate's references are in the matrix (match, band)
    expand.py           the matrix: product of the axes, excludes, impossible combinations, ids
"""

from suite.scenario.cell import Cell
from suite.scenario.expand import expand, load_cells
from suite.scenario.experiment import Scenario
from suite.scenario.source import load_scenario
from suite.scenario.yaml_loader import ScenarioError

__all__ = ["Cell", "Scenario", "ScenarioError", "expand", "load_cells", "load_scenario"]
