"""The training worker: one process per rank executes one cell and writes what it measured.

    python -m suite.worker CELL_JSON OUT_DIR        (under torchrun; Ray Train calls run_worker directly)

main.py      run_worker(cell, out_dir) -> RankRecord: setup, train, measure, write, exit status
dist.py      the rank's identity from torchrun's variables, device choice, process group
loop.py      one optimizer step (micro-batches, no_sync, mixed precision) and the timed loop
measure.py   byte counts, device facts, the MemTracker peaks pass, atomic record and event writing
faults.py    SUITE_FAULT fault injection for the runner's tests
"""
