"""One record's content edited, wherever the record is kept: a JSON document, or raw bytes.

`_edit_json(ctx, kind, doc)` gives the new text of a parsed document (a cell, the manifest, a resume file,
PACK.json) with one edit, all choices by `ctx.choose`: a value replaced by a hostile one (op 0: a field the
commands compute with, by `kind`; op 1: any), a key or list item deleted, an unknown key added, schema_version
changed, a key given twice, or the whole document replaced.  A hostile value is spliced in as raw text
(`_with_raw`), so that NaN, Infinity and nesting beyond json.dumps's recursion reach the reader as in a file.
A path into a document is a tuple of keys and indexes; a pattern's `*` is a list index, chosen by `_resolve`.

`_byte_edit(data, choose)` damages bytes: emptied, truncated, a byte changed, non-UTF-8 inserted, re-encoded
as UTF-16, a BOM, NULs, garbage.  The folder edits (edits.py) write what these return into a record's file,
the archive edits (archives.py) into a member.
"""

from __future__ import annotations

import contextlib
import json

from suite.testing.results_fuzz.case import _Ctx
from suite.testing.results_fuzz.values import (BAD_BYTES, HOSTILE_JSON, MANIFEST_FIELDS, MEASURED, PACK_FIELDS,
                                               SCHEMA_VERSIONS, Choose)


def _all_paths(doc, prefix=()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _all_paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _all_paths(v, prefix + (i,))
    return out


def _at(doc, path: tuple):
    for part in path:
        doc = doc[part]
    return doc


def _resolve(doc, pattern: tuple, choose: Choose) -> tuple | None:
    """A concrete path for a pattern (`*`: a list index, chosen); a missing last key of an object is created;
    None when the document lacks the rest."""
    path, node = (), doc
    for i, part in enumerate(pattern):
        if part == "*":
            if not isinstance(node, list) or not node:
                return None
            part = choose(len(node))
        elif not isinstance(node, dict):
            return None
        elif part not in node:
            return path + (part,) if i == len(pattern) - 1 else None
        path, node = path + (part,), node[part]
    return path


_SENTINEL = "\x00fuzz-sentinel\x00"


def _with_raw(doc, path: tuple, raw: str) -> str:
    """doc as JSON text with the value at `path` (created in its parent object if missing) replaced by `raw`."""
    if not path:
        return raw
    _at(doc, path[:-1])[path[-1]] = _SENTINEL
    return json.dumps(doc, indent=1).replace(json.dumps(_SENTINEL), raw, 1)


def _fields(kind: str) -> list[tuple]:
    return {"cell": MEASURED, "pack": PACK_FIELDS}.get(kind, MANIFEST_FIELDS)


def _dotted(path: tuple) -> str:
    return ".".join(map(str, path)) or "<document>"


def _edit_json(ctx: _Ctx, kind: str, doc, op: int | None = None) -> tuple[str, str]:
    """(new text, description) for one edit of the JSON document `doc` (op chosen unless given)."""
    choose = ctx.choose
    op = choose(6) if op is None else op
    paths = _all_paths(doc)
    if op in (0, 1):  # a value replaced (op 0: a field the commands compute with)
        where = _resolve(doc, ctx.pick(_fields(kind)), choose) if op == 0 else None
        where = where if where is not None else paths[choose(len(paths))]
        name, make = ctx.pick(HOSTILE_JSON)
        return _with_raw(doc, where, make()), f"{_dotted(where)} = {name}"
    if op == 2:  # a key or list item deleted
        where = _resolve(doc, ctx.pick(_fields(kind)), choose) if choose(2) else paths[choose(len(paths))]
        if not where:
            return "{}", "every key deleted"
        with contextlib.suppress(KeyError, IndexError, TypeError):
            del _at(doc, where[:-1])[where[-1]]
        return json.dumps(doc, indent=1), f"{_dotted(where)} deleted"
    if op == 3:  # an unknown key
        objects = [p for p in paths if isinstance(_at(doc, p), dict)]
        if not objects:
            return json.dumps(doc), "no object to add a key to"
        where = objects[choose(len(objects))] + ("x_fuzz_unknown",)
        name, make = ctx.pick(HOSTILE_JSON[:12] + [("1", lambda: "1")])
        return _with_raw(doc, where, make()), f"{_dotted(where)} = {name}"
    if op == 4:  # schema_version
        if not isinstance(doc, dict):
            return json.dumps(doc), "no schema_version (not an object)"
        raw = ctx.pick(SCHEMA_VERSIONS)
        return _with_raw(doc, ("schema_version",), raw), f"schema_version = {raw[:20]}"
    if choose(2) and isinstance(doc, dict) and doc:  # a key given twice, the second time hostile
        key = ctx.pick(list(doc))
        name, make = ctx.pick(HOSTILE_JSON)
        text = json.dumps(doc, indent=1)
        return text[:text.rindex("}")] + f', {json.dumps(key)}: {make()}\n}}\n', f"duplicate key {key} = {name}"
    name, make = ctx.pick(HOSTILE_JSON)
    return make(), f"whole document = {name}"


def _byte_edit(data: bytes, choose: Choose) -> tuple[bytes, str]:
    op = choose(9)
    pos = choose(len(data) + 1)
    if op == 0:
        return b"", "emptied"
    if op == 1:
        return data[:pos], f"truncated at {pos}"
    if op == 2:
        b = choose(256)
        return data[:pos] + bytes([b]) + data[pos + 1:], f"byte {pos} = {b:#04x}"
    if op == 3:
        bad = BAD_BYTES[choose(len(BAD_BYTES))]
        return data[:pos] + bad + data[pos:], f"{bad!r} inserted at {pos}"
    if op == 4:
        return data.decode("utf-8", "replace").encode("utf-16"), "re-encoded as UTF-16"
    if op == 5:
        return b"\xef\xbb\xbf" + data, "a UTF-8 BOM prepended"
    if op == 6:
        return data.replace(b"\n", b"\x00\n"), "NULs before every newline"
    if op == 7:
        return data.replace(b"a", b"\xe4"), "latin-1 bytes"
    return bytes(choose(256) for _ in range(1 + choose(64))) * (1 + choose(50)), "replaced by garbage"
