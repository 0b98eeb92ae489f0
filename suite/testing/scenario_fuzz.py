"""The scenario-file fuzzer: a mutator of the shipped scenarios and the check of one mutated file.

Mutated copies of scenarios/*.yaml either load, expand and plan, or fail with a clean ScenarioError, within
2 s and 500 MB each.  One mutator, two sources of choices: `mutate(choose)` builds a file from calls
`choose(n) -> 0..n-1`.  tests/unit/test_scenario_fuzz.py passes hypothesis draws (so failures shrink),
scripts/fuzz-scenarios a seeded `random.Random` for thousands of files; both classify each file with `check`.

Mutations: flipped or inserted bytes (non-UTF-8, control characters, stray brackets), deleted, doubled or
swapped lines, truncation, re-encoding, a value replaced by a hostile one (huge integers, inf/nan, deep
brackets, long strings and lists, impossible dates, bad tags), injected aliases (billion laughs, recursion)
and injected keys (big sweeps, missing data paths).
"""

from __future__ import annotations

import json
import re
import signal
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[2]
BASES = [p.read_bytes() for p in sorted((REPO / "scenarios").glob("*.yaml"))]
SECONDS, MEGABYTES = 2.0, 500
HARD_STOP_S = 10  # a runaway example (an unbounded expansion) is stopped here and reported, not waited for

Choose = Callable[[int], int]

VALUES = [
    "9" * 25, "9" * 5000, "-" + "9" * 30, "0x" + "f" * 60, "1_000_000", str(2**24), str(2**24 + 1), str(10**9 + 1),
    str(2**63), "1.0e400", "1e400", ".inf", "-.inf", ".nan", "[.nan, .nan]", "-1", "0", "0.0", "1.5", "~", "true",
    "[]", "{}", "[1, 2, 3]", "[" * 40 + "]" * 40, "[" * 600 + "]" * 600, "{a: " * 50 + "1" + "}" * 50,
    "x" * 300_000, "'" + "y" * 5000 + "'", "[" + ", ".join(map(str, range(1, 3000))) + "]", "2001-13-45",
    "!!float abc", "!!int x", "!!binary ###", "!!set {a, b}", "*nowhere", "&a [*a]", "'\\x00'", '"\\0"',
    "gpt5", "zero9", "{family: gpt, layers: 99999, hidden: 64, heads: 4, vocab: 256}",
]
INSERTS = [b"[", b"]", b"{", b"}", b": ", b"- ", b"&a ", b"*a", b"\xff", b"\xc3", b"\x00", b"\x07", b"\t", b"'", b'"',
           b"\n", b"  ", b"? ", b"!!", b"%YAML 1.1\n", b"---\n", b"<<: "]
KEYS = [
    "seq_len: [" + ", ".join(str(2**i) for i in range(1, 13)) + "]",
    "micro_batch_size: [" + ", ".join(map(str, range(1, 400))) + "]",
    "gpus: [" + ", ".join(map(str, range(1, 200))) + "]",
    "data: {kind: text, path: /no/such/corpus}", "data: {kind: text, path: .}", "data: {kind: cifar10, root: /}",
    "data: {kind: cifar10, root: /etc/hostname}", "exclude: [" + ", ".join(f"{{gpus: {i}}}" for i in range(80)) + "]",
    "optimizer: {lr: .inf, betas: [.nan, 2]}", "bucket_cap_mb: .inf", "convergence: {min_loss_drop: .nan}",
    "gpu_memory_gb: 1e400", "timeout_s: 1.0e300", "launcher: ray", "nodes: [1, 2]", "steps: 1",
]


def billion_laughs(levels: int, fanout: int) -> str:
    lines = ["x-l0: &l0 [lol]"] + [f"x-l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * fanout)}]" for i in range(1, levels)]
    return "\n".join(lines)


def _lines(text: bytes) -> list[bytes]:
    return text.split(b"\n")


def _mutate_once(text: bytes, choose: Choose) -> bytes:
    kind = choose(9)
    if kind == 0:  # replace one byte with any byte
        pos = choose(max(len(text), 1))
        return text[:pos] + bytes([choose(256)]) + text[pos + 1:]
    if kind == 1:  # insert a structural fragment
        pos = choose(len(text) + 1)
        return text[:pos] + INSERTS[choose(len(INSERTS))] + text[pos:]
    lines = _lines(text)
    i, j = choose(len(lines)), choose(len(lines))
    if kind == 2:  # delete, double or swap lines
        op = choose(3)
        if op == 0:
            del lines[i]
        elif op == 1:
            lines.insert(i, lines[i])
        else:
            lines[i], lines[j] = lines[j], lines[i]
        return b"\n".join(lines)
    if kind == 3:  # replace the value of a `key: value` line
        key, sep, _ = lines[i].partition(b":")
        lines[i] = key + b": " + VALUES[choose(len(VALUES))].encode() if sep else lines[i]
        return b"\n".join(lines)
    if kind == 4:  # append a key, overriding (or duplicating) one of the file's
        return text.rstrip(b"\n") + b"\n" + KEYS[choose(len(KEYS))].encode() + b"\n"
    if kind == 5:  # aliases: expansion bombs, recursion, or a shared value used by fields
        snippet = [billion_laughs(2 + choose(9), 2 + choose(9)), "x-r: &r {a: *r}", "gpus: &g 2\nnodes: *g",
                   "x-m: &m {steps: 3}\n<<: *m"][choose(4)]
        return text.rstrip(b"\n") + b"\n" + snippet.encode() + b"\n"
    if kind == 6:  # truncate
        return text[:choose(len(text) + 1)]
    if kind == 7:  # another encoding
        return text.decode("utf-8", "replace").encode(["latin-1", "utf-16", "utf-32", "cp1252"][choose(4)], "replace")
    return text.replace(b"\n", b"\r\n") if choose(2) else text.replace(b"  ", b"\t")  # line ends, tabs


def mutate(choose: Choose) -> bytes:
    """A shipped scenario with 1 to 4 mutations, all decided by `choose`."""
    text = BASES[choose(len(BASES))]
    for _ in range(1 + choose(4)):
        text = _mutate_once(text, choose)
    return text


@dataclass
class Outcome:
    kind: str  # "valid" (loaded, expanded, planned) | "error" (a clean ScenarioError) | "bad" (anything else)
    seconds: float
    megabytes: float
    detail: str = ""


def _clean(problem: object, path: Path) -> bool:
    """One line, `file:line: ...` (or the `... and N more` tail), of a readable length."""
    return (isinstance(problem, str) and "\n" not in problem and len(problem) < 1000
            and (re.match(rf"{re.escape(str(path))}:\d+: \S", problem) is not None
                 or re.fullmatch(r"\.\.\. and \d+ more problems", problem) is not None))


def _run(path: Path) -> tuple[str, str]:
    from suite.scenario import load_cells
    from suite.plan.rows import plan_rows
    from suite.scenario import ScenarioError

    try:
        _, cells = load_cells(str(path))
        json.dumps(plan_rows(cells), allow_nan=False)  # what `plan --json` prints: strict JSON, finite numbers
    except ScenarioError as exc:
        bad = [p for p in exc.problems if not _clean(p, path)]
        return ("bad", f"unclean problem {bad[0]!r:.300}") if bad or not exc.problems else ("error", exc.problems[0])
    except Exception as exc:  # noqa: BLE001 -- any other exception is what the fuzzer looks for: report it
        return "bad", f"{type(exc).__name__}: {str(exc)[:300]}"
    return "valid", ""


class _Overtime(BaseException):
    """Raised by the alarm; a BaseException so that _run's `except Exception` does not swallow it."""


def _alarm(signum, frame):
    raise _Overtime


def _guarded(path: Path) -> tuple[str, str]:
    """_run under a SIGALRM of HARD_STOP_S (POSIX, main thread: where pytest and the script run checks)."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, HARD_STOP_S)
    try:
        return _run(path)
    except _Overtime:
        return "bad", f"did not finish within {HARD_STOP_S} s"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check(text: bytes, path: Path) -> Outcome:
    """Write `text` to `path`, load + expand + plan it, classify; timed alone, then measured under tracemalloc."""
    path.write_bytes(text)
    start = time.perf_counter()
    kind, detail = _guarded(path)
    seconds = time.perf_counter() - start
    if kind == "bad":
        return Outcome(kind, seconds, 0.0, detail)  # not run again: it may be the runaway kind
    tracemalloc.start()
    try:
        _guarded(path)
        megabytes = tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()
    if kind != "bad" and (seconds > SECONDS or megabytes > MEGABYTES):
        kind, detail = "bad", f"took {seconds:.2f} s and {megabytes:.0f} MB ({detail or 'valid'})"
    return Outcome(kind, seconds, megabytes, detail)
