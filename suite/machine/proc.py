"""Linux's own accounts of the machine: /proc and sysfs, read without a dependency.

Every function returns None (or an empty result) where the file is missing or unreadable — another OS, a
container that hides sysfs, a process that ended between listing and reading — and never raises for that.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
CPUFREQ = Path("/sys/devices/system/cpu")
TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Proc:
    """One process: its parent, its command name, the CPU time it has used (seconds, user + system), and when
    it started (clock ticks since boot: a pid reused by a new process has another start)."""

    pid: int
    ppid: int
    name: str
    cpu_s: float
    started: int


def _read(path: Path, limit: int = 1 << 16) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def loadavg() -> tuple[float, float, float] | None:
    text = _read(PROC / "loadavg")
    try:
        one, five, fifteen = (float(x) for x in (text or "").split()[:3])
    except ValueError:
        return None
    return one, five, fifteen


def mem_available() -> int | None:
    for line in (_read(PROC / "meminfo") or "").splitlines():
        if line.startswith("MemAvailable:"):
            parts = line.split()
            return int(parts[1]) * 1024 if len(parts) > 1 and parts[1].isdigit() else None
    return None


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _khz(path: Path) -> float | None:
    text = _read(path)
    return int(text) / 1000 if text and text.strip().isdigit() else None


def cpu_clocks() -> tuple[float | None, float | None, str | None]:
    """(mean current MHz, max MHz, governor of CPU 0): cpufreq when the kernel exposes it, else the mean of
    /proc/cpuinfo's "cpu MHz" (a VM's nominal clock) with no maximum or governor."""
    cpus = sorted(CPUFREQ.glob("cpu[0-9]*/cpufreq")) if CPUFREQ.is_dir() else []
    current = [v for v in (_khz(c / "scaling_cur_freq") for c in cpus) if v is not None]
    if current:
        top = [v for v in (_khz(c / "cpuinfo_max_freq") for c in cpus) if v is not None]
        governor = (_read(cpus[0] / "scaling_governor") or "").strip() or None
        return sum(current) / len(current), (max(top) if top else None), governor
    mhz = []
    for line in (_read(PROC / "cpuinfo", 1 << 22) or "").splitlines():
        if line.startswith("cpu MHz"):
            try:
                mhz.append(float(line.split(":", 1)[1]))
            except ValueError:
                continue
    return (sum(mhz) / len(mhz) if mhz else None), None, None


def processes() -> dict[int, Proc]:
    """Every process now: pid -> Proc (from /proc/PID/stat; threads' time is in their process's)."""
    out: dict[int, Proc] = {}
    try:
        names = os.listdir(PROC)
    except OSError:
        return out
    for entry in names:
        if not entry.isdigit():
            continue
        text = _read(PROC / entry / "stat", 4096)
        if not text:
            continue
        open_, close = text.find("("), text.rfind(")")
        rest = text[close + 2:].split()
        if open_ < 0 or close < 0 or len(rest) < 20:
            continue
        try:
            out[int(entry)] = Proc(int(entry), int(rest[1]), text[open_ + 1:close][:200],
                                   (int(rest[11]) + int(rest[12])) / TICK,
                                   int(rest[19]))
        except ValueError:
            continue
    return out


def descendants(root: int, procs: dict[int, Proc]) -> set[int]:
    """root and every process below it."""
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    out, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def cmdline(pid: int) -> str:
    return (_read(PROC / str(pid) / "cmdline", 1 << 15) or "").replace("\0", " ")


def name(pid: int) -> str:
    """The process's command name (/proc/PID/comm), "?" once it is gone."""
    return (_read(PROC / str(pid) / "comm", 256) or "").strip()[:200] or "?"
