"""`suite results pack / unpack`: archives that round-trip, and every way a bad archive is refused cleanly."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import shutil
import tarfile

import pytest
from report_fixtures import make_cells, make_manifest, make_result, write_run

from suite.results import pack as packmod
from suite.results.pack import PackError, pack
from suite.results.reader import load_runs
from suite.results.unpack import open_inputs, unpack

CELL = "fixture/0001_abc1234_20250101T000000Z/cells"


def results(root, seed: int = 0):
    """Two runs of one scenario and one of another, in the runner's layout (plus work/ and a temp file)."""
    cells = make_cells(strategy=["ddp", "zero3"])
    runs = [write_run(root, make_manifest(run_no=k), [make_result(c, seed=seed + k) for c in cells]) for k in (1, 2)]
    runs.append(write_run(root, make_manifest("other", run_no=1), [make_result(cells[0], seed=seed)]))
    (runs[0] / "work" / "a1").mkdir(parents=True)
    (runs[0] / "work" / "a1" / "rank0.json").write_text("{}")
    (runs[0] / "cells" / ".x.json.123.tmp").write_text("partial")
    (runs[0] / "runlog.jsonl").write_text('{"event": "run-start"}\n')
    return root


@pytest.fixture
def archive(tmp_path):
    return pack([results(tmp_path / "results")], tmp_path / "out" / "smoke.tar.gz")


def members(path):
    """[(TarInfo, bytes or None)] of an archive, in order."""
    with tarfile.open(path, "r:gz") as tar:
        return [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()]


def write_tar(path, entries):
    """A .tar.gz of [(TarInfo, bytes or None)], sizes taken from the bytes."""
    with gzip.open(path, "wb") as gz, tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in entries:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def remade(info, tmp_path, edit):
    """The archive re-made with edit(name, bytes) -> bytes applied to each file (None drops it)."""
    entries = [(m, edit(m.name, data) if data is not None else None) for m, data in members(info.path)]
    return write_tar(tmp_path / "remade.tar.gz", [(m, d) for m, d in entries if m.isdir() or d is not None])


def refused(archive_path, into, match, **kw):
    with pytest.raises(PackError, match=match) as exc:
        unpack(archive_path, into, **kw)
    assert not into.exists() or list(into.iterdir()) == [], "a refused archive left something behind"
    return str(exc.value)


def test_round_trip_gives_the_same_runs(archive, tmp_path):
    src = load_runs([tmp_path / "results"])
    assert len(archive.runs) == 3 and archive.files == 12  # 3 manifests, 3 scenarios, 5 cells, 1 runlog
    assert archive.sha256 == hashlib.sha256(archive.path.read_bytes()).hexdigest()
    assert archive.sha256_path.read_text() == f"{archive.sha256}  smoke.tar.gz\n"
    got = unpack(archive.path, tmp_path / "dest")
    assert [p.relative_to(tmp_path / "dest").as_posix() for p in got] == [r["path"] for r in archive.runs]
    back = load_runs([tmp_path / "dest"])
    assert [r.manifest for r in back] == [r.manifest for r in src]
    assert [r.results for r in back] == [r.results for r in src]
    assert [r.scenario_yaml for r in back] == [r.scenario_yaml for r in src]
    names = [m.name for m, _ in members(archive.path)]
    assert names == sorted(names[:-2]) + ["suite-results/PACK.json", "suite-results/SHA256SUMS"]
    assert all(n.startswith("suite-results") for n in names)
    assert not any("/work" in n or ".tmp" in n for n in names)  # work/ and temp files are left out
    assert {(m.uid, m.gid, m.uname, m.gname, m.mode) for m, d in members(archive.path) if d is not None} == {
        (0, 0, "", "", 0o644)}


def test_cli_pack_unpack_and_compare_an_archive(cli, tmp_path):
    root = results(tmp_path / "results")
    out = tmp_path / "smoke.tar.gz"
    r = cli("results", "pack", root, "--out", out)
    assert r.exit_code == 0, r.output
    sha = hashlib.sha256(out.read_bytes()).hexdigest()
    assert "packed 3 run(s), 12 file(s)" in r.output and sha in r.output
    r = cli("results", "unpack", out, "--into", tmp_path / "d", "--sha256", sha)
    assert r.exit_code == 0 and r.output.count("unpacked ") == 3, r.output
    r = cli("results", "unpack", out, "--into", tmp_path / "d")
    assert r.exit_code == 0 and r.output.count("skipped ") == 3, r.output
    for args in (["compare", str(out), str(out)], ["compare", str(root), str(out)],
                 ["export", str(out), "--out", str(tmp_path / "e.json")]):
        r = cli(*args)
        assert r.exit_code == 0, (args, r.output)
    r = cli("report", out)
    assert r.exit_code == 0 and "fixture" in r.stdout, r.output
    r = cli("results", "pack", root, "--out", out)
    assert r.exit_code == 2 and "exists already" in r.output
    r = cli("results", "unpack", out, "--into", tmp_path / "e", "--sha256", "0" * 64)
    assert r.exit_code == 2 and "not the expected" in r.output
    r = cli("compare", tmp_path / "cut.tar.gz", out)
    assert r.exit_code == 2  # no such archive: the reader's own error
    (tmp_path / "cut.tar.gz").write_bytes(out.read_bytes()[:500])
    r = cli("compare", tmp_path / "cut.tar.gz", out)
    assert r.exit_code == 2 and "truncated" in r.output


def test_a_cell_rewritten_inside_a_remade_tar_is_a_checksum_mismatch(archive, tmp_path):
    target = f"suite-results/{CELL}/"
    bad = remade(archive, tmp_path, lambda n, d: d.replace(b'"ok"', b'"oom"') if n.startswith(target) else d)
    msg = refused(bad, tmp_path / "into", "checksum mismatch")
    assert CELL in msg and "modified or damaged" in msg


def test_a_tampered_checksum_list_is_refused(archive, tmp_path):
    def edit_line(name, data):
        return data.replace(data[:64], b"0" * 64, 1) if name.endswith("SHA256SUMS") else data
    refused(remade(archive, tmp_path, edit_line), tmp_path / "a", "checksum mismatch")
    garbled = remade(archive, tmp_path, lambda n, d: d + b"not a line\n" if n.endswith("SHA256SUMS") else d)
    refused(garbled, tmp_path / "b", "SHA256SUMS line 14 is not")
    dropped = remade(archive, tmp_path, lambda n, d: None if n.endswith("scenario.yaml") and "other" in n else d)
    refused(dropped, tmp_path / "c", "other/.*scenario.yaml is listed in SHA256SUMS but not in the archive")
    unlisted = remade(archive, tmp_path, lambda n, d: d.split(b"\n", 1)[1] if n.endswith("SHA256SUMS") else d)
    refused(unlisted, tmp_path / "d", "is not listed in SHA256SUMS")
    refused(remade(archive, tmp_path, lambda n, d: None if n.endswith("SHA256SUMS") else d), tmp_path / "e",
            "truncated or not a suite results archive .no suite-results/SHA256SUMS")


@pytest.mark.parametrize("cut", ["half", "tail"])
def test_a_truncated_archive_is_refused(archive, tmp_path, cut):
    data = archive.path.read_bytes()
    short = tmp_path / "short.tar.gz"
    short.write_bytes(data[: len(data) // 2] if cut == "half" else data[:-4])  # tail: gzip's length field gone
    refused(short, tmp_path / "into", "is truncated or not a suite results archive")


def test_files_that_are_not_archives(tmp_path):
    (tmp_path / "text.tar.gz").write_text("hello, I am not gzip\n")
    refused(tmp_path / "text.tar.gz", tmp_path / "a", "truncated or not a suite results archive .Not a gzipped")
    (tmp_path / "gz.tar.gz").write_bytes(gzip.compress(b"plain text, no tar headers " * 50))
    refused(tmp_path / "gz.tar.gz", tmp_path / "b", "truncated or not a suite results archive")
    (tmp_path / "empty.tgz").write_bytes(b"")
    refused(tmp_path / "empty.tgz", tmp_path / "c", "truncated or not a suite results archive")
    refused(tmp_path / "missing.tgz", tmp_path / "d", "no such file")


def _member(name, kind=tarfile.REGTYPE, link=""):
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info, (b"x" if kind == tarfile.REGTYPE else None)


@pytest.mark.parametrize("name,kind,link,why", [
    ("suite-results/../../evil", tarfile.REGTYPE, "", "'..'"),
    ("/tmp/evil", tarfile.REGTYPE, "", "absolute path"),
    ("elsewhere/a/b/c", tarfile.REGTYPE, "", "outside suite-results/"),
    ("suite-results/s/r/link", tarfile.SYMTYPE, "/etc/passwd", "symbolic link"),
    ("suite-results/s/r/hard", tarfile.LNKTYPE, "suite-results/s/r/manifest.json", "hard link"),
    ("suite-results/s/r/dev", tarfile.CHRTYPE, "", "device"),
    ("suite-results/s/stray.json", tarfile.REGTYPE, "", "outside the run folders"),
    ("suite-results/s/r/manifest.json", tarfile.REGTYPE, "", "appears twice"),
])
def test_unsafe_members_are_refused(tmp_path, name, kind, link, why):
    entries = [_member("suite-results", tarfile.DIRTYPE), _member("suite-results/s/r/manifest.json"),
               _member(name, kind, link)]
    bad = write_tar(tmp_path / "bad.tar.gz", entries)
    msg = refused(bad, tmp_path / "into", "refused")
    assert why in msg and repr(name) in msg
    assert not (tmp_path / "evil").exists() and not (tmp_path.parent / "evil").exists()


def test_limits_are_refused_with_their_numbers(archive, tmp_path, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(packmod, "MAX_FILE_BYTES", 100)
        refused(archive.path, tmp_path / "a", r"bytes, over the limit of 100")
    with monkeypatch.context() as m:
        m.setattr(packmod, "MAX_MEMBERS", 5)
        refused(archive.path, tmp_path / "b", r"more than 5 members")
    with monkeypatch.context() as m:
        m.setattr(packmod, "MAX_TOTAL_BYTES", 5000)
        refused(archive.path, tmp_path / "c", r"5000 bytes uncompressed")
    with monkeypatch.context() as m:
        m.setattr(packmod, "MAX_ARCHIVE_BYTES", 1000)
        refused(archive.path, tmp_path / "d", rf"{archive.archive_bytes} bytes, over the limit of 1000")
    with monkeypatch.context() as m:  # a pax header (a long name) larger than allowed
        m.setattr(packmod, "MAX_HEADER_BYTES", 64)
        long = write_tar(tmp_path / "long.tar.gz", [_member("suite-results/s/r/" + "n" * 300)])
        refused(long, tmp_path / "e", r"a tar header of \d+ bytes is over the limit of 64")
    with monkeypatch.context() as m:  # pack refuses what unpack would
        m.setattr(packmod, "MAX_FILE_BYTES", 100)
        with pytest.raises(PackError, match="100 bytes a file"):
            pack([tmp_path / "results"], tmp_path / "big.tar.gz")
        assert not (tmp_path / "big.tar.gz").exists() and not list(tmp_path.glob(".big*"))


def test_pack_never_overwrites_and_names_what_it_cannot_pack(archive, tmp_path):
    before = archive.path.read_bytes()
    with pytest.raises(PackError, match="smoke.tar.gz: exists already"):
        pack([tmp_path / "results"], archive.path)
    assert archive.path.read_bytes() == before
    (tmp_path / "empty").mkdir()
    with pytest.raises(PackError, match="empty: no run folders"):
        pack([tmp_path / "empty"], tmp_path / "x.tar.gz")
    with pytest.raises(PackError, match="no such file"):
        pack([tmp_path / "nowhere"], tmp_path / "x.tar.gz")
    results(tmp_path / "copy", seed=1)  # the same scenario/run names from another results root
    with pytest.raises(PackError, match=r"results/fixture/0001.* and .*copy/fixture/0001.* would both be"):
        pack([tmp_path / "results", tmp_path / "copy"], tmp_path / "x.tar.gz")
    assert not list(tmp_path.glob("*x.tar.gz*"))
    again = pack([tmp_path / "results" / "fixture", tmp_path / "results"], tmp_path / "y.tgz")  # each run once
    assert len(again.runs) == 3


def test_unpacking_twice_skips_and_other_content_under_the_same_name_is_refused(archive, tmp_path):
    dest = tmp_path / "dest"
    assert len(unpack(archive.path, dest)) == 3
    second = unpack(archive.path, dest)
    assert list(second) == [] and len(second.skipped) == 3
    assert len(unpack(archive.path, tmp_path / "results").skipped) == 3  # the source itself (work/ is ignored)
    other = pack([results(tmp_path / "copy", seed=7)], tmp_path / "other.tar.gz")
    fresh = tmp_path / "fresh"
    unpack(archive.path, fresh)
    for run in fresh.glob("other/*"):  # make room for one run, so that only the conflict can stop it
        shutil.rmtree(run)
    with pytest.raises(PackError, match=r"fresh/fixture/0001.*there already, with other content"):
        unpack(other.path, fresh)
    assert not (fresh / "other").exists() or list((fresh / "other").iterdir()) == []  # all or nothing
    assert sorted(p.name for p in fresh.iterdir()) == ["fixture", "other"]  # no staging folder left


def test_sha256_checked_out_of_band(archive, tmp_path):
    assert len(unpack(archive.path, tmp_path / "ok", sha256=archive.sha256.upper())) == 3
    refused(archive.path, tmp_path / "a", "its sha256 is .* not the expected", sha256="ab" * 32)
    refused(archive.path, tmp_path / "b", "is not a sha256", sha256="xyz")


def test_open_inputs_unpacks_archives_for_the_stack_only(archive, tmp_path):
    folder = tmp_path / "results"
    with contextlib.ExitStack() as stack:
        opened = open_inputs([archive.path, folder], stack)
        assert opened[1] == folder and len(load_runs([opened[0]])) == 3
    assert not opened[0].exists()
