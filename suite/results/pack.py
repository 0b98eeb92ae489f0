"""Results that travel: run folders packed into one checksummed .tar.gz, unpacked only once verified.

`suite results pack RUN... --out smoke.tar.gz` writes one archive that another machine can `publish`,
`report` or `compare` against (they read it directly, through open_inputs).  Inside, one top folder:

    suite-results/
        <scenario>/<run>/   manifest.json, scenario.yaml, runlog.jsonl, resume-NN.json, cells/<cell>-r<k>.json
        PACK.json           format and version, when, which suite, the runs (scenario, run id, host, commit)
        SHA256SUMS          `<sha256>  <path>` per file, relative to suite-results/ (`sha256sum -c` reads it)

so find_run_dirs on the unpacked folder sees the usual root/<scenario>/<run> shape.  work/ (rank records,
launcher logs, checkpoints: possibly gigabytes) is left out; the cell results hold every measurement the
reports read.  Members come in sorted order with the files' mtimes, uid/gid 0, no owner names, modes
0644/0755.  The archive is written to a temp file beside --out and linked into place (never over an existing
file); `<out>.sha256` holds its own checksum, to be checked out of band (`unpack --sha256`).

unpack.py verifies and unpacks (and says what the checksums do and do not protect against).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import stat
import tarfile
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import suite
from suite.results import reader

TOP, SUMS, INFO = "suite-results", "SHA256SUMS", "PACK.json"
FORMAT, FORMAT_VERSION = "suite-results-pack", 1
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")
MAX_ARCHIVE_BYTES = 1 << 30  # the .tar.gz itself
MAX_MEMBERS = 100_000
MAX_FILE_BYTES = 64 << 20  # one member
MAX_TOTAL_BYTES = 4 << 30  # all members, uncompressed
MAX_HEADER_BYTES = 1 << 20  # one pax / GNU long-name header (tarfile reads it whole into memory)
SUM_LINE = re.compile(r"([0-9a-f]{64}) [ *](.+)")
_DATA_FILTER = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python >= 3.10.12 / 3.11.4


class PackError(Exception):
    """An archive that cannot be made, or is refused; the message names the path and the numbers."""


@dataclass(frozen=True)
class PackInfo:
    path: Path
    sha256: str
    sha256_path: Path
    runs: list[dict]  # as in PACK.json
    files: int  # the runs' files (PACK.json and SHA256SUMS not counted)
    bytes: int  # their size, uncompressed
    archive_bytes: int


def run_files(run: Path) -> list[Path]:
    """What pack takes from a run folder: its records, never work/ (cells/ as reader.cell_files lists it).

    Only regular files that are no links, in folders that are no links: a link is refused (PackError naming
    it), never followed, so a run folder whose `cells/x-r0.json` points at /etc/shadow cannot carry that file's
    bytes into an archive; a FIFO, device or folder in a record's place is refused the same way."""
    names = [run / n for n in (reader.MANIFEST, "scenario.yaml", "runlog.jsonl")] + sorted(run.glob("resume-*.json"))
    cells = run / "cells"
    if os.path.islink(cells):
        raise PackError(f"{cells}: a link ({os.readlink(cells)[:200]}); pack copies only what is inside the run "
                        "folder: replace the link by the folder")
    if cells.is_dir():
        names += sorted(p for p in cells.iterdir() if p.suffix == ".json" and not p.name.startswith("."))
    files = []
    for p in names:
        try:
            mode = os.lstat(p).st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(mode):
            what = f"a link to {os.readlink(p)[:200]!r}" if stat.S_ISLNK(mode) else "not a regular file"
            raise PackError(f"{p}: {what}; pack takes regular files only, never what a link points at: replace "
                            "it by the file itself or move it out of the run folder")
        files.append(p)
    return files


def _read_regular(path: Path) -> bytes:
    """A file's bytes, opened without following a link (one swapped in since run_files looked is refused)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise PackError(f"{path}: cannot read it ({exc.strerror or exc}); pack takes regular files only") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise PackError(f"{path}: not a regular file; pack takes regular files only")
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise PackError(f"{path}: over an archive's limit of {MAX_FILE_BYTES} bytes a file: pack fewer runs")
    return data


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _link_new(dest: Path, write) -> None:
    """write(file) into a temp file beside dest, fsync it, link it to dest: atomic, and never replaces dest."""
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            os.fchmod(f.fileno(), 0o644)  # mkstemp's 0600 would keep a file made to be shared from others
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, dest)
    except FileExistsError:
        raise PackError(f"{dest}: exists already; results are never overwritten (give another --out)") from None
    finally:
        os.unlink(tmp)


def _collect(paths: list[Path]) -> dict[str, Path]:
    """archive path (<scenario folder>/<run folder>) -> run folder, sorted; two runs on one path are an error."""
    chosen: dict[str, Path] = {}
    for p in map(Path, paths):
        try:
            dirs = reader.find_run_dirs(p)
        except reader.StoreError as exc:
            raise PackError(str(exc)) from None
        if not dirs:
            raise PackError(f"{p}: no run folders (folders with a manifest.json) found below it")
        for d in dirs:
            key = f"{d.resolve().parent.name}/{d.resolve().name}"
            if chosen.setdefault(key, d).resolve() != d.resolve():
                raise PackError(f"{chosen[key]} and {d} would both be {TOP}/{key} in the archive: pack them "
                                "separately or rename one of the run folders")
    return dict(sorted(chosen.items()))


def pack(paths: list[Path], out: Path) -> PackInfo:
    """One archive of the run folders at or below `paths` (see the module docstring); never overwrites out."""
    out = Path(out)
    sha_path = out.with_name(out.name + ".sha256")
    for p in (out, sha_path):
        if p.exists() or p.is_symlink():
            raise PackError(f"{p}: exists already; results are never overwritten (give another --out)")
    runs, now = _collect(paths), datetime.now(timezone.utc)
    sums: list[str] = []
    described: list[dict] = []
    n = {"members": 0, "bytes": 0}

    def add(tar: tarfile.TarFile, name: str, src: Path | None, data: bytes | Path | None = None) -> None:
        """One member: a folder (data None), bytes, or the file `data` (read only once it is known to fit)."""
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise PackError(f"{src}: its name is not UTF-8; an archive lists names as UTF-8: rename it or move it "
                            "out of the run folder") from None
        if any(c in name for c in "\n\r\\"):
            raise PackError(f"{src}: a newline or backslash in its name cannot be listed in {SUMS}")
        size = os.lstat(data).st_size if isinstance(data, Path) else len(data or b"")
        n["members"], n["bytes"] = n["members"] + 1, n["bytes"] + size
        if size > MAX_FILE_BYTES or n["bytes"] > MAX_TOTAL_BYTES or n["members"] > MAX_MEMBERS:
            raise PackError(f"{src}: over an archive's limits ({MAX_FILE_BYTES} bytes a file, {MAX_TOTAL_BYTES} "
                            f"in all, {MAX_MEMBERS} members): pack fewer runs")
        data = _read_regular(data) if isinstance(data, Path) else data
        ti = tarfile.TarInfo(f"{TOP}/{name}".rstrip("/"))
        ti.mtime = int(src.stat().st_mtime if src is not None else now.timestamp())
        ti.type, ti.mode = (tarfile.DIRTYPE, 0o755) if data is None else (tarfile.REGTYPE, 0o644)
        ti.size, ti.uid, ti.gid, ti.uname, ti.gname = len(data or b""), 0, 0, "", ""
        tar.addfile(ti, None if data is None else io.BytesIO(data))
        if data is not None:
            sums.append(f"{hashlib.sha256(data).hexdigest()}  {name}")

    def write(f) -> None:
        with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            add(tar, "", None)
            for key, run in runs.items():
                try:
                    m = reader.read_manifest(run)
                except reader.StoreError as exc:
                    raise PackError(str(exc)) from None
                if not described or described[-1]["path"].split("/")[0] != key.split("/")[0]:
                    add(tar, key.split("/")[0], run.resolve().parent)
                described.append(dict(path=key, scenario=m.scenario, run_id=m.run_id, hostname=m.hostname,
                                      git_commit=m.git_commit, created_at=m.created_at))
                entries = [(key, run, None)] + [(f"{key}/cells", run / "cells", None)] * (run / "cells").is_dir()
                entries += [(f"{key}/{p.relative_to(run).as_posix()}", p, p) for p in run_files(run)]
                for entry in sorted(entries, key=lambda e: e[0]):
                    add(tar, *entry)
            n.update(files=len(sums), run_bytes=n["bytes"])
            info = dict(format=FORMAT, format_version=FORMAT_VERSION, created_at=now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                        suite_version=suite.__version__, runs=described, files=len(sums), bytes=n["bytes"])
            add(tar, INFO, None, json.dumps(info, indent=1).encode() + b"\n")
            add(tar, SUMS, None, "".join(line + "\n" for line in sums).encode())
        if f.tell() > MAX_ARCHIVE_BYTES:
            raise PackError(f"{out}: the archive would be {f.tell()} bytes, over {MAX_ARCHIVE_BYTES}: pack fewer runs")

    out.parent.mkdir(parents=True, exist_ok=True)
    _link_new(out, write)
    digest = _sha256_file(out)
    _link_new(sha_path, lambda f: f.write(f"{digest}  {out.name}\n".encode()))
    return PackInfo(out, digest, sha_path, described, n["files"], n["run_bytes"], out.stat().st_size)
