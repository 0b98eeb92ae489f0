"""Run numbers are unique per scenario folder even when the runs start in different seconds (so their
folder names differ) but list the folder before either made its own: the number is reserved atomically."""

from __future__ import annotations

import multiprocessing
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

from suite.results import store

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def test_racing_threads_in_different_seconds_get_different_numbers(tmp_path, monkeypatch):
    n = 6
    barrier = threading.Barrier(n, timeout=10)
    real_iterdir = Path.iterdir

    def listing_then_wait(self):
        entries = list(real_iterdir(self))
        barrier.wait()  # every run has listed the (empty) folder before any makes its own: the race window
        return iter(entries)

    monkeypatch.setattr(Path, "iterdir", listing_then_wait)
    made, errors = [], []

    def make(i):
        try:
            made.append(store.create_run_dir(tmp_path, "smoke", "abcdefg", T0 + timedelta(seconds=i)))
        except Exception as exc:  # collected and asserted below, so a failure is visible
            errors.append(exc)

    threads = [threading.Thread(target=make, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    monkeypatch.undo()
    assert not errors
    numbers = sorted(p.name[:4] for p in made)
    assert numbers == [f"{i:04d}" for i in range(1, n + 1)], numbers
    # the readers see the runs only, never the reservations
    assert len(list(store.iter_run_dirs(tmp_path))) == n


def _make_in_process(root: str, i: int, queue) -> None:
    queue.put(store.create_run_dir(Path(root), "smoke", None, T0 + timedelta(seconds=i)).name)


def test_racing_processes_get_different_numbers(tmp_path):
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_make_in_process, args=(str(tmp_path), i, queue)) for i in range(4)]
    for p in procs:
        p.start()
    names = [queue.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    assert sorted(name[:4] for name in names) == ["0001", "0002", "0003", "0004"]


def test_numbers_continue_after_reservations_and_old_folders(tmp_path):
    base = tmp_path / "smoke"
    base.mkdir()
    (base / "0007_deadbee_20250101T000000Z").mkdir()  # made by a suite without reservations
    (base / ".0009.reserved").touch()  # a run that reserved 9 and has not made its folder yet
    assert store.create_run_dir(tmp_path, "smoke", None, T0).name.startswith("0010_")


def test_a_released_number_is_not_taken_twice_and_nothing_is_left_behind(tmp_path, monkeypatch):
    """The reservation is removed once the folder exists; a run that then reserves the same number (it listed
    the folder before the first run made it) finds the folder and moves on."""
    first = store.create_run_dir(tmp_path, "smoke", "abc", T0)
    base = tmp_path / "smoke"
    assert [p.name for p in base.iterdir()] == [first.name]  # no .0001.reserved litter
    # a second run that listed the folder when it was still empty: it tries 0001 first
    monkeypatch.setattr(store, "_taken", lambda b: 0)
    second = store.create_run_dir(tmp_path, "smoke", "abc", T0 + timedelta(seconds=1))
    assert second.name.startswith("0002_") and sorted(p.name for p in base.iterdir()) == [first.name, second.name]
