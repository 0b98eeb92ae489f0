"""Held-out evaluation (scenario `eval:`): the loss, accuracy or perplexity of the model as it is now.

It runs between optimizer steps, after a step's timer stopped (the loop's after_step hook), so it never counts
in step times or throughput; its own wall time is recorded in the EvalPoint.  The model is evaluated as the
strategy holds it — `par.model(inputs)` returns the logits through the wrapped module's forward, so DDP,
FSDP2 and the hand-written strategies gather whatever forward needs, exactly as in training — in eval mode
and without gradients, under the same autocast as training.  Each rank evaluates its slice of the same
held-out batches (data/__init__.py: the same samples at every evaluation); the sums of loss, targets and
right answers are all-reduced, so every rank returns the same point, which equals a 1-rank evaluation of
the same model up to the order of additions.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext

import torch
import torch.nn.functional as F

from suite.data import Data
from suite.results.schema import EvalPoint
from suite.scenario import Cell
from suite.strategies.base import Parallel
from suite.techniques import precision
from suite.worker.dist import synchronize


def _sums(model: torch.nn.Module, data: Data, cell: Cell, device: torch.device, autocast: bool) -> torch.Tensor:
    """(loss sum, targets, right answers) of this process's slice of the held-out batches."""
    training = model.training
    model.eval()
    sums = torch.zeros(3, dtype=torch.float64, device=device)
    try:
        with torch.no_grad():
            for i in range(cell.eval.batches):
                for x, y in data.eval_micro_batches(i):
                    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                    with precision.autocast(cell.precision, device) if autocast else nullcontext():
                        logits = model(x)
                    if hasattr(logits, "full_tensor"):  # loss_parallel: split on the vocabulary (a DTensor)
                        logits = logits.full_tensor()
                    logits, y = logits.float().flatten(0, -2), y.flatten()  # (targets, classes)
                    sums[0] += F.cross_entropy(logits, y, reduction="sum").double()
                    sums[1] += y.numel()
                    sums[2] += (logits.argmax(-1) == y).sum()
    finally:
        model.train(training)
    return sums


def _pipeline_sums(par: Parallel, data: Data, cell: Cell, device: torch.device) -> torch.Tensor:
    """The same sums through a pipeline's schedule (forward only): on its last stage, zeros elsewhere (the
    all-reduce then adds one pipeline per data-parallel replica).  No accuracy: pipelines run language models."""
    sums = torch.zeros(3, dtype=torch.float64, device=device)
    training = par.model.training
    par.model.eval()
    try:
        for i in range(cell.eval.batches):
            batches = [(x.to(device), y.to(device)) for x, y in data.eval_micro_batches(i)]
            with precision.autocast(cell.precision, device) if par.autocast else nullcontext():
                sums[:2] += par.pipeline.evaluate(batches)
    finally:
        par.model.train(training)
    return sums


def held_out(model: torch.nn.Module, data: Data, cell: Cell, device: torch.device) -> tuple[float, float | None]:
    """(loss, accuracy or None) of a plain model on all held-out batches, in one process (data for rank 0 of 1):
    what the Ray driver re-measures on a restored checkpoint."""
    loss_sum, targets, right = _sums(model, data, cell, device, autocast=True).tolist()
    return loss_sum / targets, (right / targets if cell.model.inputs == "images" else None)


def evaluate(par: Parallel, data: Data, cell: Cell, device: torch.device, step: int) -> EvalPoint:
    """Evaluate `cell.eval.batches` held-out global batches after `step` optimizer steps."""
    synchronize(device)
    t0 = time.perf_counter()
    if par.pipeline is not None:
        sums = _pipeline_sums(par, data, cell, device)
    else:
        sums = _sums(par.model, data, cell, device, par.autocast)
    torch.distributed.all_reduce(sums)
    synchronize(device)
    loss_sum, targets, right = sums.tolist()
    loss = loss_sum / targets
    vit = cell.model.inputs == "images"  # a classifier (vit, or an image model of your own)
    return EvalPoint(step=step, loss=loss, accuracy=right / targets if vit else None,
                     perplexity=None if vit else (math.exp(loss) if loss < 700 else math.inf),
                     samples=cell.eval.batches * cell.global_batch_size, seconds=time.perf_counter() - t0)
