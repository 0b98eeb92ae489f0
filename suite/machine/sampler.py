"""The sampler around a timed launch: a snapshot before, a light thread sampling during, a snapshot after.

It runs in the runner's process, never in a worker: the timed steps do not pay for it beyond the CPU time of
one /proc walk per interval (about a millisecond per hundred processes).  A process is the launch's own when it
is the runner or one of its descendants, or when its command line names the launch's work folder (a container's
or a Ray actor's processes are not the runner's children; the worker's command line names its payload, which
lives in the work folder).  Every other process that used CPU time is a competitor: its CPU time per interval
is what the state's competing_cpu counts.

    with Sampler(mark=workdir.name) as sampler:
        launch(...)
    state = sampler.state(window=(train_start, train_end))   # or None: the whole launch
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from suite.machine import nvml as nvml_mod
from suite.machine import proc
from suite.machine.state import Competitor, GpuState, MachineState, Snapshot

TOP = 5  # competitors recorded per state


@dataclass
class _Interval:
    start: float  # unix time
    end: float
    others: dict[int, float]  # competing pid -> CPU seconds in this interval
    cpu_mhz: float | None = None
    gpus: list[GpuState] = field(default_factory=list)


def snapshot(nvml: Any = None, ours: Callable[[int], bool] = lambda pid: False) -> Snapshot:
    """The machine now (GPUs only when NVML's bindings are given)."""
    mhz, top, governor = proc.cpu_clocks()
    return Snapshot(at=time.time(), loadavg=proc.loadavg(), cpu_count=proc.cpu_count(), cpu_mhz=mhz,
                    cpu_max_mhz=top, governor=governor, mem_available_bytes=proc.mem_available(),
                    gpus=nvml_mod.gpu_states(nvml, ours) if nvml is not None else [])


class Sampler:
    """Samples the machine every `interval` seconds from start() (or `with`) to stop(); state() summarises."""

    def __init__(self, mark: str | None = None, interval: float = 1.0, root: int | None = None,
                 gpus: bool = True):
        self.mark, self.interval = mark, interval
        self.root = os.getpid() if root is None else root
        self.nvml, self.gpu_note = nvml_mod.open_nvml() if gpus else (None, "no GPU state: not asked for")
        self.intervals: list[_Interval] = []
        self.names: dict[int, str] = {}
        self._mine: dict[int, bool] = {}  # pid -> whether its command line names the mark (read once)
        self._ours: set[int] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: tuple[float, dict[int, proc.Proc]] | None = None
        self.before: Snapshot | None = None
        self.after: Snapshot | None = None

    def ours(self, pid: int) -> bool:
        if pid in self._ours:
            return True
        if self.mark is None:
            return False
        if pid not in self._mine:
            self._mine[pid] = self.mark in proc.cmdline(pid)
        return self._mine[pid]

    def start(self) -> "Sampler":
        self.before = snapshot(self.nvml, self.ours)
        self._last = (time.time(), proc.processes())
        self._thread = threading.Thread(target=self._loop, name="suite-machine-sampler", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        """One interval: every process's CPU time since the last sample, the competitors' kept."""
        now, procs = time.time(), proc.processes()
        then, last = self._last or (now, {})
        self._ours = proc.descendants(self.root, procs)
        others: dict[int, float] = {}
        for pid, p in procs.items():
            before = last.get(pid)
            used = p.cpu_s - before.cpu_s if before is not None and before.started == p.started else p.cpu_s
            if used > 0 and not self.ours(pid):
                others[pid] = used
                self.names[pid] = p.name
        gpus = nvml_mod.gpu_states(self.nvml, self.ours) if self.nvml is not None else []
        self.intervals.append(_Interval(then, now, others, proc.cpu_clocks()[0], gpus))
        self._last = (now, procs)

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self.sample()  # the tail since the last interval
            self.after = snapshot(self.nvml, self.ours)
            if self.nvml is not None:
                nvml_mod.close_nvml(self.nvml)

    def __enter__(self) -> "Sampler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def state(self, window: tuple[float, float] | None = None) -> MachineState:
        """The summary over `window` (unix start, end: the timed steps), else over everything sampled."""
        assert self.before is not None and self.after is not None, "state() after start() and stop()"
        start, end = window if window is not None else (self.before.at, self.after.at)
        end = max(end, start)
        used: dict[int, float] = {}
        peak, span, kept = 0.0, 0.0, []
        for iv in self.intervals:
            overlap = min(iv.end, end) - max(iv.start, start)
            length = iv.end - iv.start
            if overlap <= 0 or length <= 0:
                continue
            share = overlap / length  # the part of this interval inside the window
            kept.append(iv)
            span += overlap
            for pid, s in iv.others.items():
                used[pid] = used.get(pid, 0.0) + s * share
            peak = max(peak, sum(iv.others.values()) / length)
        span = max(span, 1e-9)
        top = sorted(used.items(), key=lambda kv: -kv[1])[:TOP]
        clocks = [iv.cpu_mhz for iv in kept if iv.cpu_mhz is not None]
        gpus = [g for iv in kept for g in iv.gpus] + (self.before.gpus if not kept else [])
        sm = [g.sm_clock_mhz for g in gpus if g.sm_clock_mhz is not None]
        others = {(o.pid, o.name): o for g in gpus for o in g.other_processes}
        return MachineState(
            window="train" if window is not None else "launch", window_s=end - start, interval_s=self.interval,
            samples=len(kept), competing_cpu=sum(used.values()) / span, competing_cpu_peak=peak,
            competitors=[Competitor(pid=pid, name=self.names.get(pid, "?"), cpu=s / span) for pid, s in top],
            cpu_mhz_min=min(clocks) if clocks else None, gpu_sm_clock_min_mhz=min(sm) if sm else None,
            gpu_throttle=sorted({r for g in gpus for r in g.throttle_reasons}),
            gpu_others=list(others.values())[:64], gpu_note=self.gpu_note if self.nvml is None else None,
            before=self.before, after=self.after)
