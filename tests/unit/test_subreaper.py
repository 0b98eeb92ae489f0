"""The torchrun launcher is a child subreaper only while a cell runs (suite/launch/torchrun.py `subreaper`), and
reaps the orphans it adopted. Found in CI: a pytest process that stayed a subreaper after its first cell adopted
the `dockerd` that scripts/docker-setup daemonized later, and a test that looks for leftover children found it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from suite.launch import torchrun

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux only")


def _orphan(seconds: float) -> int:
    """Start a process whose parent exits at once (a daemonizing shell, like docker-setup's); its pid."""
    out = subprocess.run(["sh", "-c", f"sleep {seconds} >/dev/null 2>&1 </dev/null & echo $!"],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def _parent_of(pid: int) -> int:
    return psutil.Process(pid).ppid()  # re-parenting happens as the shell exits, before subprocess.run returns


def test_subreaper_only_while_a_cell_runs_and_nested_cells_keep_it():
    before = torchrun.is_subreaper()
    with torchrun.subreaper():
        assert torchrun.is_subreaper()
        with torchrun.subreaper():
            assert torchrun.is_subreaper()
        assert torchrun.is_subreaper()  # the outer cell still runs
    assert torchrun.is_subreaper() == before


def test_an_orphan_made_inside_is_adopted_and_one_made_after_is_not():
    if torchrun.is_subreaper():
        pytest.skip("this process was made a subreaper by someone else: orphans would come to it anyway")
    with torchrun.subreaper():
        inside = _orphan(30)
        assert _parent_of(inside) == os.getpid()
    after = _orphan(30)
    try:
        assert _parent_of(after) != os.getpid()  # a daemon started between cells is not ours
    finally:
        for pid in (inside, after):
            psutil.Process(pid).kill()
        os.waitpid(inside, 0)


def test_adopted_orphans_that_exited_are_reaped_and_no_others():
    with torchrun.subreaper():
        adopted = _orphan(0.3)
        assert _parent_of(adopted) == os.getpid()
    mine = subprocess.Popen(["true"])  # a zombie of ours that belongs to someone else (its Popen)
    proc = psutil.Process(adopted)
    end = time.monotonic() + 10
    while proc.status() != psutil.STATUS_ZOMBIE and time.monotonic() < end:
        time.sleep(0.05)
    assert proc.status() == psutil.STATUS_ZOMBIE  # exited, not reaped: what piled up before
    assert torchrun._reap_adopted([proc]) == [adopted]
    assert not psutil.pid_exists(adopted)
    assert torchrun._reap_adopted([proc]) == []  # gone: nothing to do, no error
    assert mine.wait(timeout=10) == 0  # never taken from its owner
