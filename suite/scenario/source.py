"""Loading a scenario file with `file:line: field: message` errors: where each key was written, and how
pydantic's validation errors are turned into lines a person can act on.

experiment.py holds the models (what a scenario *is*); this module holds reading one from YAML (where its
mistakes are); yaml_loader.py reads the YAML itself within fixed bounds.
"""

from __future__ import annotations

import difflib
import os
import re
import stat
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from suite.scenario.experiment import Scenario
from suite.models.trust import find_project
from suite.scenario.yaml_loader import ScenarioError, clip, parse


def _line_map(root: yaml.Node | None) -> tuple[dict[tuple, int], list[str]]:
    """Map each key path in the composed YAML document, e.g. ('gpus', 2), to its 1-based line number.

    The document was bounded by yaml_loader.parse (expanded nodes, depth), so walking every path is cheap.

    Also returns the keys written twice in one mapping (`line: key`): PyYAML silently keeps the last one,
    which would hide a typo-level mistake, so load_scenario reports them.
    """
    lines: dict[tuple, int] = {}
    duplicates: list[str] = []

    def walk(node: yaml.Node, path: tuple) -> None:
        lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if not isinstance(key, yaml.ScalarNode):
                    continue  # `? [a]: 1`: a list or mapping as a key; construction refuses it next, at its line
                child = path + (key.value,)
                if child in lines:
                    first = lines[child]
                    duplicates.append(f"{key.start_mark.line + 1}: {clip('.'.join(map(str, child)))}: key given twice "
                                      f"(first on line {first}); YAML would silently keep the last")
                walk(value, child)
                lines[child] = key.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            for i, value in enumerate(node.value):
                walk(value, path + (i,))

    if root is not None:
        walk(root, ())
    return lines, duplicates


class SourceMap:
    """Where each field of a loaded scenario was written, for `file:line:` prefixes."""

    def __init__(self, path: str, lines: dict[tuple, int]):
        self.path, self.lines = path, lines
        self.warnings: list[str] = []  # `file:line: field: message` lines that do not make the file invalid

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


MAX_PROBLEMS = 20  # a 10,000-item list of wrong values is reported by its first problems and a count


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field's type may hold: through Annotated, unions, Optional, lists and dicts."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]  # Literal's values and metadata: none


def _tagged(model: type[BaseModel], tag: str) -> bool:
    """Whether a Literal field of the model (its discriminator: `family`, `kind`) allows this tag."""
    return any(get_origin(f.annotation) is Literal and tag in get_args(f.annotation)
               for f in model.model_fields.values())


@lru_cache(maxsize=256)
def _keys_at(loc: tuple) -> tuple[str, ...]:
    """The keys the scenario's models allow in the mapping at a pydantic error loc (the loc of an unknown key,
    less that key), found by walking the models' field types: branch parts and list indices are skipped, a
    union's tag (`gpt` under `model`) picks its model.  Empty when the loc leads to no model (a free dict)."""
    models: list[type[BaseModel]] = [Scenario]
    for part in loc:
        if isinstance(part, int) or _is_branch(part):
            continue
        fields = [m.model_fields[part] for m in models if part in m.model_fields]
        if fields:
            models = [m for f in fields for m in _models_in(f.annotation)]
        else:  # a union's tag, or a key of a dict
            models = [m for m in models if _tagged(m, part)] or models
    return tuple(dict.fromkeys(name for m in models for name in m.model_fields))


def _quoted(expected: Any) -> list[str]:
    """The string choices pydantic lists in an error's context (`'fp32', 'bf16-mixed' or 'fp16-mixed'`)."""
    return re.findall(r"'([^']*)'", expected) if isinstance(expected, str) else []


def _did_you_mean(e: dict) -> str:
    """`; did you mean 'strategy'?` for a misspelt key or value, or "" when nothing allowed is close.

    The choices come from the error itself, whatever the field: an unknown key's are the keys its mapping's
    model allows (_keys_at); a Literal's or an enum's are listed in the error's context, a tagged union's
    (`data: {kind: ...}`) too; a validator's (a strategy, a model preset) are the `choices` of the ValueError
    it raised (registry.UnknownStrategy, presets.UnknownPreset).  Matching ignores case."""
    kind, ctx = e["type"], e.get("ctx") or {}
    if kind == "extra_forbidden":
        word, choices = e["loc"][-1], _keys_at(tuple(0 if isinstance(p, int) else p for p in e["loc"][:-1]))
    elif kind in ("literal_error", "enum"):
        word, choices = e.get("input"), _quoted(ctx.get("expected"))
    elif kind == "union_tag_invalid":
        word, choices = ctx.get("tag"), _quoted(ctx.get("expected_tags"))
    else:
        word, choices = e.get("input"), getattr(ctx.get("error"), "choices", None)
    if not isinstance(word, str) or not word or len(word) > 100 or not choices:
        return ""
    lowered = {str(c).lower(): str(c) for c in choices if isinstance(c, str) and c != word}
    close = difflib.get_close_matches(word.lower(), list(lowered), n=1)
    return f"; did you mean {clip(repr(lowered[close[0]]))}?" if close else ""


def _format_validation(err: ValidationError, source: SourceMap, data: Any) -> list[str]:
    problems, fallback = [], []
    for e in err.errors():
        path = _file_path(e["loc"], data)
        loc = path if path is not None else tuple(p for p in e["loc"] if not _is_branch(p))
        field = clip(".".join(str(p) for p in loc) or "scenario")
        msg = clip(re.sub(r"^Value error, ", "", e["msg"]), 400)
        got = "" if e["type"] in ("missing", "extra_forbidden") or not loc else f" (got {clip(repr(e.get('input')))})"
        if e["type"] == "extra_forbidden":
            msg = "unknown key (not allowed; check the spelling)"
        (problems if path is not None else fallback).append(f"{source.where(*loc)}: {field}: {msg}{got}"
                                                            f"{_did_you_mean(e)}")
    # Keep the distinct lines, in order; the ruled-out branches only if nothing else explains the error.
    out = list(dict.fromkeys(problems or fallback))
    if len(out) > MAX_PROBLEMS:
        out = out[:MAX_PROBLEMS] + [f"... and {len(out) - MAX_PROBLEMS} more problems"]
    return out


def _stat(path: str) -> os.stat_result | str:
    """os.stat of a path the user wrote, or why it cannot be used (missing, NUL byte, name too long)."""
    try:
        return os.stat(Path(path).expanduser())
    except (OSError, ValueError, RuntimeError) as exc:  # ValueError: a NUL byte; RuntimeError: ~nosuchuser
        return getattr(exc, "strerror", None) or str(exc)


def _check_paths(scenario: Scenario, source: SourceMap) -> list[str]:
    """Problems with the data paths that can be seen without running (suite/data/ would fail on them later).

    Relative paths resolve from the current folder, as in the worker (containers mount it at the same path).
    A missing CIFAR-10 folder is only a warning: the data may be put there before `suite run`, and on a Ray
    cluster it must exist on the nodes, not on the machine that validates.
    """
    data, problems = scenario.data, []
    if data.kind == "text" and data.path is not None:
        where, st = source.where("data", "path"), _stat(data.path)
        if isinstance(st, str):
            problems.append(f"{where}: data.path: {clip(repr(data.path))}: {st} (from {os.getcwd()}); give an "
                            f"existing text file or folder, or leave path out for the Python standard library")
        elif not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)) or not os.access(
                Path(data.path).expanduser(), os.R_OK):
            problems.append(f"{where}: data.path: {clip(repr(data.path))} is not a readable file or folder")
    elif data.kind == "cifar10":
        where, folder = source.where("data", "root"), os.path.join(data.root, "cifar-10-batches-py")
        root, batches = _stat(data.root), _stat(folder)
        if not isinstance(root, str) and not stat.S_ISDIR(root.st_mode):
            problems.append(f"{where}: data.root: {clip(repr(data.root))} is a file, not a folder; give the folder "
                            f"that holds cifar-10-batches-py/")
        elif not data.download and (isinstance(batches, str) or not stat.S_ISDIR(batches.st_mode)):
            source.warnings.append(f"{where}: data.root: no folder {clip(repr(folder))} here (from {os.getcwd()}): "
                                   f"`suite run` fails its cells unless CIFAR-10 is extracted there first, or "
                                   f"set download: true")
    return problems


def load_scenario(path: str | Path) -> tuple[Scenario, SourceMap]:
    """Read and validate a scenario file; raise ScenarioError with `file:line: field: message` lines.

    The file is read and composed within the bounds of yaml_loader.py (size, depth, aliases, integers)
    before anything walks it; then the line map, pydantic validation and the data-path checks.
    """
    name = str(path)
    (lines, duplicates), data = parse(Path(path), _line_map)
    source = SourceMap(name, lines)
    if duplicates:
        raise ScenarioError([f"{name}:{d}" for d in duplicates[:MAX_PROBLEMS]])
    if not isinstance(data, dict):
        raise ScenarioError([f"{name}:1: a scenario file must be a mapping of keys, got {type(data).__name__}"])
    try:
        # a python factory is imported only from the scenario file's project or a declared module (models/trust.py)
        scenario = Scenario.model_validate(data, context={"project": find_project(Path(path).parent)})
    except ValidationError as exc:
        raise ScenarioError(_format_validation(exc, source, data)) from exc
    problems = _check_paths(scenario, source)
    if problems:
        raise ScenarioError(problems)
    return scenario, source
