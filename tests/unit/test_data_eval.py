"""Held-out data for `eval:`: apart from training, the same samples at every evaluation, split like training.

- synthetic: the held-out stream never yields a training batch of the first steps, and is the same task;
- text: training windows lie wholly before the held-out tail, held-out windows wholly inside it;
- cifar10: held-out batches are the test split's images, in order, normalized like training images.
"""

from __future__ import annotations

import pickle

import pytest
import torch
from test_data import TINY_VIT, _cell

from suite.data import build_data
from suite.data.cifar10 import MEAN, STD, write_tiny_cifar10
from suite.scenario import Scenario
from suite.scenario.data import EVAL_FRACTION


def _held_out(cell, index):
    """Held-out global batch `index` as all ranks see it together."""
    parts = [mb for rank in range(cell.gpus) for mb in build_data(cell, rank, cell.gpus).eval_micro_batches(index)]
    return torch.cat([x for x, _ in parts]), torch.cat([y for _, y in parts])


@pytest.mark.parametrize("model", ["gpt-tiny", TINY_VIT])
def test_synthetic_held_out_stream_is_apart_from_training_and_stable(model):
    cell = _cell(model, glob=4, micro=1, gpus=1)
    two = _cell(model, glob=4, micro=1, gpus=2)
    x0, y0 = _held_out(cell, 0)
    assert torch.equal(x0, _held_out(two, 0)[0]) and torch.equal(y0, _held_out(two, 0)[1])  # any world size
    assert torch.equal(x0, _held_out(cell, 0)[0])  # the same samples at every evaluation
    assert not torch.equal(x0, _held_out(cell, 1)[0])
    data = build_data(cell, 0, 1)
    for step in range(200):  # no training batch of the first 200 steps is a held-out batch
        (x, _), *_ = data.micro_batches(step)
        assert not torch.equal(x, x0[:1])


def test_text_holds_out_the_corpus_tail(tmp_path):
    f = tmp_path / "corpus.txt"
    f.write_bytes(b"a" * 900 + b"B" * 100)  # the last tenth is the only place a B occurs
    cell = _cell("gpt-tiny", {"kind": "text", "path": str(f)}, glob=8, micro=8, seq_len=16)
    data = build_data(cell, 0, 1)
    assert data.cut == 1000 - int(1000 * EVAL_FRACTION) == 900
    for step in range(50):  # training never reads a held-out byte
        (x, y), = data.micro_batches(step)
        assert set(x.unique().tolist()) | set(y.unique().tolist()) == {ord("a")}
    for index in range(5):  # held-out windows lie wholly in the tail
        (x, y), = data.eval_micro_batches(index)
        assert set(x.unique().tolist()) | set(y.unique().tolist()) == {ord("B")}


def test_text_too_short_for_a_held_out_tail_is_a_clear_error(tmp_path):
    f = tmp_path / "short.txt"
    f.write_bytes(b"x" * 30)
    with pytest.raises(ValueError, match=r"30 bytes of text, fewer than 2 x \(seq_len \+ 1\) = 34"):
        build_data(_cell("gpt-tiny", {"kind": "text", "path": str(f)}, seq_len=16), 0, 1)


def test_cifar10_held_out_batches_are_the_test_split_in_order(tmp_path):
    root = tmp_path / "cifar"
    folder = write_tiny_cifar10(root, per_batch=10, seed=3)
    cell = _cell("vit-cifar10", {"kind": "cifar10", "root": str(root)}, glob=4, micro=2, gpus=2)
    with open(folder / "test_batch", "rb") as fh:
        test = pickle.load(fh, encoding="latin1")
    images = torch.tensor(test["data"]).view(-1, 3, 32, 32).float().div(255)
    images = (images - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1)
    labels = torch.tensor(test["labels"])
    for index in (0, 1, 2):  # 4 a batch, 10 test images: batch 2 wraps around
        order = (index * 4 + torch.arange(4)) % 10
        x, y = _held_out(cell, index)
        assert torch.allclose(x, images[order], atol=1e-6) and torch.equal(y, labels[order])


def test_eval_settings_are_checked_and_give_their_points():
    sc = Scenario(name="t", model="gpt-tiny", seq_len=16, steps=10, warmup_steps=0, eval={"every_steps": 4})
    assert sc.eval.points(10) == [4, 8, 10]
    assert sc.eval.model_copy(update={"at_end": False}).points(10) == [4, 8]
    assert Scenario(name="t", model="gpt-tiny", seq_len=16, eval={}).eval.points(7) == [7]
    with pytest.raises(ValueError, match="neither every_steps nor at_end"):
        Scenario(name="t", model="gpt-tiny", seq_len=16, eval={"at_end": False})
    with pytest.raises(ValueError, match="batches"):
        Scenario(name="t", model="gpt-tiny", seq_len=16, eval={"batches": 0})
