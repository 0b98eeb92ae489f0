"""`suite comm`: resolve the device, make a run folder with a manifest, launch the ranks, return the records.

A comm run is stored like any other run (suite.results.store):

    results/comm/<NNNN>_<gitsha7>_<utc>/
        manifest.json    the environment (Manifest; extra.comm holds the resolved arguments)
        comm.json        CommRun: the arguments and one CommResult per (op, size)
        work/comm/       the launch: cell.json (the CommArgs the ranks got), launcher.log (torchrun's and the
                         ranks' output), comm.json as rank 0 wrote it
        cells/           empty: the run-folder layout shared with `suite run`

The parent never imports torch: the CUDA devices come from suite.results.env's probe subprocess, which the
manifest needs anyway.
"""

from __future__ import annotations

from pathlib import Path

from suite.comm.busbw import DEFAULT_OPS
from suite.comm.launch import CommError, launch
from suite.comm.record import CommArgs, CommRun
from suite.comm.sizes import CommArgError, parse_ops, parse_sizes
from suite.device import resolve_device
from suite.results.env import build_manifest, git_info, torch_info
from suite.results.store import create_run_dir, write_atomic, write_manifest

# The full NCCL-tests-like sweep on GPUs; on CPUs (gloo over loopback, one core per rank) 1 GiB messages
# take seconds per iteration, so the default stops at 64 MiB there.
DEFAULT_SIZES = {"cuda": "1KiB..1GiB", "cpu": "1KiB..64MiB"}
CPU_DEFAULT_RANKS = 2


def resolve(device: str, gpus: int | None, cuda_devices: list[str]) -> tuple[str, str, int]:
    """(device, backend, world size) from --device and --gpus, given the visible CUDA device names."""
    if device not in ("auto", "cuda", "cpu"):
        raise CommArgError(f"--device: {device!r} is not one of auto, cuda, cpu")
    if gpus is not None and gpus < 1:
        raise CommArgError(f"--gpus: {gpus} ranks; need at least 1")
    device = resolve_device(device, len(cuda_devices))
    if device == "cpu":
        return "cpu", "gloo", gpus or CPU_DEFAULT_RANKS
    if not cuda_devices:
        raise CommArgError("--device cuda: torch sees no CUDA device on this machine (use --device cpu)")
    n = gpus or len(cuda_devices)
    if n > len(cuda_devices):
        raise CommArgError(f"--gpus {n}: only {len(cuda_devices)} CUDA device(s) visible "
                           f"({', '.join(cuda_devices)}); NCCL needs one device per rank")
    return "cuda", "nccl", n


def run_comm(*, ops: str | None, sizes: str | None, gpus: int | None, iters: int, warmup: int,
             results: Path, device: str, timeout_s: float, command: list[str]) -> tuple[Path, CommRun]:
    """Measure every (op, size), store the run folder, and return it with the records."""
    if iters < 1:
        raise CommArgError(f"--iters: {iters}; need at least 1 timed iteration")
    if warmup < 0:
        raise CommArgError(f"--warmup: {warmup}; cannot be negative")
    op_list = parse_ops(ops) if ops else list(DEFAULT_OPS)
    size_list = parse_sizes(sizes) if sizes else None  # bad values fail before the seconds-long torch probe
    facts = torch_info()
    if facts.get("error"):
        raise CommError(f"cannot import torch in a subprocess: {facts['error']}")
    device, backend, n = resolve(device, gpus, facts.get("devices") or [])
    size_list = size_list or parse_sizes(DEFAULT_SIZES[device])
    args = CommArgs(ops=op_list, sizes=size_list, iters=iters, warmup=warmup, device=device, backend=backend)
    commit, _ = git_info()
    run_dir = create_run_dir(Path(results), "comm", commit)
    manifest = build_manifest(run_id=run_dir.name, scenario="comm", seed=0, command=command,
                              extra={"comm": {"args": args.model_dump(), "world_size": n}}, torch_facts=facts)
    write_manifest(run_dir, manifest)
    run = launch(args, n, run_dir / "work" / "comm", timeout_s=timeout_s)
    write_atomic(run_dir / "comm.json", run.model_dump_json(indent=1))
    return run_dir, run
