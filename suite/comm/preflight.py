"""A quick all-reduce bus-bandwidth probe, run before training and recorded in the run's manifest.

A slow step time has many causes; a slow interconnect is one that the training numbers alone cannot show.
Measuring the all-reduce busbw of the very machine and world size a run uses (a few sizes, a few iterations,
10 to 30 s, most of it process start-up and `import torch`) puts that fact beside the results:

    extra["preflight"] = preflight(world_size=N, device=cell.device, cuda_devices=manifest_devices,
                                   work_dir=run_dir / "work" / "preflight")

The returned dict is plain JSON: busbw per size in GB/s (1e9 B/s, as NCCL-tests print), the full
CommResult records, and `correct`.  A failed probe is recorded as {"error": ...} instead of stopping the run
(the probe is optional; the training run will show its own failure), and one rank is recorded as skipped.
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from suite.comm.launch import CommError, launch
from suite.comm.record import CommArgs
from suite.comm.run import resolve
from suite.comm.sizes import format_size

PREFLIGHT_SIZES = (1 << 20, 16 << 20, 64 << 20)  # 1, 16, 64 MiB: latency-bound to bandwidth-bound


def preflight(world_size: int, device: str = "auto", cuda_devices: list[str] | None = None,
              work_dir: Path | None = None, sizes: tuple[int, ...] = PREFLIGHT_SIZES, iters: int = 5,
              warmup: int = 2, timeout_s: float = 300, stop: threading.Event | None = None) -> dict[str, Any]:
    """Measure all-reduce busbw on `world_size` ranks; return a JSON-able dict for manifest.extra.

    cuda_devices: the visible CUDA device names (Manifest.devices); probed in a subprocess when None.
    work_dir: where comm.json and launcher.log go (e.g. <run>/work/preflight); a temp folder when None.
    stop: the caller's Ctrl-C event (see suite.comm.launch.launch); an interrupted probe raises CommError."""
    if cuda_devices is None:
        from suite.results.env import torch_info

        cuda_devices = torch_info().get("devices") or []
    dev, backend, n = resolve(device, world_size, cuda_devices)
    if n < 2:
        return {"op": "all_reduce", "world_size": n, "skipped": "one rank: no interconnect to measure"}
    args = CommArgs(ops=["all_reduce"], sizes=list(sizes), iters=iters, warmup=warmup, device=dev,
                    backend=backend)
    t0 = time.perf_counter()
    try:
        if work_dir is None:
            with tempfile.TemporaryDirectory(prefix="suite-preflight-") as tmp:
                run = launch(args, n, Path(tmp), timeout_s=timeout_s, stop=stop)
        else:
            run = launch(args, n, Path(work_dir), timeout_s=timeout_s, stop=stop)
    except CommError as exc:  # recorded, not hidden: the manifest says the probe failed and why
        if exc.interrupted:
            raise  # the user asked to stop: not a probe failure
        return {"op": "all_reduce", "world_size": n, "device": dev, "error": str(exc)}
    return {
        "op": "all_reduce",
        "world_size": n,
        "device": dev,
        "backend": backend,
        "device_name": run.results[0].device_name,
        "busbw_GBps": {format_size(r.bytes): round(r.busbw / 1e9, 4) for r in run.results},
        "max_busbw_GBps": round(max(r.busbw for r in run.results) / 1e9, 4),
        "correct": all(r.correct for r in run.results),
        "wall_s": round(time.perf_counter() - t0, 2),
        "results": [r.model_dump() for r in run.results],
    }
