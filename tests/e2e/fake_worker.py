"""A stand-in for suite.worker that trains nothing: it tests the runner's logic in isolation, quickly.

`python -m tests.e2e.fake_worker CELL_JSON OUT_DIR` under torchrun honours the worker's contract (interface 3):
rank<R>.json RankRecords written atomically, rank 0's events.jsonl (setup_done, step, done), exit codes
0 ok / 3 diverged / 4 oom / 1 failed.  Its loss curve is a formula of the step and the global batch size only,
so strategies give identical curves and a different global batch a different one (what a match gate sees).

SUITE_FAULT (as the real worker: `<cell_id>:<kind>@<step>`, comma-separated) with the real kinds raise, hang,
nan, plus fake-only kinds to reach runner paths the real worker rarely takes:
  oom        the rank records status oom and exits 4
  norecord   the rank exits 1 without writing a record
  stubborn   the rank ignores SIGTERM, then hangs (the launcher must escalate to SIGKILL)
FAKE_STEP_S: seconds per fake step (default 0.05).
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import sys
import time
from pathlib import Path

from suite.results.schema import RankRecord, SetupTimes, TensorBytes
from suite.scenario import Cell


def _faults(cell_id: str) -> dict[int, str]:
    out = {}
    for entry in filter(None, os.environ.get("SUITE_FAULT", "").split(",")):
        cid, rest = entry.rsplit(":", 1)
        kind, step = rest.split("@")
        if cid == cell_id:
            out[int(step)] = kind
    return out


def _event(out: Path, rank: int, **fields) -> None:
    if rank == 0:
        with open(out / "events.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps({**fields, "t": time.time()}) + "\n")


def _write(out: Path, record: RankRecord) -> None:
    tmp = out / f".rank{record.rank}.json.tmp"
    tmp.write_text(record.model_dump_json(indent=1), encoding="utf-8")
    os.replace(tmp, out / f"rank{record.rank}.json")


def main(cell_json: str, out_dir: str) -> int:
    t_start = time.time()
    cell = Cell.model_validate_json(Path(cell_json).read_text())
    out = Path(out_dir)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    faults = _faults(cell.id)
    step_s = float(os.environ.get("FAKE_STEP_S", "0.05"))
    tokens = cell.global_batch_size * cell.seq_len
    psi = cell.model.num_parameters()
    record = dict(cell_id=cell.id, rank=rank, world_size=world, local_rank=int(os.environ["LOCAL_RANK"]),
                  hostname=socket.gethostname(), device="cpu", device_name="fake cpu", losses=[], step_times_s=[],
                  warmup_steps=cell.warmup_steps, tokens_per_step=tokens, samples_per_step=cell.global_batch_size,
                  tensor_bytes=TensorBytes(parameters=4 * psi, gradients=4 * psi, optimizer_states=8 * psi))
    time.sleep(0.2)  # "setup"
    setup = time.time() - t_start
    record["setup_s"] = SetupTimes(process_group=0.0, model_build=setup, strategy=0.0, data=0.0, total=setup)
    _event(out, rank, event="setup_done")
    t_train = time.time()
    status, code, error = "ok", 0, None
    for step in range(cell.steps):
        kind = faults.get(step)
        if kind == "raise":
            status, code, error = "failed", 1, f"Traceback (most recent call last):\nInjectedFault: raise at step {step}"
            break
        if kind == "oom":
            status, code, error = "oom", 4, f"OutOfMemoryError: fake at step {step}"
            break
        if kind == "norecord":
            return 1
        if kind in ("hang", "stubborn"):
            if kind == "stubborn":
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            while True:
                time.sleep(3600)
        t0 = time.time()
        time.sleep(step_s)
        loss = float("nan") if kind == "nan" else 4.0 * math.exp(-0.1 * step) + 1.0 / cell.global_batch_size
        record["losses"].append(loss)
        record["step_times_s"].append(time.time() - t0)
        _event(out, rank, event="step", step=step, loss=loss, step_time_s=record["step_times_s"][-1])
        if not math.isfinite(loss):
            status, code, error = "diverged", 3, f"loss is {loss} at step {step}"
            break
    record["train_s"] = time.time() - t_train
    record["teardown_s"] = 0.0
    _write(out, RankRecord(status=status, error=error, **record))
    _event(out, rank, event="done", status=status)
    return code


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
