"""One rank of a spawned group (spawn.py `run_group`): run_worker for each cell of the spec, each on its own
port."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from suite.scenario import Cell
from suite.worker.main import run_worker


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    for cell_json, port in zip(spec["cells"], spec["ports"]):
        cell = Cell.model_validate(cell_json)
        os.environ["MASTER_PORT"] = str(port)
        record = run_worker(cell, Path(spec["out_root"]) / cell.id)
        print(f"cell {cell.id}: {record.status} {record.error or ''}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
