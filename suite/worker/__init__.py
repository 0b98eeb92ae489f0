"""The training worker: one process per rank executes one cell and writes what it measured.

    python -m suite.worker CELL_JSON OUT_DIR        (under torchrun; Ray Train calls run_worker directly)

main.py      run_worker(cell, out_dir) -> RankRecord: setup, train, measure, write, exit status
dist.py      the rank's identity from torchrun's variables, device choice, process group
loop.py      the Trainer: one optimizer step (micro-batches, no_sync, mixed precision), the timed loop, and
             the loss curve and step times it owns (state_dict / load_state_dict for a resumed run)
measure.py   byte counts, device facts, the MemTracker peaks pass, atomic record and event writing
faults.py    SUITE_FAULT fault injection for the runner's tests: one hook object the loop calls
parallelize.py  tensor parallelism -> checkpointing -> compile -> the strategy's apply(model, mesh, policy)
evaluate.py  held-out evaluation between steps;  gradients.py  the global gradient norm of each step

Ray Train's training function (run_worker with hooks that checkpoint and resume) and its checkpoints live with
the rest of Ray in suite/launch/ray/ (train_fn.py, checkpoint.py).
"""
