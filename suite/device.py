"""Which kind of device a cell's `device` setting means on a machine: one pure function, no torch.

The runner, the Ray driver and the worker each know the GPU count in their own way (CUDA's device count, a
Ray cluster's GPU resources); what they decide from it is this.
"""

from __future__ import annotations

from typing import Literal

DEVICES = ("auto", "cuda", "cpu")


def resolve_device(requested: str, gpu_count: int) -> Literal["cuda", "cpu"]:
    """auto = cuda when there is a GPU, else cpu; cuda and cpu are taken as asked (whether a cuda request can
    be met is the caller's to check: the runner calls the cell infeasible, the worker refuses to start)."""
    if requested not in DEVICES:
        raise ValueError(f"device {requested!r} is unknown; expected auto, cuda or cpu")
    if requested == "auto":
        return "cuda" if gpu_count > 0 else "cpu"
    return "cuda" if requested == "cuda" else "cpu"
