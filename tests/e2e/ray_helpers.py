"""Helpers for the Ray end-to-end tests: scenario variants of ray-multinode-cpu.yaml, reading a Ray cell's
facts, recomputing a step's loss from a checkpoint, and finding Ray processes left behind."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import torch
import yaml

from tests.e2e.run_helpers import REPO, env

SHIPPED = REPO / "scenarios" / "ray-multinode-cpu.yaml"
STEPS, EVERY = 40, 10  # checkpoints at 10, 20, 30, 40 (the best 2 by loss are kept)


def ray_env(**extra) -> dict[str, str]:
    """The tests' environment without RAY_ADDRESS: suite starts (or is given) its own cluster."""
    return {k: v for k, v in env(**extra).items() if k != "RAY_ADDRESS"}


def scenario(tmp: Path, name: str, **changes) -> Path:
    """The shipped CPU scenario with STEPS steps, a checkpoint every EVERY, and `changes` (None deletes a key)."""
    data = yaml.safe_load(SHIPPED.read_text())
    data.update(name=name, steps=STEPS, timeout_s=900)
    data["ray"].update(checkpoint_every_steps=EVERY)
    data["convergence"].pop("match", None)  # cross-launcher matches are checked by the tests themselves
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        elif isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key].update(value)
        else:
            data[key] = value
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def torchrun_twin(tmp: Path) -> Path:
    """The same cells under torchrun: one node, no ray block (nothing else changes what is computed)."""
    return scenario(tmp, "ray-twin-torchrun", launcher="torchrun", nodes=1, ray=None)


def by_strategy(results: dict[str, dict]) -> dict[str, dict]:
    return {r["axes"]["strategy"]: r for r in results.values()}


def events(workdir: Path) -> list[dict]:
    """The Ray cell's events so far (suite/launch/ray/rank_files.py: event lines and rank start files)."""
    from suite.launch.ray.rank_files import read_events

    return read_events(workdir)


def worker_events(workdir: Path) -> list[dict]:
    """Rank 0's events.jsonl (setup_done, step, done), complete lines only."""
    path = workdir / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip().endswith("}")]


def step_loss_from_checkpoint(result: dict, checkpoint_dir: Path, step: int) -> float:
    """The global mean loss of optimizer step `step` computed by a plain model holding the checkpoint's weights
    (all ranks' micro-batches of that step, one process): what the run recorded for that step if the
    checkpoint holds the weights after step - 1."""
    from suite.scenario import Cell
    from suite.data import build_data
    from suite.models.build import build_model
    from suite.launch.ray.checkpoint import load_model_state

    cell = Cell.model_validate(result["cell"])
    model = build_model(cell.model, cell.seed)
    model.load_state_dict(load_model_state(checkpoint_dir), strict=True)
    losses = []
    with torch.no_grad():
        for rank in range(cell.gpus):
            for x, y in build_data(cell, rank, cell.gpus).micro_batches(step):
                losses.append(model(x, y).item())
    return sum(losses) / len(losses)


def ray_processes_alive(pids) -> list[str]:
    """`pid name` of the given processes that still run (zombies count as gone)."""
    out = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{pid} {p.name()}")
        except psutil.NoSuchProcess:
            continue
    return out
