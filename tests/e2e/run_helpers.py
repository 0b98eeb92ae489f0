"""Helpers for the `suite run` end-to-end tests: run the CLI as a subprocess, watch its process tree by pid,
and read what it stored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil

REPO = Path(__file__).resolve().parents[2]
FAKE_WORKER = "tests.e2e.fake_worker"


@dataclass
class CliRun:
    returncode: int
    stdout: str
    stderr: str
    seen: dict[int, psutil.Process] = field(default_factory=dict)  # every descendant seen while it ran
    cmdlines: dict[int, str] = field(default_factory=dict)  # their command lines, as last read while they ran

    def workers(self, module: str = "suite.worker") -> list[int]:
        """Pids of worker ranks seen (not the torchrun process that names the module too)."""
        return [pid for pid, c in self.cmdlines.items() if module in c and "suite.launch.torchrun" not in c]

    def alive(self) -> list[int]:
        """Pids of descendants still running (zombies count as gone)."""
        out = []
        for pid, p in self.seen.items():
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(pid)
            except psutil.NoSuchProcess:
                continue
        return out


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def env(worker: str | None = None, **extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k not in ("SUITE_FAULT", "SUITE_WORKER_MODULE")}
    e["PYTHONPATH"] = os.pathsep.join([str(REPO), e.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if worker:
        e["SUITE_WORKER_MODULE"] = worker
    e.update(extra)
    return e


def run_cli(args: list[str], cwd: Path, environ: dict[str, str], timeout: float = 600,
            watch: Callable[[subprocess.Popen], None] | None = None) -> CliRun:
    """`python -m suite ARGS`, polling its descendants every 0.2 s; `watch(proc)` may send it signals."""
    proc = subprocess.Popen([sys.executable, "-m", "suite", *args], cwd=cwd, env=environ, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen: dict[int, psutil.Process] = {}
    cmdlines: dict[int, str] = {}
    root = psutil.Process(proc.pid)
    deadline = time.monotonic() + timeout
    # communicate() with a timeout keeps draining both pipes and loses nothing when called again
    while True:
        try:
            out, err = proc.communicate(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            pass  # still running: record its process tree below, then poll again
        try:
            for p in root.children(recursive=True):
                seen.setdefault(p.pid, p)
                # read again on every poll: a child caught between fork and exec still shows its parent's
                # command line (a rank would pass for the torchrun process that forked it)
                try:
                    cmdlines[p.pid] = " ".join(seen[p.pid].cmdline()) or cmdlines.get(p.pid, "")
                except psutil.Error:
                    cmdlines.setdefault(p.pid, "")
        except psutil.NoSuchProcess:
            pass  # the CLI process just exited; communicate() returns on the next turn
        if watch is not None:
            watch(proc)
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"suite {' '.join(args)} did not finish in {timeout} s")
    return CliRun(proc.returncode, out, err, seen, cmdlines)


def run_shipped(name: str, tmp_path: Path, timeout: float = 600) -> tuple[Path, dict[str, dict]]:
    """`suite run scenarios/<name>.yaml` into tmp_path/results; (the results folder, {cell-r: result dict} of its
    one run folder).  Asserts the run exited 0."""
    results = tmp_path / "results"
    scenario = Path(__file__).resolve().parents[2] / "scenarios" / f"{name}.yaml"
    run = run_cli(["run", str(scenario), "--results", str(results)], tmp_path, env(), timeout=timeout)
    assert run.returncode == 0, run.stderr
    (folder,) = run_dirs(results, name)
    return results, cell_results(folder)


def run_dirs(results: Path, scenario: str) -> list[Path]:
    base = results / scenario
    return sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []


def cell_results(run_dir: Path) -> dict[str, dict]:
    """{<cell_id>-r<k>: result dict} of a run folder."""
    return {p.stem: json.loads(p.read_text()) for p in sorted((run_dir / "cells").glob("*.json"))}


def runlog(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "runlog.jsonl").read_text().splitlines()]
