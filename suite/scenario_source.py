"""Loading a scenario file with `file:line: field: message` errors: where each key was written, and how
pydantic's validation errors are turned into lines a person can act on.

suite/scenario.py holds the models (what a scenario *is*); this module holds reading one from YAML (where its
mistakes are).  load_scenario, ScenarioError and SourceMap are also importable from suite.scenario.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import ValidationError

if TYPE_CHECKING:
    from suite.scenario import Scenario


class ScenarioError(Exception):
    """One or more problems in a scenario file, each already formatted as `file:line: field: message`."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def _line_map(text: str) -> tuple[dict[tuple, int], list[str]]:
    """Map each key path in the YAML document, e.g. ('gpus', 2), to its 1-based line number.

    Also returns the keys written twice in one mapping (`line: key`): PyYAML silently keeps the last one,
    which would hide a typo-level mistake, so load_scenario reports them.
    """
    lines: dict[tuple, int] = {}
    duplicates: list[str] = []

    def walk(node: yaml.Node, path: tuple) -> None:
        lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                child = path + (key.value,)
                if child in lines:
                    first = lines[child]
                    duplicates.append(f"{key.start_mark.line + 1}: {'.'.join(map(str, child))}: key given twice "
                                      f"(first on line {first}); YAML would silently keep the last")
                walk(value, child)
                lines[child] = key.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            for i, value in enumerate(node.value):
                walk(value, path + (i,))

    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is not None:
        walk(root, ())
    return lines, duplicates


class SourceMap:
    """Where each field of a loaded scenario was written, for `file:line:` prefixes."""

    def __init__(self, path: str, lines: dict[tuple, int]):
        self.path, self.lines = path, lines

    def where(self, *loc: Any) -> str:
        key = tuple(loc)
        while key and key not in self.lines:
            key = key[:-1]
        return f"{self.path}:{self.lines.get(key, 1)}"


def _is_branch(part: Any) -> bool:
    """Whether a part of a pydantic error loc names a union branch (`list[...]`, `str`) rather than a key."""
    return isinstance(part, str) and ("[" in part or part in ("list", "str", "int", "constrained-int"))


def _branch_fits(branch: str, value: Any) -> bool:
    """Whether the input's shape selects this union branch: a list the list branch, a mapping a model."""
    if branch.startswith("function-after["):  # a validated type, e.g. `function-after[_known_preset(), str]`
        branch = branch[:-1].rsplit(", ", 1)[-1]
    if branch.startswith("list"):
        return isinstance(value, list)
    if branch in ("str", "int", "constrained-int") or branch.startswith("literal["):
        return not isinstance(value, (list, dict))
    return isinstance(value, dict)  # models and tagged unions of models


def _file_path(loc: tuple, data: Any) -> tuple | None:
    """An error's loc as a path of keys/indices in the file; None if it comes from a branch the input rules out.

    Axes are `X | list[X]` unions and pydantic reports a failure in every branch; only the branch the
    input's shape selects says something useful (`gpus: two` is not a valid integer; that it is not a
    list either is noise), so each problem is reported once.
    """
    path: list = []
    for part in loc:
        if _is_branch(part) and not (isinstance(data, dict) and part in data):  # a key may contain `[`
            if not _branch_fits(part, data):
                return None
            continue
        if isinstance(data, dict) and part in data or isinstance(data, list) and isinstance(part, int):
            path.append(part)
            data = data[part] if isinstance(data, dict) or part < len(data) else None
        elif isinstance(data, dict) and part in (data.get("kind"), data.get("family")):
            continue  # the discriminator's tag (`gpt`, `text`), not a key of the file
        else:
            path.append(part)  # a missing key: keep naming it, nothing left to descend into
            data = None
    return tuple(path)


def _format_validation(err: ValidationError, source: SourceMap, data: Any) -> list[str]:
    problems, fallback = [], []
    for e in err.errors():
        path = _file_path(e["loc"], data)
        loc = path if path is not None else tuple(p for p in e["loc"] if not _is_branch(p))
        field = ".".join(str(p) for p in loc) or "scenario"
        msg = re.sub(r"^Value error, ", "", e["msg"])
        got = "" if e["type"] in ("missing", "extra_forbidden") or not loc else f" (got {e.get('input')!r})"
        if e["type"] == "extra_forbidden":
            msg = "unknown key (not allowed; check the spelling)"
        (problems if path is not None else fallback).append(f"{source.where(*loc)}: {field}: {msg}{got}")
    # Keep the distinct lines, in order; the ruled-out branches only if nothing else explains the error.
    return list(dict.fromkeys(problems or fallback))


def load_scenario(path: str | Path) -> tuple[Scenario, SourceMap]:
    """Read and validate a scenario file; raise ScenarioError with `file:line: field: message` lines."""
    path = Path(path)
    name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError([f"{name}: cannot read scenario file: {exc.strerror}"]) from exc
    try:
        data = yaml.safe_load(text)
        lines, duplicates = _line_map(text)
        source = SourceMap(name, lines)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or str(exc)
        context, cmark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if context and cmark is not None:  # e.g. an unclosed `[` is detected lines later: name where it began
            problem += f" ({context} started on line {cmark.line + 1})"
        raise ScenarioError([f"{name}:{line}: malformed YAML: {problem}"]) from exc
    if duplicates:
        raise ScenarioError([f"{name}:{d}" for d in duplicates])
    if not isinstance(data, dict):
        raise ScenarioError([f"{name}:1: a scenario file must be a mapping of keys, got {type(data).__name__}"])
    from suite.scenario import Scenario  # here, not on top: suite.scenario imports this module

    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_format_validation(exc, source, data)) from exc
    return scenario, source
