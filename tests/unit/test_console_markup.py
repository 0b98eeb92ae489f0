"""Untrusted text in tables is printed as it is: a gloo error's `[/tmp/...]` or pydantic's `[type=...]` is not
rich markup (it used to raise MarkupError in `suite run`'s summary and `results show`)."""

from __future__ import annotations

import io

from rich.console import Console
from rich.text import Text

from suite.console import cell_text, styled, table
from suite.results.schema import CellResult
from suite.results.show import cell_detail, cells_table, runs_table
from suite.testing.builders import make_result

GLOO = "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [bold]"


def _render(renderable) -> str:
    out = io.StringIO()
    Console(file=out, width=300, color_system=None).print(renderable)
    return out.getvalue()


def _result(error: str) -> CellResult:
    return make_result(cell_id="c[/x]", axes={"strategy": "ddp", "model": "[red]m"}, status="failed", error=error)


def test_table_cells_title_and_headers_are_plain_text():
    text = _render(table("runs under /tmp/[/a]", ["[/h]"], [["[/x] [type=int_parsing]"], [None]]))
    assert "runs under /tmp/[/a]" in text and "[/h]" in text and "[/x] [type=int_parsing]" in text
    assert "-" in text


def test_cell_text_keeps_renderables_and_wraps_everything_else():
    styled_text = styled("ok", "green")
    assert cell_text(styled_text) is styled_text and styled_text.style == "green"
    assert cell_text("[red]x[/red]").plain == "[red]x[/red]" and cell_text(3).plain == "3"
    assert isinstance(cell_text(None), Text) and cell_text(None).plain == "-"


def test_run_summary_and_cell_detail_print_a_gloo_error_verbatim():
    result = _result(GLOO + "\ntraceback line [/more]")
    summary = _render(cells_table([result], "smoke [/x]: 1 cell results"))
    assert "[/pytorch/third_party/gloo" in summary and "c[/x]-r0" in summary and "smoke [/x]" in summary
    detail = _render(cell_detail(result))
    assert "Connection closed by peer [bold]" in detail and "traceback line [/more]" in detail


def test_runs_table_prints_an_unreadable_record_verbatim(tmp_path):
    run = tmp_path / "s" / "0001_abcdefg_20260101T000000Z"
    (run / "cells").mkdir(parents=True)
    (run / "manifest.json").write_text('{"run_id": [1]}')  # wrong types: pydantic's message has [type=...]
    (run / "cells" / "a-r0.json").write_text('{"cell_id": 5')  # truncated
    text = _render(runs_table(tmp_path))
    assert "unreadable manifest" in text and "unreadable:" in text and "0001_abcdefg" in text
