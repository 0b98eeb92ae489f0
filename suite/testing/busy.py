"""A planted busy loop: a process that keeps one CPU busy, for tests and campaigns of the machine-state checks.

It is started outside the caller's process tree (a double fork: its parent exits at once, so it is nobody's
child here), which makes it what a real neighbour is to suite's sampler: a competitor, not part of the launch.
It ends when stop() is called, when the process that started it is gone, or after `max_s` seconds, whichever
comes first: a test that dies never leaves it spinning.

    with BusyLoop():            # one core kept busy
        ...suite run...
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

_LOOP = r"""
import os, sys, time
owner, end = int(sys.argv[1]), time.time() + float(sys.argv[2])
if os.fork():
    os._exit(0)
os.setsid()
os.write(1, f"{os.getpid()}\n".encode())
os.close(1)
while time.time() < end:
    for _ in range(200_000):
        pass
    try:
        os.kill(owner, 0)
    except ProcessLookupError:
        break
"""


class BusyLoop:
    """One CPU kept busy by a process outside this one's tree (see the module docstring)."""

    def __init__(self, max_s: float = 900.0):
        self.max_s, self.pid, self.stopped = max_s, None, False

    def start(self) -> "BusyLoop":
        proc = subprocess.run([sys.executable, "-c", _LOOP, str(os.getpid()), str(self.max_s)],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              timeout=60, check=True)
        self.pid = int(proc.stdout.split()[0])
        return self

    def stop(self) -> None:
        if self.pid is not None and not self.stopped:  # the pid stays readable: tests look for it afterwards
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.stopped = True

    def __enter__(self) -> "BusyLoop":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
