"""Archive cases: the run packed by suite's own `pack`, then the archive damaged.

`_finish_archive` (mutator.py) packs an untouched copy of the run (`_pack_clean`), reads the members back
(`_members`; when the run folder was edited first, the run's members are the edited tree's: `_tree_members`,
links kept as links), lets the archive edits change that member list, and writes the tar again (`_write_tar`)
with SHA256SUMS recomputed, so that a changed member reaches the reader instead of failing its checksum;
only `edit_sums` leaves the sums stale, on purpose.

The archive edits: PACK.json edited as a document (`edit_pack_json`), SHA256SUMS damaged (`edit_sums`), a
hostile member added (`add_member`: links and hard links out, a device, a FIFO, `..` and absolute paths, long
and non-UTF-8 names, a header whose size lies, 60 MB of zeros, a file below a link out of the run), the gzip
stream damaged (`edit_gzip`: kept in `ctx.gzip_edit`, applied to the compressed bytes last).  ARCHIVE_EDITS is
what an archive case draws from.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

from suite.testing.results_fuzz.case import SECRET, _Ctx, _decoy
from suite.testing.results_fuzz.documents import _byte_edit, _edit_json
from suite.testing.results_fuzz.values import ESCAPE_MARK


def _pack_clean(run: Path, out: Path) -> None:
    from suite.results.pack import pack

    pack([run], out)


def _members(archive: Path) -> list[dict]:
    out = []
    with tarfile.open(archive, "r:gz") as tar:
        for m in tar:
            data = tar.extractfile(m).read() if m.isfile() else None
            out.append({"name": m.name, "type": m.type, "data": data, "linkname": m.linkname, "mode": m.mode,
                        "size": None})
    return out


def _tree_members(run: Path, key: str) -> list[dict]:
    """The run folder as archive members (pack's layout), whatever the edits left there (links stay links)."""
    top = "suite-results"
    out = [{"name": f"{top}/{key}", "type": tarfile.DIRTYPE}]
    for dirpath, dirnames, filenames in os.walk(run):
        dirnames[:] = sorted(d for d in dirnames if not (d == "work" and Path(dirpath) == run))
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            rel = f"{top}/{key}/{p.relative_to(run).as_posix()}"
            if p.is_symlink():
                out.append({"name": rel, "type": tarfile.SYMTYPE, "linkname": os.readlink(p)})
            elif p.is_dir():
                out.append({"name": rel, "type": tarfile.DIRTYPE})
            elif p.is_file() and p.stat().st_size <= (8 << 20):
                out.append({"name": rel, "type": tarfile.REGTYPE, "data": p.read_bytes()})
            elif p.is_file():  # a big sparse file: a header that says so, with no bytes behind it
                out.append({"name": rel, "type": tarfile.REGTYPE, "data": b"", "size": p.stat().st_size})
            else:
                out.append({"name": rel, "type": tarfile.FIFOTYPE})
    return out


def _sums(members: list[dict]) -> bytes:
    top = "suite-results/"
    lines = [f"{hashlib.sha256(m['data']).hexdigest()}  {m['name'][len(top):]}" for m in members
             if m["type"] == tarfile.REGTYPE and m.get("data") is not None and m["name"].startswith(top)
             and not m["name"].endswith("/SHA256SUMS")]
    return "".join(line + "\n" for line in lines).encode("utf-8", "surrogateescape")


def _write_tar(members: list[dict], sums: bool) -> bytes:
    if sums:
        members = [m for m in members if m["name"] != "suite-results/SHA256SUMS"]
        members.append({"name": "suite-results/SHA256SUMS", "type": tarfile.REGTYPE, "data": _sums(members)})
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for m in members:
            ti = tarfile.TarInfo(m["name"])
            ti.type, ti.mode, ti.mtime = m["type"], m.get("mode", 0o644), 1_700_000_000
            ti.linkname = m.get("linkname") or ""
            data = m.get("data")
            if ti.type == tarfile.REGTYPE:
                ti.size = len(data or b"")
                tar.addfile(ti, io.BytesIO(data or b""))
            else:
                tar.addfile(ti)
    raw = buf.getvalue()
    for m in members:  # members whose header claims more bytes than follow: rewrite their size field
        if m.get("size") is not None and m["type"] == tarfile.REGTYPE:
            raw = _lie_about_size(raw, m["name"], m["size"])
    return raw


def _lie_about_size(raw: bytes, name: str, size: int) -> bytes:
    """The first ustar header named `name` (its last 100 bytes of name) with `size`, checksum recomputed."""
    short = name.encode()[-100:] if len(name.encode()) <= 100 else None
    for off in range(0, len(raw) - 511, 512):
        block = raw[off:off + 512]
        if short is not None and block[:100].rstrip(b"\0") == short and block[257:262] == b"ustar":
            b = bytearray(block)
            b[124:136] = (b"%011o" % size + b"\0") if size < 8**11 else (b"\x80" + size.to_bytes(11, "big"))
            b[148:156] = b" " * 8
            b[148:156] = b"%06o\0 " % sum(b)
            return raw[:off] + bytes(b) + raw[off + 512:]
    return raw


def edit_pack_json(ctx: _Ctx) -> str:
    """PACK.json with one JSON edit (or, when an earlier edit left it unreadable, a byte edit)."""
    m = next((x for x in ctx.members if x["name"] == "suite-results/PACK.json"), None)
    if m is None or m.get("data") is None:
        return "no PACK.json to edit"
    try:
        doc = json.loads(m["data"])
    except (ValueError, RecursionError):
        m["data"], what = _byte_edit(m["data"], ctx.choose)
        return f"PACK.json: {what}"
    text, what = _edit_json(ctx, "pack", doc)
    m["data"] = text.encode()
    return f"PACK.json: {what}"


def edit_sums(ctx: _Ctx) -> str:
    m = next((x for x in ctx.members if x["name"] == "suite-results/SHA256SUMS"), None)
    if m is None or m.get("data") is None:
        return "no SHA256SUMS to edit"
    ctx.sums_stale = True
    op = ctx.choose(5)
    lines = m["data"].split(b"\n")
    if op == 0:
        del lines[ctx.choose(len(lines))]
        what = "a line deleted"
    elif op == 1:
        lines.insert(ctx.choose(len(lines) + 1), ctx.pick([b"garbage", b"0" * 64 + b"  ../../etc/passwd",
                                                           b"0" * 64 + b"  " + b"x" * 100000, b"\xff\xfe"]))
        what = "a bad line"
    elif op == 2:
        lines = lines * 2
        what = "every line twice"
    else:
        data, what = _byte_edit(m["data"], ctx.choose)
        m["data"] = data
        return f"SHA256SUMS: {what} (not recomputed)"
    m["data"] = b"\n".join(lines)
    return f"SHA256SUMS: {what} (not recomputed)"


def add_member(ctx: _Ctx) -> str:
    runs = [x["name"] for x in ctx.members if x["type"] == tarfile.DIRTYPE and x["name"].count("/") == 2]
    base = runs[0] if runs else "suite-results/x/y"
    kinds = {
        "symlink to a passwd outside": {"name": f"{base}/cells/zz-r0.json", "type": tarfile.SYMTYPE,
                                        "linkname": str(_decoy(ctx))},
        "symlink to ..": {"name": f"{base}/cells/up", "type": tarfile.SYMTYPE, "linkname": "../../../../.."},
        "hard link to a passwd outside": {"name": f"{base}/cells/zz-r0.json", "type": tarfile.LNKTYPE,
                                          "linkname": str(_decoy(ctx))},
        "hard link inside": {"name": f"{base}/cells/zz-r0.json", "type": tarfile.LNKTYPE,
                             "linkname": f"{base}/manifest.json"},
        "character device": {"name": f"{base}/cells/zz-r0.json", "type": tarfile.CHRTYPE},
        "FIFO": {"name": f"{base}/cells/zz-r0.json", "type": tarfile.FIFOTYPE},
        "'..' path": {"name": f"suite-results/../../{ESCAPE_MARK}", "type": tarfile.REGTYPE, "data": b"x"},
        "absolute path": {"name": f"/tmp/{ESCAPE_MARK}", "type": tarfile.REGTYPE, "data": b"x"},
        "duplicate manifest": {"name": f"{base}/manifest.json", "type": tarfile.REGTYPE, "data": b"{}"},
        "file inside a file": {"name": f"{base}/manifest.json/x", "type": tarfile.REGTYPE, "data": b"{}"},
        "10000-char name": {"name": f"{base}/cells/{'x' * 10000}-r0.json", "type": tarfile.REGTYPE, "data": b"{}"},
        "non-UTF-8 name": {"name": f"{base}/cells/\udcff\udcfe-r0.json", "type": tarfile.REGTYPE, "data": b"{}"},
        "a size that lies": {"name": f"{base}/cells/lie-r0.json", "type": tarfile.REGTYPE, "data": b"{}",
                             "size": 1 << 40},
        "outside the run folders": {"name": "suite-results/notes.txt", "type": tarfile.REGTYPE, "data": b"hi"},
        "60 MB of zeros": {"name": f"{base}/cells/zeros-r0.json", "type": tarfile.REGTYPE, "data": bytes(60 << 20)},
        "another run folder": {"name": "suite-results/smoke/0099_0000000_20260101T000000Z", "type": tarfile.DIRTYPE},
    }
    name = ctx.pick(list(kinds) + ["a file through a link"])
    if name == "a file through a link":  # a link out, then a file below it: written through it unless refused
        up = "../" * 12 + str(ctx.case.outside).lstrip("/")
        ctx.members += [{"name": f"{base}/cells/out", "type": tarfile.SYMTYPE, "linkname": up},
                        {"name": f"{base}/cells/out/{ESCAPE_MARK}", "type": tarfile.REGTYPE, "data": b"x"}]
        ctx.case.outside.mkdir(exist_ok=True)
    else:
        ctx.members.insert(ctx.choose(len(ctx.members) + 1), dict(kinds[name]))
    if "passwd" in name:
        ctx.case.leak = SECRET
    return f"archive member added: {name}"


def edit_gzip(ctx: _Ctx) -> str:
    op = ctx.choose(7)
    n = ctx.choose(1 << 16)
    edits = [
        (lambda gz: gz[:len(gz) * (n % 100) // 100], "gzip truncated"),
        (lambda gz: gz[:n % len(gz)] + bytes([gz[n % len(gz)] ^ 0x20]) + gz[n % len(gz) + 1:], "a gzip byte flipped"),
        (lambda gz: bytes((i * 7919) % 256 for i in range(4096)), "garbage instead of gzip"),
        (lambda gz: b"", "an empty file"),
        (lambda gz: gzip.decompress(gz), "a plain tar (not gzipped)"),
        (lambda gz: gz + gz, "two gzip streams concatenated"),
        (lambda gz: gz + b"\x00garbage" * 100, "trailing garbage"),
    ]
    ctx.gzip_edit, what = edits[op]
    return what


ARCHIVE_EDITS = [edit_pack_json, edit_sums, add_member, add_member, edit_gzip]
