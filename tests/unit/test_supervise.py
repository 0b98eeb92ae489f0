"""The one supervision loop (suite/launch/supervise.py) with a stand-in handle: no processes, only the order
of what supervise() and stop_gracefully() ask of a handle, and how the outcome reads."""

from __future__ import annotations

import threading
import time

from suite.launch import LaunchResult
from suite.launch.supervise import outcome_error, stop_gracefully, supervise


class FakeHandle:
    """A launch that ends after `runs_for` polls (None: never by itself); SIGTERM ends it unless `stubborn`;
    `stray` leaves something alive after a normal exit until it is terminated."""

    def __init__(self, runs_for: int | None = None, stubborn: bool = False, stray: bool = False):
        self.runs_for, self.stubborn, self.stray = runs_for, stubborn, stray
        self.polls, self.calls, self.code = 0, [], None

    def poll(self):
        self.polls += 1
        if self.code is None and self.runs_for is not None and self.polls > self.runs_for:
            self.code = 0
        return self.code

    def running(self):
        return self.code is None or self.stray

    def terminate(self):
        self.calls.append("terminate")
        if not self.stubborn:
            self.code, self.stray = (-15 if self.code is None else self.code), False
        return [42]

    def kill(self):
        self.calls.append("kill")
        self.code, self.stray = (-9 if self.code is None else self.code), False

    def wait(self):
        self.calls.append("wait")
        return self.code


def test_a_normal_exit_is_not_stopped():
    handle, polled = FakeHandle(runs_for=2), []
    out = supervise(handle, timeout_s=60, stop=threading.Event(), on_poll=lambda: polled.append(1))
    assert out.returncode == 0 and not out.timed_out and not out.interrupted
    assert out.killed_pids is None and out.stray_killed is None and "terminate" not in handle.calls
    assert len(polled) == 3  # twice while it ran, once after it ended
    assert outcome_error(out, 60, __file__) is None


def test_timeout_stops_gracefully_and_stop_event_interrupts():
    timed = FakeHandle()
    out = supervise(timed, timeout_s=0, stop=threading.Event(), grace_s=5)
    assert out.timed_out and not out.interrupted and out.returncode == -15 and out.killed_pids == [42]
    assert out.sigkill_needed is False  # SIGTERM alone ended it
    assert LaunchResult(launcher="x").take(out).extra == {"killed_pids": [42], "sigkill_needed": False}
    assert timed.calls[:2] == ["terminate", "kill"]  # kill() after a clean exit only forces what is left
    stop = threading.Event()
    stop.set()
    out = supervise(FakeHandle(), timeout_s=60, stop=stop)
    assert out.interrupted and not out.timed_out
    assert outcome_error(out, 60, __file__) == "interrupted (Ctrl-C / SIGTERM)"


def test_a_process_ignoring_sigterm_is_killed_after_the_grace_period():
    handle = FakeHandle(stubborn=True)
    t0 = time.monotonic()
    assert stop_gracefully(handle, grace_s=0.3) == [42]
    assert time.monotonic() - t0 >= 0.3 and handle.code == -9 and handle.calls == ["terminate", "kill", "wait"]
    out = supervise(FakeHandle(stubborn=True), timeout_s=0, stop=threading.Event(), grace_s=0.1)
    assert out.returncode == -9 and out.sigkill_needed is True


def test_what_outlives_a_normal_exit_is_stopped_and_reported():
    out = supervise(FakeHandle(runs_for=1, stray=True), timeout_s=60, stop=threading.Event())
    assert out.returncode == 0 and out.stray_killed == [42] and out.killed_pids is None
    result = LaunchResult(launcher="x").take(out)
    assert result.returncode == 0 and result.extra == {"stray_killed": [42]} and result.ended == out.ended


def test_outcome_error_puts_the_launchers_detail_before_the_log_tail(tmp_path):
    log = tmp_path / "launcher.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    failed = LaunchResult(launcher="ray", returncode=1)
    text = outcome_error(failed, 60, log, detail="RuntimeError: no nodes")
    assert text.splitlines()[0] == "RuntimeError: no nodes" and text.splitlines()[-1] == "line 99"
    assert len(text.splitlines()) == 41  # the detail and the last 40 lines
    assert outcome_error(LaunchResult(launcher="x", returncode=1), 60, tmp_path / "missing.log") is None
