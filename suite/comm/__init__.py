"""Collective-communication benchmarks: time, algbw and busbw per op and message size (NCCL-tests style).

- busbw.py     the conventions (pure): busbw factors per op, what "bytes" means per op
- sizes.py     `1KiB..1GiB` / `4MiB,64MiB` / op-list parsing
- record.py    CommArgs (to the ranks), CommResult (one measurement), CommRun (comm.json)
- bench.py     the per-rank measuring code, started by torchrun
- launch.py    torchrun as a subprocess, timeouts, reading back comm.json
- run.py       `suite comm`: device resolution, the run folder and its manifest
- preflight.py a quick all-reduce busbw probe for a training run's manifest
- table.py     the printed table
"""
