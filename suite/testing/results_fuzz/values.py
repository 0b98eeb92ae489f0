"""What the results fuzzer throws at the readers, and the bounds it holds them to.

The bounds: a command answers within LIMIT_S seconds and LIMIT_MB megabytes of peak RSS growth; the child that
runs the commands lives in AS_LIMIT of address space, and the parent waits HARD_S at most for one answer.  Cases
start from the real run folders in SOURCES (paths under REPO, the checkout's root).

The hostile values, each drawn by an edit: JSON texts that replace a value in a record (HOSTILE_JSON, built
lazily and inserted raw, so NaN, Infinity and 100,000-deep nesting reach the reader as a file would hold them),
the fields the commands compute with (MEASURED for a cell, MANIFEST_FIELDS, PACK_FIELDS: picked often),
schema versions, bytes that are not UTF-8, YAML values.
A path of `../` ending in ESCAPE_MARK is the bait for an escape: nothing of that name may appear anywhere.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[3]  # suite/testing/results_fuzz/values.py -> the checkout
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
