"""A launch's processes die with the process that started them, even when that one is killed hard.

`suite run` supervises torchrun, torchrun supervises the ranks.  When the runner itself dies without a chance
to clean up (SIGKILL, the OOM killer, a lost SSH session), nothing stops its cell: torchrun and the ranks run in
sessions of their own, and a hanging cell would run forever.  So every link of the chain is tied to the one
above it with Linux's parent-death signal (prctl PR_SET_PDEATHSIG), set by each process on itself:

    runner ──▶ launcher (python -m suite.launch.torchrun, or the Ray driver) ──▶ ranks (suite.worker)

- the launcher process asks for SIGUSR2 when the runner dies (`guard_launcher`): its handler SIGKILLs every
  child's process group (each rank is a group leader: torchrun starts them with start_new_session) and exits;
  a handled signal, not SIGKILL, because only the launcher knows its children;
- each rank asks for SIGKILL when its launcher dies (`die_with_parent`), which covers a launcher that was
  itself killed hard (its handler never ran);
- launcher: ray - the run's driver (one process for all its Ray cells) asks for SIGKILL when the runner dies
  (Ray then ends the dead driver's job, its Train controller and worker actors), and the nodes of a private
  cluster (`ray start --block`) run under `run_guarded`, a guarded launcher for any program: its node's gcs,
  raylet and agents die too.

The kernel delivers the signal when the parent *thread* that forked the process exits (the runner and torchrun
start their children from the thread that then supervises them, so that is the process's end).  The setting
survives exec but not fork, so it is made in the process itself after it started, and a parent that died
before that (a race) is caught by comparing os.getppid() with the pid the parent put in the environment
(PARENT_ENV / RANK_PARENT_ENV).  Elsewhere than Linux nothing is set (best effort, documented in the result).
Only the standard library here: the worker imports it before torch.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

PARENT_ENV = "SUITE_LIFELINE_PARENT"  # the runner's pid, for the launcher process
RANK_PARENT_ENV = "SUITE_LIFELINE_RANK_PARENT"  # the launcher's pid, for its ranks
LAUNCHER_SIGNAL = signal.SIGUSR2  # torchrun handles SIGTERM/INT/HUP/QUIT itself, not SIGUSR2
_PR_SET_PDEATHSIG = 1
_PR_GET_PDEATHSIG = 2


def prctl(option: int, arg) -> bool:
    """Linux prctl(option, arg); False when it fails or where there is none (other systems, unusual builds:
    the run still works, without the guard). The one wrapper for suite's prctl calls (torchrun's too)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0) == 0
    except (OSError, AttributeError):  # no libc prctl
        return False


def set_parent_death_signal(sig: int) -> bool:
    """Ask the kernel to send `sig` to this process when its parent thread exits; False when unsupported."""
    return prctl(_PR_SET_PDEATHSIG, int(sig))


def parent_death_signal() -> int:
    """The parent-death signal currently set for this process (0: none; also 0 where unsupported)."""
    value = ctypes.c_int(0)
    prctl(_PR_GET_PDEATHSIG, ctypes.byref(value))  # on failure value stays 0
    return value.value


def die_with_parent(sig: int = signal.SIGKILL, env_var: str = RANK_PARENT_ENV) -> bool:
    """Set the parent-death signal; if the parent named in `env_var` is already gone, take `sig` now.

    Without the variable (a process started by hand, or inside a container, where the runner's pid means
    nothing) the signal is still tied to whatever parent this process has.  Returns whether it was set."""
    ok = set_parent_death_signal(sig)
    expected = os.environ.get(env_var, "")
    if ok and expected.isdigit() and os.getppid() != int(expected):
        os.kill(os.getpid(), sig)  # the parent died between our start and prctl: the kernel will not tell us
    return ok


def kill_children_groups() -> list[int]:
    """SIGKILL the process group of every child of this process (and the child itself); the pids signalled."""
    import psutil  # only when it fires: the worker's import of this module stays free of psutil

    own = os.getpgrp()
    hit = []
    for child in psutil.Process().children(recursive=True):
        try:
            pgid = os.getpgid(child.pid)
            if pgid != own:
                os.killpg(pgid, signal.SIGKILL)
            child.kill()
            hit.append(child.pid)
        except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
            continue  # already gone: what we wanted
    return hit


def _on_parent_death(signum, _frame) -> None:
    # Once is enough: a second delivery (seen under load) re-entering the handler mid-way would abandon the
    # first one's work half done.
    signal.signal(signum, signal.SIG_IGN)
    pids = kill_children_groups()
    print(f"suite: the runner died; killed the cell's processes {pids} ({signal.Signals(signum).name})",
          file=sys.stderr, flush=True)
    os._exit(128 + signum)


def guard_launcher() -> bool:
    """In the launcher process: when the runner dies, kill every rank and exit (see the module docstring).
    Also tells the ranks this process's pid (RANK_PARENT_ENV), for their own die_with_parent."""
    import psutil  # noqa: F401 - imported now, not inside the signal handler (an import there can be cut short)

    os.environ[RANK_PARENT_ENV] = str(os.getpid())
    signal.signal(LAUNCHER_SIGNAL, _on_parent_death)
    return die_with_parent(LAUNCHER_SIGNAL, PARENT_ENV)


def run_guarded(argv: list[str]) -> int:
    """Run `argv` as a guarded launcher would (for programs that are not suite's own Python, such as
    `ray start --block`): when our parent dies, every descendant is SIGKILLed - Ray's agents too, which
    outlive their raylet for seconds otherwise.  SIGTERM / SIGINT are passed on (a stop lets `ray start`
    stop its node); the exit code is the program's."""
    guard_launcher()
    child = subprocess.Popen(argv)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    return child.wait()


def guarded_command(argv: list[str]) -> list[str]:
    """`argv` started through run_guarded: `python -m suite.lifeline ARGV...`."""
    return [sys.executable, "-m", "suite.lifeline", *argv]


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print("usage: python -m suite.lifeline PROGRAM [ARGS...]", file=sys.stderr)
        sys.exit(2)
    sys.exit(run_guarded(sys.argv[1:]))
