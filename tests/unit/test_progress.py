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


def test_eta_from_the_cells_done_and_no_unset_axes(tmp_path, monkeypatch):
    from suite.runner import progress as mod

    clock = [100.0]
    monkeypatch.setattr(mod.time, "monotonic", lambda: clock[0])
    out = io.StringIO()
    progress = RunProgress(4, Console(file=out, width=200), live=False)
    cell = _cell()
    assert progress.eta_s() is None  # nothing done: no estimate yet
    progress.start_cell(cell, 0, tmp_path)
    assert "=None" not in out.getvalue()  # axes the cell does not set are not listed
    clock[0] += 30
    progress.end_cell(_result(cell, "ok"))
    assert progress.eta_s() == 90.0
    assert out.getvalue().splitlines()[-1].endswith("(ETA 1 min 30 s)")
    live = RunProgress(4, Console(file=io.StringIO(), force_terminal=True, width=120))
    live.done = 1
    clock[0] += 3600
    live._refresh()
    live.live.refresh()
    assert "ETA 3 h 00 min" in live.console.file.getvalue()
    live.close()
    assert mod.duration(42.4) == "42 s" and mod.duration(185) == "3 min 05 s"
