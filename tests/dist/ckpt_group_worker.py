"""One rank of the checkpoint round-trip group (test_ray_checkpoint.py): for each cell, train 3 steps, save a
full-state-dict checkpoint, train 2 more; then rebuild from the seed, restore, train the same 2 steps.
Writes the losses of both continuations (rank 0) to OUT/<cell_id>.json."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from suite.data import build_data
from suite.launch.ray import checkpoint as ckpt
from suite.models.build import build_model
from suite.scenario import Cell
from suite.worker.parallelize import parallelize


def _steps(par, data, steps, rank_world) -> list[float]:
    losses = []
    for step in steps:
        par.optimizer.zero_grad(set_to_none=True)
        (x, y), = data.micro_batches(step)  # grad_accum 1 in these cells
        loss = par.model(x, y)
        loss.backward()
        par.before_step()  # hand-written strategies communicate here
        par.optimizer.step()
        par.after_step()
        t = loss.detach().reshape(1).clone()
        dist.all_reduce(t)
        losses.append(t.item() / rank_world)
    return losses


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    out = Path(spec["out"])
    for cell_json in spec["cells"]:
        cell = Cell.model_validate(cell_json)
        data = build_data(cell, rank, world)
        par = parallelize(build_model(cell.model, cell.seed), cell, torch.device("cpu"))
        first = _steps(par, data, range(3), world)
        where = out / cell.id
        meta = ckpt.Meta(step=3, losses=first, step_times_s=[0.0] * 3, cell_id=cell.id, strategy=cell.strategy,
                         world_size=world)
        ckpt.save(where, par.model, par.optimizer, meta)
        dist.barrier()
        cont_a = _steps(par, data, range(3, 5), world)
        par2 = parallelize(build_model(cell.model, cell.seed), cell, torch.device("cpu"))
        restored = ckpt.restore(where, par2.model, par2.optimizer)
        cont_b = _steps(par2, data, range(restored.step, 5), world)
        if rank == 0:
            plain = build_model(cell.model, cell.seed)
            before = {k: v.clone() for k, v in plain.state_dict().items()}
            missing = plain.load_state_dict(ckpt.load_model_state(where), strict=True)
            changed = sum(not torch.equal(before[k], v) for k, v in plain.state_dict().items())
            (out / f"{cell.id}.json").write_text(json.dumps({
                "first": first, "a": cont_a, "b": cont_b, "meta_step": restored.step, "meta_losses": restored.losses,
                "strict_ok": not missing.missing_keys and not missing.unexpected_keys, "changed": changed,
                "tensors": len(before)}))
        dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
