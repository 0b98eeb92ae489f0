"""The text reader skips an entry it cannot read (a broken symlink, a FIFO) with a warning naming it, instead of
stopping at it; the rest of the folder is read as before, in the same sorted order."""

from __future__ import annotations

import os
import warnings

import pytest

from suite.data.text import UnreadableTextWarning, read_corpus


def test_a_broken_symlink_and_a_fifo_are_skipped_with_a_note(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"first ")
    (tmp_path / "b.txt").symlink_to(tmp_path / "gone.txt")  # broken: its target does not exist
    os.mkfifo(tmp_path / "c.txt")  # opening it would block forever
    (tmp_path / "d.txt").write_bytes(b"second")
    with pytest.warns(UnreadableTextWarning) as caught:
        corpus = read_corpus(tmp_path)
    assert bytes(corpus.tolist()) == b"first second"
    (note,) = [str(w.message) for w in caught]
    assert "skipped 2 unreadable entries" in note and "b.txt" in note and "c.txt" in note
    assert str(tmp_path) in note and "fix or remove" in note


def test_a_readable_folder_reads_without_a_note(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"only text")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        assert bytes(read_corpus(tmp_path).tolist()) == b"only text"


def test_a_folder_of_only_unreadable_entries_is_still_an_error(tmp_path):
    (tmp_path / "b.txt").symlink_to(tmp_path / "gone.txt")
    with pytest.warns(UnreadableTextWarning), pytest.raises(ValueError, match="holds no text"):
        read_corpus(tmp_path)
