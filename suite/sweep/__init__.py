"""Sweeps that use the whole cluster: a scenario's independent cells scheduled by Ray Core onto free nodes.

`suite run FILE --schedule pack|node|serial [--ray-address ADDR | --nodes N]`: ledger.py keeps the sweep's
state and decides what starts where (one Ray actor); dispatch.py connects to the cluster, sends each cell's
launch to its node as a Ray task and gathers the results for the runner, which gates and stores them as in a
serial run.  docs/sweeps.md says what each schedule promises about timings.
"""
