"""The commands a case runs: every command that reads stored results, as arguments for `suite`.

A folder case runs results ls and show, report (markdown to stdout; then html, csv and json files), compare
(the mutated run against an untouched one, as the current side or, with `case.swap`, as the baseline),
publish, export, results pack and the unpack of what it wrote, and `run --resume` last, since it writes into
the run folder.  An archive case runs results unpack (and ls of what it unpacked), then the same readers on the
archive itself.  A command with `after` runs only when that one exited 0.  COMMAND_NAMES is the order of the
campaign's table (scripts/fuzz-results), both kinds together.
"""

from __future__ import annotations

from dataclasses import dataclass

from suite.testing.results_fuzz.case import Case


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
