"""Unpacking a `suite results pack` archive: verified first, moved into place only then (see pack.py).

unpack treats the archive as untrusted and is bounded in time and memory whatever it holds: the limits below
are checked from the headers before a member's bytes are read, and the streams are counted as they are read.
Only regular files and folders under suite-results/ pass (no links, devices, absolute paths or `..`; tarfile's
"data" filter too).  Everything is extracted into a hidden temp folder inside the destination, and run folders
are moved into place only after every file matched SHA256SUMS, every listed file was there and PACK.json
agreed: a refused archive leaves nothing behind.  Append-only: a run folder already there is skipped when its
files are byte-identical, and refused when they differ.

What the checksums protect against: damage (a cut-off download, a flipped bit) and a file edited without its
line in SHA256SUMS.  Whoever rewrites a file *and* SHA256SUMS makes a consistent archive; only the archive's
own sha256, compared with one obtained another way (`--sha256`), catches that.
"""

from __future__ import annotations

import contextlib
import filecmp
import gzip
import hashlib
import os
import re
import shutil
import tarfile
import tempfile
import zlib
from pathlib import Path, PurePosixPath

from suite.results import bounded, reader
from suite.results import pack as limits  # the MAX_* limits, read at call time (tests lower them)
from suite.results.pack import (ARCHIVE_SUFFIXES, FORMAT, FORMAT_VERSION, INFO, SUM_LINE, SUMS, TOP, PackError, _DATA_FILTER,
                                _sha256_file, run_files)


def clip(text: str, limit: int = 200) -> str:
    """A name from the archive, short enough for one error line."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


class _Refused(Exception):
    """A refusal raised while the archive is read (inside tarfile, a stream); unpack names the archive."""


class Unpacked(list):
    """The run folders unpacked (a list of Paths); .skipped: those that were there already, byte-identical."""

    def __init__(self, unpacked: list[Path], skipped: list[Path]):
        super().__init__(unpacked)
        self.skipped = skipped


class _Counted:
    """A read-only stream that counts (and may hash) what passes through, and refuses more than `limit` bytes."""

    def __init__(self, src, limit: int, what: str, digest=None):
        self.src, self.limit, self.what, self.digest, self.n = src, limit, what, digest, 0

    def read(self, size: int = -1) -> bytes:
        data = self.src.read(size)
        self.n += len(data)
        if self.n > self.limit:
            raise _Refused(f"{self.what} is over {self.limit} bytes")
        if self.digest is not None:
            self.digest.update(data)
        return data


class _Header(tarfile.TarInfo):
    def _proc_member(self, tar):  # tarfile reads a pax / long-name header's body whole: bound it first
        if self.type in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME,
                         tarfile.GNUTYPE_LONGLINK) and self.size > limits.MAX_HEADER_BYTES:
            raise _Refused(f"a tar header of {self.size} bytes is over the limit of {limits.MAX_HEADER_BYTES}")
        return super()._proc_member(tar)


def _check_member(m: tarfile.TarInfo, seen: dict[str, str]) -> str:
    """The member's path below TOP, or _Refused saying why not.  seen: path -> "file", "dir", or "parent" (a
    folder made for a member below it, which may come as a member of its own later)."""
    parts = PurePosixPath(m.name).parts
    kind = "" if m.isdir() or m.type in (tarfile.REGTYPE, tarfile.AREGTYPE) else (
        "a symbolic link" if m.issym() else "a hard link" if m.islnk() else "a device" if m.isdev() else
        f"of tar type {m.type!r}")
    why = (f"is {kind}: only regular files and folders are allowed" if kind else
           "has a name too long for a file system" if len(m.name.encode("utf-8", "surrogateescape")) > 1024 or
           any(len(p.encode("utf-8", "surrogateescape")) > 255 for p in parts) else
           "is an absolute path" if m.name.startswith("/") else
           "has '..' in its path" if ".." in parts else
           "is not a plain relative path" if "/".join(parts) != m.name else
           f"is outside {TOP}/" if not parts or parts[0] != TOP else
           "appears twice" if m.name in seen and not (m.isdir() and seen[m.name] == "parent") else
           "is inside a file" if any(seen.get("/".join(parts[:i])) == "file" for i in range(1, len(parts))) else
           f"is {m.size} bytes, over the limit of {limits.MAX_FILE_BYTES}" if m.size > limits.MAX_FILE_BYTES else
           "is a file outside the run folders (<scenario>/<run>/...)" if m.isfile() and len(parts) <= 3 and not (
               len(parts) == 2 and parts[1] in (SUMS, INFO)) else "")
    if why:
        raise _Refused(f"member {clip(m.name)!r} {why}")
    for i in range(1, len(parts)):
        seen.setdefault("/".join(parts[:i]), "parent")
    seen[m.name] = "file" if m.isfile() else "dir"
    return "/".join(parts[1:])


def _extract(archive: Path, staging: Path) -> tuple[str, dict[str, str]]:
    """Stream the archive into staging through every check: (the archive's sha256, {file: its sha256})."""
    digest, files, seen, total = hashlib.sha256(), {}, {}, 0
    with open(archive, "rb") as f:
        raw = _Counted(f, limits.MAX_ARCHIVE_BYTES, "the archive", digest)
        with gzip.GzipFile(fileobj=raw, mode="rb") as gz:
            # the members' bytes plus headers and padding (2 KiB a member)
            stream = _Counted(gz, limits.MAX_TOTAL_BYTES + 2048 * limits.MAX_MEMBERS, "the uncompressed tar stream")
            with tarfile.open(fileobj=stream, mode="r|", tarinfo=_Header) as tar:
                for count, m in enumerate(tar, 1):
                    rel, total = _check_member(m, seen), total + m.size
                    if count > limits.MAX_MEMBERS or total > limits.MAX_TOTAL_BYTES:
                        raise _Refused(f"more than {limits.MAX_MEMBERS} members or {limits.MAX_TOTAL_BYTES} bytes "
                                       f"uncompressed (the limits; {count} members, {total} bytes so far)")
                    tar.extract(m, staging, **_DATA_FILTER)
                    if m.isfile():
                        files[rel] = _sha256_file(staging / m.name)
            while stream.read(1 << 20):  # to the end: there gzip checks its CRC and length (a cut-off tail)
                pass
        while raw.read(1 << 20):
            pass
    return digest.hexdigest(), files


def _verify(archive: Path, top: Path, files: dict[str, str]) -> list[str]:
    """SHA256SUMS against the files, PACK.json against the folders; the run folders (<scenario>/<run>)."""
    damaged = "the archive was modified or damaged"
    for name in (SUMS, INFO):
        if name not in files:
            raise PackError(f"{archive} is truncated or not a suite results archive (no {TOP}/{name} in it)")
    listed: dict[str, str] = {}
    try:
        sums = bounded.read_bytes(top / SUMS, "checksums", within=top)
    except reader.StoreError as exc:
        raise PackError(f"{archive}: {exc}") from None
    for i, line in enumerate(sums.decode("utf-8", "replace").splitlines(), 1):
        match = SUM_LINE.fullmatch(line)
        if not match or listed.setdefault(match.group(2), match.group(1)) != match.group(1):
            raise PackError(f"{archive}: {TOP}/{SUMS} line {i} is not '<sha256>  <path>', once a path: {damaged}")
    for name in sorted(set(files) - {SUMS} - set(listed)):
        raise PackError(f"{archive}: {TOP}/{clip(name)} is not listed in {SUMS}: {damaged}")
    for name in sorted(set(listed) - set(files)):
        raise PackError(f"{archive}: {TOP}/{clip(name)} is listed in {SUMS} but not in the archive: {damaged}")
    for name in sorted(n for n in listed if listed[n] != files[n]):
        raise PackError(f"{archive}: checksum mismatch: {TOP}/{clip(name)}: {damaged}")
    try:
        info = bounded.read_json(top / INFO, "pack metadata", within=top)
        described, version = sorted(str(r["path"]) for r in info["runs"]), info["format_version"]
        if info["format"] != FORMAT or not isinstance(version, int) or version > FORMAT_VERSION:
            raise ValueError(f"format {info['format']!r} version {version!r}; this suite reads {FORMAT!r} up to "
                             f"version {FORMAT_VERSION}")
    except (ValueError, KeyError, TypeError, reader.StoreError) as exc:
        raise PackError(f"{archive}: {TOP}/{INFO}: not a suite results archive it can read "
                        f"({' '.join(str(exc).split())[:300]})") from None
    runs = sorted(f"{s.name}/{r.name}" for s in top.iterdir() if s.is_dir() for r in s.iterdir())
    if runs != described or not all((top / r / reader.MANIFEST).is_file() for r in runs):
        raise PackError(f"{archive}: {INFO} lists the runs {clip(str(described))}; the archive holds "
                        f"{clip(str(runs))}, each of which must have a {reader.MANIFEST}")
    return runs


def _differs(staged: Path, dest: Path) -> str:
    """Why dest (a run folder already there) is not the staged one, or "" when its files are byte-identical."""
    if not dest.is_dir() or dest.is_symlink():
        return "it is not a folder"
    ours = {p.relative_to(staged).as_posix(): p for p in staged.rglob("*") if p.is_file()}
    theirs = {p.relative_to(dest).as_posix(): p for p in run_files(dest)}
    if ours.keys() != theirs.keys():
        return f"files on one side only: {', '.join(sorted(ours.keys() ^ theirs.keys())[:3])}"
    return next((f"{k} differs" for k in sorted(ours) if not filecmp.cmp(ours[k], theirs[k], shallow=False)), "")


def unpack(archive: Path, into: Path, sha256: str | None = None) -> Unpacked:
    """Verify `archive`, then move its run folders to `into`/<scenario>/<run>; PackError, leaving nothing, if not."""
    archive, into = Path(archive), Path(into)
    expected = sha256.strip().lower() if sha256 is not None else None
    if expected is not None and not re.fullmatch(r"[0-9a-f]{64}", expected):
        raise PackError(f"--sha256 {sha256!r} is not a sha256 (64 hex digits)")
    if not archive.is_file():
        raise PackError(f"{archive}: {'not a regular file' if archive.exists() else 'no such file'}")
    if archive.stat().st_size > limits.MAX_ARCHIVE_BYTES:
        raise PackError(f"{archive}: {archive.stat().st_size} bytes, over the limit of {limits.MAX_ARCHIVE_BYTES}")
    into.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".suite-unpack-", dir=into))  # hidden: no reader looks inside
    try:
        try:
            digest, files = _extract(archive, staging)
        except (_Refused, getattr(tarfile, "FilterError", _Refused)) as exc:
            raise PackError(f"{archive}: refused: {exc}") from None
        except (tarfile.TarError, gzip.BadGzipFile, EOFError, zlib.error, RecursionError) as exc:
            raise PackError(f"{archive} is truncated or not a suite results archive ({exc})") from None
        if expected is not None and digest != expected:
            raise PackError(f"{archive}: its sha256 is {digest}, not the expected {expected}: the archive was "
                            "modified or damaged")
        top, moves, skipped = staging / TOP, [], []
        for run in _verify(archive, staging / TOP, files):
            if not ((into / run).exists() or (into / run).is_symlink()):
                moves.append(into / run)
            elif why := _differs(top / run, into / run):
                raise PackError(f"{into / run}: a run folder of that name is there already, with other content "
                                f"({why}); results are never overwritten: unpack into another folder")
            else:
                skipped.append(into / run)
        for dest in moves:
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.rename(top / dest.relative_to(into), dest)
        return Unpacked(moves, skipped)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def open_inputs(paths: list[Path], stack: contextlib.ExitStack) -> list[Path]:
    """paths, each archive (a file named *.tar.gz or *.tgz) verified and unpacked into a temp folder that lives
    as long as `stack`: what lets report, compare and publish read an archive directly."""
    opened = []
    for p in map(Path, paths):
        if p.name.endswith(ARCHIVE_SUFFIXES) and p.is_file():
            try:
                opened.append(Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="suite-pack-"))))
                unpack(p, opened[-1])
            except OSError as exc:  # the temp folder's disk, not the archive: still one clean line
                raise PackError(f"{p}: cannot unpack it into a temp folder ({exc}); free space in "
                                f"{tempfile.gettempdir()} or unpack it with `suite results unpack`") from exc
        else:
            opened.append(p)
    return opened
