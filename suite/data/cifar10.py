"""CIFAR-10 through torchvision.datasets.CIFAR10, from `data.root` (a folder holding cifar-10-batches-py/).

The data is never downloaded unless the scenario says `download: true`; when the folder is missing, the error
names it and says how to get it.  The training split (50,000 images) is loaded once into memory.

Transforms: torchvision's ToTensor (uint8 HWC -> float CHW in [0, 1]) and Normalize with the CIFAR-10
per-channel mean and std, applied to the whole batch at once (the same arithmetic as the per-image
transforms, vectorized).  No random augmentation: random crops and flips would have to be drawn from the
step's generator to stay deterministic (accuracy is measured on the held-out test split: `eval:`).

Sampling a step: the step's generator draws global_batch_size image indices (with replacement); this rank
converts only the images of its slice.  Held out (scenario `eval:`): the test split (10,000 images of the real
data), loaded on the first evaluation and read in order: held-out batch i is test images i*G .. (i+1)*G - 1
(G = global_batch_size, wrapping around), so `batches` x G >= 10,000 covers the whole test set.

Generated folders: torchvision verifies the md5 of every batch file against the real CIFAR-10's, so a tiny
folder written for tests would be rejected as "corrupted".  `write_tiny_cifar10` writes files in the real
format plus a marker file `SUITE_GENERATED`; for a folder with that marker, `GeneratedCIFAR10` (a subclass
whose checksums are None, which torchvision's `check_integrity` treats as "the file exists") loads it.
Real data (no marker) always goes through the unmodified, checksum-verified CIFAR10 class.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch

from suite.data.source import Batch, Data

MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
MARKER = "SUITE_GENERATED"
_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def _dataset_classes():
    from torchvision.datasets import CIFAR10

    class GeneratedCIFAR10(CIFAR10):
        """CIFAR10 without checksums, for folders written by write_tiny_cifar10 (never for real data)."""

        train_list = [[name, None] for name, _ in CIFAR10.train_list]
        test_list = [[name, None] for name, _ in CIFAR10.test_list]
        meta = {**CIFAR10.meta, "md5": None}

    return CIFAR10, GeneratedCIFAR10


def load_cifar10(root: str | Path, download: bool = False, train: bool = True):
    """torchvision's CIFAR10 training (or test) split from `root`, with a clear error when it is not there."""
    root = Path(root).expanduser()
    CIFAR10, GeneratedCIFAR10 = _dataset_classes()
    folder = root / CIFAR10.base_folder
    if (folder / MARKER).exists():
        return GeneratedCIFAR10(str(root), train=train, download=False)
    if not download and not folder.is_dir():
        raise FileNotFoundError(
            f"data.root {str(root)!r}: CIFAR-10 not found (no folder {str(folder)!r}). Put the extracted "
            f"cifar-10-python.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html there, or set "
            f"`data: {{kind: cifar10, download: true}}` in the scenario to let torchvision download it"
        )
    try:
        return CIFAR10(str(root), train=train, download=download)
    except RuntimeError as e:  # torchvision: "Dataset not found or corrupted"
        raise RuntimeError(
            f"data.root {str(root)!r}: {e} (files in {str(folder)!r} are missing or fail torchvision's md5 check; "
            f"delete the folder and set download: true, or extract a fresh cifar-10-python.tar.gz)"
        ) from e


def write_tiny_cifar10(root: str | Path, per_batch: int = 20, seed: int = 0, learnable: bool = False,
                       test_size: int | None = None) -> Path:
    """Write a tiny CIFAR-10-format folder (5 train batches + test batch + meta) for tests.

    Images are random (labels carry nothing), or with `learnable` each class's fixed random template blended
    with noise (40:60): a small model learns it in tens of steps and the test batch measures it, like the real
    data's held-out split.  `test_size`: images in the test batch (default per_batch).
    The real files are Python 2 pickles whose bytes keys torchvision reads back as str (encoding="latin1");
    a Python 3 pickle must use str keys ("data", "labels", "label_names") to load the same way."""
    folder = Path(root) / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    templates = rng.integers(0, 256, (10, 3072)).astype(np.float64)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        n = test_size if name == "test_batch" and test_size else per_batch
        labels = rng.integers(0, 10, n)
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        if learnable:
            data = (0.4 * templates[labels] + 0.6 * data).round().astype(np.uint8)
        batch = {
            "batch_label": name,
            "labels": labels.tolist(),
            "data": data,
            "filenames": [f"{name}_{i}.png" for i in range(n)],
        }
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": _CLASSES, "num_cases_per_batch": per_batch}, f)
    (folder / MARKER).write_text("written by suite.data.cifar10.write_tiny_cifar10: not the real CIFAR-10\n")
    return folder


class Cifar10Data(Data):
    salt = 4

    def __init__(self, cell, rank: int, world_size: int):
        super().__init__(cell, rank, world_size)
        size = cell.model.image_size
        if size != 32:
            raise ValueError(f"data kind cifar10 has 32x32 images; the model's image_size is {size}")
        self.root, self.download = cell.data.root, cell.data.download
        self.images, self.labels = _arrays(load_cifar10(self.root, self.download))
        self.test: tuple[torch.Tensor, torch.Tensor] | None = None  # loaded on the first evaluation
        self.mean = torch.tensor(MEAN).view(1, 3, 1, 1)
        self.std = torch.tensor(STD).view(1, 3, 1, 1)

    def _convert(self, images: torch.Tensor, labels: torch.Tensor, index: torch.Tensor) -> Batch:
        x = images[index].permute(0, 3, 1, 2).float().div(255)  # ToTensor
        return (x - self.mean) / self.std, labels[index]  # Normalize

    def sample(self, g: torch.Generator, global_size: int, start: int, count: int) -> Batch:
        index = torch.randint(len(self.labels), (global_size,), generator=g)[start:start + count]
        return self._convert(self.images, self.labels, index)

    def eval_sample(self, index: int, global_size: int, start: int, count: int) -> Batch:
        if self.test is None:
            self.test = _arrays(load_cifar10(self.root, self.download, train=False))
        images, labels = self.test
        order = (index * global_size + torch.arange(start, start + count)) % len(labels)
        return self._convert(images, labels, order)


def _arrays(dataset) -> tuple[torch.Tensor, torch.Tensor]:
    """(images (N, 32, 32, 3) uint8 HWC, labels (N,) int64) of a torchvision CIFAR10 split."""
    return torch.from_numpy(np.ascontiguousarray(dataset.data)), torch.tensor(dataset.targets, dtype=torch.long)
