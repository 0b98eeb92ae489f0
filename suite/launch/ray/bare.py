"""The yardstick for a Ray cell's cost: the same cell's training work as a bare TorchTrainer fit.

What a user who never heard of suite would write: a driver that connects to the cluster and calls
`TorchTrainer(train_func, ScalingConfig(num_workers=gpus), TorchConfig(backend)).fit()`, where `train_func`
builds the cell's model from its seed, wraps it in DDP (or FSDP2's `fully_shard` per block for zero3), and
runs the cell's steps on the cell's data with the cell's optimizer - no records, no events, no checkpoints,
no callbacks; rank 0 writes its step times and losses to a file at the end (Train V2's `result.metrics` is
not where numbers come back).

    fit(cell, out_dir) -> {"fit_s", "worker_group_setup_s", "train_s", "teardown_s", "step_times_s", "losses"}

`fit_s` (TorchTrainer.fit's own wall time, in a driver already connected) is Ray Train's floor for this work
on this cluster; a suite Ray cell's wall time is compared with it (scripts/ray-overhead, docs/ray-cost.md).
Step times are timed exactly as suite's worker times them (device synchronized on both ends, the loss's
all-reduce outside), so the two step medians compare as well.  Placement: workers spread one per node
(STRICT_SPREAD) when the cell has as many nodes as workers, else Ray's default PACK - the same nodes suite's
`placement_strategy: auto` picks for those cells.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from suite.scenario import Cell

BARE_STRATEGIES = ("ddp", "zero3")


def train_func(config: dict) -> None:
    """Every rank: the cell's steps in a plain loop (Ray has made the process group already)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from suite.data import build_data
    from suite.models.build import build_model
    from suite.strategies.base import make_optimizer

    t_enter = time.time()
    cell = Cell.model_validate_json(config["cell"])
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device()) if cell.device == "cuda" else torch.device("cpu")
    model = build_model(cell.model, cell.seed).to(device)
    if cell.strategy == "zero3":
        from torch.distributed.fsdp import fully_shard

        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
        wrapped = model
    else:
        wrapped = DistributedDataParallel(model)
    data = build_data(cell, rank, world)
    optimizer = make_optimizer(model.parameters(), cell.optimizer, device)
    times, losses = [], []
    t_train = time.time()
    for step in range(cell.steps):
        batches = [(x.to(device), y.to(device)) for x, y in data.micro_batches(step)]
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        total = torch.zeros((), device=device)
        for i, (x, y) in enumerate(batches):
            last = i == len(batches) - 1
            if cell.strategy == "zero3":
                wrapped.set_requires_gradient_sync(last)
                loss = wrapped(x, y) / len(batches)
                loss.backward()
            elif last:
                loss = wrapped(x, y) / len(batches)
                loss.backward()
            else:
                with wrapped.no_sync():
                    loss = wrapped(x, y) / len(batches)
                    loss.backward()
            total += loss.detach()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
        dist.all_reduce(total)  # the global mean loss, outside the timer (as suite's worker does)
        losses.append(total.item() / world)
    if rank == 0:
        out = {"entered_t": t_enter, "train_started_t": t_train, "returned_t": time.time(), "step_times_s": times,
               "losses": losses}
        Path(config["out"]).write_text(json.dumps(out), encoding="utf-8")


def fit(cell: Cell, out_dir: Path) -> dict:
    """One bare fit of `cell` on the cluster this process is connected to (ray.init done); its phases."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    if cell.strategy not in BARE_STRATEGIES:
        raise ValueError(f"the bare yardstick trains strategies {BARE_STRATEGIES}, not {cell.strategy!r}")
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"bare-{cell.id}-{time.time_ns()}.json"
    use_gpu = cell.device == "cuda"
    spread = cell.nodes == cell.gpus and cell.nodes > 1
    trainer = TorchTrainer(
        train_func, train_loop_config={"cell": cell.model_dump_json(), "out": str(out)},
        scaling_config=ScalingConfig(num_workers=cell.gpus, use_gpu=use_gpu,
                                     placement_strategy="STRICT_SPREAD" if spread else "PACK"),
        torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo"),
        run_config=RunConfig(name=out.stem, storage_path=str(out_dir / "ray")))
    t0 = time.time()
    trainer.fit()
    t1 = time.time()
    rank0 = json.loads(out.read_text(encoding="utf-8"))
    return {"fit_s": t1 - t0, "worker_group_setup_s": rank0["entered_t"] - t0,
            "train_s": rank0["returned_t"] - rank0["entered_t"], "teardown_s": t1 - rank0["returned_t"],
            "step_times_s": rank0["step_times_s"], "losses": rank0["losses"]}


_DRIVER = """
import json, sys
from pathlib import Path
import ray
from suite.launch.ray import bare as ray_bare
from suite.scenario import load_cells
ray.init(address=sys.argv[1], logging_level="WARNING", log_to_driver=False)
(cell,) = [c for c in load_cells(sys.argv[2])[1] if c.id == sys.argv[3]]
for _ in range(int(sys.argv[5])):
    print("FIT", json.dumps(ray_bare.fit(cell, Path(sys.argv[4]))), flush=True)
"""


def fits_in_a_driver(address: str, scenario: Path, cell_id: str, out_dir: Path, n: int, env: dict) -> list[dict]:
    """`n` bare fits of one cell of `scenario` in a fresh driver process connected to `address` (what a user's
    script is); connecting is outside every fit_s."""
    proc = subprocess.run([sys.executable, "-c", _DRIVER, address, str(scenario), cell_id, str(out_dir), str(n)],
                          env=env, capture_output=True, text=True, timeout=300 + 120 * n)
    if proc.returncode:
        raise RuntimeError(f"bare TorchTrainer driver failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return [json.loads(line[4:]) for line in proc.stdout.splitlines() if line.startswith("FIT ")]
