"""Building cases: the mutator (`mutate`), and the named edits (`EDITS`, `case_from`).

`mutate(choose, where)` decides everything with `choose(n) -> 0..n-1`, always in the same order: the source
run, the kind (an archive one time in three), compare's sides, then 1-3 folder edits (edits.py), or for an
archive 0-2 edits of the run's records and then 0-2 of the archive itself (archives.py; at least one when the
records were left alone).  The same answers build the same case: `random.Random(f"{seed}:{i}").randrange`
rebuilds a campaign's case, and hypothesis's draws shrink a failing one to a few edits.  `_apply` runs one
edit and notes its line, or why it was skipped (`_Unsafe`: it would have written through a link).

`EDITS` names hand-made edits, one per hostile input met so far (the regression tests, reproducers in words);
`case_from(where, names)` applies them in order to a copy of a source, every choice answered 0 (`_fixed`).
`_start` lays out a case's folders; verdict.py's `warm` uses it for untouched cases.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tarfile
from pathlib import Path
from typing import Callable

from suite.testing.results_fuzz.archives import ARCHIVE_EDITS, _members, _pack_clean, _tree_members, _write_tar
from suite.testing.results_fuzz.case import Case, _cells, _Ctx, _plain, _rel, _Unsafe
from suite.testing.results_fuzz.documents import _resolve, _with_raw
from suite.testing.results_fuzz.edits import CONTENT_EDITS, FOLDER_EDITS, replace_special
from suite.testing.results_fuzz.values import SOURCES, Choose, _deep


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


def _apply(ctx: _Ctx, edit: Callable[[_Ctx], str]) -> None:
    try:
        ctx.case.edits.append(edit(ctx))
    except _Unsafe as exc:
        ctx.case.edits.append(f"{edit.__name__} skipped ({exc})")


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
        if path.is_dir() and not path.is_symlink():
            return "scenario.yaml: a folder (an earlier edit), left"
        text = path.read_bytes() if _plain(path) else b""
        ctx.safe(path).write_bytes(text[:40] + data + text[40:])
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
    # found by the 5,000-case campaign of seed 7
    "only-nulls": ("folder", _set("manifest.json", ("extra", "options", "only"), "[null, null]")),
    "repeats-2**53": ("folder", _set("manifest.json", ("extra", "options", "repeats"), str(2**53 + 1))),
    "-1e308-final-loss": ("folder", _set("cell", ("final_loss",), "-1e308")),
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
