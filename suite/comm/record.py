"""Records of the collective benchmark: what the launcher hands the ranks, and what rank 0 stores.

`CommArgs` travels to every rank as one JSON positional argument; `CommResult` is one measurement (one op at
one size); `CommRun` is the file `comm.json` in the run folder.  Like suite.results.schema these are
versioned, fixed-key pydantic records: the report reads them without importing torch.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from suite.results.schema import StepStats

COMM_SCHEMA_VERSION = 1


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CommArgs(_Record):
    """What every rank measures (resolved by the launcher: no 'auto' left)."""

    ops: list[str] = Field(description="Collectives to measure, in order (names from suite.comm.busbw.OPS).")
    sizes: list[int] = Field(description="Requested sizes S in bytes (NCCL-tests meaning, see busbw.py).")
    iters: int = Field(ge=1, description="Timed iterations per (op, size).")
    warmup: int = Field(ge=0, description="Untimed iterations before them.")
    device: Literal["cpu", "cuda"]
    backend: Literal["gloo", "nccl"]
    dtype: Literal["float32"] = "float32"


class CommResult(_Record):
    """One collective at one message size, timed over `time_s.n` iterations after the warm-up.

    An iteration's time is the slowest rank's (all ranks start together after a barrier; the collective is
    done when the last rank has its result).  algbw and busbw use the median time."""

    schema_version: int = COMM_SCHEMA_VERSION
    op: str = Field(description="all_reduce | all_gather | reduce_scatter | broadcast | reduce | all_to_all")
    bytes: int = Field(description="S as NCCL-tests defines it: whole gathered output for all_gather, whole "
                                   "input for reduce_scatter, the buffer for the others.")
    requested_bytes: int = Field(description="The --sizes value S was rounded down from (to whole chunks).")
    world_size: int
    dtype: str
    time_s: StepStats = Field(description="Per-iteration seconds: median, p10, p90, mean over n iterations.")
    algbw: float = Field(description="bytes / median time, bytes per second.")
    busbw: float = Field(description="algbw x busbw_factor, bytes per second.")
    busbw_factor: float = Field(description="2(n-1)/n all_reduce; (n-1)/n all_gather, reduce_scatter, "
                                            "all_to_all; 1 broadcast, reduce.")
    correct: bool = Field(description="Every iteration's result on every rank equalled the closed form.")
    device: str = Field(description="cpu or cuda")
    device_name: str = Field(description="GPU model (rank 0) or CPU model.")
    backend: str = Field(description="torch.distributed backend: gloo or nccl.")


class CommRun(_Record):
    """File comm.json of a `suite comm` run folder."""

    schema_version: int = COMM_SCHEMA_VERSION
    args: CommArgs
    results: list[CommResult]
    started_at: str
    finished_at: str
