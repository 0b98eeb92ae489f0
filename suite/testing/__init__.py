"""Helpers that the test suite and scripts/ share: cell builders, multi-rank runs, yardsticks, the GPU check.

The top layer, beside suite/cli: these modules use the rest of suite, and no other suite module uses them.
Test files and scripts/ reach them as `from suite.testing.X import Y`; nothing here reaches into the test folders.

    builders       real `Cell`s of a small scenario (`make_cell`), stored `CellResult`s and report rows
    spawn          multi-rank runs: cells on `world` spawned ranks in one group (`run_group`, each rank running
                   group_worker.py), one real torchrun launch (`torchrun_cell`)
    group_worker   one rank of a spawned group (`python -m suite.testing.group_worker SPEC`)
    bare_loop      the yardstick for suite's own cost: a cell trained by a bare PyTorch loop (`bare_step_times`)
    overhead       suite's per-step overhead against the bare loop, measured in a fresh process (overhead_probe.py)
    overhead_probe that process: suite's worker and the bare loop alternating on one cell
    scenario_fuzz  the scenario-file fuzzer's mutator and check (tests/unit/test_scenario_fuzz.py,
                   scripts/fuzz-scenarios)
    results_fuzz/  the results-reader fuzzer (a package): hostile copies of real run folders and packs, every
                   reading command run in one guarded child process (tests/unit/test_results_fuzz.py,
                   scripts/fuzz-results)
    gpu_check      the GPU check of a lent machine and its rehearsal here (scripts/gpu-check, docs/gpu-check.md)
    gpu_programs   the programs its steps run inside the interpreter they check (stand-in, scenarios, harness)
    peaks          a real rank's MemTracker peak against its trace, less one all-gather buffer gloo let go of late
    pipeline_order PyTorch's pipeline orders run through a dependency simulation (the planner's bubble and
                   in-flight formulas checked against them)

Importing this package imports nothing: gpu_check must run under a bare python3 before suite's requirements are
installed.
"""
