"""Inside the long-lived child (`python -m suite.testing.results_fuzz serve`), and the disarmed `cli` entry.

`serve` caps the address space at AS_LIMIT, imports what every command shares, `disarm`s training, then answers
requests, a JSON line each on stdin: run `suite.cli.main()` with these arguments, fd 1 and 2 redirected to
these files.  `_serve_one` runs one under an interval timer of the request's limit (the alarm raises
`_Overtime`, a BaseException that no `except Exception` swallows, even out of an open() blocked on a FIFO),
measures the peak RSS growth (VmHWM, reset through /proc/self/clear_refs), counts the refused launches, kills
(by pid) whatever processes the command left behind, and answers a JSON line on stdout.

`disarm` swaps the runner's launcher for `_refused_launch` and its torch probe for fixed facts ("No training"
in the package docstring); `disarmed_cli` is the same guard around one command in a fresh process.  FAULTS
are the ways `_faulty_report` makes `suite report` fail on purpose: the self-tests showing that each kind of
failure is seen.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time

from suite.testing.results_fuzz.values import AS_LIMIT, LIMIT_S, NO_WORKER


class _Overtime(BaseException):
    """Raised by the alarm: a BaseException, so that no `except Exception` of the command swallows it."""


def _alarm(signum, frame):
    raise _Overtime


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        m = re.search(rf"^{key}:\s+(\d+)", f.read(), re.M)
    return int(m.group(1)) if m else 0


_LAUNCHES = [0]


def _refused_launch(request, *, stop=None, on_poll=None):
    """The runner's launcher, in the fuzzer: no process, an immediate failure saying why."""
    from suite.launch import LaunchResult

    _LAUNCHES[0] += 1
    now = time.time()
    return LaunchResult(launcher=request.launcher, returncode=None, started=now, ended=now,
                        error="launch refused: the results fuzzer never trains (suite.testing.results_fuzz)")


def disarm() -> None:
    """Make `run --resume` unable to train or probe torch, in this process ("No training" in the package docstring)."""
    os.environ["SUITE_WORKER_MODULE"] = NO_WORKER
    os.environ.pop("RAY_ADDRESS", None)
    import suite.launch
    import suite.runner.cell as cell_mod
    import suite.runner.session as session_mod

    original = suite.launch.launch
    for name, module in list(sys.modules.items()):
        if name.startswith("suite.") and getattr(module, "launch", None) is original:
            module.launch = _refused_launch
    cell_mod.launch = suite.launch.launch = _refused_launch
    suite.launch.LAUNCHERS = {k: NO_WORKER for k in suite.launch.LAUNCHERS}
    session_mod.torch_info = lambda *a, **k: {"torch": "fuzz", "cuda": None, "nccl": None, "devices": []}


def _children() -> list:
    import psutil

    return psutil.Process().children(recursive=True)


def _kill_strays() -> list[str]:
    """Kill (by pid) every process this one started and left behind; their descriptions."""
    import psutil

    strays = _children()
    for p in strays:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(strays, timeout=5)
    return [f"{p.pid}" for p in strays]


FAULTS = ["raise", "hang", "fifo", "alloc", "exit1", "noisy", "spawn", "die"]


def _faulty_report(fault: str, scratch: str):
    """A body for `suite report` that fails on purpose, one way per FAULTS: the fuzzer's own tests show that
    each way is caught and classified (a fuzzer that sees nothing proves nothing)."""
    def body(*args, **kwargs):
        if fault == "raise":
            raise ValueError("a deliberate bug (the results fuzzer's self-test)")
        if fault == "hang":
            time.sleep(3600)
        if fault == "fifo":
            path = os.path.join(scratch, f"fifo-{os.getpid()}-{time.monotonic_ns()}")
            os.mkfifo(path)
            with open(path) as f:  # blocks in open(): no writer will ever come
                f.read()
        if fault == "alloc":
            block = bytearray(b"\x01") * (800 << 20)  # written, so resident
            del block
        if fault == "noisy":
            for i in range(20):
                print(f"error: line {i}", file=sys.stderr)
            return 2
        if fault == "spawn":
            subprocess.Popen(["sleep", "600"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if fault == "die":
            os._exit(9)
        return 1 if fault == "exit1" else 0
    return body


def _serve_one(req: dict) -> dict:
    import suite.cli.report as report_body
    from suite.cli import main

    out_fd = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err_fd = os.open(req["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    os.close(out_fd)
    os.close(err_fd)
    os.chdir(req["cwd"])
    sys.argv = ["suite", *req["args"]]
    _LAUNCHES[0] = 0
    real_report = report_body.report
    if req.get("fault"):
        report_body.report = _faulty_report(req["fault"], req["cwd"])
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    rss0 = _status_kb("VmRSS")
    code, note = None, None
    start = time.perf_counter()
    signal.setitimer(signal.ITIMER_REAL, req.get("limit", LIMIT_S))
    try:
        try:
            main()
            code = 0
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except _Overtime:
        note = "timeout"
    except BaseException as exc:  # noqa: BLE001 -- escaped the CLI's own handlers: report it
        note = f"escaped {type(exc).__name__}: {str(exc)[:300]}"
    seconds = time.perf_counter() - start
    report_body.report = real_report
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    peak = (_status_kb("VmHWM") - rss0) / 1024
    strays = _kill_strays()
    os.dup2(saved[0], 1)
    os.dup2(saved[1], 2)
    os.close(saved[0])
    os.close(saved[1])
    os.chdir("/")
    return {"code": code, "note": note, "seconds": seconds, "megabytes": peak, "launches": _LAUNCHES[0],
            "strays": strays}


def serve() -> None:
    """The child's loop: a JSON request per line on stdin, a JSON answer per line on stdout."""
    proto_in = os.fdopen(os.dup(0), "r")
    proto_out = os.fdopen(os.dup(1), "w")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT if hard == resource.RLIM_INFINITY else min(AS_LIMIT, hard), hard))
    import suite.cli  # noqa: F401 -- the imports every command shares, before the first clock
    import suite.compare.comparison  # noqa: F401
    import suite.publish.command  # noqa: F401
    import suite.report.render  # noqa: F401
    import suite.results.unpack  # noqa: F401

    disarm()
    signal.signal(signal.SIGALRM, _alarm)
    proto_out.write(json.dumps({"ready": os.getpid()}) + "\n")
    proto_out.flush()
    for line in proto_in:
        reply = _serve_one(json.loads(line))
        proto_out.write(json.dumps(reply) + "\n")
        proto_out.flush()


def disarmed_cli() -> None:
    """`python -m suite.testing.results_fuzz cli ARGS...`: the `suite` CLI in a fresh process, disarmed."""
    import suite.runner.run  # noqa: F401
    from suite.cli import main

    disarm()
    sys.argv = ["suite", *sys.argv[2:]]
    main()
