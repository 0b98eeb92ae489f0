"""Start the benchmark ranks with torchrun, wait for them, and read back what rank 0 stored.

    python -m torch.distributed.run --standalone --nproc_per_node=N -m suite.comm.bench ARGS_JSON OUT_DIR

This reuses the training runner's torchrun launcher (suite.launch.torchrun.run_cell) for its process
hygiene: a private rendezvous per launch (`--standalone`), one thread per rank on CPU (OMP_NUM_THREADS=1:
ranks share the cores, and oversubscribing them makes gloo timings meaningless), a timeout, and stopping
every rank on timeout or Ctrl-C.  The launcher takes a LaunchRequest, not a cell: the rank count, one
thread per rank, and the payload - the benchmark's arguments, written here to OUT_DIR/cell.json and passed
to the ranks as ARGS_JSON.

This module never imports torch: the parent process stays light and never initialises CUDA.
"""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path

from suite.comm.record import CommArgs, CommRun

BENCH_MODULE = "suite.comm.bench"


class CommError(RuntimeError):
    """The benchmark ranks failed, timed out or were interrupted; the message says which, with the log's tail."""

    def __init__(self, message: str, interrupted: bool = False):
        super().__init__(message)
        self.interrupted = interrupted


def launch(args: CommArgs, world_size: int, out_dir: Path, timeout_s: float = 1800,
           stop: threading.Event | None = None) -> CommRun:
    """Run the ranks to completion and return rank 0's `CommRun` (OUT_DIR/comm.json); raise CommError.

    stop: set it to stop the ranks (the training runner passes its own Ctrl-C event).  Without one, Ctrl-C and
    SIGTERM are caught here for the duration of the launch, so the ranks are stopped before we return."""
    from suite.launch import LaunchRequest
    from suite.launch.torchrun import run_cell

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    payload = out_dir / "cell.json"
    payload.write_text(args.model_dump_json(indent=1), encoding="utf-8")
    request = LaunchRequest(launcher="torchrun", workdir=out_dir, payload=payload, timeout_s=timeout_s,
                            gpus=world_size, threads_per_rank=1, device=args.device, worker_module=BENCH_MODULE,
                            label="comm")
    own_handlers = stop is None and threading.current_thread() is threading.main_thread()
    stop = stop or threading.Event()
    previous = {}
    if own_handlers:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    try:
        result = run_cell(request, stop=stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    where = f"{world_size} ranks, {args.device}/{args.backend}; log: {result.log_path}"
    if result.interrupted:
        raise CommError(f"collective benchmark interrupted ({where})", interrupted=True)
    if result.timed_out:
        raise CommError(f"collective benchmark timed out after {timeout_s:g} s ({where})\n{result.error or ''}")
    path = out_dir / "comm.json"
    if result.returncode != 0 or not path.exists():
        raise CommError(f"collective benchmark exited with status {result.returncode} ({where})\n"
                        f"{result.error or ''}")
    return CommRun.model_validate(json.loads(path.read_text(encoding="utf-8")))
