"""Python module names that settings carry (SUITE_PLUGINS, SUITE_TRUST, a factory's module): their one form.

A module name is Python identifiers joined by dots: no `/`, no `..`, no leading dot (a relative import has no
meaning for a setting).  Checking the form before anything is imported turns `SUITE_PLUGINS=..` or
`os/path:join` into one clean error instead of an import machinery traceback.
"""

from __future__ import annotations

import re

MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def parse_names(text: str, what: str) -> list[str]:
    """The module names of a comma-separated list; ValueError naming `what` and the first malformed entry."""
    names = [n.strip() for n in text.split(",")]
    for name in names:
        if name and not MODULE.fullmatch(name):
            raise ValueError(f"{what}: {name[:100]!r} is not a module name (Python names joined by dots, e.g. "
                             "mypkg.plugins)")
    return [n for n in names if n]
