"""The check: a case's commands run, and each answer judged.

`classify(command, reply)` makes an `Outcome` of kind ok (exit 0, at most a few one-line warnings), error
(exit 2 or 3 with a short `error:` line), verdict (compare's exit 1 for a regression; a resume's exit 1 when
the cells it relaunched were refused), or one of FAILURES, with why.  `check(case, run)` runs the case's
commands with `run` (`Runner.run` or `run_subprocess`) and after each looks for what an exit code cannot show:
an output holding the decoy's bytes (a leak), the decoy changed (a write through a link), a file named
ESCAPE_MARK outside the case's folders (an escape).

`warm` runs every command on untouched sources: the imports and caches paid before any clock that matters,
and the proof that clean runs pass.  `cleanup` removes a case's folder, FIFOs and read-only folders included.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import shutil
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from suite.testing.results_fuzz.case import SECRET, Case, _plain, _remove
from suite.testing.results_fuzz.commands import commands
from suite.testing.results_fuzz.mutator import _fixed, _start
from suite.testing.results_fuzz.runner import Reply, Runner
from suite.testing.results_fuzz.values import (ESCAPE_MARK, LIMIT_MB, LIMIT_S, MAX_WARNING_CHARS, MAX_WARNING_LINES,
                                               SOURCES, TRACEBACK)


# What counts as a failure, by kind (the campaign groups its findings by command and kind):
FAILURES = {
    "crash": "exit 70 or a traceback on stderr (an exception no handler took), or one escaped the CLI",
    "exit": "an exit code the command does not have (not 0, 2, 3; 1 only as compare's or resume's verdict)",
    "timeout": f"longer than {LIMIT_S:.0f} s (interrupted there)",
    "memory": f"the process's peak RSS grew more than {LIMIT_MB} MB",
    "unclean": "an error without an `error:` line, or more than a few lines; noise beside exit 0",
    "late": "run --resume launched cells, then refused the folder as damaged (exit 2): found too late",
    "leak": "an output (pack's archive, a report, the site, an export) holds bytes of a file outside the run",
    "wrote-outside": "a file outside the run folder was written through a link (the decoy changed)",
    "escape": f"something named {ESCAPE_MARK} appeared outside the case's folders (a `..` path was followed)",
    "stray": "the command left a process running",
    "runner": "the runner child died or stopped answering (a hang the alarm could not break)",
}


@dataclass
class Outcome:
    command: str
    kind: str  # ok | error | verdict | a key of FAILURES
    code: int | None
    seconds: float
    megabytes: float
    detail: str = ""
    stderr: str = ""
    args: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        return self.kind not in ("ok", "error", "verdict")


def classify(command: str, reply: Reply) -> Outcome:
    """ok (exit 0, a few one-line warnings), error (exit 2 / 3, a short `error:`), verdict (compare's
    regression; a resume whose refused relaunches failed), or a failure kind (FAILURES) with why."""
    err = reply.stderr
    size = reply.stderr_bytes if reply.stderr_bytes >= 0 else len(err.encode())
    lines = [x for x in err.splitlines() if x.strip()]
    out = Outcome(command, "ok", reply.code, reply.seconds, reply.megabytes, stderr=err[-1500:])

    def bad(kind: str, detail: str) -> Outcome:
        out.kind, out.detail = kind, detail
        return out

    if reply.note == "timeout":
        return bad("timeout", f"did not finish within {reply.seconds:.0f} s")
    if reply.note:
        return bad("runner" if reply.note.startswith(("runner", "hung", "killed")) else "crash", reply.note)
    if reply.strays:
        return bad("stray", f"left {len(reply.strays)} process(es) running")
    if reply.code == 70 or TRACEBACK in err:
        last = next((x for x in reversed(lines) if not x.startswith("error: internal error")), "")
        return bad("crash", f"exit {reply.code}: {last[:300]}")
    if reply.seconds > LIMIT_S:
        return bad("timeout", f"took {reply.seconds:.1f} s")
    if reply.megabytes > LIMIT_MB:
        return bad("memory", f"peak RSS grew {reply.megabytes:.0f} MB (exit {reply.code})")
    if reply.code == 1 and (command == "compare" or command == "resume" and reply.launches):
        if noise := _noise(command, lines, size, reply.code):
            return bad("unclean", noise)
        out.kind, out.detail = "verdict", f"{reply.launches} relaunch(es) refused" if command == "resume" else ""
        return out
    if reply.code in (2, 3):
        errors = [x for x in lines if x.startswith("error:")]
        if not errors:
            return bad("unclean", f"exit {reply.code} without an `error:` line ({size} bytes on stderr): "
                                  f"{(lines or [''])[-1][:150]}")
        if len(lines) > 6 or size > 3000:
            return bad("unclean", f"exit {reply.code} with {len(lines)} lines / {size} bytes on stderr (at most 6 / "
                                  f"3000): {errors[0][:150]}")
        if command == "resume" and reply.launches and reply.code == 2:
            return bad("late", f"{reply.launches} launch(es), then exit 2: {errors[0][:250]}")
        out.kind, out.detail = "error", errors[0][:300]
        return out
    if reply.code != 0:
        return bad("exit", f"exit {reply.code}: {(lines or [''])[-1][:300]}")
    if noise := _noise(command, lines, size, 0):
        return bad("unclean", noise)
    return out


def _noise(command: str, lines: list[str], size: int, code: int) -> str | None:
    """What is wrong with the stderr of an answer that is not an error (exit 0, or a verdict), or None: at most
    MAX_WARNING_LINES one-line warnings, no error line, a few lines (the `wrote ...`, `read ...` of report and publish;
    run --resume says a line per cell, so only its size counts)."""
    warnings = [x for x in lines if re.match(r"(warning|error)\b", x, re.I)]
    if len(warnings) > MAX_WARNING_LINES or any(x.lower().startswith("error") for x in warnings):
        return f"exit {code} with {len(warnings)} warning/error lines on stderr"
    if any(len(x) > MAX_WARNING_CHARS for x in warnings):
        return f"exit {code} with a warning of {max(map(len, warnings))} characters"
    limit = 20_000 if command == "resume" else 5000 + MAX_WARNING_CHARS * len(warnings)
    if (len(lines) > 12 and command != "resume") or size > limit:
        return f"exit {code} with {len(lines)} lines / {size} bytes on stderr (at most 12 / {limit})"
    return None


def _holds(path: Path, probe: bytes) -> bool:
    """Whether a file (a .tar.gz decompressed) holds `probe`."""
    try:
        if path.name.endswith((".tar.gz", ".tgz")):
            with gzip.open(path, "rb") as f:
                return probe in f.read(256 << 20)
        return probe in path.read_bytes()
    except (OSError, EOFError, zlib.error):
        return False


def _leaks(case: Case) -> list[str]:
    """The outputs under where/out that hold the first line of the bytes no output may hold (case.leak)."""
    probe = case.leak.strip().split(b"\n")[0]
    found = []
    for dirpath, dirnames, filenames in os.walk(case.where / "out"):
        for name in filenames:
            p = Path(dirpath) / name
            if _plain(p) or (p.is_file() and not p.is_symlink() and name.endswith((".tar.gz", ".tgz"))):
                if _holds(p, probe):
                    found.append(str(p.relative_to(case.where)))
    return found


def _escaped(case: Case) -> list[str]:
    """Entries named ESCAPE_MARK above the case's folder or in its outside/ (written through a `..` path or a link)."""
    found = []
    for parent in [case.outside, case.where, *case.where.parents][:14]:
        with contextlib.suppress(OSError):
            found += [str(parent / n) for n in os.listdir(parent) if ESCAPE_MARK in n]
    return found


def _decoy_changed(case: Case) -> str | None:
    decoy = case.outside / "passwd"
    if os.path.lexists(decoy) and (decoy.is_symlink() or not decoy.is_file() or decoy.read_bytes() != SECRET):
        decoy.unlink()
        decoy.write_bytes(SECRET)
        return str(decoy)
    return None


def check(case: Case, run: Callable[..., Reply], only: list[str] | None = None) -> list[Outcome]:
    """Run the case's commands (all, or those named in `only`) with `run` (Runner.run or run_subprocess), and
    classify each; after each command, look for leaks, writes through links and escapes."""
    outcomes: dict[str, Outcome] = {}
    for i, cmd in enumerate(commands(case)):
        if only is not None and cmd.name not in only:
            continue
        if cmd.after and (cmd.after not in outcomes or outcomes[cmd.after].code != 0):
            continue
        io_dir = case.where / "io"
        reply = run(list(cmd.args), case.where, io_dir / f"{i:02d}-{cmd.name}.out", io_dir / f"{i:02d}-{cmd.name}.err")
        outcome = classify(cmd.name, reply)
        outcome.args = cmd.args
        extra = []
        if case.leak and (leaks := _leaks(case)):
            extra.append(("leak", f"{leaks[0]} holds bytes of a file outside the run (a link's target)"))
            case.leak = None  # said once; the next command's outputs are checked as new
        if changed := _decoy_changed(case):
            extra.append(("wrote-outside", f"{changed} (a link's target outside the run) was changed"))
        if escaped := _escaped(case):
            extra.append(("escape", f"wrote outside its folders: {escaped[0]}"))
            for p in escaped:
                _remove(Path(p))
        if extra and not outcome.failed:
            outcome.kind, outcome.detail = extra[0][0], f"{extra[0][1]} (exit {reply.code})"
        outcomes[cmd.name] = outcome
    return list(outcomes.values())


def cleanup(where: Path) -> None:
    """Remove a case's folder (FIFOs, links and read-only folders included)."""
    if not os.path.lexists(where):
        return
    for dirpath, dirnames, _ in os.walk(where):
        for d in dirnames:
            if not os.path.islink(os.path.join(dirpath, d)):
                with contextlib.suppress(OSError):
                    os.chmod(os.path.join(dirpath, d), 0o755)
    shutil.rmtree(where, ignore_errors=True)


def warm(runner: Runner, scratch: Path, sources: list[Path] | None = None) -> list[Outcome]:
    """Every command on untouched sources (default: all): imports and caches paid before any clock that matters,
    and the check that clean run folders pass (a failure here is the fuzzer's or the baseline's, not an input's)."""
    outcomes = []
    for i, source in enumerate(SOURCES if sources is None else sources):
        where = scratch / f"warm-{i}"
        cleanup(where)
        case = _start(where, source, _fixed(), "folder")
        outcomes += check(case, runner.run)
        cleanup(where)
    return outcomes
