"""Byte-level language modelling over text files: every byte is a token (vocab 256), no tokenizer needed.

The corpus is a file or a folder (`data.path` in the scenario).  By default it is the Python standard
library's own .py sources, found next to `os.__file__`: they exist on every machine with Python, so the text
kind needs no download.  (Their content differs between Python versions: compare text runs on the same one.)

Reading is deterministic: files are taken in sorted order of their relative paths, folders starting with "."
and `site-packages` / `dist-packages` / `__pycache__` are skipped (installed packages differ between machines),
files with a NUL byte in their first 8 KiB are treated as binary and skipped, and reading stops after
`MAX_BYTES` (8 MiB).  The whole corpus is one uint8 tensor in memory.  An entry that cannot be read (a
broken symlink, a FIFO, a permission error) is skipped, and one UnreadableTextWarning names the entries
skipped: it goes to the rank's stderr, which the launcher keeps in the cell's launcher.log.

Sampling a step: the step's generator draws one start position per sample of the global batch; this rank's
samples are the windows of seq_len + 1 bytes at its positions; inputs = window[:-1], targets = window[1:].

Held out: the last EVAL_FRACTION (a tenth) of the corpus, at least one window.  Training windows lie wholly
before it and held-out windows wholly inside it, whether or not the scenario evaluates, so a cell trains the
same with and without `eval:`.
"""

from __future__ import annotations

import functools
import os
import warnings
from pathlib import Path

import torch

from suite.data.source import EVAL_TAG, Batch, Data, mix
from suite.scenario.data import EVAL_FRACTION

MAX_BYTES = 8 * 1024 * 1024
_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__"}


class UnreadableTextWarning(UserWarning):
    """Entries of data.path were skipped because they could not be read; the message names them."""


def default_corpus() -> Path:
    """The folder of the standard library's sources (the folder holding os.py)."""
    return Path(os.__file__).resolve().parent


def _files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        # Prune in place so os.walk does not descend; sorted so the walk order is the same everywhere.
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS)
        found.extend(Path(dirpath) / f for f in filenames if not f.startswith("."))
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def read_corpus(path: str | Path | None, max_bytes: int = MAX_BYTES) -> torch.Tensor:
    """The corpus as a uint8 tensor: the first max_bytes bytes of the text files under `path`, in sorted order.

    Cached per process (by resolved path and size): a worker reads it once, tests build many Data objects.
    The returned tensor is shared: index it, never write to it."""
    root = default_corpus() if path is None else Path(path).expanduser().resolve()
    return _read(str(root), path is None, max_bytes)


@functools.lru_cache(maxsize=4)
def _read(root_name: str, python_sources_only: bool, max_bytes: int) -> torch.Tensor:
    root = Path(root_name)
    if not root.exists():
        raise FileNotFoundError(f"data.path {str(root)!r} does not exist (text data needs a file or a folder of text files)")
    suffixes = {".py"} if python_sources_only else None  # the default corpus: Python sources only
    chunks, total, skipped = [], 0, []
    for f in _files(root):
        if suffixes is not None and f.suffix not in suffixes:
            continue
        if not f.is_file():  # a broken symlink, a FIFO or socket (opening a FIFO would block forever)
            skipped.append(f"{f} (not a readable regular file)")
            continue
        try:
            with open(f, "rb") as fh:
                blob = fh.read(max_bytes - total)
        except OSError as exc:  # e.g. permission denied: one bad entry must not end the whole corpus
            skipped.append(f"{f} ({exc.strerror or exc})")
            continue
        if b"\0" in blob[:8192]:
            continue  # binary file
        chunks.append(blob)
        total += len(blob)
        if total >= max_bytes:
            break
    if skipped:
        shown = "; ".join(skipped[:3]) + (f"; and {len(skipped) - 3} more" if len(skipped) > 3 else "")
        warnings.warn(f"data.path {str(root)!r}: skipped {len(skipped)} unreadable entr"
                      f"{'y' if len(skipped) == 1 else 'ies'}: {shown}; fix or remove them to read them",
                      UnreadableTextWarning, stacklevel=2)
    if total == 0:
        raise ValueError(f"data.path {str(root)!r} holds no text files (no readable non-binary file under it)")
    return torch.frombuffer(bytearray(b"".join(chunks)), dtype=torch.uint8)


class TextData(Data):
    salt = 3

    def __init__(self, cell, rank: int, world_size: int):
        super().__init__(cell, rank, world_size)
        self.path = cell.data.path
        self.corpus = read_corpus(self.path)
        self.seq_len, n = cell.seq_len, cell.seq_len + 1
        # the held-out tail: a tenth of the corpus, at least one window; training keeps at least one window
        self.cut = len(self.corpus) - max(n, int(len(self.corpus) * EVAL_FRACTION))
        if self.cut < n:
            raise ValueError(
                f"data.path {self.path or str(default_corpus())!r} holds {len(self.corpus)} bytes of text, fewer "
                f"than 2 x (seq_len + 1) = {2 * n}: one window to train on and one held out for evaluation"
            )

    def _windows(self, g: torch.Generator, lo: int, hi: int, global_size: int, start: int, count: int) -> Batch:
        """Windows wholly inside corpus[lo:hi], one start position drawn per sample of the global batch."""
        n = self.seq_len + 1
        positions = lo + torch.randint(hi - lo - n + 1, (global_size,), generator=g)[start:start + count]
        windows = self.corpus[positions[:, None] + torch.arange(n)].long()
        return windows[:, :-1], windows[:, 1:]

    def sample(self, g: torch.Generator, global_size: int, start: int, count: int) -> Batch:
        return self._windows(g, 0, self.cut, global_size, start, count)

    def eval_sample(self, index: int, global_size: int, start: int, count: int) -> Batch:
        g = torch.Generator().manual_seed(mix(self.seed, self.salt, EVAL_TAG, index))
        return self._windows(g, self.cut, len(self.corpus), global_size, start, count)
