"""Parent-death signals (suite/lifeline.py), with real processes: a child tied to its parent dies when
the parent is SIGKILLed, a child whose parent is already gone dies at once, and a guarded launcher kills its
children (in sessions of their own) when its own parent dies."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from suite import lifeline

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux only")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A middle process that starts a grandchild and prints its pid; the grandchild runs `TAIL` then sleeps.
MIDDLE = """
import subprocess, sys, time
{head}
child = subprocess.Popen([sys.executable, "-c", {tail!r}], start_new_session=True)
print(child.pid, flush=True)
time.sleep(60)
"""


def _env(**extra):
    return {**os.environ, "PYTHONPATH": REPO, **extra}


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def _start(head: str, tail: str) -> tuple[subprocess.Popen, int]:
    tail = tail + "\nimport time; print('ready', flush=True); time.sleep(60)"
    middle = subprocess.Popen([sys.executable, "-c", MIDDLE.format(head=head, tail=tail)], env=_env(),
                              stdout=subprocess.PIPE, text=True)
    grandchild = int(middle.stdout.readline())
    time.sleep(1.0)  # let the grandchild reach its prctl (a python start) before the middle one dies
    return middle, grandchild


def test_a_rank_dies_with_its_launcher():
    middle, rank = _start("", "from suite.lifeline import die_with_parent; die_with_parent()")
    try:
        assert psutil.Process(rank).is_running()
        middle.kill()
        middle.wait()
        assert _gone_within(rank, 2.0)
    finally:
        _cleanup(middle, rank)


def test_without_the_lifeline_the_grandchild_outlives_its_parent():
    """The control: what the lifeline prevents really happens without it (so the test above can fail)."""
    middle, rank = _start("", "pass")
    try:
        middle.kill()
        middle.wait()
        assert not _gone_within(rank, 1.0)
    finally:
        _cleanup(middle, rank)


def test_a_guarded_launcher_kills_its_ranks_when_the_runner_dies():
    # the middle process is the launcher, guarded against its parent (this test process, the "runner")
    launcher = subprocess.Popen([sys.executable, "-c", MIDDLE.format(
        head="from suite.lifeline import guard_launcher; guard_launcher()", tail="import time")],
        env=_env(**{lifeline.PARENT_ENV: str(os.getpid())}), stdout=subprocess.PIPE, text=True)
    rank = int(launcher.stdout.readline())
    try:
        time.sleep(0.5)
        assert psutil.Process(rank).is_running()
        # the launcher's parent is this process; we cannot die, so deliver what the kernel would send
        os.kill(launcher.pid, lifeline.LAUNCHER_SIGNAL)
        assert launcher.wait(timeout=5) == 128 + lifeline.LAUNCHER_SIGNAL
        assert _gone_within(rank, 2.0)
    finally:
        _cleanup(launcher, rank)


def test_a_parent_that_died_before_prctl_is_noticed():
    """The race: the expected parent (env) is not our parent any more, so the process takes its signal itself."""
    code = "from suite.lifeline import die_with_parent; die_with_parent(); import time; time.sleep(30)"
    proc = subprocess.run([sys.executable, "-c", code], env=_env(**{lifeline.RANK_PARENT_ENV: "1"}), timeout=30)
    assert proc.returncode == -signal.SIGKILL


def test_the_signal_is_set_and_survives_in_the_process():
    code = ("from suite.lifeline import die_with_parent, parent_death_signal; "
            "die_with_parent(); print(parent_death_signal())")
    out = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == str(int(signal.SIGKILL))


def _cleanup(proc: subprocess.Popen, pid: int) -> None:
    proc.kill()
    proc.wait()
    with contextlib.suppress(ProcessLookupError):  # already dead: the usual case
        os.kill(pid, signal.SIGKILL)
