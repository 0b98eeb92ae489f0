"""`launcher: ray`: a cell's ranks as a Ray Train worker group (one job for many nodes), run from one driver
process per run.  Everything Ray lives here; nothing outside imports Ray.

    launcher.py    `run_cell`: the run's private cluster (or a given address) and the cell's job on the driver
    cluster.py     a private multi-node cluster on this host (`ray start` nodes), stopped with the run
    session.py     the one driver process per run; a cell's job on it as a supervise Handle; the cell's phases
    driver.py      the driver itself: one job per stdin line -> TorchTrainer.fit -> the answer file
    train_fn.py    the training function every Ray worker runs: the same `run_worker` torchrun runs
    events.py      what ranks report besides files (event names, the failure carrying a rank's record)
    rank_files.py  the ranks' records and start lines as files, or through Ray reports without a shared disk
    checkpoint.py  Ray Train checkpoints of a strategy's training state (the registry's `checkpointable`)
    bare.py        the bare `TorchTrainer.fit` yardstick a Ray cell's cost is measured against (docs/ray-cost.md)
"""
