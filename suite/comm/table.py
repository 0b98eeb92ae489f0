"""The rich table `suite comm` prints: one row per (op, size), NCCL-tests units (GB/s = 1e9 B/s, us)."""

from __future__ import annotations

from rich.table import Table

from suite.comm.record import CommRun
from suite.comm.sizes import format_size
from suite.console import styled, table

COLUMNS = ["op", "size", "bytes", "ranks", "time median (us)", "p10 (us)", "p90 (us)", "algbw (GB/s)",
           "busbw (GB/s)", "factor", "correct"]


def comm_table(run: CommRun, title: str) -> Table:
    rows = []
    for r in run.results:
        t = r.time_s
        rows.append([r.op, format_size(r.bytes), r.bytes, r.world_size, f"{t.median * 1e6:.1f}",
                     f"{t.p10 * 1e6:.1f}", f"{t.p90 * 1e6:.1f}", f"{r.algbw / 1e9:.4f}", f"{r.busbw / 1e9:.4f}",
                     f"{r.busbw_factor:.4g}", "yes" if r.correct else styled("NO", "red")])
    return table(title, COLUMNS, rows)
