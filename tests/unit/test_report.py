"""`suite report`: rows, pivots and every output format, built from stored fixture runs."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from html.parser import HTMLParser

import pytest
from report_fixtures import make_cells, make_manifest, make_result, write_run

from suite.report.pivots import pivots
from suite.report.tables import COLUMN_KEYS, cell_rows
from suite.results.reader import load_runs

EXCLUDE_SHARDED_ON_ONE = [{"strategy": s, "gpus": 1} for s in ("zero1", "zero2", "zero3")]


def zero_sweep(tmp_path, efficiency: float = 1.0):
    """ddp/zero1/2/3 on 1, 2, 4 ranks; step time shrinks with the world size at the given scaling efficiency."""
    cells = make_cells(strategy=["ddp", "zero1", "zero2", "zero3"], gpus=[1, 2, 4], exclude=EXCLUDE_SHARDED_ON_ONE,
                       convergence={"match": {"strategy": "ddp"}})
    results = [make_result(c, step_time_s=0.1 / (c.gpus * efficiency if c.gpus > 1 else 1), noise=0.0) for c in cells]
    return write_run(tmp_path / "results", make_manifest(), results)


def test_one_row_per_cell_with_repeats_folded(tmp_path):
    cells = make_cells(strategy=["ddp", "zero3"])
    results = [make_result(cells[0], repeat=k, seed=k, step_time_s=0.1 + 0.01 * k) for k in range(3)]
    results += [make_result(cells[1]), make_result(cells[1], repeat=1, status="oom")]
    rows = cell_rows(load_runs([write_run(tmp_path, make_manifest(), results)]))
    assert [r.get("strategy") for r in rows] == ["ddp", "zero3"]
    ddp, zero3 = rows
    assert ddp.repeats == 3 and len(ddp.step_times_s) == 75  # 3 repeats x 25 steps, pooled
    assert ddp.status == "ok" and zero3.status == "oom"  # a flaky repeat shows
    assert 100 < ddp.step_median_ms < 120
    assert ddp.memory_scope == "peak (cuda)" and ddp.memory_ratio == pytest.approx(
        ddp.memory_measured_mib / ddp.memory_predicted_mib)


def test_cpu_rows_compare_states_with_states(tmp_path):
    cell = make_cells()[0]
    rows = cell_rows(load_runs([write_run(tmp_path, make_manifest(), [make_result(cell, memory="states")])]))
    assert rows[0].memory_scope == "states"
    assert rows[0].memory_ratio == pytest.approx(1.05)  # measured states = predicted states x 1.05


def test_pivots_only_for_axes_present(tmp_path):
    one = make_cells()[0]
    rows = cell_rows(load_runs([write_run(tmp_path / "a", make_manifest(), [make_result(one)])]))
    assert pivots(rows) == []
    smoke = make_cells(strategy=["ddp", "zero1", "zero2", "zero3"])
    rows = cell_rows(load_runs([write_run(tmp_path / "b", make_manifest(), [make_result(c) for c in smoke])]))
    assert [p.name for p in pivots(rows)] == ["memory"]
    ckpt = make_cells(activation_checkpointing=["none", "selective", "full"], seq_len=[64, 128])
    rows = cell_rows(load_runs([write_run(tmp_path / "c", make_manifest(), [make_result(c) for c in ckpt])]))
    assert [p.name for p in pivots(rows)] == ["checkpointing", "seq_len"]


def test_memory_pivot_shows_the_1_over_n_check(tmp_path):
    rows = cell_rows(load_runs([zero_sweep(tmp_path)]))
    memory = {p.name: p for p in pivots(rows)}["memory"]
    assert memory.header == ["cells", "1 gpus (MiB)", "2 gpus (MiB)", "4 gpus (MiB)", "measured vs predicted change"]
    by_label = {line[0]: line for line in memory.rows}
    assert by_label["strategy=zero3"][-1] == "2->4 gpus: x0.50 (predicted x0.50)"  # everything sharded: 1/N
    assert by_label["strategy=ddp"][-1] == "1->4 gpus: x1.00 (predicted x1.00)"   # nothing sharded
    assert by_label["strategy=zero3"][1] == ""  # no zero3 cell on one GPU


@pytest.mark.parametrize("efficiency", [1.0, 0.8])
def test_scaling_pivot_efficiency(tmp_path, efficiency):
    rows = cell_rows(load_runs([zero_sweep(tmp_path, efficiency)]))
    scaling = {p.name: p for p in pivots(rows)}["scaling"]
    ddp = next(line for line in scaling.rows if line[0] == "strategy=ddp")
    assert ddp[1].endswith("(100%)")
    assert ddp[3].endswith(f"({efficiency * 100:.0f}%)")


def test_checkpointing_pivot_percentages(tmp_path):
    cells = make_cells(activation_checkpointing=["none", "full"])
    res = [make_result(c, step_time_s=0.1 if c.activation_checkpointing == "none" else 0.13, noise=0.0) for c in cells]
    rows = cell_rows(load_runs([write_run(tmp_path, make_manifest(), res)]))
    ck = {p.name: p for p in pivots(rows)}["checkpointing"]
    assert ck.header == ["cells", "none", "full"]
    assert "ms (+30%)" in ck.rows[0][2] and "MiB (-" in ck.rows[0][2]


def run_cli(cli, *args):
    result = cli(*args)
    return result.exit_code, result.stdout, result.stderr


def test_markdown_to_stdout_stable_columns_and_units(cli, tmp_path):
    run = zero_sweep(tmp_path)
    code, out, _ = run_cli(cli, "report", run)
    assert code == 0
    header = next(line for line in out.splitlines() if line.startswith("| cell |"))
    cols = [c.strip() for c in header.strip("|").split("|")]
    assert cols == ["cell", "strategy", "gpus", "status", "repeats", "tokens/s", "tokens/s/device", "step median (ms)",
                    "step p90 (ms)", "MFU (%)", "MFU basis", "memory measured (MiB)", "memory predicted (MiB)",
                    "measured/predicted", "memory scope", "final loss", "convergence"]
    assert "Same in every cell: model=gpt-tiny, seq=64" in out
    assert "## Model-state memory per rank" in out and "## Throughput scaling" in out
    table = [line for line in out.splitlines() if line.startswith("| ") and "| ok |" in line]
    assert len(table) == 9 and all(line.count("|") == len(cols) + 1 for line in table)
    assert "MFU accounting: [1] no known peak" in out


def test_markdown_group_by_sections(cli, tmp_path):
    code, out, _ = run_cli(cli, "report", zero_sweep(tmp_path), "--group-by", "gpus")
    assert code == 0
    assert [line for line in out.splitlines() if line.startswith("### gpus=")] == ["### gpus=1", "### gpus=2",
                                                                                   "### gpus=4"]


def test_csv_and_json(cli, tmp_path):
    run = zero_sweep(tmp_path)
    code, out, _ = run_cli(cli, "report", run, "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert tuple(rows[0]) == COLUMN_KEYS and len(rows) == 9
    code, _, _ = run_cli(cli, "report", run, "--format", "json", "--format", "csv", "--out", tmp_path / "o")
    doc = json.loads((tmp_path / "o" / "report.json").read_text())
    assert code == 0 and len(doc["cells"]) == 9 and [p["name"] for p in doc["pivots"]] == ["memory", "scaling"]
    assert (tmp_path / "o" / "cells.csv").read_text().splitlines()[0] == ",".join(COLUMN_KEYS)


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def test_html_is_self_contained_and_escaped(cli, tmp_path):
    cells = make_cells(strategy=["ddp", "zero3"], gpus=[2, 4], convergence={"match": {"strategy": "ddp"}})
    run = write_run(tmp_path / "r", make_manifest(hostname="<b>host</b>"), [make_result(c) for c in cells])
    code, _, err = run_cli(cli, "report", run, "--format", "html", "--format", "md", "--out", tmp_path / "o")
    assert code == 0, err
    html = (tmp_path / "o" / "report.html").read_text()
    parser = _Collect()
    parser.feed(html)
    imgs = [a for t, a in parser.tags if t == "img"]
    assert len(imgs) >= 4 and all(a["src"].startswith("data:image/png;base64,") for a in imgs)
    assert not [a for t, a in parser.tags if t in ("script", "link")]  # nothing fetched, nothing run
    assert "&lt;b&gt;host&lt;/b&gt;" in html and "<b>host" not in html
    assert sum(t == "table" for t, _ in parser.tags) >= 4  # runs, cells, memory and scaling pivots
    pngs = sorted(p.name for p in (tmp_path / "o" / "plots").iterdir())
    assert "memory_breakdown.png" in pngs and "step_times.png" in pngs and "scaling.png" in pngs
    assert all((tmp_path / "o" / "plots" / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert "](plots/memory_breakdown.png)" in (tmp_path / "o" / "report.md").read_text()


def test_usage_errors_exit_2(cli, tmp_path):
    run = zero_sweep(tmp_path)
    assert cli("report", run, "--format", "html").exit_code == 2
    assert cli("report", run, "--format", "pdf").exit_code == 2
    assert cli("report", run, "--group-by", "colour").exit_code == 2
    assert cli("report", tmp_path / "missing").exit_code == 2


def test_missing_matplotlib_names_the_extra(cli, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    result = cli("report", zero_sweep(tmp_path), "--format", "html", "--out", tmp_path / "o")
    assert result.exit_code == 2 and "suite[report]" in result.stderr


def test_missing_jinja2_names_what_to_install(cli, tmp_path, monkeypatch):
    """The HTML report's templates need Jinja2 (torch brings it): without it, exit 2 saying so, and nothing
    written; Markdown still works."""
    from suite.report import templating

    monkeypatch.setitem(sys.modules, "jinja2", None)  # import jinja2 -> ImportError
    for cached in (templating.environment, templating.template):
        cached.cache_clear()
    try:
        run = zero_sweep(tmp_path)
        result = cli("report", run, "--format", "html", "--out", tmp_path / "o")
        assert result.exit_code == 2 and "pip install jinja2" in result.stderr, result.stderr
        assert not (tmp_path / "o" / "report.html").exists()
        assert cli("report", run, "--format", "md").exit_code == 0
    finally:
        for cached in (templating.environment, templating.template):
            cached.cache_clear()


def test_report_compare_export_never_import_torch(tmp_path):
    run = zero_sweep(tmp_path)
    code = f"""
import sys
from typer.testing import CliRunner
from suite.cli import app
r = CliRunner()
for args in (["report", "{run}", "--format", "html", "--out", "{tmp_path / 'o'}"], ["compare", "{run}", "{run}"],
             ["export", "{run}", "--out", "{tmp_path / 'e.json'}"]):
    res = r.invoke(app, args)
    assert res.exit_code == 0, (args, res.output)
print("torch" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_html_marks_the_best_the_worst_and_missed_predictions(cli, tmp_path):
    from suite.report.html import PREDICTION_TOLERANCE, marks
    from suite.report.tables import display_columns

    ddp, zero1, zero3 = make_cells(strategy=["ddp", "zero1", "zero3"])
    results = [make_result(ddp, step_time_s=0.1, noise=0.0, memory="states"),  # counted states x 1.05: within
               make_result(zero1, step_time_s=0.2, noise=0.0, memory="states"),
               make_result(zero3, step_time_s=0.3, noise=0.0, memory="states",
                           memory_scale=1.0 + 3 * PREDICTION_TOLERANCE)]
    run = write_run(tmp_path / "r", make_manifest(), results)
    rows = cell_rows(load_runs([run]))
    columns = display_columns(rows)
    got = marks(rows, columns)
    key = {c.key: j for j, c in enumerate(columns)}
    by = {r.get("strategy"): i for i, r in enumerate(rows)}
    assert got[by["ddp"]][key["step_median_ms"]] == "best" and got[by["zero3"]][key["step_median_ms"]] == "worst"
    assert key["step_median_ms"] not in got.get(by["zero1"], {})  # neither best nor worst
    assert got[by["ddp"]][key["tokens_per_s_per_device"]] == "best"
    assert got[by["zero3"]][key["memory_ratio"]] == "miss" and key["memory_ratio"] not in got.get(by["ddp"], {})
    assert cli("report", run, "--format", "html", "--out", tmp_path / "o").exit_code == 0
    page = (tmp_path / "o" / "report.html").read_text()
    assert page.count('class="best"') >= 2 and 'class="worst"' in page and 'class="miss"' in page


def test_pivots_mark_the_best_and_the_worst_of_each_comparison(cli, tmp_path):
    """Scaling: in each GPU-count column the strategy with the most tokens/s is best, the fewest worst; a column
    with one value marks nothing.  Checkpointing: along each row, the mode with the least memory is best."""
    cells = make_cells(strategy=["ddp", "zero1", "zero3"], gpus=[1, 2], exclude=[{"strategy": "zero3", "gpus": 1}])
    speed = {"ddp": 0.1, "zero1": 0.2, "zero3": 0.3}
    run = write_run(tmp_path / "r", make_manifest(), [make_result(c, step_time_s=speed[c.strategy], noise=0.0)
                                                      for c in cells])
    scaling = {p.name: p for p in pivots(cell_rows(load_runs([run])))}["scaling"]
    row = {line[0]: i for i, line in enumerate(scaling.rows)}
    col = {h: j for j, h in enumerate(scaling.header)}
    two = col["2 gpus (tokens/s)"]
    assert scaling.marks[row["strategy=ddp"]][two] == "best" and scaling.marks[row["strategy=zero3"]][two] == "worst"
    assert two not in scaling.marks.get(row["strategy=zero1"], {})
    assert scaling.marks[row["strategy=ddp"]][col["1 gpus (tokens/s)"]] == "best"
    assert "highest tokens/s (best)" in scaling.marked

    ckpt = make_cells(activation_checkpointing=["none", "selective", "full"])
    run2 = write_run(tmp_path / "c", make_manifest(), [make_result(c) for c in ckpt])
    ck = {p.name: p for p in pivots(cell_rows(load_runs([run2])))}["checkpointing"]
    assert ck.marks[0] == {1: "worst", 3: "best"}  # none holds the most activations, full the least
    assert cli("report", run, "--format", "html", "--out", tmp_path / "o").exit_code == 0
    section = (tmp_path / "o" / "report.html").read_text().split('id="pivot-scaling"')[1].split("</section>")[0]
    assert section.count('class="best"') == 2 and section.count('class="worst"') == 2, section
    code, out, _ = run_cli(cli, "report", run, "--format", "md")
    assert code == 0 and "Best in bold, worst in italics." in out and "| **" in out
