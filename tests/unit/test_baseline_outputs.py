"""report, compare and publish of the committed baseline (results/baselines) give exactly the bytes an earlier
suite gave (tests/fixtures/baseline-outputs, with how they were made): reading old results through the typed
records (Cell, Axes) changes nothing a person or a tool sees."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BASELINES = Path("results", "baselines")  # relative, as the golden outputs were made (report.json names the runs)
GOLDEN = ROOT / "tests" / "fixtures" / "baseline-outputs"


def _same(produced: Path, golden: Path) -> None:
    assert produced.read_bytes() == golden.read_bytes(), f"{produced.name} differs from {golden}"


@pytest.mark.parametrize("fmt,name", [("md", "report.md"), ("csv", "cells.csv"), ("json", "report.json")])
def test_report_of_the_baseline_is_unchanged(cli, tmp_path, monkeypatch, fmt, name):
    monkeypatch.chdir(ROOT)
    out = cli("report", BASELINES, "--format", fmt, "--out", tmp_path)
    assert out.exit_code == 0, out.output
    _same(tmp_path / name, GOLDEN / name)


@pytest.mark.parametrize("fmt,name", [("md", "compare.md"), ("junit", "compare.junit")])
def test_compare_of_the_baseline_is_unchanged(cli, tmp_path, monkeypatch, fmt, name):
    monkeypatch.chdir(ROOT)
    runs = sorted(p for p in (BASELINES / "smoke").iterdir() if p.is_dir())
    out = cli("compare", runs[0], runs[-1], "--format", fmt)
    assert out.exit_code == 1  # the golden output is a regression verdict (a planted slow night is not needed)
    (tmp_path / name).write_text(out.stdout)
    _same(tmp_path / name, GOLDEN / name)


def test_published_pages_of_the_baseline_are_unchanged(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    site = tmp_path / "site"
    out = cli("publish", BASELINES, "--out", site)
    assert out.exit_code == 0, out.output
    golden = sorted(p.relative_to(GOLDEN / "site") for p in (GOLDEN / "site").rglob("*") if p.is_file())
    assert golden and all((site / rel).is_file() for rel in golden)
    for rel in golden:
        _same(site / rel, GOLDEN / "site" / rel)
