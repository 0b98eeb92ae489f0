"""Parse message sizes and op lists from the command line: `4MiB`, `1KiB..1GiB`, `4MiB,64MiB`, `1024`.

A range `A..B` is the doubling sweep A, 2A, 4A, ... up to and including B (the usual NCCL-tests `-f 2`);
with powers of two at both ends that is every power of two between them.  Binary units (KiB = 1024) and
decimal units (KB = 1000) are both accepted, case-sensitively on the `i` so `1MB` is never silently 1 MiB.
"""

from __future__ import annotations

import re

from suite.comm.busbw import OPS

UNITS = {"": 1, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
         "KB": 10**3, "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


class CommArgError(ValueError):
    """A bad --sizes / --ops / --gpus value; the message names the option and the value."""


def parse_size(text: str, option: str = "--sizes") -> int:
    """One size in bytes; raise CommArgError naming `text` when it is not a positive whole number of bytes."""
    m = _SIZE.match(text)
    if not m or m.group(2) not in UNITS:
        raise CommArgError(f"{option}: {text!r} is not a size (use e.g. 1024, 4MiB, 1GiB, 100MB)")
    value = float(m.group(1)) * UNITS[m.group(2)]
    if value < 1 or value != int(value):
        raise CommArgError(f"{option}: {text!r} is {value:g} bytes; a size must be a whole number >= 1 byte")
    return int(value)


def parse_sizes(text: str, option: str = "--sizes") -> list[int]:
    """Sizes in bytes from a comma list whose items are sizes or `A..B` doubling ranges; sorted, unique."""
    sizes: set[int] = set()
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise CommArgError(f"{option}: empty item in {text!r}")
        if ".." in item:
            lo_text, _, hi_text = item.partition("..")
            lo, hi = parse_size(lo_text, option), parse_size(hi_text, option)
            if lo > hi:
                raise CommArgError(f"{option}: range {item!r} runs backwards ({lo} > {hi} bytes)")
            while lo <= hi:
                sizes.add(lo)
                lo *= 2
        else:
            sizes.add(parse_size(item, option))
    return sorted(sizes)


def parse_ops(text: str, option: str = "--ops") -> list[str]:
    """Collective names from a comma list (order kept, duplicates dropped); unknown names are errors."""
    ops: list[str] = []
    for name in (s.strip() for s in text.split(",")):
        if name not in OPS:
            raise CommArgError(f"{option}: unknown op {name!r}; choose from {', '.join(OPS)}")
        if name not in ops:
            ops.append(name)
    return ops


def format_size(n: int) -> str:
    """Exact compact label: the largest binary unit that divides n (1048576 -> '1MiB', 1000 -> '1000B')."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        if n >= UNITS[unit] and n % UNITS[unit] == 0:
            return f"{n // UNITS[unit]}{unit}"
    return f"{n}B"
