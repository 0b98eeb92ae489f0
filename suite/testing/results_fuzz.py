"""The results-reader fuzzer: mutated copies of real run folders and pack archives, fed to every reading command.

Every command that reads stored results - `results ls/show`, `report`, `compare`, `publish`, `export`,
`results pack/unpack` and `run --resume` - must answer a damaged or hostile run folder (or archive) the same
way: exit 0 (at most a one-line warning on stderr), or exit 2 / 3 with a short `error:` (no traceback), within
LIMIT_S seconds and LIMIT_MB megabytes.  Never exit 70 (a crash: suite/cli/crash.py), never a hang, never any
other exit code.  Two verdicts are also fine: `compare` exits 1 for a regression, and `run --resume` exits 1
when a cell it relaunched failed - here only because the fuzzer refuses every launch (see "No training").

One mutator, two sources of choices, as in scenario_fuzz.py: `mutate(choose, where)` builds one case under the
folder `where` from calls `choose(n) -> 0..n-1`.  tests/unit/test_results_fuzz.py passes hypothesis draws (so a
failure shrinks to a few edits), scripts/fuzz-results a seeded `random.Random` for thousands of cases; both run
the case's commands with a `Runner` and classify each answer with `classify`.

A case.  A real run folder (results/baselines/smoke/*, tests/fixtures/slow-night, tests/fixtures/ray-cost) is
copied to where/results/<scenario>/<run> and changed by 1-3 edits, or it is packed and the archive changed:
- JSON records (cells, manifest.json, resume-NN.json, PACK.json): a value replaced by a hostile one (nesting
  100,000 deep, 5,000-digit integers, +-1e308, NaN / Infinity, wrong types, huge strings, `../` paths), a key
  deleted or added, schema_version changed, the whole document replaced; measured fields are picked often;
- bytes: emptied, truncated, a byte flipped, non-UTF-8 inserted, re-encoded (UTF-16), a BOM, NULs;
- scenario.yaml: YAML bombs and recursive aliases, garbage, a 5 MB line, a python tag, hostile values;
- runlog.jsonl: garbage, huge and non-UTF-8 lines;
- a file (or cells/, work/) replaced by a symlink to /dev/zero (or /dev/null, /dev/urandom, /proc/self/environ),
  to a passwd file outside the run folder (a decoy: see SECRET), to a file of the run, itself or nowhere; a
  FIFO; a folder; a 200 MB sparse file; removed; junk files and folders beside the records (duplicate, foreign,
  many or oddly named cells, a nested run); cells/ a link out of the run; the run folder renamed oddly;
- archives: rebuilt with a member changed as above and SHA256SUMS recomputed (so the change reaches the
  reader), or stale; members added (symlink, hard link, device, FIFO, `..`, absolute, duplicate, a long or
  non-UTF-8 name, a lying size, 60 MB of zeros, a file below a link out); the gzip stream truncated, flipped,
  garbage, concatenated, with trailing garbage, or not gzip at all.
Besides the exit code and the output, each command is checked for a leak (an output holding the decoy's bytes),
a write through a link (the decoy changed) and an escape (a file named ESCAPE_MARK outside the case's folders).
Links out of the run point at decoys in the case's own folder, never at the system's files: `run --resume`
writes, and the fuzzer may run as root.  (The regression tests' "etc-passwd" edits link the real /etc/passwd,
for pack only, which never writes into the run folder.)
`EDITS` names every edit; `case_from(where, names)` builds a case from named edits (the regression tests).

Running commands fast.  A fresh `suite` costs a second of imports, so a `Runner` keeps one child process
(`python -m suite.testing.results_fuzz serve`) that imports suite once and runs each command in-process through
`suite.cli.main()` - the console entry point, so exit codes and crash handling are the real ones - with fd 1
and 2 redirected to files.  The child runs each command under an interval timer of LIMIT_S (the alarm raises
out of a blocking open() of a FIFO or a long computation), with RLIMIT_AS at AS_LIMIT (room for the imports;
a runaway allocation then fails instead of taking the machine), and measures its peak RSS growth (VmHWM,
reset through /proc/self/clear_refs).  The parent waits HARD_S at most for an answer; a child that does not
answer (a hang the alarm could not break) or dies is killed and replaced, and the command is a failure.
`run_subprocess` runs a command as a fresh process instead (spot checks: `--subprocess` in the script).

No training.  `run --resume` of an intact copy has nothing to do; of a damaged one it may relaunch cells.  The
child replaces the runner's launcher (`suite.runner.run.launch`, and `suite.launch.launch`) with one that
refuses at once without starting a process, and its torch probe (`torch_info`, a subprocess importing torch)
with fixed facts, as tests/unit/stand_in_launcher.py does; SUITE_WORKER_MODULE names a module that does not
exist and every launcher module in suite.launch.LAUNCHERS is pointed at a missing one, should a launch slip
through anyway.  A resume's exit 1 counts as a verdict only when the refusing launcher was called.  Any child
process left behind by a command is killed (by pid) and is a failure ("stray").
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import re
import resource
import select
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[2]
SOURCES = sorted([*REPO.glob("results/baselines/smoke/*_*_*"), *REPO.glob("tests/fixtures/slow-night/smoke/*_*_*"),
                  *REPO.glob("tests/fixtures/ray-cost/*/*_*_*")])
LIMIT_S, LIMIT_MB = 10.0, 500  # per command
AS_LIMIT = 3 << 30  # the child's address space: imports (~0.7 GB virtual) plus room for the 500 MB under test
HARD_S = LIMIT_S + 25  # the parent's own deadline for one answer of the child
SUBPROCESS_BASE_MB = 150  # a fresh `suite` process's own resident size (interpreter, imports), not the input's
NO_WORKER = "suite.testing.no_such_worker_for_the_results_fuzzer"
ESCAPE_MARK = "fuzz-ESCAPED"  # a run id / path of "../../..../fuzz-ESCAPED": nothing may be written there
TRACEBACK = "Traceback (most recent call last)"
# beside exit 0: one-line warnings, one per thing skipped (`results ls` lists every run, naming each unreadable
# one on a line of its own); a case has at most 3 edits, so more lines than this is noise, not a listing
MAX_WARNING_LINES = 8
MAX_WARNING_CHARS = 2500  # one warning line (suite's messages are clipped at 2,000 characters plus the path)

Choose = Callable[[int], int]


# ------------------------------------------------------------------------------------------ hostile values

def _deep(n: int, o: str = "[", c: str = "]") -> str:
    return o * n + c * n


# (name, JSON text): a JSON value that replaces one in a record.  The text is inserted raw, so NaN, Infinity
# and nesting beyond json.dumps's recursion reach the reader as they would in a file.  Built lazily (some are MBs).
HOSTILE_JSON: list[tuple[str, Callable[[], str]]] = [
    ("100000-deep list", lambda: _deep(100_000)),
    ("100000-deep object", lambda: '{"a":' * 100_000 + "1" + "}" * 100_000),
    ("1000-deep list", lambda: _deep(1000)),
    ("5000-digit integer", lambda: "9" * 5000),
    ("-5000-digit integer", lambda: "-" + "9" * 5000),
    ("1e308", lambda: "1e308"), ("-1e308", lambda: "-1e308"), ("1e400 (inf)", lambda: "1e400"),
    ("NaN", lambda: "NaN"), ("Infinity", lambda: "Infinity"), ("-Infinity", lambda: "-Infinity"),
    ("[NaN, Infinity]", lambda: "[NaN, Infinity, -Infinity]"), ("5e-324", lambda: "5e-324"),
    ("0", lambda: "0"), ("-1", lambda: "-1"), ("-0.0", lambda: "-0.0"), ("2**63", lambda: str(2**63)),
    ("2**53+1", lambda: str(2**53 + 1)), ("1.5", lambda: "1.5"), ("true", lambda: "true"), ("null", lambda: "null"),
    ('"two"', lambda: '"two"'), ('""', lambda: '""'), ("[]", lambda: "[]"), ("{}", lambda: "{}"),
    ("[1, 2]", lambda: "[1, 2]"), ('["a"]', lambda: '["a"]'), ('{"a": 1}', lambda: '{"a": 1}'),
    ("1 MB string", lambda: '"' + "x" * 1_000_000 + '"'), ("lone surrogate", lambda: '"\\ud800x"'),
    ("NUL string", lambda: '"a\\u0000b"'), ("markup string", lambda: '"[red]x[/red] [/] [link=file:///etc]"'),
    ("newline string", lambda: '"a\\nb\\r\\nc\\u2028"'), ("bad date", lambda: '"2026-13-45T99:99:99+00:00"'),
    ("escape path", lambda: json.dumps("../" * 9 + ESCAPE_MARK)), ("slash string", lambda: '"a/b/../../c"'),
    ("1e308 list", lambda: "[" + ",".join(["1e308"] * 1000) + "]"),
    ("200000 floats", lambda: "[" + ",".join(["0.125"] * 200_000) + "]"),
    ("list of nulls", lambda: "[null, null]"), ("list of objects", lambda: '[{"a": 1}, {}]'),
]
# fields the commands compute with: picked often (paths into a cell result; `*` is any list index)
MEASURED = [("step_times_s",), ("step_times_s", "*"), ("throughput", "tokens_per_s"), ("throughput",),
            ("throughput", "samples_per_s"), ("throughput", "tokens_per_s_per_device"), ("step_time",),
            ("step_time", "median"), ("step_time", "p10"), ("step_time", "p90"), ("step_time", "mean"),
            ("step_time", "n"), ("losses",), ("losses", "*"), ("final_loss",), ("memory",), ("memory", "measured"),
            ("memory", "predicted"), ("memory", "ratio"), ("axes", "gpus"), ("axes",), ("axes", "strategy"),
            ("axes", "model"), ("status",), ("cell_id",), ("repeat",), ("cell",), ("cell", "id"), ("cell", "gpus"),
            ("cell", "model"), ("prediction",), ("mfu",), ("started_at",), ("finished_at",), ("eval",),
            ("grad_norms",), ("gates",), ("ranks",), ("overhead_s",), ("extra",), ("error",)]
MANIFEST_FIELDS = [("run_id",), ("scenario",), ("created_at",), ("command",), ("git_commit",), ("hostname",),
                   ("devices",), ("device_count",), ("seed",), ("env",), ("extra",), ("extra", "options"),
                   ("extra", "options", "worker_module"), ("extra", "options", "repeats"),
                   ("extra", "options", "only"), ("extra", "options", "image"), ("extra", "options", "shuffle"),
                   ("container_image",), ("torch",), ("python",), ("cpu_model",)]
PACK_FIELDS = [("format",), ("format_version",), ("runs",), ("runs", "*"), ("runs", "*", "path"), ("files",),
               ("bytes",), ("created_at",)]
SCHEMA_VERSIONS = ["0", "1", "2", "5", "6", "99", "-1", '"2"', "2.0", "null", "1e308", "9" * 5000, "NaN", "[]"]
BAD_BYTES = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\x80\x80", b"\xfe\xff", b"\x1b[31m"]
YAML_HOSTILE = ["9" * 5000, ".inf", ".nan", "-1", "~", "[]", "{}", "x" * 300_000, "'" + "y" * 5000 + "'",
                "[" * 600 + "]" * 600, "!!float abc", "!!binary ###", "*nowhere", "&a [*a]", "two",
                "!!python/object/apply:os.system ['true']", "2001-13-45", "[1, 2, 3]"]


# ------------------------------------------------------------------------------------------ the case

@dataclass
class Case:
    """One mutated run folder (kind "folder") or archive (kind "archive"), and what the commands compare it to."""

    where: Path  # everything of the case lives below it
    kind: str
    source: Path  # the real run folder it started from
    run: Path  # the (mutated) run folder; for an archive case, the copy that was packed
    root: Path  # the results root holding `run` (results ls)
    clean: Path  # an untouched run of the same scenario: compare's other side
    archive: Path | None = None
    edits: list[str] = field(default_factory=list)
    swap: bool = False  # compare: the mutated side as the baseline
    leak: bytes | None = None  # bytes of a file outside the run (a link's target) that no output may hold

    @property
    def outside(self) -> Path:
        """Decoys outside the run folder that links point at (see SECRET); no command may write there."""
        return self.where / "outside"

    def describe(self) -> str:
        return f"{self.kind} {self.source.relative_to(REPO)}: " + ("; ".join(self.edits) or "no edit")


# Links out of the run folder point at decoys in the case's own `outside/` folder, never at the system's files:
# the fuzzer runs `run --resume` (which appends and writes), often as root, on folders whose runlog.jsonl or
# cells/ may be links.  A decoy looks like what it stands for; whether a command copied its bytes into an output
# (a leak) or wrote through the link (the decoy changed) is checked after every command.
SECRET = b"root:x:0:0:fuzz-secret-7f3a9c:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
# Link targets outside the case that no process can write to, even root's: kernel views, devices that discard.
SYSTEM_TARGETS = ["/dev/zero", "/dev/null", "/dev/urandom", "/proc/self/environ"]
SYSTEM_DIRS = ["/proc/self/fd", "/proc/sys/kernel", "/sys/kernel"]


class _Unsafe(Exception):
    """An edit that would touch something outside the case's folder (through a link an earlier edit made)."""


class _Ctx:
    """What an edit works on: the run folder (its path may change: a rename) and the archive's members."""

    def __init__(self, case: Case, choose: Choose):
        self.case, self.choose = case, choose
        self.members: list[dict] | None = None  # archive cases, after packing: {"name", "type", "data", ...}
        self.sums_stale = False
        self.gzip_edit: Callable[[bytes], bytes] | None = None

    @property
    def run(self) -> Path:
        return self.case.run

    def pick(self, items):
        return items[self.choose(len(items))] if len(items) > 1 else items[0]

    def safe(self, path: Path) -> Path:
        """`path`, if it lies in the case's folder once every link on the way is followed (its own name may be a
        link: edits replace links, never write through them); else _Unsafe."""
        base = os.path.realpath(self.case.where)
        real = os.path.realpath(Path(path).parent)
        if real != base and not real.startswith(base + os.sep):
            raise _Unsafe(f"{Path(path).name!r} is outside the case")
        if Path(path).is_symlink():
            os.unlink(path)
        return Path(path)


MAX_EDIT_BYTES = 8 << 20  # the mutator reads (and copies) only plain files up to this size: never a FIFO, a device


def _plain(p: Path) -> bool:
    """A regular file (not a link) small enough for the mutator to read: what edits may read or copy."""
    try:
        return p.is_file() and not p.is_symlink() and p.stat().st_size <= MAX_EDIT_BYTES
    except OSError:
        return False


def _real_dir(p: Path) -> bool:
    return p.is_dir() and not p.is_symlink()


def _cells(run: Path) -> list[Path]:
    d = run / "cells"
    if not _real_dir(d):
        return []
    try:
        return sorted(p for p in d.iterdir() if p.suffix == ".json" and _plain(p))
    except OSError:
        return []


def _load(path: Path):
    if not _plain(path):
        return None
    try:
        return json.loads(path.read_bytes())
    except (ValueError, RecursionError):
        return None


def _json_file(ctx: _Ctx, which: str | None = None) -> tuple[Path, str]:
    """A JSON record of the run to edit, and its kind (cell, manifest, resume); makes resume-01.json if asked."""
    kind = ctx.pick(["cell", "cell", "cell", "manifest", "manifest", "resume"] if which is None else [which])
    cells = _cells(ctx.run)
    if kind == "cell" and cells:
        return ctx.pick(cells), "cell"
    manifest = ctx.run / "manifest.json"
    if kind == "resume":
        resume = ctx.run / "resume-01.json"
        doc = _load(manifest)
        if not os.path.lexists(resume) and isinstance(doc, dict):
            doc["extra"] = {"options": (doc.get("extra") or {}).get("options", {})}
            ctx.safe(resume).write_text(json.dumps(doc, indent=1))
        return resume, "resume"
    return manifest, "manifest"


def _all_paths(doc, prefix=()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _all_paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _all_paths(v, prefix + (i,))
    return out


def _at(doc, path: tuple):
    for part in path:
        doc = doc[part]
    return doc


def _resolve(doc, pattern: tuple, choose: Choose) -> tuple | None:
    """A concrete path for a pattern (`*`: a list index, chosen); a missing last key of an object is created;
    None when the document lacks the rest."""
    path, node = (), doc
    for i, part in enumerate(pattern):
        if part == "*":
            if not isinstance(node, list) or not node:
                return None
            part = choose(len(node))
        elif not isinstance(node, dict):
            return None
        elif part not in node:
            return path + (part,) if i == len(pattern) - 1 else None
        path, node = path + (part,), node[part]
    return path


_SENTINEL = "\x00fuzz-sentinel\x00"


def _with_raw(doc, path: tuple, raw: str) -> str:
    """doc as JSON text with the value at `path` (created in its parent object if missing) replaced by `raw`."""
    if not path:
        return raw
    _at(doc, path[:-1])[path[-1]] = _SENTINEL
    return json.dumps(doc, indent=1).replace(json.dumps(_SENTINEL), raw, 1)


def _fields(kind: str) -> list[tuple]:
    return {"cell": MEASURED, "pack": PACK_FIELDS}.get(kind, MANIFEST_FIELDS)


def _dotted(path: tuple) -> str:
    return ".".join(map(str, path)) or "<document>"


def _edit_json(ctx: _Ctx, kind: str, doc, op: int | None = None) -> tuple[str, str]:
    """(new text, description) for one edit of the JSON document `doc` (op chosen unless given)."""
    choose = ctx.choose
    op = choose(6) if op is None else op
    paths = _all_paths(doc)
    if op in (0, 1):  # a value replaced (op 0: a field the commands compute with)
        where = _resolve(doc, ctx.pick(_fields(kind)), choose) if op == 0 else None
        where = where if where is not None else paths[choose(len(paths))]
        name, make = ctx.pick(HOSTILE_JSON)
        return _with_raw(doc, where, make()), f"{_dotted(where)} = {name}"
    if op == 2:  # a key or list item deleted
        where = _resolve(doc, ctx.pick(_fields(kind)), choose) if choose(2) else paths[choose(len(paths))]
        if not where:
            return "{}", "every key deleted"
        with contextlib.suppress(KeyError, IndexError, TypeError):
            del _at(doc, where[:-1])[where[-1]]
        return json.dumps(doc, indent=1), f"{_dotted(where)} deleted"
    if op == 3:  # an unknown key
        objects = [p for p in paths if isinstance(_at(doc, p), dict)]
        if not objects:
            return json.dumps(doc), "no object to add a key to"
        where = objects[choose(len(objects))] + ("x_fuzz_unknown",)
        name, make = ctx.pick(HOSTILE_JSON[:12] + [("1", lambda: "1")])
        return _with_raw(doc, where, make()), f"{_dotted(where)} = {name}"
    if op == 4:  # schema_version
        if not isinstance(doc, dict):
            return json.dumps(doc), "no schema_version (not an object)"
        raw = ctx.pick(SCHEMA_VERSIONS)
        return _with_raw(doc, ("schema_version",), raw), f"schema_version = {raw[:20]}"
    if choose(2) and isinstance(doc, dict) and doc:  # a key given twice, the second time hostile
        key = ctx.pick(list(doc))
        name, make = ctx.pick(HOSTILE_JSON)
        text = json.dumps(doc, indent=1)
        return text[:text.rindex("}")] + f', {json.dumps(key)}: {make()}\n}}\n', f"duplicate key {key} = {name}"
    name, make = ctx.pick(HOSTILE_JSON)
    return make(), f"whole document = {name}"


def _rel(ctx: _Ctx, path: Path) -> str:
    try:
        return str(path.relative_to(ctx.run))
    except ValueError:
        return str(path)


def edit_json(ctx: _Ctx, which: str | None = None, op: int | None = None) -> str:
    """A cell result, the manifest or a resume-NN.json with one JSON edit."""
    path, kind = _json_file(ctx, which)
    doc = _load(path)
    if doc is None:
        return f"{_rel(ctx, path)}: not a readable JSON file already"
    text, what = _edit_json(ctx, kind, doc, op)
    ctx.safe(path).write_text(text)
    return f"{_rel(ctx, path)}: {what}"


def _record_files(ctx: _Ctx) -> list[Path]:
    run = ctx.run
    named = [run / n for n in ("manifest.json", "scenario.yaml", "runlog.jsonl")] + sorted(run.glob("resume-*.json"))
    return [p for p in named + _cells(run) if _plain(p)]


def _byte_edit(data: bytes, choose: Choose) -> tuple[bytes, str]:
    op = choose(9)
    pos = choose(len(data) + 1)
    if op == 0:
        return b"", "emptied"
    if op == 1:
        return data[:pos], f"truncated at {pos}"
    if op == 2:
        b = choose(256)
        return data[:pos] + bytes([b]) + data[pos + 1:], f"byte {pos} = {b:#04x}"
    if op == 3:
        bad = BAD_BYTES[choose(len(BAD_BYTES))]
        return data[:pos] + bad + data[pos:], f"{bad!r} inserted at {pos}"
    if op == 4:
        return data.decode("utf-8", "replace").encode("utf-16"), "re-encoded as UTF-16"
    if op == 5:
        return b"\xef\xbb\xbf" + data, "a UTF-8 BOM prepended"
    if op == 6:
        return data.replace(b"\n", b"\x00\n"), "NULs before every newline"
    if op == 7:
        return data.replace(b"a", b"\xe4"), "latin-1 bytes"
    return bytes(choose(256) for _ in range(1 + choose(64))) * (1 + choose(50)), "replaced by garbage"


def edit_bytes(ctx: _Ctx) -> str:
    """Any record's bytes: emptied, truncated, a byte changed, non-UTF-8, UTF-16, a BOM, NULs, garbage."""
    files = _record_files(ctx)
    if not files:
        return "no record to edit bytes of"
    path = ctx.pick(files)
    data, what = _byte_edit(path.read_bytes(), ctx.choose)
    ctx.safe(path).write_bytes(data)
    return f"{_rel(ctx, path)}: {what}"


def _billion_laughs(levels: int, fanout: int) -> str:
    lines = ["x-l0: &l0 [lol]"] + [f"x-l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * fanout)}]" for i in range(1, levels)]
    return "\n".join(lines)


def edit_scenario(ctx: _Ctx) -> str:
    """scenario.yaml: a YAML bomb, a recursive alias, a hostile value, a 5 MB line, a python tag, bytes."""
    path = ctx.run / "scenario.yaml"
    text = path.read_bytes() if _plain(path) else b"name: smoke\n"
    op = ctx.choose(8)
    if op == 0:
        levels, fanout = 4 + ctx.choose(7), 4 + ctx.choose(7)
        new, what = text + b"\n" + _billion_laughs(levels, fanout).encode() + b"\n", f"YAML bomb {levels}x{fanout}"
    elif op == 1:
        new, what = text + b"\nx-r: &r {a: *r}\n", "recursive alias"
    elif op == 2:
        lines = text.split(b"\n")
        i = ctx.choose(len(lines))
        key, sep, _ = lines[i].partition(b":")
        value = ctx.pick(YAML_HOSTILE)
        if sep:
            lines[i] = key + b": " + value.encode()
        new, what = b"\n".join(lines), f"line {i + 1} value = {value[:30]}"
    elif op == 3:
        new, what = b"a: " + b"b" * (5 << 20) + b"\n", "one 5 MB line"
    elif op == 4:
        new, what = b"- " + b"\n- ".join(text.split(b"\n")), "a list at the top"
    elif op == 5:
        new, what = text.replace(b"name: ", b"name: other-", 1), "another scenario name"
    elif op == 6:
        new, what = b"!!python/object/apply:os.system ['echo pwned']\n", "a python tag"
    else:
        new, what = _byte_edit(text, ctx.choose)
    ctx.safe(path).write_bytes(new)
    return f"scenario.yaml: {what}"


def edit_runlog(ctx: _Ctx) -> str:
    """runlog.jsonl: a garbage, huge, non-UTF-8, deep or cut line, first or last."""
    path = ctx.run / "runlog.jsonl"
    text = path.read_bytes() if _plain(path) else b""
    line, what = ctx.pick([
        (b"garbage {{{", "a garbage line"), (b"x" * (5 << 20), "a 5 MB line"), (b"\xff\xfe\x00bad", "a non-UTF-8 line"),
        (_deep(100_000).encode(), "a 100000-deep line"), (b'{"event": NaN, "t": Infinity}', "NaN and Infinity"),
        (b"null", "a null line"), (b'{"event": "cell_end", "cell": ' + b"9" * 5000 + b"}", "a 5000-digit cell"),
        (b"", "an empty line"), (b'{"event": "run_start"', "a cut line"),
    ])
    ctx.safe(path).write_bytes(text + line + b"\n" if ctx.choose(2) else line + b"\n" + text)
    return f"runlog.jsonl: {what}"


def _targets(ctx: _Ctx) -> list[Path]:
    run = ctx.run
    return [run / "manifest.json", run / "manifest.json", run / "scenario.yaml", run / "runlog.jsonl",
            run / "cells", run / "work", run / "resume-01.json"] + _cells(run)[:1] * 3


def _remove(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path)


def _decoy(ctx: _Ctx) -> Path:
    """The case's stand-in for /etc/passwd, outside the run folder (see SECRET)."""
    ctx.case.outside.mkdir(exist_ok=True)
    decoy = ctx.case.outside / "passwd"
    if not decoy.exists():
        decoy.write_bytes(SECRET)
    return decoy


SPECIAL = ["/dev/zero", "passwd", "inside", "fifo", "folder", "dangling", "loop", "/dev/null", "sparse",
           "/dev/urandom", "/proc/self/environ", "outside folder"]


def replace_special(ctx: _Ctx, target: Path | None = None, kind: str | None = None) -> str:
    """A record (or cells/, work/) replaced by something that is not a plain file of its own: a link to a device,
    to a file outside the run (a decoy passwd) or inside it, to itself, to nowhere; a FIFO; a folder; 200 MB."""
    run = ctx.run
    target = target if target is not None else ctx.pick(_targets(ctx))
    what = kind if kind is not None else ctx.pick(SPECIAL)
    inside = [p for p in [run / "manifest.json", run / "scenario.yaml", run / "runlog.jsonl", *_cells(run)]
              if p != target and os.path.lexists(p)]
    _remove(ctx.safe(target))
    if what in SYSTEM_TARGETS:
        target.symlink_to(what)
    elif what == "/etc/passwd":  # named edits only (EDITS): the real file, for commands that only read (pack)
        target.symlink_to(what)
        ctx.case.leak = Path(what).read_bytes()
    elif what == "passwd":
        target.symlink_to(_decoy(ctx))
        ctx.case.leak = SECRET
        what = "a file outside the run (a passwd decoy)"
    elif what == "outside folder":
        ctx.case.outside.mkdir(exist_ok=True)
        elsewhere = ctx.case.outside / f"folder-{ctx.choose(1000)}"
        shutil.copytree(ctx.pick(SOURCES) / "cells", elsewhere, dirs_exist_ok=True)
        target.symlink_to(elsewhere)
        what = "a folder outside the run (a copy of another run's cells)"
    elif what == "inside":
        other = ctx.pick(inside) if inside else run
        target.symlink_to(os.path.relpath(other, target.parent))
        what = f"a link to {_rel(ctx, other)}"
    elif what == "fifo":
        os.mkfifo(target)
    elif what == "folder":
        target.mkdir()
        (target / "x.json").write_text("{}")
    elif what == "dangling":
        target.symlink_to("no-such-file")
    elif what == "loop":
        target.symlink_to(target.name)
    else:  # a 200 MB sparse file: nothing on disk, 200 MB to read
        with open(target, "wb") as f:
            f.truncate(200 << 20)
        what = "a 200 MB sparse file"
    return f"{_rel(ctx, target)} -> {what}"


def remove(ctx: _Ctx) -> str:
    """manifest.json, scenario.yaml, runlog.jsonl, cells/, work/, every cell file or one, removed."""
    run = ctx.run
    what = ctx.pick(["manifest.json", "scenario.yaml", "runlog.jsonl", "cells", "work", "cell files", "a cell"])
    if what == "cell files":
        for p in _cells(run):
            ctx.safe(p).unlink()
    elif what == "a cell":
        cells = _cells(run)
        if cells:
            ctx.safe(ctx.pick(cells)).unlink()
    elif os.path.lexists(run / what):
        _remove(ctx.safe(run / what))
    return f"removed {what}"


def junk(ctx: _Ctx) -> str:
    """Extra files and folders: duplicate, foreign or many cells, odd names, a nested run, resume-NN.json files
    of odd numbers, junk beside the run and in work/."""
    run, choose = ctx.run, ctx.choose
    cells = _cells(run)
    some = ctx.pick(cells) if cells else None
    op = choose(12)
    if op == 0 and some:
        shutil.copy(some, ctx.safe(run / "cells" / ("zz-" + some.name)))
        return f"a copy of {some.name} under another name (same cell, same repeat)"
    if op == 1 and some:
        doc = _load(some)
        if isinstance(doc, dict):
            doc["repeat"] = 1 + choose(3)
            ctx.safe(run / "cells" / some.name.replace("-r0", f"-r{doc['repeat']}")).write_text(json.dumps(doc))
            return f"{some.name} repeated as r{doc['repeat']}"
    if op == 2 and _real_dir(run / "cells"):
        other = _cells(ctx.pick(SOURCES))
        if other:
            shutil.copy(other[0], ctx.safe(run / "cells" / ("other-" + other[0].name)))
            return f"a cell of {other[0].parents[2].name} added"
    if op == 3 and _real_dir(run / "cells"):
        (ctx.safe(run / "cells" / "dir.json")).mkdir(exist_ok=True)
        ctx.safe(run / "cells" / ".hidden.json").write_text("{{{")
        return "cells/dir.json/ a folder, cells/.hidden.json garbage"
    if op == 4 and some:
        n = 200 + choose(800)
        data = some.read_bytes()
        for i in range(n):
            ctx.safe(run / "cells" / f"many{i:04d}-r0.json").write_bytes(data)
        return f"{n} copies of a cell"
    if op == 5:
        nested = ctx.safe(run / "0009_abcdef0_20260101T000000Z")
        nested.mkdir(exist_ok=True)
        (nested / "cells").mkdir(exist_ok=True)
        if _plain(run / "manifest.json"):
            shutil.copy(run / "manifest.json", nested / "manifest.json")
        return "a run folder nested in the run folder"
    if op == 6:
        ctx.safe(run.parent / "junk").mkdir(exist_ok=True)
        (run.parent / "junk" / "manifest.json").write_text("[]")
        ctx.safe(run.parent / "notes.txt").write_text("hello")
        ctx.safe(run.parent / "0007_zzzzzzz_20260101T000000Z").mkdir(exist_ok=True)
        return "junk beside the run (a folder with a bad manifest, a file, an empty run folder)"
    if op == 7 and some:
        name = ctx.pick(["a\nb-r0.json", "[bold red]x[red]-r0.json", "x" * 240 + "-r0.json", "-r0.json", " -r0.json",
                         "--help-r0.json", "\u00e9-r0.json"])
        shutil.copy(some, ctx.safe(run / "cells" / name))
        return f"a cell copied as {name!r}"
    if op == 8 and some:
        shutil.copy(some, os.fsencode(ctx.safe(run / "cells" / "x")) + b"\xff\xfe-r0.json")
        return "a cell file with a non-UTF-8 name"
    if op == 9:
        for name in ("resume-00.json", "resume-99.json", "resume-1000.json", "resume-xx.json"):
            if _plain(run / "manifest.json") and choose(2):
                shutil.copy(run / "manifest.json", ctx.safe(run / name))
        ctx.safe(run / "resume-77.json").write_text(_deep(100_000) if choose(2) else "{}")
        return "resume-NN.json files of odd numbers"
    if op == 10 and (_real_dir(run / "work") or not os.path.lexists(run / "work")):
        ctx.safe(run / "work" / "junk").mkdir(parents=True, exist_ok=True)
        (run / "work" / "junk" / "rank0.json").write_text("NaN")
        ctx.safe(run / "extra.json").write_text("[" * 10000)
        return "junk in work/ and the run folder"
    if _real_dir(run / "cells"):
        ctx.safe(run / "cells" / "notes.txt").write_bytes(b"\xff" * 100)
        ctx.safe(run / "cells" / "x-r0.json.tmp").write_text("{")
        return "non-JSON files in cells/"
    return "no junk added"


def link_cells(ctx: _Ctx) -> str:
    """cells/ a link: to a copy of another run's cells outside the run, to a kernel folder, to the run, its parent."""
    run = ctx.run
    where = ctx.pick(["outside", "outside", ".", ".."] + SYSTEM_DIRS)
    _remove(ctx.safe(run / "cells"))
    if where == "outside":
        return "cells -> " + replace_special(ctx, run / "cells", "outside folder").split(" -> ", 1)[1]
    (run / "cells").symlink_to(where)
    return f"cells -> {where}"


ODD_NAMES = ["0001_acc13b4_20261201T162244Z\n", "[bold]0001_acc13b4_20261201T162244Z", "-rf", "--help",
             " 0001_acc13b4_20261201T162244Z", "0001_ACC13B4_20261201T162244Z", "x" * 250,
             "99999999999999999999_abc1234_20261201T162244Z", "0000_0000000_00000000T000000Z", "\u00e9", "a.tar.gz",
             "\udcff\udcfe"]


def rename_run(ctx: _Ctx) -> str:
    """The run folder renamed: a newline, markup, an option, 250 characters, a huge number, non-UTF-8 bytes."""
    name = ctx.pick(ODD_NAMES)
    new = ctx.safe(ctx.run.parent / name)
    ctx.run.rename(new)
    ctx.case.run = new
    return f"run folder renamed {name[:40]!r}"


FOLDER_EDITS = [edit_json, edit_json, edit_json, edit_json, edit_bytes, edit_scenario, edit_runlog, replace_special,
                replace_special, remove, junk, link_cells, rename_run]
CONTENT_EDITS = [edit_json, edit_json, edit_json, edit_bytes, edit_scenario, edit_runlog, remove, junk]


def _apply(ctx: _Ctx, edit: Callable[[_Ctx], str]) -> None:
    try:
        ctx.case.edits.append(edit(ctx))
    except _Unsafe as exc:
        ctx.case.edits.append(f"{edit.__name__} skipped ({exc})")


# ------------------------------------------------------------------------------------------ archives

def _pack_clean(run: Path, out: Path) -> None:
    from suite.results.pack import pack

    pack([run], out)


def _members(archive: Path) -> list[dict]:
    out = []
    with tarfile.open(archive, "r:gz") as tar:
        for m in tar:
            data = tar.extractfile(m).read() if m.isfile() else None
            out.append({"name": m.name, "type": m.type, "data": data, "linkname": m.linkname, "mode": m.mode,
                        "size": None})
    return out


def _tree_members(run: Path, key: str) -> list[dict]:
    """The run folder as archive members (pack's layout), whatever the edits left there (links stay links)."""
    top = "suite-results"
    out = [{"name": f"{top}/{key}", "type": tarfile.DIRTYPE}]
    for dirpath, dirnames, filenames in os.walk(run):
        dirnames[:] = sorted(d for d in dirnames if not (d == "work" and Path(dirpath) == run))
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            rel = f"{top}/{key}/{p.relative_to(run).as_posix()}"
            if p.is_symlink():
                out.append({"name": rel, "type": tarfile.SYMTYPE, "linkname": os.readlink(p)})
            elif p.is_dir():
                out.append({"name": rel, "type": tarfile.DIRTYPE})
            elif p.is_file() and p.stat().st_size <= (8 << 20):
                out.append({"name": rel, "type": tarfile.REGTYPE, "data": p.read_bytes()})
            elif p.is_file():  # a big sparse file: a header that says so, with no bytes behind it
                out.append({"name": rel, "type": tarfile.REGTYPE, "data": b"", "size": p.stat().st_size})
            else:
                out.append({"name": rel, "type": tarfile.FIFOTYPE})
    return out


def _sums(members: list[dict]) -> bytes:
    top = "suite-results/"
    lines = [f"{hashlib.sha256(m['data']).hexdigest()}  {m['name'][len(top):]}" for m in members
             if m["type"] == tarfile.REGTYPE and m.get("data") is not None and m["name"].startswith(top)
             and not m["name"].endswith("/SHA256SUMS")]
    return "".join(line + "\n" for line in lines).encode("utf-8", "surrogateescape")


def _write_tar(members: list[dict], sums: bool) -> bytes:
    if sums:
        members = [m for m in members if m["name"] != "suite-results/SHA256SUMS"]
        members.append({"name": "suite-results/SHA256SUMS", "type": tarfile.REGTYPE, "data": _sums(members)})
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for m in members:
            ti = tarfile.TarInfo(m["name"])
            ti.type, ti.mode, ti.mtime = m["type"], m.get("mode", 0o644), 1_700_000_000
            ti.linkname = m.get("linkname") or ""
            data = m.get("data")
            if ti.type == tarfile.REGTYPE:
                ti.size = len(data or b"")
                tar.addfile(ti, io.BytesIO(data or b""))
            else:
                tar.addfile(ti)
    raw = buf.getvalue()
    for m in members:  # members whose header claims more bytes than follow: rewrite their size field
        if m.get("size") is not None and m["type"] == tarfile.REGTYPE:
            raw = _lie_about_size(raw, m["name"], m["size"])
    return raw


def _lie_about_size(raw: bytes, name: str, size: int) -> bytes:
    """The first ustar header named `name` (its last 100 bytes of name) with `size`, checksum recomputed."""
    short = name.encode()[-100:] if len(name.encode()) <= 100 else None
    for off in range(0, len(raw) - 511, 512):
        block = raw[off:off + 512]
        if short is not None and block[:100].rstrip(b"\0") == short and block[257:262] == b"ustar":
            b = bytearray(block)
            b[124:136] = (b"%011o" % size + b"\0") if size < 8**11 else (b"\x80" + size.to_bytes(11, "big"))
            b[148:156] = b" " * 8
            b[148:156] = b"%06o\0 " % sum(b)
            return raw[:off] + bytes(b) + raw[off + 512:]
    return raw


def edit_pack_json(ctx: _Ctx) -> str:
    """PACK.json with one JSON edit (or, when an earlier edit left it unreadable, a byte edit)."""
    m = next((x for x in ctx.members if x["name"] == "suite-results/PACK.json"), None)
    if m is None or m.get("data") is None:
        return "no PACK.json to edit"
    try:
        doc = json.loads(m["data"])
    except (ValueError, RecursionError):
        m["data"], what = _byte_edit(m["data"], ctx.choose)
        return f"PACK.json: {what}"
    text, what = _edit_json(ctx, "pack", doc)
    m["data"] = text.encode()
    return f"PACK.json: {what}"


def edit_sums(ctx: _Ctx) -> str:
    m = next((x for x in ctx.members if x["name"] == "suite-results/SHA256SUMS"), None)
    if m is None or m.get("data") is None:
        return "no SHA256SUMS to edit"
    ctx.sums_stale = True
    op = ctx.choose(5)
    lines = m["data"].split(b"\n")
    if op == 0:
        del lines[ctx.choose(len(lines))]
        what = "a line deleted"
    elif op == 1:
        lines.insert(ctx.choose(len(lines) + 1), ctx.pick([b"garbage", b"0" * 64 + b"  ../../etc/passwd",
                                                           b"0" * 64 + b"  " + b"x" * 100000, b"\xff\xfe"]))
        what = "a bad line"
    elif op == 2:
        lines = lines * 2
        what = "every line twice"
    else:
        data, what = _byte_edit(m["data"], ctx.choose)
        m["data"] = data
        return f"SHA256SUMS: {what} (not recomputed)"
    m["data"] = b"\n".join(lines)
    return f"SHA256SUMS: {what} (not recomputed)"


def add_member(ctx: _Ctx) -> str:
    runs = [x["name"] for x in ctx.members if x["type"] == tarfile.DIRTYPE and x["name"].count("/") == 2]
    base = runs[0] if runs else "suite-results/x/y"
    kinds = {
        "symlink to a passwd outside": {"name": f"{base}/cells/zz-r0.json", "type": tarfile.SYMTYPE,
                                        "linkname": str(_decoy(ctx))},
        "symlink to ..": {"name": f"{base}/cells/up", "type": tarfile.SYMTYPE, "linkname": "../../../../.."},
        "hard link to a passwd outside": {"name": f"{base}/cells/zz-r0.json", "type": tarfile.LNKTYPE,
                                          "linkname": str(_decoy(ctx))},
        "hard link inside": {"name": f"{base}/cells/zz-r0.json", "type": tarfile.LNKTYPE,
                             "linkname": f"{base}/manifest.json"},
        "character device": {"name": f"{base}/cells/zz-r0.json", "type": tarfile.CHRTYPE},
        "FIFO": {"name": f"{base}/cells/zz-r0.json", "type": tarfile.FIFOTYPE},
        "'..' path": {"name": f"suite-results/../../{ESCAPE_MARK}", "type": tarfile.REGTYPE, "data": b"x"},
        "absolute path": {"name": f"/tmp/{ESCAPE_MARK}", "type": tarfile.REGTYPE, "data": b"x"},
        "duplicate manifest": {"name": f"{base}/manifest.json", "type": tarfile.REGTYPE, "data": b"{}"},
        "file inside a file": {"name": f"{base}/manifest.json/x", "type": tarfile.REGTYPE, "data": b"{}"},
        "10000-char name": {"name": f"{base}/cells/{'x' * 10000}-r0.json", "type": tarfile.REGTYPE, "data": b"{}"},
        "non-UTF-8 name": {"name": f"{base}/cells/\udcff\udcfe-r0.json", "type": tarfile.REGTYPE, "data": b"{}"},
        "a size that lies": {"name": f"{base}/cells/lie-r0.json", "type": tarfile.REGTYPE, "data": b"{}",
                             "size": 1 << 40},
        "outside the run folders": {"name": "suite-results/notes.txt", "type": tarfile.REGTYPE, "data": b"hi"},
        "60 MB of zeros": {"name": f"{base}/cells/zeros-r0.json", "type": tarfile.REGTYPE, "data": bytes(60 << 20)},
        "another run folder": {"name": "suite-results/smoke/0099_0000000_20260101T000000Z", "type": tarfile.DIRTYPE},
    }
    name = ctx.pick(list(kinds) + ["a file through a link"])
    if name == "a file through a link":  # a link out, then a file below it: written through it unless refused
        up = "../" * 12 + str(ctx.case.outside).lstrip("/")
        ctx.members += [{"name": f"{base}/cells/out", "type": tarfile.SYMTYPE, "linkname": up},
                        {"name": f"{base}/cells/out/{ESCAPE_MARK}", "type": tarfile.REGTYPE, "data": b"x"}]
        ctx.case.outside.mkdir(exist_ok=True)
    else:
        ctx.members.insert(ctx.choose(len(ctx.members) + 1), dict(kinds[name]))
    if "passwd" in name:
        ctx.case.leak = SECRET
    return f"archive member added: {name}"


def edit_gzip(ctx: _Ctx) -> str:
    op = ctx.choose(7)
    n = ctx.choose(1 << 16)
    edits = [
        (lambda gz: gz[:len(gz) * (n % 100) // 100], "gzip truncated"),
        (lambda gz: gz[:n % len(gz)] + bytes([gz[n % len(gz)] ^ 0x20]) + gz[n % len(gz) + 1:], "a gzip byte flipped"),
        (lambda gz: bytes((i * 7919) % 256 for i in range(4096)), "garbage instead of gzip"),
        (lambda gz: b"", "an empty file"),
        (lambda gz: gzip.decompress(gz), "a plain tar (not gzipped)"),
        (lambda gz: gz + gz, "two gzip streams concatenated"),
        (lambda gz: gz + b"\x00garbage" * 100, "trailing garbage"),
    ]
    ctx.gzip_edit, what = edits[op]
    return what


ARCHIVE_EDITS = [edit_pack_json, edit_sums, add_member, add_member, edit_gzip]


# ------------------------------------------------------------------------------------------ building cases

def _copy(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest, symlinks=True)
    return dest


def _sibling(source: Path, choose: Choose) -> Path:
    """A clean run of the same scenario for compare's other side: another run of it when there is one."""
    same = [s for s in SOURCES if _scenario(s) == _scenario(source) and s != source] or [source]
    return same[choose(len(same))] if len(same) > 1 else same[0]


def _scenario(run: Path) -> str:
    return json.loads((run / "manifest.json").read_text())["scenario"]


def _start(where: Path, source: Path, choose: Choose, kind: str) -> Case:
    where.mkdir(parents=True, exist_ok=True)
    scenario = _scenario(source)
    root = where / "results"
    run = _copy(source, root / scenario / source.name)
    clean_src = _sibling(source, choose)
    clean = _copy(clean_src, where / "clean" / scenario / clean_src.name)
    (where / "out").mkdir()
    (where / "io").mkdir()
    return Case(where, kind, source, run, root, clean)


def _finish_archive(ctx: _Ctx, archive_edits: list[Callable[[_Ctx], str]]) -> None:
    case = ctx.case
    packed = case.where / "packed.tar.gz"
    key = f"{case.run.parent.name}/{case.run.name}"
    clean_copy = _copy(case.source, case.where / "pack-src" / case.run.parent.name / case.source.name)
    _pack_clean(clean_copy, packed)
    members = _members(packed)
    shutil.rmtree(case.where / "pack-src")
    if case.edits:  # the run folder was edited: its members are the edited tree's
        members = [m for m in members if not m["name"].startswith(f"suite-results/{key}")]
        at = next(i for i, m in enumerate(members) if m["name"] == "suite-results/PACK.json")
        members[at:at] = _tree_members(case.run, key)
    ctx.members = members
    for edit in archive_edits:
        _apply(ctx, edit)
    gz = gzip.compress(_write_tar(ctx.members, sums=not ctx.sums_stale), mtime=0)
    if ctx.gzip_edit is not None:
        gz = ctx.gzip_edit(gz)
    case.archive = case.where / ("archive.tgz" if ctx.choose(8) == 0 else "archive.tar.gz")
    case.archive.write_bytes(gz)
    packed.unlink()
    Path(str(packed) + ".sha256").unlink()


def mutate(choose: Choose, where: Path) -> Case:
    """A case under `where` (an empty or missing folder): a real run folder, or its archive, with 1-3 edits, all
    decided by `choose`."""
    source = SOURCES[choose(len(SOURCES))]
    kind = "archive" if choose(3) == 0 else "folder"
    case = _start(where, source, choose, kind)
    case.swap = bool(choose(2))
    ctx = _Ctx(case, choose)
    if kind == "folder":
        for _ in range(1 + choose(3)):
            _apply(ctx, FOLDER_EDITS[choose(len(FOLDER_EDITS))])
        return case
    for _ in range(choose(3)):  # 0-2 edits of the run's records, then 0-2 of the archive itself (at least one)
        _apply(ctx, CONTENT_EDITS[choose(len(CONTENT_EDITS))])
    extra = [ARCHIVE_EDITS[choose(len(ARCHIVE_EDITS))] for _ in range(choose(3) if case.edits else 1 + choose(2))]
    _finish_archive(ctx, extra)
    return case


def _fixed(*values: int) -> Choose:
    """A `choose` that answers `values` in turn, then 0."""
    it = iter(values)
    return lambda n: min(next(it, 0), n - 1)


# Named edits (the regression tests, and reproducers in words): name -> (kind, edit(ctx)).
def _set(rel: str, path: tuple, raw: str, what: str = "") -> Callable[[_Ctx], str]:
    def edit(ctx: _Ctx) -> str:
        target = (ctx.run / rel) if rel != "cell" else _cells(ctx.run)[0]
        doc = json.loads(target.read_bytes())
        where = _resolve(doc, path, lambda n: 0)
        target.write_text(_with_raw(doc, where, raw))
        return f"{_rel(ctx, target)}: {'.'.join(map(str, where))} = {what or raw[:30]}"
    return edit


def _special(rel: str, kind: str) -> Callable[[_Ctx], str]:
    def edit(ctx: _Ctx) -> str:
        target = ctx.run / rel if rel != "cell" else _cells(ctx.run)[0]
        return replace_special(ctx, target, kind)
    return edit


def _scenario_bytes(data: bytes, what: str) -> Callable[[_Ctx], str]:
    def edit(ctx: _Ctx) -> str:
        path = ctx.run / "scenario.yaml"
        path.write_bytes(path.read_bytes()[:40] + data + path.read_bytes()[40:])
        return f"scenario.yaml: {what}"
    return edit


def _pack_json(raw: str, what: str) -> Callable[[_Ctx], str]:
    def edit(ctx: _Ctx) -> str:
        m = next(x for x in ctx.members if x["name"] == "suite-results/PACK.json")
        m["data"] = _with_raw(json.loads(m["data"]), ("format_version",), raw).encode() if what != "deep" else \
            raw.encode()
        return f"PACK.json: {what}"
    return edit


def _cell_links_to_another(ctx: _Ctx) -> str:
    first, second = _cells(ctx.run)[:2]
    first.unlink()
    first.symlink_to(second.name)
    return f"cells/{first.name} -> {second.name} (a link inside the run)"


def _nonutf8_cell_name(ctx: _Ctx) -> str:
    cell = _cells(ctx.run)[0]
    shutil.copy(cell, os.fsencode(ctx.run / "cells") + b"/\xff\xfe-r0.json")
    return "a copy of a cell named b'\\xff\\xfe-r0.json' (not UTF-8)"


def _member(name: str, data: bytes, what: str) -> Callable[[_Ctx], str]:
    def edit(ctx: _Ctx) -> str:
        base = next(m["name"] for m in ctx.members if m["type"] == tarfile.DIRTYPE and m["name"].count("/") == 2)
        ctx.members.append({"name": f"{base}/cells/{name}", "type": tarfile.REGTYPE, "data": data})
        return f"archive member added: {what}"
    return edit


def _sums_line(line: bytes, what: str) -> Callable[[_Ctx], str]:
    def edit(ctx: _Ctx) -> str:
        m = next(x for x in ctx.members if x["name"] == "suite-results/SHA256SUMS")
        m["data"] += line + b"\n"
        ctx.sums_stale = True
        return f"SHA256SUMS: {what} (not recomputed)"
    return edit


EDITS: dict[str, tuple[str, Callable[[_Ctx], str]]] = {
    "fifo-manifest": ("folder", _special("manifest.json", "fifo")),
    "devzero-manifest": ("folder", _special("manifest.json", "/dev/zero")),
    "devzero-scenario": ("folder", _special("scenario.yaml", "/dev/zero")),
    "fifo-runlog": ("folder", _special("runlog.jsonl", "fifo")),
    "fifo-cell": ("folder", _special("cell", "fifo")),
    "passwd-cell": ("folder", _special("cell", "passwd")),
    "passwd-scenario": ("folder", _special("scenario.yaml", "passwd")),
    # the system's own /etc/passwd: only for commands that never write into the run folder (pack, unpack)
    "etc-passwd-cell": ("folder", _special("cell", "/etc/passwd")),
    "etc-passwd-scenario": ("folder", _special("scenario.yaml", "/etc/passwd")),
    "sparse-cell": ("folder", _special("cell", "sparse")),
    "deep-cell": ("folder", _set("cell", ("step_times_s",), _deep(100_000), "100000-deep list")),
    "deep-manifest": ("folder", _set("manifest.json", ("extra",), '{"a":' * 100_000 + "1" + "}" * 100_000,
                                     "100000-deep object")),
    "bigint-cell": ("folder", _set("cell", ("throughput", "tokens_per_s"), "9" * 5000, "5000-digit integer")),
    "bigint-steptime": ("folder", _set("cell", ("step_times_s", "*"), "9" * 5000, "5000-digit integer")),
    "1e308-steptime": ("folder", _set("cell", ("step_times_s", "*"), "1e308")),
    "1e308-median": ("folder", _set("cell", ("step_time", "median"), "1e308")),
    "nan-tokens": ("folder", _set("cell", ("throughput", "tokens_per_s"), "NaN")),
    "inf-tokens": ("folder", _set("cell", ("throughput", "tokens_per_s"), "Infinity")),
    "nan-steptimes": ("folder", _set("cell", ("step_times_s",), "[NaN, Infinity, -Infinity]")),
    "gpus-two": ("folder", _set("cell", ("axes", "gpus"), '"two"')),
    "nonutf8-scenario": ("folder", _scenario_bytes(b"\xff\xfe\xed\xa0\x80", "non-UTF-8 bytes")),
    "deep-pack-json": ("archive", _pack_json('{"a":' * 100_000 + "1" + "}" * 100_000, "deep")),
    "bigint-pack-json": ("archive", _pack_json("9" * 5000, "format_version = 5000-digit integer")),
    # found by scripts/fuzz-results
    "nan-manifest-extra": ("folder", _set("manifest.json", ("extra", "x_fuzz"), "[NaN, Infinity]")),
    "huge-cpu-model": ("folder", _set("manifest.json", ("cpu_model",), '"' + "x" * 1_000_000 + '"', "1 MB string")),
    "cell-links-to-another-cell": ("folder", _cell_links_to_another),
    "nonutf8-cell-name": ("folder", _nonutf8_cell_name),
    "long-member-name": ("archive", _member("x" * 10_000 + "-r0.json", b"{}", "a cell with a 10000-character name")),
    "long-sums-line": ("archive", _sums_line(b"0" * 64 + b"  " + b"x" * 100_000, "a line of a 100000-character path")),
}


def case_from(where: Path, names: list[str], source: Path | None = None) -> Case:
    """A case of the named EDITS (all of one kind) applied, in order, to a copy of `source` (the first smoke run)."""
    kinds = {EDITS[n][0] for n in names}
    kind = kinds.pop() if kinds else "folder"
    case = _start(where, source or SOURCES[0], _fixed(), kind)
    ctx = _Ctx(case, _fixed())
    if kind == "folder":
        case.edits += [EDITS[n][1](ctx) for n in names]
    else:
        _finish_archive(ctx, [EDITS[n][1] for n in names])
    return case


# ------------------------------------------------------------------------------------------ commands

@dataclass(frozen=True)
class Command:
    name: str
    args: tuple[str, ...]
    after: str | None = None  # run only when that command exited 0 (unpack what pack wrote)


def commands(case: Case) -> list[Command]:
    """Every reading command for the case, in order (`run --resume` last: it writes into the run folder)."""
    out = case.where / "out"
    mutated = str(case.archive if case.kind == "archive" else case.run)
    base, cur = (mutated, str(case.clean)) if case.swap else (str(case.clean), mutated)
    common = [
        Command("report", ("report", mutated)),
        Command("report-files", ("report", mutated, "--format", "html", "--format", "csv", "--format", "json",
                                 "--out", str(out / "report"))),
        Command("compare", ("compare", base, cur)),
        Command("publish", ("publish", mutated, "--out", str(out / "site"))),
        Command("export", ("export", mutated, "--out", str(out / "export.json"))),
    ]
    if case.kind == "archive":
        return [Command("unpack", ("results", "unpack", mutated, "--into", str(out / "unpacked"))),
                Command("ls-unpacked", ("results", "ls", str(out / "unpacked")), after="unpack"), *common]
    return [Command("ls", ("results", "ls", str(case.root))),
            Command("show", ("results", "show", mutated, "--results", str(case.root))),
            *common,
            Command("pack", ("results", "pack", mutated, "--out", str(out / "packed.tar.gz"))),
            Command("unpack-packed", ("results", "unpack", str(out / "packed.tar.gz"), "--into",
                                      str(out / "unpacked")), after="pack"),
            Command("resume", ("run", mutated, "--resume"))]


COMMAND_NAMES = ["ls", "show", "report", "report-files", "compare", "publish", "export", "pack", "unpack-packed",
                 "resume", "unpack", "ls-unpacked"]


# ------------------------------------------------------------------------------------------ the child

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
    """Make `run --resume` unable to train or probe torch, in this process (see "No training" above)."""
    os.environ["SUITE_WORKER_MODULE"] = NO_WORKER
    os.environ.pop("RAY_ADDRESS", None)
    import suite.launch
    import suite.runner.run as run_mod

    original = suite.launch.launch
    for name, module in list(sys.modules.items()):
        if name.startswith("suite.") and getattr(module, "launch", None) is original:
            module.launch = _refused_launch
    run_mod.launch = suite.launch.launch = _refused_launch
    suite.launch.LAUNCHERS = {k: NO_WORKER for k in suite.launch.LAUNCHERS}
    run_mod.torch_info = lambda *a, **k: {"torch": "fuzz", "cuda": None, "nccl": None, "devices": []}


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


# ------------------------------------------------------------------------------------------ the parent

@dataclass
class Reply:
    code: int | None
    seconds: float
    megabytes: float
    stdout_tail: str
    stderr: str
    note: str | None = None  # "timeout", "escaped ...", "runner died ...", "hung ..."
    launches: int = 0
    strays: list[str] = field(default_factory=list)
    stderr_bytes: int = -1  # the whole stderr's size (-1: len(stderr))


def _tail(path: Path, n: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


STDERR_KEPT = 16_000  # of a longer stderr, its head and tail (the classification counts the whole)


def _stderr(path: Path) -> tuple[str, int]:
    """(stderr, or its head and tail joined by a marker line when longer than STDERR_KEPT; its size in bytes)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            if size <= STDERR_KEPT:
                return f.read().decode("utf-8", "replace"), size
            head = f.read(STDERR_KEPT // 2)
            f.seek(size - STDERR_KEPT // 2)
            tail = f.read()
        return f"{head.decode('utf-8', 'replace')}\n[... {size - STDERR_KEPT} bytes ...]\n" \
               f"{tail.decode('utf-8', 'replace')}", size
    except OSError:
        return "", 0


class Runner:
    """One long-lived child running commands in-process (see the module docstring); replaced when it dies."""

    def __init__(self, python: str | None = None, scratch: Path | None = None):
        self.python = python or sys.executable
        self.scratch = scratch
        self.proc: subprocess.Popen | None = None
        self.restarts = 0

    def _env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTEST_CURRENT_TEST")}
        env.update(SUITE_WORKER_MODULE=NO_WORKER, MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1",
                   PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep))
        if self.scratch is not None:
            env.setdefault("SUITE_CACHE_DIR", str(self.scratch / "cache"))
            env["TMPDIR"] = str(self.scratch / "tmp")
            (self.scratch / "tmp").mkdir(parents=True, exist_ok=True)
        return env

    def start(self) -> None:
        log = open(self.scratch / "runner.log", "ab") if self.scratch else subprocess.DEVNULL
        self.proc = subprocess.Popen([self.python, "-m", "suite.testing.results_fuzz", "serve"], cwd=REPO,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=self._env(),
                                     start_new_session=True, text=True, bufsize=1)
        line = self._readline(120)
        if not line or "ready" not in line:
            self.close()
            raise RuntimeError(f"the fuzz runner did not start: {line!r}")

    def _readline(self, timeout: float) -> str | None:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return self.proc.stdout.readline() if ready else None

    def close(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: the child and whatever it started
        with contextlib.suppress(Exception):
            self.proc.wait(10)
        for f in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(Exception):
                f.close()
        self.proc = None

    def restart(self) -> None:
        self.close()
        self.restarts += 1
        self.start()

    def run(self, args: list[str], cwd: Path, out: Path, err: Path, fault: str | None = None,
            limit: float = LIMIT_S) -> Reply:
        """One command in the child; `fault`: make `suite report` fail that way (FAULTS; the self-tests); `limit`:
        its alarm (a self-test of a hang need not wait LIMIT_S)."""
        if self.proc is None or self.proc.poll() is not None:
            self.restart() if self.proc is not None else self.start()
        req = {"args": args, "cwd": str(cwd), "out": str(out), "err": str(err), "fault": fault, "limit": limit}
        died = None
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            line = self._readline(HARD_S)
        except (BrokenPipeError, OSError) as exc:
            line, died = None, f"runner died ({exc})"
        if not line:
            if line == "":  # end of file: the child is gone (or going)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(5)
            alive = self.proc.poll() is None
            rc = self.proc.returncode
            note = died or (f"hung: no answer in {HARD_S:.0f} s, killed" if alive else f"runner died (exit {rc})")
            self.restart()
            return Reply(None, HARD_S if alive else 0.0, 0.0, _tail(out, 2000), *_stderr(err)[:1], note)
        r = json.loads(line)
        text, size = _stderr(err)
        reply = Reply(r["code"], r["seconds"], r["megabytes"], _tail(out, 2000), text, r["note"],
                      r["launches"], r["strays"], size)
        if reply.note:  # interrupted mid-command: its state may be half-changed; start clean
            self.restart()
        return reply


def run_subprocess(args: list[str], cwd: Path, out: Path, err: Path, python: str | None = None) -> Reply:
    """The command as a fresh process (`python -m suite`; `run` through the disarmed entry), same limits."""
    python = python or sys.executable
    entry = ["-m", "suite.testing.results_fuzz", "cli"] if args[:1] == ["run"] else ["-m", "suite"]

    def limits():
        resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, resource.getrlimit(resource.RLIMIT_AS)[1]))

    env = Runner()._env()
    start = time.perf_counter()
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen([python, *entry, *args], cwd=cwd, stdout=o, stderr=e, stdin=subprocess.DEVNULL,
                                env=env, preexec_fn=limits, start_new_session=True)
        deadline, note, rusage, status = start + LIMIT_S + 5, None, None, None  # + 5: the interpreter's start
        while True:
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                note = "timeout"
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                _, status, rusage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(status)
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)  # anything of its session still running
    code = None if note else proc.returncode
    if code is not None and code < 0:
        code, note = None, f"killed by signal {-code}"
    text, size = _stderr(err)
    return Reply(code, time.perf_counter() - start, max(0.0, rusage.ru_maxrss / 1024 - SUBPROCESS_BASE_MB),
                 _tail(out, 2000), text, note, stderr_bytes=size)


# ------------------------------------------------------------------------------------------ the check

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


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve()
    elif sys.argv[1:2] == ["cli"]:
        disarmed_cli()
    else:
        sys.exit("usage: python -m suite.testing.results_fuzz serve | cli ARGS...")
