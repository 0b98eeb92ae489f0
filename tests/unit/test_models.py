"""The torch models: exact parameter counts against the planner, seeding, loss at init, causality, interface."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from suite.models.build import build_model, init_weights
from suite.models.presets import PRESETS, GptShape, LlamaShape, VitShape
from suite.plan import predict
from suite.scenario import expand, Scenario

SMALL = {"gpt-tiny", "llama-tiny", "vit-cifar10"}  # built for real; the others on the meta device

INLINE = {
    "gpt-inline": GptShape(family="gpt", layers=3, hidden=48, heads=6, vocab=300, ffn=100, max_seq_len=40),
    "llama-inline": LlamaShape(family="llama", layers=3, hidden=48, heads=6, kv_heads=1, ffn=80, vocab=300),
    "vit-inline": VitShape(family="vit", image_size=16, patch_size=8, layers=2, heads=2, hidden=32, mlp=40, num_classes=7),
}


def _cell(model, **overrides):
    fields = dict(name="t", model=model, steps=2, warmup_steps=0)
    if not (model == "vit-cifar10" or isinstance(model, VitShape)):
        fields["seq_len"] = 32
    fields.update(overrides)
    return expand(Scenario(**fields))[0]


def _count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", list(PRESETS) + list(INLINE))
def test_parameter_count_matches_shape_and_planner(name):
    shape = PRESETS.get(name) or INLINE[name]
    if name in SMALL or name in INLINE:
        model = build_model(shape, seed=0)
    else:
        with torch.device("meta"):
            model = build_model(shape, seed=0)
        assert all(p.is_meta for p in model.parameters()), "meta build must not allocate parameters"
        assert all(b.is_meta for b in model.buffers())
    assert _count(model) == shape.num_parameters() == predict(_cell(shape)).num_parameters
    assert isinstance(model.blocks, torch.nn.ModuleList) and len(model.blocks) == shape.layers


def test_published_sizes():
    """Independent anchors: GPT-2 small 124,439,808 (tied); Llama 3 8B 8,030,261,248; 70B 70,553,706,496."""
    assert PRESETS["gpt2-small"].num_parameters() == 124_439_808
    assert PRESETS["llama3-8b"].num_parameters() == 8_030_261_248
    assert PRESETS["llama3-70b"].num_parameters() == 70_553_706_496


@pytest.mark.parametrize("name", ["gpt-tiny", "llama-tiny", "vit-inline"])
def test_weights_depend_only_on_seed(name):
    shape = PRESETS.get(name) or INLINE[name]
    before = torch.random.get_rng_state()
    a, b, c = build_model(shape, 7).state_dict(), build_model(shape, 7).state_dict(), build_model(shape, 8).state_dict()
    assert torch.equal(torch.random.get_rng_state(), before), "build_model must not disturb the global RNG"
    assert a.keys() == b.keys() == c.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    differ = [k for k in a if not torch.equal(a[k], c[k])]
    # Every randomly initialized tensor differs between seeds (biases, norm gains, zero-init heads do not).
    assert any("blocks.0" in k or "layers.0" in k for k in differ) and len(differ) >= 2 * shape.layers


@pytest.mark.parametrize("name", ["gpt-tiny", "llama-tiny"])
def test_meta_build_then_init_weights_equals_build(name):
    shape = PRESETS[name]
    with torch.device("meta"):
        model = build_model(shape, 3)
    model.to_empty(device="cpu")
    init_weights(model, 3)
    reference = build_model(shape, 3)
    for (k, p), (k2, q) in zip(model.state_dict().items(), reference.state_dict().items()):
        assert k == k2 and torch.equal(p, q), k
    for (k, p), (_, q) in zip(model.named_buffers(), reference.named_buffers()):  # Llama's rotary frequencies
        assert torch.equal(p, q), k


def test_init_statistics_follow_nanogpt():
    model = build_model(GptShape(family="gpt", layers=4, hidden=256, heads=4, vocab=512, max_seq_len=64), 0)
    assert model.wte.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert model.blocks[0].mlp.down.weight.std().item() == pytest.approx(0.02 / math.sqrt(8), rel=0.05)
    assert model.blocks[0].attn.proj.weight.std().item() == pytest.approx(0.02 / math.sqrt(8), rel=0.05)
    assert torch.all(model.blocks[0].attn.qkv.bias == 0) and torch.all(model.ln_f.weight == 1)
    assert model.wte.weight.data_ptr() not in {p.data_ptr() for n, p in model.named_parameters() if n != "wte.weight"}


@pytest.mark.parametrize("name", ["gpt-tiny", "llama-tiny"])
def test_forward_backward_at_init(name):
    shape = PRESETS[name]
    model = build_model(shape, 0)
    g = torch.Generator().manual_seed(0)
    seq = torch.randint(shape.vocab, (4, 33), generator=g)
    loss = model(seq[:, :-1], seq[:, 1:])
    assert loss.ndim == 0 and torch.isfinite(loss)
    assert abs(loss.item() - math.log(shape.vocab)) < 0.1  # small init: near-uniform predictions
    loss.backward()
    for n, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), n
        assert p.grad.abs().sum() > 0, f"{n} gets no gradient"


def test_vit_forward_backward_and_blocks():
    shape = INLINE["vit-inline"]
    model = build_model(shape, 0)
    images, labels = torch.randn(3, 3, 16, 16), torch.tensor([0, 3, 6])
    loss = model(images, labels)
    assert loss.ndim == 0 and abs(loss.item() - math.log(7)) < 0.1  # torchvision zero-inits the head
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    # `.blocks` is the encoder's own container: replacing a block changes what forward runs.
    assert model.blocks is model.vit.encoder.layers
    assert len(list(model.parameters())) == len(model.state_dict())  # registered once
    torch.nn.init.normal_(model.vit.heads.head.weight)  # zero at init: make the logits see the encoder
    before = model.logits(images)
    model.blocks[0] = torch.nn.Identity()
    assert not torch.allclose(before, model.logits(images))


@pytest.mark.parametrize("name", ["gpt-tiny", "llama-tiny"])
def test_causal_future_tokens_do_not_change_earlier_logits(name):
    shape = PRESETS[name]
    model = build_model(shape, 1).eval()
    g = torch.Generator().manual_seed(1)
    seq = torch.randint(shape.vocab, (2, 24), generator=g)
    changed = seq.clone()
    changed[:, 15:] = (changed[:, 15:] + 1) % shape.vocab  # alter positions 15..23
    with torch.no_grad():
        a, b = model.logits(seq), model.logits(changed)
    assert a.shape == (2, 24, shape.vocab)
    assert torch.allclose(a[:, :15], b[:, :15], atol=1e-6)  # positions before the change: identical
    assert not torch.allclose(a[:, 15:], b[:, 15:], atol=1e-3)  # the changed positions: not


def test_gpt_rejects_sequences_longer_than_positions():
    model = build_model(INLINE["gpt-inline"], 0)
    x = torch.zeros(1, 41, dtype=torch.long)
    with pytest.raises(ValueError, match="41 exceeds max_seq_len 40"):
        model(x, x)


def test_gqa_kv_projections_are_smaller():
    model = build_model(INLINE["llama-inline"], 0)
    attn = model.blocks[0].attn
    assert attn.wq.weight.shape == (48, 48) and attn.wk.weight.shape == (8, 48) and attn.wv.weight.shape == (8, 48)
    assert "inv_freq" not in model.state_dict() and "inv_freq" in dict(model.named_buffers())


def test_models_do_not_import_torch_distributed():
    folder = Path(__file__).resolve().parents[2] / "suite" / "models"
    files = list(folder.glob("*.py"))
    assert {"gpt.py", "llama.py", "vit.py", "build.py"} <= {f.name for f in files}
    for f in files:
        imports = re.findall(r"^\s*(?:from|import)\s+(torch\.distributed\S*)", f.read_text(), re.MULTILINE)
        assert not imports, f"{f.name} imports {imports}"


def test_unknown_shape_is_rejected():
    with pytest.raises(TypeError, match="unknown model shape"):
        build_model("gpt-tiny", 0)


@pytest.mark.parametrize("name", ["gpt-tiny", "llama-tiny"])
def test_bf16_parameters_give_an_fp32_loss(name):
    """What FSDP's MixedPrecisionPolicy(param_dtype=bf16) does: the loss is still computed in fp32."""
    shape = PRESETS[name]
    model = build_model(shape, 0).to(torch.bfloat16)
    seq = torch.randint(shape.vocab, (2, 17), generator=torch.Generator().manual_seed(0))
    loss = model(seq[:, :-1], seq[:, 1:])
    assert loss.dtype == torch.float32 and abs(loss.item() - math.log(shape.vocab)) < 0.1
    loss.backward()
    assert all(p.grad.dtype == torch.bfloat16 and torch.isfinite(p.grad).all() for p in model.parameters())
