"""Tables sized to the output: the final table of `suite run` (= `results show`'s) at 80 and 120 columns, in a
pipe with COLUMNS, leaves out its least important columns first, says which, and never cuts a cell id."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from suite.console import table
from suite.results.reader import load_run
from suite.results.show import cells_table

ROOT = Path(__file__).resolve().parents[2]
RUN = next(p for p in sorted((ROOT / "results/baselines/smoke").iterdir()) if (p / "cells").is_dir())


def rendered(renderable, width: int) -> list[str]:
    con = Console(width=width, record=True, file=open(os.devnull, "w"))
    con.print(renderable)
    return con.export_text().splitlines()


@pytest.mark.parametrize("width", [80, 120])
def test_the_final_table_fits_the_terminal(width):
    results = load_run(RUN).results
    lines = rendered(cells_table(results, "smoke"), width)
    assert max(map(len, lines)) <= width, "\n".join(lines)
    for r in results:  # every cell id whole, on one line
        assert any(f"{r.cell_id}-r{r.repeat}" in line for line in lines)
    caption = " ".join(" ".join(lines[-3:]).split())
    assert "left out to fit" in caption and "teardown s" in caption  # the least important goes first
    header = " ".join(lines[:8])
    assert "status" in header and "gates" in header  # what matters most stays


def test_a_wide_output_keeps_every_column():
    lines = rendered(cells_table(load_run(RUN).results, "smoke"), 240)
    assert not any("left out" in line for line in lines)
    assert any("teardown" in line for line in lines) and any("launch+setup" in line for line in lines)


def test_columns_are_dropped_in_the_order_given():
    rows = [["a" * 10, "b" * 10, "c" * 10, "d" * 10]]
    t = table("t", ["w", "x", "y", "z"], rows, optional=["y", "x"], width=30)
    lines = rendered(t, 30)
    assert max(map(len, lines)) <= 30
    assert "left out to fit 30 columns: x, y" in " ".join(" ".join(lines).split())


@pytest.mark.parametrize("width", [80, 120])
def test_columns_sizes_the_piped_output(width):
    env = {**os.environ, "COLUMNS": str(width)}
    proc = subprocess.run([sys.executable, "-m", "suite", "results", "show", str(RUN)], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() and max(map(len, proc.stdout.splitlines())) <= width, proc.stdout


@pytest.mark.parametrize("width", [80, 120])
def test_compare_prints_one_table_that_fits(width):
    runs = [p for p in sorted((ROOT / "results/baselines/smoke").iterdir()) if (p / "cells").is_dir()]
    env = {**os.environ, "COLUMNS": str(width)}
    proc = subprocess.run([sys.executable, "-m", "suite", "compare", str(runs[0]), str(runs[-1])],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    out = proc.stdout
    assert out.count("suite compare") == 1 and "timing: noise" not in out  # one table, not a second copy
    table_lines = [line for line in out.splitlines() if line[:1] in "┏┃┡│└"]
    assert table_lines and max(map(len, table_lines)) <= width, out
    assert "unchanged" in out and "regression" in out  # the quiet timing checks are in the same table
