"""What `suite run` shows while it works: cells done and left, the current cell, its step and loss, elapsed.

The current cell's step and loss come from the worker's events.jsonl (rank 0 appends one JSON line per step),
read incrementally: display only, never a source of results.  On a terminal the status is a rich Live panel;
otherwise (CI logs, pipes) it prints one plain line per event, with step lines at most every few seconds.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.text import Text

from suite.axes import in_use

STEP_LINE_EVERY_S = 5.0


class EventTail:
    """Reads the lines appended to a worker's events.jsonl since the last call (a partial last line waits)."""

    def __init__(self, path: Path):
        self.path, self.offset, self.buffer = Path(path), 0, ""
        self.step: int | None = None
        self.loss: float | None = None
        self.setup_done = False

    def poll(self) -> list[dict]:
        try:
            with open(self.path, encoding="utf-8") as f:
                f.seek(self.offset)
                chunk = f.read()
                self.offset = f.tell()
        except FileNotFoundError:
            return []
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split("\n")
        events = []
        for line in lines:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # not a whole record; the worker writes whole lines, so this is a cut-off tail
            events.append(event)
            if event.get("event") == "step":
                self.step, self.loss = event.get("step"), event.get("loss")
            elif event.get("event") == "setup_done":
                self.setup_done = True
        return events


def _num(x) -> str:
    return f"{x:.4g}" if isinstance(x, (int, float)) else "-"


def _axes(cell) -> str:
    """The cell's axes as k=v, leaving out the ones it does not set (None: no shard size, no seed axis, ...) and
    the layouts it does not use (tensor_parallel 1, ...: suite.axes.in_use)."""
    return " ".join(f"{k}={v}" for k, v in cell.axes().items() if v is not None and in_use(k, v))


def duration(seconds: float) -> str:
    """Seconds as a person reads them: 42 s, 3 min 05 s, 2 h 07 min."""
    s = int(round(max(seconds, 0.0)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class RunProgress:
    """Progress of one `suite run`; `live=None` picks a Live panel on a terminal and plain lines otherwise."""

    def __init__(self, total: int, console: Console, live: bool | None = None):
        self.total, self.done, self.console = total, 0, console
        self.live_mode = console.is_terminal if live is None else live
        self.t0 = time.monotonic()
        self.cell, self.repeat, self.tail, self.cell_t0 = None, 0, None, 0.0
        self.counts: dict[str, int] = {}
        self.running: list = []  # a sweep's cells running at once: (key, node, began unix time)
        self.free = ""  # a sweep's free resources per node, as text
        self.last_line = 0.0
        self.live = Live(console=console, refresh_per_second=4, transient=True) if self.live_mode else None
        if self.live:
            self.live.start()

    # -------------------------------------------------------------------------------------------- events
    def note(self, message: str) -> None:
        self.console.print(message, highlight=False, markup=False, soft_wrap=True)

    def start_cell(self, cell, repeat: int, workdir: Path) -> None:
        self.cell, self.repeat, self.tail, self.cell_t0 = cell, repeat, EventTail(Path(workdir) / "events.jsonl"), time.monotonic()
        self.last_line = time.monotonic()
        if not self.live:
            self.note(f"[{self.done + 1}/{self.total}] {cell.id}-r{repeat} started: {_axes(cell)}")
        self._refresh()

    def sweep_started(self, cell, repeat: int, node: str) -> None:
        """A sweep sent a cell to a node (suite/sweep/): one line, and the panel's running list."""
        where = "the whole cluster" if node == "*" else f"node {node[:8]}"
        self.note(f"    {cell.id}-r{repeat} started on {where}: {_axes(cell)}")  # [k/total] counts ends

    def sweep_state(self, running: list, free: dict) -> None:
        """The sweep's cells running at once (key, node, began) and what it leaves free per node."""
        self.running = running
        self.free = " ".join(f"{n[:8]}:" + ",".join(f"{k}{v:g}" for k, v in sorted(r.items()) if v or k == "CPU")
                             for n, r in sorted(free.items()))
        self._refresh()

    def poll(self) -> None:
        if self.tail is None:
            self._refresh()  # a sweep's panel: elapsed time and the cells running at once
            return
        events = self.tail.poll()
        if not self.live:
            now = time.monotonic()
            for e in events:
                if e.get("event") == "setup_done":
                    self.note(f"    setup done ({now - self.cell_t0:.1f} s)")
                elif e.get("event") == "step" and now - self.last_line >= STEP_LINE_EVERY_S:
                    self.last_line = now
                    self.note(f"    step {e.get('step')}/{self.cell.steps} loss {_num(e.get('loss'))} "
                              f"({now - self.cell_t0:.1f} s)")
        self._refresh()

    def end_cell(self, result) -> None:
        self.done += 1
        self.counts[result.status] = self.counts.get(result.status, 0) + 1
        loss = f", final loss {result.final_loss:.4g}" if result.final_loss is not None else ""
        why = ""
        if result.status != "ok" and result.error:
            why = f": {result.error.strip().splitlines()[0][:200]}"
        wall = result.extra.get("wall_s") if result.schedule is not None else None
        took = (f" in {time.monotonic() - self.cell_t0:.1f} s" if self.tail is not None
                else f" in {wall:.1f} s on node {str(result.schedule.node)[:8]}" if isinstance(wall, (int, float))
                else "")
        eta = f" (ETA {duration(left)})" if (left := self.eta_s()) is not None and self.done < self.total else ""
        line = f"[{self.done}/{self.total}] {result.cell_id}-r{result.repeat} {result.status}{took}{loss}{why}{eta}"
        self.note(line)
        self.cell, self.tail = None, None
        self._refresh()

    def eta_s(self) -> float | None:
        """Seconds until the last cell ends, from the mean time of the cells done so far (None before the first)."""
        if not self.done:
            return None
        return (time.monotonic() - self.t0) / self.done * (self.total - self.done)

    def close(self) -> None:
        if self.live:
            self.live.stop()
            self.live = None

    # ------------------------------------------------------------------------------------------- display
    def _refresh(self) -> None:
        if not self.live:
            return
        elapsed = time.monotonic() - self.t0
        counts = " ".join(f"{k} {v}" for k, v in sorted(self.counts.items())) or "-"
        text = Text.from_markup(f"[bold]cells[/bold] {self.done}/{self.total} done, {self.total - self.done} left "
                                f"({escape(counts)})   [bold]elapsed[/bold] {duration(elapsed)}")
        left = self.eta_s()
        text.append(f"   ETA {duration(left)}" if left is not None else "   ETA after the first cell")
        if self.cell is not None:
            step = self.tail.step if self.tail else None
            loss = self.tail.loss if self.tail else None
            where = (f"step {step}/{self.cell.steps}  loss {_num(loss)}" if step is not None
                     else "setting up" if not (self.tail and self.tail.setup_done) else "first step")
            text.append(f"\ncurrent {self.cell.id}-r{self.repeat}  {where}  "
                        f"({time.monotonic() - self.cell_t0:.0f} s)\n  {_axes(self.cell)}")
        if self.running:
            now = time.time()
            text.append(f"\nrunning at once: {len(self.running)}   free: {self.free}")
            for key, node, began in self.running[:8]:
                text.append(f"\n  {key} on {'all nodes' if node == '*' else node[:8]} ({now - began:.0f} s)")
        self.live.update(text)


def print_outcomes(outcomes, console: Console, err_console: Console) -> None:
    """The end of `suite run`: each run folder's cell table and path, how to resume an interrupted one, and for
    an A/B the compare command."""
    from suite.results.show import cells_table

    for o in outcomes:
        console.print(cells_table(o.results, f"{o.run_dir.parent.name}: {len(o.results)} cell results"))
        console.print(f"results: {o.run_dir}", highlight=False, markup=False, soft_wrap=True)
        if o.interrupted_by:
            err_console.print(f"interrupted by {o.interrupted_by}: finished cells are kept; continue with "
                              f"`suite run {o.run_dir} --resume`", highlight=False, markup=False, soft_wrap=True)
    if len(outcomes) > 1:
        console.print("A/B: suite compare " + " ".join(str(o.run_dir) for o in outcomes[:2]), highlight=False,
                      markup=False, soft_wrap=True)
