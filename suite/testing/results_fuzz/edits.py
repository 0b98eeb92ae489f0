"""The edits of a run folder: what the mutator does to a copy of a real run.

Each edit takes a `_Ctx`, changes the run at `ctx.run` and returns a line saying what it did (the case's
`edits`: a reproducer in words).  The records: a cell, the manifest or a resume-NN.json with one document edit
(`edit_json`), any record's bytes (`edit_bytes`), scenario.yaml bombs, aliases and tags (`edit_scenario`),
runlog.jsonl lines (`edit_runlog`).  The folder: a record, cells/ or work/ replaced by a link (to a device, a
decoy outside the run, another record, itself, nowhere), a FIFO, a folder or a 200 MB sparse file
(`replace_special`); records removed (`remove`); junk beside them (`junk`); cells/ a link (`link_cells`); the
run folder renamed oddly (`rename_run`).  Every write goes through `ctx.safe` (case.py), so a link one edit made
is replaced by the next, never written through.

FOLDER_EDITS is what a folder case draws from; CONTENT_EDITS (the records only: no links, no rename) is what an
archive case draws from before the run is packed.  Repeats in a list weight the draw.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from suite.testing.results_fuzz.case import SECRET, _cells, _Ctx, _decoy, _load, _plain, _real_dir, _rel, _remove
from suite.testing.results_fuzz.documents import _byte_edit, _edit_json
from suite.testing.results_fuzz.values import SOURCES, YAML_HOSTILE, _deep


# Link targets outside the case that no process can write to, even root's: kernel views, devices that discard.
SYSTEM_TARGETS = ["/dev/zero", "/dev/null", "/dev/urandom", "/proc/self/environ"]
SYSTEM_DIRS = ["/proc/self/fd", "/proc/sys/kernel", "/sys/kernel"]


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
    if path.is_dir() and not path.is_symlink():  # an earlier edit of this case made it a folder: nothing to write
        return "scenario.yaml: a folder (an earlier edit), left"
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
    if path.is_dir() and not path.is_symlink():  # an earlier edit of this case made it a folder: nothing to write
        return "runlog.jsonl: a folder (an earlier edit), left"
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
    if ctx.run.name == name:  # renamed so by an earlier edit of this case
        return f"run folder kept its name {name[:40]!r}"
    new = ctx.safe(ctx.run.parent / name)
    ctx.run.rename(new)
    ctx.case.run = new
    return f"run folder renamed {name[:40]!r}"


FOLDER_EDITS = [edit_json, edit_json, edit_json, edit_json, edit_bytes, edit_scenario, edit_runlog, replace_special,
                replace_special, remove, junk, link_cells, rename_run]
CONTENT_EDITS = [edit_json, edit_json, edit_json, edit_bytes, edit_scenario, edit_runlog, remove, junk]
