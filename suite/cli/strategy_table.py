"""`suite strategies`: the registry as a table or as JSON (no torch; what people and tools read of it)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from suite.strategies import registry

COLUMNS = ["strategy", "aliases", "family", "shards", "comm/step", "twin of", "checkpoints", "what"]


def as_json() -> list[dict[str, Any]]:
    return [{**asdict(s), "shards": asdict(s.shards)} for s in registry.specs()]


def rows() -> list[list[str]]:
    """One row per strategy: what it shards, its bytes per step in units of Psi (k: micro-batches per step)."""
    out = []
    for s in registry.specs():
        shards = ", ".join(k.replace("_", " ") for k, v in asdict(s.shards).items() if v) or "nothing"
        comm = f"{s.comm.per_step:g}" + (f" + {s.comm.per_micro_batch:g} k" if s.comm.per_micro_batch else "")
        if s.comm.per_shard_across_replicas:  # hsdp: the gradient shards' all-reduce across the replicas
            comm += f" + {s.comm.per_shard_across_replicas:g}/S"
        out.append([s.name, ", ".join(s.aliases) or "-", s.family, shards, f"{comm} Psi", s.twin or "-",
                    "yes" if s.checkpointable else "no", s.summary])
    return out
