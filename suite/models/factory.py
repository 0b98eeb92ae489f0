"""`family: python`: your own nn.Module from `factory: "package.module:function"` and `args`.

The contract (docs/own-model.md), checked by `probe` when the scenario is validated, on the meta device (no
memory, no initialization: a 70B-parameter factory is probed in a moment):

- `function(**args)` returns a torch.nn.Module;
- `forward(inputs, targets)` returns the scalar mean loss (tokens: inputs and next-token targets of shape
  (b, s); images: (b, 3, size, size) and labels (b,)); `forward(inputs)` alone returns the logits
  ((b, s, vocab) or (b, classes)), which held-out evaluation uses;
- `.blocks`: a non-empty nn.ModuleList of the repeated blocks (checkpointed and sharded one by one);
- optional `num_parameters` (an int or a method returning one): if given, it must equal the module's count;
- optional `init_weights()`: called after construction from the seeded RNG (else the constructor's init is
  what the seed draws).

Weights depend only on the cell's seed: build_model seeds the RNG around the factory call, so every rank
builds the same model.  The module must know nothing about distribution (strategies wrap it).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
from typing import Any, Callable

import torch
from torch import nn

from suite.models.trust import split_factory


def load(factory: str) -> Callable[..., Any]:
    """The function `factory` names (ValueError naming the factory and what failed)."""
    module_name, attr = split_factory(factory)  # the form only: whether it is trusted was checked on validation
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"factory {factory}: cannot import {module_name!r} ({exc}); install its package or put "
                         "it on PYTHONPATH (containers: mount it, docs/own-model.md)") from None
    except Exception as exc:  # the user's module failed while importing: name it, keep the cause
        raise ValueError(f"factory {factory}: importing {module_name!r} raised {type(exc).__name__}: {exc}") from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"factory {factory}: module {module_name!r} has no function {attr!r}")
    return fn


def construct(factory: str, args: dict[str, Any]) -> nn.Module:
    """Call the factory and check the contract (ValueError naming the factory and what is missing)."""
    fn = load(factory)
    try:
        model = fn(**args)
    except Exception as exc:  # the user's code: report it with the factory's name and the args
        raise ValueError(f"factory {factory}(**{args}) raised {type(exc).__name__}: {exc}") from exc
    problems = contract_problems(model)
    if problems:
        raise ValueError(f"factory {factory} breaks the model contract: {'; '.join(problems)}")
    return model


def contract_problems(model: Any) -> list[str]:
    if not isinstance(model, nn.Module):
        return [f"it returned a {type(model).__name__}, not a torch.nn.Module"]
    problems = []
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList) or not len(blocks):
        problems.append("no .blocks (a non-empty nn.ModuleList of its repeated blocks, checkpointed and sharded "
                        f"one by one; got {type(blocks).__name__})")
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        params = None
    positional = [p for p in params or [] if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if params is not None and len(positional) < 2 and not any(p.kind == p.VAR_POSITIONAL for p in params):
        problems.append(f"forward takes {len(positional)} positional argument(s); the contract is forward(inputs, "
                        "targets) -> loss")
    declared = getattr(model, "num_parameters", None)
    if declared is not None:
        value = declared() if callable(declared) else declared
        counted = count(model)
        if value != counted:
            problems.append(f"num_parameters says {value} but the module holds {counted}")
    return problems


def count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # shared (tied) parameters once


def probe(factory: str, args: dict[str, Any]) -> dict[str, Any]:
    """What the planner needs, from the module built on the meta device: parameters, layers, largest block,
    and a digest of the factory's source file (part of the cell id: edited code is a new cell)."""
    load(factory)  # imported outside the meta device: the module's own tensors stay real
    with torch.device("meta"):
        model = construct(factory, args)
    return {"parameters": count(model), "layers": len(model.blocks),
            "block_parameters": max(count(b) for b in model.blocks), "source_digest": probe_digest(factory)}


def probe_digest(factory: str) -> str | None:
    """sha256 (16 hex) of the source file that defines the factory function (not of what it imports)."""
    try:
        source = inspect.getsourcefile(load(factory))
    except TypeError:  # a builtin or C function: no source file
        return None
    if not source:
        return None
    with open(source, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]
