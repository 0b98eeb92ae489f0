"""How a run schedules its cells: one after another here, or as a sweep over a Ray cluster (suite/sweep/)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Schedule = Literal["serial", "pack", "node"]


class SweepPolicy(BaseModel):
    """A scenario's `sweep:` (suite run --schedule / --nodes / --cpus-per-node override it; docs/sweeps.md)."""

    model_config = ConfigDict(extra="forbid")

    schedule: Schedule = Field("serial", description="serial: one cell at a time (without a cluster, launched by "
                               "suite run itself; on a cluster, one task at a time); pack: every cell as a Ray task "
                               "as soon as a node has its CPUs/GPUs free, largest first (timings shared a node: not "
                               "timing-grade unless nothing shared it); node: at most one cell per node at a time "
                               "(timing-grade).")
    nodes: Annotated[int, Field(ge=1, le=64)] = Field(1, description="Nodes of the private loopback cluster suite "
                                                      "starts when no --ray-address (or RAY_ADDRESS) is given.")
    cpus_per_node: Annotated[float, Field(gt=0, le=4096)] | None = Field(
        None, description="CPUs of each private node; default: this machine's cores divided by nodes (at least "
        "the most any cell asks for on one node).")
    gpus_per_node: Annotated[int, Field(ge=0, le=64)] = Field(0, description="GPUs of the private node (one node "
                                                              "only: nodes on one host would share the GPUs); 0: "
                                                              "this machine's GPUs.")
    retries: Annotated[int, Field(ge=0, le=10)] = Field(2, description="More tries for a cell whose node or task "
                                                        "process died, on another node.")
