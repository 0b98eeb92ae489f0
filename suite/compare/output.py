"""How a Comparison is shown: a rich terminal table and GitHub-flavoured Markdown (a CI job summary).

Both list what needs a person's attention — regressions first, then improvements, then inconclusive checks —
and count the unchanged ones; cells present on one side only and environment differences come after.
JUnit XML (every check, for CI test views) lives in junit.py.
"""

from __future__ import annotations

from suite.compare.comparison import Comparison, Finding
from suite.report.markdown import table as md_table

ORDER = {"regression": 0, "machine-differs": 1, "improvement": 2, "inconclusive": 3, "skipped": 4, "unchanged": 5}
HEADER = ["cell", "axes", "metric", "verdict", "baseline", "current", "change", "detectable", "p", "noise", "detail"]


def summary(c: Comparison) -> str:
    counts = {v: sum(f.verdict == v for f in c.findings) for v in ORDER}
    regressed = len({f.cell_id for f in c.regressions})
    line = (f"{c.matched} cells compared: {counts['regression']} regression(s) in {regressed} cell(s), "
            f"{counts['improvement']} improvement(s), "
            + (f"{counts['machine-differs']} timing check(s) on machines that differed, "
               if counts["machine-differs"] else "")
            + f"{counts['inconclusive']} inconclusive, "
            f"{counts['unchanged']} unchanged, {counts['skipped']} skipped checks")
    if c.only_baseline or c.only_current:
        line += f"; {len(c.only_baseline)} cell(s) only in baseline, {len(c.only_current)} only in current"
    return line


def notable(c: Comparison) -> list[Finding]:
    return sorted((f for f in c.findings if f.verdict in ("regression", "machine-differs", "improvement",
                                                          "inconclusive")),
                  key=lambda f: (ORDER[f.verdict], f.cell, f.metric))


NOISE_HEADER = ["cell", "axes", "metric", "verdict", "change", "detectable", "judged against"]


def _pct(v: float | None, spec: str = ".1%") -> str:
    return "-" if v is None else format(v, spec)


def noise_rows(c: Comparison) -> list[list[str]]:
    """Every timing verdict, unchanged ones too: how much the cell moved, the smallest change the comparison
    could have flagged, and the noise it was judged against (what a nightly reader needs to trust a green)."""
    rows = [f for f in c.findings if f.noise]
    return [[f.cell_id, f.cell, f.metric, f.verdict, _pct(f.change, "+.1%"), _pct(f.detectable), f.noise]
            for f in sorted(rows, key=lambda f: (f.cell, f.metric))]


def _line(f: Finding) -> list[str]:
    return [f.cell_id, f.cell, f.metric, f.verdict, f.baseline, f.current,
            _pct(f.change, "+.1%"), _pct(f.detectable), _pct(f.p_value, ".3g"), f.noise or "-", f.detail]


def thresholds_line(c: Comparison) -> str:
    return ("thresholds: " + ", ".join(f"{k}={v:.2%}" for k, v in c.thresholds.items())
            + f"; alpha={c.alpha} (a timing regression is a change past its threshold with {1 - c.alpha:.0%} "
            "confidence, judged against the spread between runs: docs/compare.md)")


def to_markdown(c: Comparison) -> str:
    verdict = "**regression**" if c.regressions else "no regression"
    parts = ["## suite compare", "", f"{verdict}: {summary(c)}", "", thresholds_line(c), ""]
    if c.env:
        parts += ["### Environments differ", "", md_table(["field", "baseline", "current"],
                                                          [[d.field, d.baseline, d.current] for d in c.env]), ""]
    rows = notable(c)
    if rows:
        parts += [md_table(HEADER, [_line(f) for f in rows]), ""]
    timing = noise_rows(c)
    if timing:
        parts += ["### Timing: noise and the smallest detectable change", "",
                  md_table(NOISE_HEADER, timing), ""]
    for title, cells in (("Only in baseline", c.only_baseline), ("Only in current", c.only_current)):
        if cells:
            parts += [f"### {title} ({len(cells)})", "", md_table(["cell", "axes"], [list(x) for x in cells]), ""]
    return "\n".join(parts)


def terminal_rows(c: Comparison) -> list[Finding]:
    """The one terminal table's rows: every check that needs a person (regressions first), then the timing checks
    that were unchanged (with the noise they were judged against: what a nightly reader needs to trust a green)."""
    rows = notable(c)
    shown = {id(f) for f in rows}
    return rows + sorted((f for f in c.findings if f.noise and id(f) not in shown), key=lambda f: (f.cell, f.metric))


def print_terminal(c: Comparison, console) -> None:
    """One table of checks, sized to the terminal (suite.console.table: the least important columns go first
    when it is narrow); every value is plain text (error tails like "[rank0]: ..." are text, not markup)."""
    from rich.markup import escape

    from suite.console import styled, table

    style = {"regression": "bold red", "machine-differs": "magenta", "improvement": "green", "inconclusive": "yellow"}
    if c.env:
        console.print(table("environments differ", ["field", "baseline", "current"],
                            [[d.field, d.baseline, d.current] for d in c.env]))
    rows = terminal_rows(c)
    if rows:
        lines = []
        for f in rows:
            line: list = _line(f)
            line[3] = styled(f.verdict, style.get(f.verdict, ""))
            lines.append(line)
        console.print(table("suite compare", HEADER, lines, flexible="detail",
                            optional=["p", "noise", "detectable", "baseline", "current", "axes"]))
    for title, cells in (("only in baseline", c.only_baseline), ("only in current", c.only_current)):
        for cid, desc in cells:
            console.print(f"[yellow]{title}:[/yellow] {escape(cid)} {escape(desc)}", highlight=False)
    console.print(thresholds_line(c), highlight=False, markup=False)
    console.print(("[bold red]REGRESSION[/bold red] " if c.regressions else "[green]ok[/green] ") + summary(c),
                  highlight=False)
