"""`suite report`'s predicted-vs-measured-peak section: rows, ratios, the old/untraced/unmeasured cases, every format."""

from __future__ import annotations

import csv
import io
import json

import pytest
from report_fixtures import make_cells, make_manifest, make_result, write_run

from suite.report import peaks, plots
from suite.report.tables import cell_rows
from suite.results.reader import load_runs
from suite.results.schema import CellResult

MiB = 2**20
OLD_MISSING = ("as_implemented", "traced", "trace_error", "fits_by", "fits_bytes")
ERROR = "strategy zero1 cannot be traced: it reads a tensor's value on the host | twice"


def _with(result: CellResult, prediction: dict | None = None, **measured) -> CellResult:
    """The result with prediction keys set and measured keys replaced (a copy, validated again).  prediction=None
    makes an old result: the planner's newer keys are dropped, as results written before them lack them."""
    doc = result.model_dump(mode="json")
    if prediction is None:
        doc["prediction"] = {k: v for k, v in doc["prediction"].items() if k not in OLD_MISSING}
    doc["prediction"].update(prediction or {})
    doc["memory"]["measured"].update(measured)
    return CellResult.model_validate(doc)


def _traced(peak_mib: float) -> dict:
    return {"as_implemented": {"total": 80 * MiB, "activations": 10 * MiB},
            "traced": {"peak": int(peak_mib * MiB), "attention_kernel": "aten._scaled_dot_product_flash_attention",
                       "notes": ["accumulation: 2 of 4 micro-batches traced"]},
            "trace_error": None}


@pytest.fixture
def run(tmp_path):
    """ddp: two repeats, traced (CUDA peaks 100 and 110 MiB); zero1: trace failed, tracker peak only; zero2: an
    old result without the new prediction keys; zero3: a CPU run without measure_peaks (no peak: left out)."""
    ddp, zero1, zero2, zero3 = make_cells(strategy=["ddp", "zero1", "zero2", "zero3"])
    results = [
        _with(make_result(ddp), _traced(100.0), total_cuda=100 * MiB),
        _with(make_result(ddp, repeat=1, seed=1), _traced(100.0), total_cuda=110 * MiB),
        _with(make_result(zero1), {"as_implemented": {"total": 40 * MiB}, "traced": None, "trace_error": ERROR},
              total_cuda=None, reserved_cuda=None, total_tracker=50 * MiB),
        _with(make_result(zero2), total_cuda=30 * MiB),
        make_result(zero3, memory="states"),
    ]
    return write_run(tmp_path / "results", make_manifest(), results)


def _textbook_mib(rows, strategy):
    row = next(r for r in rows if r.get("strategy") == strategy)
    return row.results[0].prediction["memory_bytes"]["total"] / MiB


def test_rows_numbers_ratios_and_sources(run):
    rows = cell_rows(load_runs([run]))
    prows = {p.get("strategy"): p for p in peaks.peak_rows(rows)}
    assert list(prows) == ["ddp", "zero1", "zero2"]  # zero3 has no measured peak
    ddp, zero1, zero2 = prows["ddp"], prows["zero1"], prows["zero2"]
    assert ddp.measured_mib == pytest.approx(110.0) and ddp.measured_source == "cuda allocated"  # max of repeats
    assert ddp.as_implemented_mib == pytest.approx(80.0) and ddp.traced_mib == pytest.approx(100.0)
    assert ddp.ratio_as_implemented == pytest.approx(110 / 80) and ddp.ratio_traced == pytest.approx(1.10)
    assert ddp.ratio_textbook == pytest.approx(110 / _textbook_mib(rows, "ddp"))
    assert ddp.trace_status == "traced" and "flash_attention" in ddp.trace_notes
    assert zero1.measured_source == "tracker" and zero1.measured_mib == pytest.approx(50.0)
    assert zero1.trace_status == "untraced" and zero1.trace_error == ERROR and zero1.traced_mib is None
    assert zero1.ratio_as_implemented == pytest.approx(1.25) and zero1.ratio_traced is None
    assert zero2.ratio_textbook == pytest.approx(30 / _textbook_mib(rows, "zero2"))
    assert zero2.as_implemented_mib is None and zero2.traced_mib is None and zero2.trace_status is None


def test_section_table_and_footnotes(run):
    rows = cell_rows(load_runs([run]))
    [pv] = peaks.peak_pivot(rows)
    assert pv.header == ["cell", "strategy", "measured peak (MiB)", "measured by", "textbook (MiB)",
                         "as implemented (MiB)", "traced (MiB)", "measured/textbook", "measured/as-implemented",
                         "measured/traced", "trace notes"]
    by = {line[1]: line for line in pv.rows}
    assert by["ddp"][2:4] == ["110.0", "cuda allocated"] and by["ddp"][5:7] == ["80.0", "100.0"]
    assert by["ddp"][8:10] == ["1.38", "1.10"] and by["ddp"][10] == "[1]"
    assert by["zero1"][6] == "untraced" and by["zero1"][9] == "untraced" and by["zero1"][10] == "[2]"
    assert by["zero2"][5:7] == ["-", "-"] and by["zero2"][9:] == ["-", "-"]
    assert f"[2] untraced: {ERROR}" in pv.notes
    assert any(n.startswith("1 cell(s) without a measured peak") for n in pv.notes)


def test_omitted_when_no_cell_has_a_peak(cli, tmp_path):
    cells = make_cells(strategy=["ddp", "zero3"])
    run = write_run(tmp_path / "r", make_manifest(), [make_result(c, memory="states") for c in cells])
    assert peaks.peak_pivot(cell_rows(load_runs([run]))) == []
    result = cli("report", run, "--format", "md", "--format", "json", "--format", "csv", "--out", tmp_path / "o")
    assert result.exit_code == 0, result.stderr
    assert "Predicted vs measured peak" not in (tmp_path / "o" / "report.md").read_text()
    assert json.loads((tmp_path / "o" / "report.json").read_text())["peaks"] == []
    assert not (tmp_path / "o" / "peaks.csv").exists()


def test_markdown_stdout_has_the_section(cli, run):
    result = cli("report", run)
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "## Predicted vs measured peak memory per rank" in out
    lines = [line for line in out.splitlines() if line.startswith("| ") and "| untraced |" in line]
    assert len(lines) == 1 and "| zero1 | 50.0 | tracker |" in lines[0]
    assert f"- [2] untraced: {ERROR}" in out  # a bullet under the table, not a table cell


def test_html_json_csv_and_plot(cli, run, tmp_path):
    o = tmp_path / "o"
    result = cli("report", run, "--format", "html", "--format", "md", "--format", "json", "--format", "csv",
                 "--out", o)
    assert result.exit_code == 0, result.stderr
    html = (o / "report.html").read_text()
    assert 'id="pivot-peaks"' in html and 'id="plot-peaks"' in html and "untraced: strategy zero1" in html
    assert (o / "plots" / "peaks.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "](plots/peaks.png)" in (o / "report.md").read_text()
    doc = json.loads((o / "report.json").read_text())
    assert [p["strategy"] for p in doc["peaks"]] == ["ddp", "zero1", "zero2"]
    assert doc["peaks"][0]["ratio_traced"] == pytest.approx(1.10) and doc["peaks"][1]["trace_error"] == ERROR
    assert "peaks" not in [p["name"] for p in doc["pivots"]]  # numbers under "peaks", not strings twice
    table = list(csv.DictReader(io.StringIO((o / "peaks.csv").read_text())))
    assert tuple(table[0]) == peaks.KEYS and float(table[2]["measured_mib"]) == pytest.approx(30.0)


def test_plot_bars_capped_and_missing_predictions_skipped(run, monkeypatch):
    drawn = []
    monkeypatch.setattr(peaks, "png", lambda fig: drawn.append(fig) or b"png")
    rows = cell_rows(load_runs([run]))
    assert peaks.peak_plot(rows, ["strategy"], False).name == "peaks"
    bars = [len(ax.patches) for ax in drawn[0].axes]
    assert bars == [3 + 3 + 2 + 1]  # measured x3, textbook x3, as implemented x2 (ddp, zero1), traced x1 (ddp)
    monkeypatch.setattr(peaks, "MAX_BARS", 1)
    peaks.peak_plot(rows, ["strategy"], False)
    assert [len(ax.patches) for ax in drawn[1].axes] == [4]  # ddp alone, all four bars
