"""Run in a fresh process (one thread, world of one): suite's worker and the bare loop on the same cell,
alternating, and print their step times and losses as JSON (read by suite/testing/overhead.py `measure`)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import torch

from suite.scenario import Cell
from suite.testing.bare_loop import bare_step_times
from suite.worker.main import run_worker


def main(cell_json: str) -> None:
    cell = Cell.model_validate_json(Path(cell_json).read_text())
    torch.set_num_threads(1)
    out = {"suite": [], "bare": [], "suite_losses": None, "bare_losses": None}
    for i in range(3):  # alternate, so a burst of load on the machine hits both sides
        times, losses = bare_step_times(cell)
        out["bare"].append(times)
        out["bare_losses"] = losses
        with tempfile.TemporaryDirectory() as tmp:
            record = run_worker(cell, Path(tmp) / f"run{i}")
        assert record.status == "ok", record.error
        out["suite"].append(record.step_times_s)
        out["suite_losses"] = record.losses
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
