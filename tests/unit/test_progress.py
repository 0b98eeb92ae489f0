"""Progress display: incremental events.jsonl reading, plain lines off a terminal, a Live panel on one."""

from __future__ import annotations

import io
import json

from rich.console import Console

from suite.results.schema import Axes, CellResult
from suite.runner.progress import EventTail, RunProgress
from suite.testing.builders import make_cell


def _cell():
    return make_cell(seq_len=16, steps=4, warmup_steps=1, gpus=1, micro_batch_size=1, global_batch_size=1)


def test_event_tail_reads_whole_lines_incrementally(tmp_path):
    path = tmp_path / "events.jsonl"
    tail = EventTail(path)
    assert tail.poll() == []  # no file yet
    with open(path, "w") as f:
        f.write(json.dumps({"event": "setup_done", "t": 1}) + "\n" + '{"event": "step", "st')
    assert [e["event"] for e in tail.poll()] == ["setup_done"] and tail.setup_done
    with open(path, "a") as f:
        f.write('ep": 0, "loss": 3.5, "t": 2}\n')
    assert tail.poll()[0]["loss"] == 3.5 and (tail.step, tail.loss) == (0, 3.5)
    assert tail.poll() == []


def _result(cell, status, error=None):
    return CellResult(cell_id=cell.id, axes=Axes(**cell.axes()), cell=cell, status=status, error=error, started_at="",
                      finished_at="", launcher="torchrun", prediction={}, final_loss=2.5 if status == "ok" else None)


def test_plain_lines_when_not_a_terminal(tmp_path):
    out = io.StringIO()
    progress = RunProgress(2, Console(file=out, width=200), live=None)
    assert not progress.live_mode
    cell = _cell()
    progress.start_cell(cell, 0, tmp_path)
    (tmp_path / "events.jsonl").write_text(json.dumps({"event": "setup_done", "t": 1}) + "\n")
    progress.poll()
    progress.end_cell(_result(cell, "ok"))
    progress.end_cell(_result(cell, "failed", "rank 0: RuntimeError: boom\nTraceback ..."))
    progress.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith(f"[1/2] {cell.id}-r0 started: model=gpt-tiny")
    assert "setup done" in lines[1]
    assert "ok" in lines[2] and "final loss 2.5" in lines[2]
    assert lines[3].endswith("failed: rank 0: RuntimeError: boom")


def test_live_panel_on_a_terminal(tmp_path):
    out = io.StringIO()
    progress = RunProgress(1, Console(file=out, force_terminal=True, width=120))
    assert progress.live_mode
    cell = _cell()
    progress.start_cell(cell, 0, tmp_path)
    (tmp_path / "events.jsonl").write_text(json.dumps({"event": "step", "step": 1, "loss": 3.25, "t": 1}) + "\n")
    progress.poll()
    progress.live.refresh()
    assert "step 1/4" in out.getvalue() and "3.25" in out.getvalue()
    progress.end_cell(_result(cell, "ok"))
    progress.close()
    assert f"[1/1] {cell.id}-r0 ok" in out.getvalue()
