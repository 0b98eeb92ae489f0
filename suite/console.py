"""Human-readable rendering shared by the CLI commands: units and rich tables."""

from __future__ import annotations

from typing import Any, Iterable

from rich.console import Console
from rich.table import Table

# Wide tables stay readable when piped (rich falls back to 80 columns without a terminal).
console = Console(width=None if Console().is_terminal else 240)
err_console = Console(stderr=True, width=None if Console(stderr=True).is_terminal else 240)


def nbytes(n: float | None) -> str:
    """Bytes with a binary unit (KiB, MiB, GiB, TiB)."""
    if n is None:
        return "-"
    for scale, unit in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def si(n: float | None, unit: str = "") -> str:
    if n is None:
        return "-"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {prefix}{unit}"
    return f"{n:.3g} {unit}".strip()


def table(title: str, columns: list[str], rows: Iterable[list[Any]]) -> Table:
    t = Table(title=title, show_lines=False)
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*("-" if v is None else str(v) for v in r))
    return t
