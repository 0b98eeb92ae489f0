"""The one bounded reader: every file suite reads back from a results folder, an archive or a site.

A run folder, a pack or a published site may come from another machine, a shared folder or a CI artifact, so
what is read back is treated as data from a stranger.  Every such read goes through `read_bytes` (and
`read_text` / `read_json` on top of it), which holds these promises whatever the file is:

- **regular files only**: a FIFO, a device, a socket or a folder is refused without blocking (the file is
  opened with O_NONBLOCK and checked with fstat, so a FIFO never hangs the reader); a symbolic link is
  followed only when it stays inside the folder the caller names (`within`: the run folder), so
  `manifest.json -> /dev/zero` or `cells/x.json -> /etc/shadow` is refused, never read;
- **a size cap per kind** (`LIMITS`): a few times the largest real record of that kind; a bigger file is
  refused before it is read, and at most cap + 1 bytes are ever read (a size that lies, a file that grows);
- **UTF-8** (strict): other bytes are refused with their offset;
- **JSON within limits**: at most `MAX_DEPTH` levels of nesting (checked before parsing), integers of at most
  `MAX_INT_DIGITS` digits (Python would refuse a 4,300-digit one with a crash-shaped ValueError, and compute
  slowly with shorter huge ones); NaN and Infinity read back (a diverged loss is a fact), and the schema says
  where numbers must be finite (results/schema.py: `Seconds`, `Rate`, `Bytes`).

Each refusal is one `StoreError` whose message names the file, what is wrong with it and what to do.  This
module is the lowest of the results package: it knows files and JSON, not records.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

# The most bytes read from one file of each kind (real ones are far smaller: a cell result of 10,000 steps is
# under 1 MiB, a manifest a few KiB, a runlog about 200 bytes a cell).
LIMITS: dict[str, int] = {
    "cell result": 16 << 20,
    "manifest": 4 << 20,
    "scenario copy": 1 << 20,
    "runlog": 64 << 20,
    "pack metadata": 16 << 20,
    "checksums": 32 << 20,
    "site index": 256 << 20,
    "record": 16 << 20,
}
MAX_DEPTH = 64  # a real record nests 6 deep
MAX_INT_DIGITS = 40  # byte counts and FLOPs fit in 20; more is not a measurement
FIX = "the file is damaged: repair it or move it out of the run folder"  # what to do, in every read error


class StoreError(Exception):
    """A run folder or record that cannot be created or read; the message names the path."""


def refuse(path: Path, kind: str, problem: str) -> StoreError:
    """The one shape of every read error: the file, what it should have been, what is wrong, what to do."""
    return StoreError(f"{path}: cannot read {kind}: {problem}; {FIX}")


def _kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def check_inside(path: Path, within: Path | None) -> None:
    """StoreError unless `path` (links resolved) lies inside `within` (resolved too); None: anywhere."""
    if within is None:
        return
    real, root = os.path.realpath(path), os.path.realpath(within)
    if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
        raise StoreError(f"{path}: a link to {real}, outside {within}; suite reads only files inside the run "
                         f"folder: replace the link by the file itself")


def read_bytes(path: Path, kind: str, *, within: Path | None = None, parent_checked: bool = False) -> bytes:
    """The bytes of the regular file `path`, at most LIMITS[kind] of them (StoreError otherwise).

    `within`: the folder the file must resolve inside (links leaving it are refused); `parent_checked`: the
    caller has checked the file's folder lies inside it (one check for a folder of 20,000 records).  A missing
    file raises FileNotFoundError, so callers that treat "absent" differently from "damaged" still can."""
    limit = LIMITS[kind]  # (paths stay as given: 20,000 Path objects are a measurable part of `results show`)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
    if os.path.islink(path):
        if not os.path.exists(path):
            raise refuse(path, kind, f"a link to {os.readlink(path)[:200]!r}, which does not exist")
        check_inside(path, within if within is not None else os.path.dirname(path))
    else:
        flags |= os.O_NOFOLLOW  # a link swapped in after this look is refused by open, not followed
        if within is not None and not parent_checked:
            check_inside(os.path.dirname(path), within)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise refuse(path, kind, str(exc.strerror or exc)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise refuse(path, kind, f"{_kind_of(st.st_mode)}, not a regular file")
        if st.st_size > limit:
            raise refuse(path, kind, f"{st.st_size} bytes, more than a {kind} can be ({limit})")
        chunks, n = [], 0
        while n <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - n))
            if not chunk:
                break
            chunks.append(chunk)
            n += len(chunk)
        if n > limit:
            raise refuse(path, kind, f"more than a {kind} can be ({limit} bytes)")
        return b"".join(chunks)
    except OSError as exc:
        raise refuse(path, kind, str(exc.strerror or exc)) from None
    finally:
        os.close(fd)


def decode(data: bytes, path: Path, kind: str) -> str:
    """`data` as UTF-8, or StoreError naming the first bad byte's offset."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise refuse(path, kind, f"not UTF-8 text (byte {exc.start}: {data[exc.start:exc.start + 1]!r})") from None


def read_text(path: Path, kind: str, *, within: Path | None = None, parent_checked: bool = False) -> str:
    return decode(read_bytes(path, kind, within=within, parent_checked=parent_checked), path, kind)


def _int(digits: str) -> int:
    if len(digits) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(digits)} digits (at most {MAX_INT_DIGITS})")
    return int(digits)


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def too_deep(text: str) -> bool:
    """Whether the JSON text nests more than MAX_DEPTH deep, found before parsing (no recursion, no objects):
    strings and everything but brackets are dropped, then innermost pairs are removed one level a pass."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return False
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    for _ in range(MAX_DEPTH):
        inner = brackets.replace("[]", "").replace("{}", "")
        if not inner or inner == brackets:  # all matched, or mismatched (json.loads names that)
            return False
        brackets = inner
    return bool(brackets)


_SURROGATE = re.compile(r"\\u[dD][89abcdefABCDEF][0-9a-fA-F]{2}")


def has_surrogate_escape(text: str) -> bool:
    """Whether the JSON text escapes a UTF-16 surrogate (a pair stands for one character; a lone one is not
    text at all, and fails when printed or written)."""
    return "\\u" in text and _SURROGATE.search(text) is not None


def _lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        for v in (item.items() if isinstance(item, dict) else item if isinstance(item, list) else ()):
            parts = v if isinstance(item, dict) else (v,)
            for x in parts:
                if isinstance(x, str):
                    try:
                        x.encode("utf-8")
                    except UnicodeEncodeError:
                        return True
                elif isinstance(x, (dict, list)):
                    stack.append(x)
    return False


def parse_json(text: str, path: Path, kind: str) -> Any:
    """The JSON document `text` within the depth and integer limits, its strings Unicode (StoreError naming
    `path`)."""
    if too_deep(text):
        raise refuse(path, kind, f"JSON nested deeper than a record can be ({MAX_DEPTH})")
    try:
        value = json.loads(text, parse_int=_int)  # Python alone would refuse only past 4,300 digits
        if has_surrogate_escape(text) and _lone_surrogate([value]):
            raise refuse(path, kind, "a string holds a lone UTF-16 surrogate (\\uD800-\\uDFFF), which is not text")
        return value
    except RecursionError:
        raise refuse(path, kind, f"JSON nested deeper than a record can be ({MAX_DEPTH})") from None
    except ValueError as exc:  # json.JSONDecodeError is one; so is _int's refusal
        raise refuse(path, kind, f"not valid JSON: {' '.join(str(exc).split())[:200]}") from None


def loose_problem(value: Any) -> str | None:
    """Why a free-form part of a record (a dict of any JSON: `extra`, `prediction`) is past the limits a parsed
    document is held to (depth, integer digits), or None.  The typed fields have their own bounds."""
    stack, limit = [(value, 1)], 10 ** MAX_INT_DIGITS
    while stack:  # (type() is, not isinstance: JSON makes exact types, and this runs for every record read)
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return f"nested deeper than {MAX_DEPTH}"
        for v in (item.values() if type(item) is dict else item):
            t = type(v)
            if t is dict or t is list:
                stack.append((v, depth + 1))
            elif t is int and not -limit < v < limit:
                return f"an integer of more than {MAX_INT_DIGITS} digits"
    return None


def read_json(path: Path, kind: str, *, within: Path | None = None, parent_checked: bool = False) -> Any:
    """The JSON document in the file `path` (read_bytes' checks, then parse_json's)."""
    return parse_json(read_text(path, kind, within=within, parent_checked=parent_checked), path, kind)


def json_lines(text: str) -> list[Any]:
    """The JSON values of a .jsonl text, one per line; a line that is not a JSON value within the limits (a
    cut-off tail, garbage) is skipped: runlogs and event files are logs, not records."""
    values = []
    for line in text.splitlines():
        if not line.strip() or len(line) > (1 << 20):
            continue
        try:
            values.append(parse_json(line, Path("-"), "line"))
        except StoreError:
            continue
    return values
