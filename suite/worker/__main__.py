"""`python -m suite.worker CELL_JSON OUT_DIR`: run one cell on this rank and exit with its status code.

Positional arguments only: torchrun takes any flag that is a prefix of one of its own.
A rank dies with its launcher (SIGKILL when torchrun's process ends, even hard): suite/lifeline.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

USAGE = "usage: python -m suite.worker CELL_JSON OUT_DIR   (CELL_JSON: a file holding one Cell as JSON)"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(USAGE, file=sys.stderr)
        return 2
    from suite.scenario import Cell
    from suite.worker.main import EXIT_CODES, run_worker

    cell = Cell.model_validate_json(Path(argv[0]).read_text())
    record = run_worker(cell, Path(argv[1]))
    return EXIT_CODES[record.status]


if __name__ == "__main__":
    from suite.lifeline import die_with_parent

    die_with_parent()  # before torch's seconds of importing: a launcher killed meanwhile takes this rank along
    code = main(sys.argv[1:])
    # The rank record is already on disk (written atomically); skip the interpreter's teardown of torch and
    # its thread pools, which costs seconds per rank here and measures nothing.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
