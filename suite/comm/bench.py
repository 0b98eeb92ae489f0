"""The per-rank side of `suite comm`: time collectives and check their results, on every rank.

Started by torchrun (never directly): `python -m suite.comm.bench ARGS_JSON OUT_DIR`, positional arguments
only because torchrun takes any flag that prefixes one of its own.  ARGS_JSON is the path of a file holding a
`CommArgs` (or that JSON itself); rank 0 writes OUT_DIR/comm.json (a `CommRun`) at the end.

How one (op, size) is measured:
1. Every rank fills its input with a pattern built from its rank (all_reduce: the value rank+1 everywhere),
   and the output with -1 so a collective that wrote nothing cannot pass the check.  This refill is untimed
   and done before each iteration: all_reduce/broadcast/reduce work in place and would otherwise compound.
2. Barrier, synchronize the device, start the clock, run the collective, synchronize, stop the clock.
3. Compare the result with its closed form (all_reduce: n(n+1)/2), on the device, without a host sync.
The first `warmup` iterations are untimed (they pay for lazy connection setup and allocator growth).  Each
iteration's time is then the MAX over ranks (a collective is done when its slowest rank is), and rank 0
records median / p10 / p90 with algbw and busbw from the median (suite.comm.busbw).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Callable, NamedTuple

import torch
import torch.distributed as dist

from suite.comm.busbw import algbw, busbw_factor, effective_bytes
from suite.comm.record import CommArgs, CommResult, CommRun
from suite.results.env import cpu_model
from suite.results.schema import StepStats
from suite.results.store import utc_iso, write_atomic

# torch 2.14 renamed the flat-tensor collectives (the old names still work but warn); older torch lacks the new.
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

class Case(NamedTuple):
    """One op's buffers and actions on this rank (values are small integers: exact in fp32)."""

    reset: Callable[[], object]  # untimed: refill the input pattern / poison the output with -1
    run: Callable[[], object]  # the timed collective
    bad: Callable[[], torch.Tensor]  # 0-dim bool on the device: does `result` differ from its closed form?
    result: torch.Tensor  # the buffer that holds this rank's result


def make_case(op: str, nbytes: int, n: int, rank: int, device: torch.device) -> Case:
    """Buffers, collective and closed-form check for `op` at S = nbytes on rank `rank` of `n`."""
    kw = dict(dtype=torch.float32, device=device)
    numel = nbytes // 4
    chunk = numel // n
    total = n * (n + 1) / 2  # sum over ranks of (rank + 1)
    rows = torch.arange(1, n + 1, **kw)[:, None]  # 1..n as a column, broadcast over a chunk

    if op in ("all_reduce", "broadcast", "reduce"):  # in place: every rank's buffer starts as rank+1
        buf = torch.empty(numel, **kw)
        reset = lambda: buf.fill_(rank + 1)  # noqa: E731
        if op == "all_reduce":
            return Case(reset, lambda: dist.all_reduce(buf), lambda: (buf != total).any(), buf)
        if op == "broadcast":  # root 0 holds 1.0, so every rank must end with 1.0
            return Case(reset, lambda: dist.broadcast(buf, src=0), lambda: (buf != 1).any(), buf)
        # reduce: only the root's buffer is defined afterwards (NCCL leaves the others unspecified)
        never = torch.zeros((), dtype=torch.bool, device=device)
        check = (lambda: (buf != total).any()) if rank == 0 else (lambda: never)
        return Case(reset, lambda: dist.reduce(buf, dst=0), check, buf)

    out = torch.empty(chunk if op == "reduce_scatter" else n * chunk, **kw)
    reset = lambda: out.fill_(-1)  # noqa: E731
    if op == "all_gather":  # rank r sends a chunk full of r+1: row j of the gathered buffer must be j+1
        inp = torch.full((chunk,), float(rank + 1), **kw)
        return Case(reset, lambda: _all_gather(out, inp), lambda: (out.view(n, chunk) != rows).any(), out)
    if op == "reduce_scatter":  # chunk j on rank r is (r+1)(j+1); rank r gets chunk r summed: (r+1) total
        inp = ((rank + 1) * rows).expand(n, chunk).contiguous().view(-1)
        return Case(reset, lambda: _reduce_scatter(out, inp), lambda: (out != (rank + 1) * total).any(), out)
    if op == "all_to_all":  # chunk j on rank r is r n + j + 1; rank r gets chunk r of every rank i: i n + r + 1
        inp = (rank * n + rows).expand(n, chunk).contiguous().view(-1)
        expect = (rows - 1) * n + rank + 1
        return Case(reset, lambda: dist.all_to_all_single(out, inp),
                    lambda: (out.view(n, chunk) != expect).any(), out)
    raise ValueError(f"unknown collective op {op!r}")


def measure(op: str, requested: int, args: CommArgs, device: torch.device, device_name: str) -> CommResult:
    """Warm up, time and check one (op, size) on every rank; all ranks return the same record."""
    n, rank = dist.get_world_size(), dist.get_rank()
    nbytes = effective_bytes(op, requested, n, elem_size=4)
    reset, run, bad, _ = make_case(op, nbytes, n, rank, device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    wrong = torch.zeros((), dtype=torch.int64, device=device)
    times: list[float] = []
    for i in range(args.warmup + args.iters):
        reset()
        dist.barrier()
        sync()
        t0 = time.perf_counter()
        run()
        sync()
        t1 = time.perf_counter()
        wrong += bad()  # stays on the device: no host sync inside the loop
        if i >= args.warmup:
            times.append(t1 - t0)
    slowest = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    dist.all_reduce(wrong)  # wrong iterations summed over ranks
    stats = StepStats.of(slowest.cpu().tolist())
    factor = busbw_factor(op, n)
    bw = algbw(nbytes, stats.median)
    return CommResult(op=op, bytes=nbytes, requested_bytes=requested, world_size=n, dtype=args.dtype,
                      time_s=stats, algbw=bw, busbw=bw * factor, busbw_factor=factor,
                      correct=int(wrong.item()) == 0, device=device.type, device_name=device_name,
                      backend=args.backend)


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        raise SystemExit("usage (under torchrun): python -m suite.comm.bench ARGS_JSON OUT_DIR")
    text = argv[0] if argv[0].lstrip().startswith("{") else Path(argv[0]).read_text(encoding="utf-8")
    args = CommArgs.model_validate_json(text)
    out_dir = Path(argv[1])
    local_rank = int(os.environ["LOCAL_RANK"])
    started = utc_iso()
    if args.device == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        device_name = torch.cuda.get_device_name(device)
        dist.init_process_group(args.backend, device_id=device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)  # one thread per rank: ranks share the cores
        device_name = cpu_model()
        dist.init_process_group(args.backend)
    try:
        results = [measure(op, size, args, device, device_name) for op in args.ops for size in args.sizes]
        if dist.get_rank() == 0:
            run = CommRun(args=args, results=results, started_at=started,
                          finished_at=utc_iso())
            write_atomic(out_dir / "comm.json", run.model_dump_json(indent=1))  # never half a file
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
