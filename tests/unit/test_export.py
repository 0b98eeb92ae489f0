"""`suite export --format pytest-benchmark`: pytest-benchmark itself must load and compare the file."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import pytest
from report_fixtures import make_cells, make_manifest, make_result, write_run

pytest_benchmark = pytest.importorskip("pytest_benchmark")  # a test dependency (pyproject [test] extra)


@pytest.fixture
def exported(cli, tmp_path):
    cells = make_cells(strategy=["ddp", "zero3"])
    results = [make_result(c, repeat=k, seed=k) for c in cells for k in range(2)]
    run = write_run(tmp_path / "results", make_manifest("smoke", 3),
                    results + [make_result(make_cells(seq_len=128)[0], status="failed")])
    out = tmp_path / "bench" / "0001_suite.json"
    result = cli("export", run, "--format", "pytest-benchmark", "--out", out)
    assert result.exit_code == 0, result.stderr
    # what the run stored: every repeat's measured step times, in repeat order (not recomputed from the export)
    stored = {c.id: [t for r in results if r.cell_id == c.id for t in r.step_times_s] for c in cells}
    return out, cells, stored


def test_the_exported_rounds_are_the_stored_step_times(exported):
    out, cells, stored = exported
    for bench in json.loads(out.read_text())["benchmarks"]:
        data = bench["stats"]["data"]
        want = stored[bench["name"].split("[")[0]]
        assert sorted(data) == sorted(want) and len(data) == 50, bench["name"]
        assert bench["stats"]["median"] == pytest.approx(statistics.median(want))


def test_stats_match_pytest_benchmark_own_computation(exported):
    from pytest_benchmark.stats import Stats

    out, cells, _ = exported
    doc = json.loads(out.read_text())
    assert {b["name"].split("[")[0] for b in doc["benchmarks"]} == {c.id for c in cells}
    assert doc["suite"]["left_out"][0]["status"] == "failed"  # no measured steps, no benchmark
    for bench in doc["benchmarks"]:
        assert bench["stats"]["rounds"] == 50 and bench["stats"]["iterations"] == 1  # 2 repeats x 25 steps
        ref = Stats()
        for t in bench["stats"]["data"]:
            ref.update(t)
        for field in Stats.fields:
            assert bench["stats"][field] == pytest.approx(getattr(ref, field)), field


def test_pytest_benchmark_storage_loads_it(exported):
    from pytest_benchmark.logger import Logger
    from pytest_benchmark.storage.file import FileStorage

    out, cells, _ = exported
    storage = FileStorage(out.parent, logger=Logger(Logger.QUIET), default_machine_id=None)
    loaded = list(storage.load_benchmarks(str(out)))
    assert len(loaded) == len(cells)
    assert all(b["group"] == "smoke" and b["ops"] > 0 and b["median"] > 0 for b in loaded)


def test_pytest_benchmark_compare_cli_reads_it(exported, tmp_path):
    out, cells, _ = exported
    csv_out = tmp_path / "cmp"
    proc = subprocess.run([sys.executable, "-m", "pytest_benchmark", "compare", str(out), "--columns=min,median,max",
                           f"--csv={csv_out}"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Failed to load" not in proc.stdout + proc.stderr
    for c in cells:
        assert c.id in proc.stdout
    assert csv_out.with_suffix(".csv").read_text().count("\n") >= len(cells) + 1


def test_export_usage_errors(cli, tmp_path):
    assert cli("export", tmp_path, "--format", "asv", "--out", tmp_path / "x.json").exit_code == 2
    assert cli("export", tmp_path / "missing", "--out", tmp_path / "x.json").exit_code == 2
