"""The yardstick for suite's own cost: the same cell trained by a bare PyTorch loop, one process.

suite promises that its training step costs what a plain loop costs: the harness (events, records, process
group, strategy wrappers at world size 1) must stay outside the timed region.  `bare_step_times` trains the
cell's model on the cell's data with the cell's optimizer in the simplest loop there is (no process group,
no wrappers, no records) and times each optimizer step exactly as the worker does (device synchronized on
both ends).  The ratio suite / bare of the median measured step time is the harness's per-step overhead;
suite/testing/overhead.py measures it side by side in one process (tests/dist/test_overhead_vs_bare.py,
scripts/overhead-vs-bare), and the GPU check's harness step on the device (suite/testing/gpu_check.py).
"""

from __future__ import annotations

import time

import torch

from suite.data import build_data
from suite.models.build import build_model
from suite.scenario import Cell
from suite.strategies.base import make_optimizer
from suite.techniques import precision
from suite.worker.dist import synchronize


def bare_step_times(cell: Cell, device: torch.device | None = None) -> tuple[list[float], list[float]]:
    """(seconds per optimizer step, loss per step) of a plain single-process loop, warm-up included.

    fp32 and bf16 only (no GradScaler): the yardstick is for the step's cost, not for fp16's loss scaling."""
    device = device or torch.device("cpu")
    model = build_model(cell.model, cell.seed).to(device)
    data = build_data(cell, 0, 1)
    optimizer = make_optimizer(model.parameters(), cell.optimizer, device)
    times, losses = [], []
    for step in range(cell.steps):
        batches = [(x.to(device), y.to(device)) for x, y in data.micro_batches(step)]
        synchronize(device)
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        total = torch.zeros((), device=device)
        for x, y in batches:
            with precision.autocast(cell.precision, device):
                loss = model(x, y) / len(batches)
            loss.backward()
            total += loss.detach()
        optimizer.step()
        synchronize(device)
        times.append(time.perf_counter() - t0)
        losses.append(total.item())
    return times, losses
