"""Your own model (suite/models/own.py, hf.py, factory.py): Hugging Face configs and Python factories.

Single process, CPU: parameter counts against transformers' own, the loss against transformers' own shifted
loss, the planner's analytic / traced-only split, and one clear error per bad input at validation time.
(2 gloo ranks against 1, and traced against measured peaks: tests/dist/test_own_model_ranks.py.)
"""

from __future__ import annotations

import json
import shutil
import sys
import textwrap

import pytest
import torch

from suite.models.build import build_model, materialize
from suite.models.own import HfShape, PythonShape, read_config
from suite.plan import predict
from suite.scenario import expand, Scenario, ScenarioError
from suite.scenario.source import load_scenario
from suite.testing.builders import make_cell
from suite.testing.spawn import ROOT

LLAMA = "scenarios/models/llama-tiny-hf.json"
QWEN2 = "scenarios/models/qwen2-tiny.json"
FACTORY = "tests.dist.own_factory"


@pytest.fixture(autouse=True)
def _in_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # config paths are relative to the working directory, like data.path


def _write(tmp_path, name: str, config: dict) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return str(path)


TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=128)
ANALYTIC = {
    "llama": dict(model_type="llama", **TINY),
    "llama-tied-biases": dict(model_type="llama", tie_word_embeddings=True, attention_bias=True, mlp_bias=True, **TINY),
    "llama-head-dim": dict(model_type="llama", head_dim=16, **TINY),
    "mistral": dict(model_type="mistral", **TINY),
    "qwen2": dict(model_type="qwen2", **TINY),
    "qwen2-untied": dict(model_type="qwen2", tie_word_embeddings=False, **TINY),
}


@pytest.mark.parametrize("name", list(ANALYTIC))
def test_analytic_count_is_transformers_count(name, tmp_path):
    shape = HfShape(family="hf", config=_write(tmp_path, f"{name}.json", ANALYTIC[name]))
    assert shape.analytic
    with torch.device("meta"):
        model = build_model(shape, 0)
    assert shape.num_parameters() == model.hf.num_parameters() == sum(p.numel() for p in model.parameters())
    assert shape.block_parameters() == sum(p.numel() for p in model.blocks[0].parameters())
    assert shape.formula_parameters() == (shape.num_parameters(), shape.block_parameters())  # the planner's layout
    assert len(model.blocks) == shape.layers == 2 and shape.probed["attention"] == "sdpa"


@pytest.mark.parametrize("path", [LLAMA, QWEN2])
def test_shipped_configs_count_and_loss(path):
    """The loss is suite's next-token cross-entropy on the given targets: transformers' own loss (which shifts
    its labels by one) on the sequence one longer is the same number."""
    shape = HfShape(family="hf", config=path)
    model = build_model(shape, 3)
    assert shape.num_parameters() == model.hf.num_parameters()
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(shape.vocab, (2, 17), generator=g)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    ours = model(inputs, targets)
    theirs = model.hf(input_ids=tokens, labels=tokens, use_cache=False).loss
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-6)
    assert model(inputs).shape == (2, 16, shape.vocab)
    # the seed alone decides the weights
    again = build_model(shape, 3)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))


def test_tied_head_stays_tied_through_a_meta_build():
    shape = HfShape(family="hf", config=QWEN2)
    assert shape.contents["tie_word_embeddings"] is True
    with torch.device("meta"):
        model = build_model(shape, 0)
    materialize(model, "cpu")
    assert model.hf.lm_head.weight is model.hf.model.embed_tokens.weight
    assert sum(p.numel() for p in model.parameters()) == shape.num_parameters()


def test_a_tied_factory_model_stays_tied_in_the_trace():
    from suite.plan.trace import trace_cell

    cell = make_cell(model={"family": "python", "factory": f"{FACTORY}:tied_lm", "inputs": "tokens", "vocab": 256})
    n = cell.model.num_parameters()
    assert n == sum(p.numel() for p in build_model(cell.model, 0).parameters())
    assert trace_cell(cell).counted["parameters"] == 4 * n  # ddp fp32: every parameter once


def test_a_non_llama_architecture_is_traced_only(tmp_path):
    config = _write(tmp_path, "gpt2.json", dict(model_type="gpt2", n_layer=2, n_embd=32, n_head=4, vocab_size=256,
                                                 n_positions=128))
    cell = make_cell(model={"family": "hf", "config": config}, seq_len=32)
    assert not cell.model.analytic and cell.model.layers == 2 and cell.model.hidden == 32
    with torch.device("meta"):
        model = build_model(cell.model, 0)
    p = predict(cell)
    assert p.num_parameters == model.hf.num_parameters()
    assert p.memory_bytes is None and p.as_implemented is None and "traced only" in p.analytic
    assert p.fits_by == "none"
    # gpt2 has learned positions: a seq_len past them is refused with the numbers
    with pytest.raises(ScenarioError, match="seq_len 256 exceeds max_position_embeddings 128"):
        make_cell(model={"family": "hf", "config": config}, seq_len=256)


def test_cell_id_is_the_config_contents_not_its_path(tmp_path):
    copy = tmp_path / "elsewhere.json"
    shutil.copy(ROOT / LLAMA, copy)
    here, there = make_cell(model={"family": "hf", "config": LLAMA}), make_cell(model={"family": "hf",
                                                                                        "config": str(copy)})
    assert here.id == there.id
    assert here.axes()["model"] == "hf-llama-tiny-hf" and there.axes()["model"] == "hf-elsewhere"
    changed = _write(tmp_path, "wider.json", {**json.loads((ROOT / LLAMA).read_text()), "intermediate_size": 180})
    assert make_cell(model={"family": "hf", "config": changed}).id != here.id


def test_a_worker_never_reads_the_config_again(tmp_path):
    path = tmp_path / "c.json"
    shutil.copy(ROOT / LLAMA, path)
    cell = make_cell(model={"family": "hf", "config": str(path)})
    path.unlink()  # as inside a container that has no such file
    again = type(cell).model_validate_json(cell.model_dump_json())
    assert again == cell and again.model.num_parameters() == cell.model.num_parameters()


BAD_CONFIGS = {
    "missing": (None, "no such file"),
    "not-json": ("{ nope", "is not JSON"),
    "a-list": ("[1, 2]", "holds a JSON list, not an object"),
    "adapter": ({"peft_type": "LORA", "base_model_name_or_path": "meta-llama/Llama-3-8B"}, "adapter"),
    "remote-code": ({"model_type": "llama", "auto_map": {"AutoModelForCausalLM": "x.Y"}}, "remote code"),
    "quantized": ({"model_type": "llama", "quantization_config": {"quant_method": "gptq"}}, "quantized"),
    "no-model-type": ({"hidden_size": 8}, "names no model_type"),
    "unknown-architecture": ({"model_type": "my-secret-llm"}, "'my-secret-llm' is not an architecture of "
                                                               "transformers"),
    "not-a-causal-lm": ({"model_type": "vit"}, "has no causal-LM class"),
    "nan": ('{"model_type": "llama", "rms_norm_eps": NaN}', "NaN is not a JSON number"),
    "a-string-width": ({"model_type": "llama", "hidden_size": "abc"}, "transformers refuses it"),
    "zero-heads": ({"model_type": "llama", "num_attention_heads": 0}, "transformers refuses it"),
    "fractional-layers": ({"model_type": "llama", "num_hidden_layers": 2.5}, "transformers refuses it"),
    "negative-layers": ({"model_type": "gpt2", "n_layer": -1}, "-1 layers; suite builds 1 to 1024"),
    "grouped-heads": ({"model_type": "llama", "num_attention_heads": 4, "num_key_value_heads": 3,
                       "hidden_size": 32}, "num_attention_heads 4 is not divisible by num_key_value_heads 3"),
    "no-layers": ({"model_type": "gpt2", "n_layer": 0}, "0 layers; suite builds 1 to 1024"),
    "one-token-vocab": ({"model_type": "llama", "vocab_size": 1}, "a vocabulary of 1 token(s)"),
}


@pytest.mark.parametrize("name", list(BAD_CONFIGS))
def test_bad_configs_fail_validation_with_one_clear_error(name, tmp_path):
    body, message = BAD_CONFIGS[name]
    path = tmp_path / f"{name}.json"
    if body is not None:
        path.write_text(body if isinstance(body, str) else json.dumps(body))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(textwrap.dedent(f"""\
        name: own
        model: {{family: hf, config: {path}}}
        seq_len: 16
        """))
    with pytest.raises(ScenarioError) as err:
        load_scenario(scenario)
    text = str(err.value)
    assert message in text and "s.yaml:2" in text and str(path) in text, text


def test_an_architecture_without_sdpa_runs_with_eager_attention(tmp_path):
    config = _write(tmp_path, "mpt.json", dict(model_type="mpt", n_layers=2, d_model=32, n_heads=4, vocab_size=256,
                                                max_seq_len=64))
    cell = make_cell(model={"family": "hf", "config": config})
    assert cell.model.probed["attention"] == "eager" and cell.model.layers == 2
    model = build_model(cell.model, 0)
    assert model(torch.zeros(1, 8, dtype=torch.long), torch.zeros(1, 8, dtype=torch.long)).ndim == 0


def test_two_models_under_one_label_are_refused(tmp_path):
    """A model's folder names it (.../a/config.json -> hf-a); two different configs both named x.json would be
    one value of the model axis (a gate would compare one with the other's reference): refused."""
    for d in ("a", "c"):
        (tmp_path / d).mkdir()
    a = _write(tmp_path, "a/config.json", ANALYTIC["llama"])
    assert make_cell(model={"family": "hf", "config": a}).axes()["model"] == "hf-a"
    x1, x2 = _write(tmp_path, "x.json", ANALYTIC["qwen2"]), _write(tmp_path, "c/x.json", ANALYTIC["llama"])
    with pytest.raises(ScenarioError, match="both labelled hf-x"):
        expand(Scenario(name="t", seq_len=16, model=[{"family": "hf", "config": x1}, {"family": "hf", "config": x2}]))


def test_factory_args_are_part_of_the_label():
    small, big = ({"family": "python", "factory": f"{FACTORY}:tiny_lm", "args": {"hidden": h}, "inputs": "tokens",
                   "vocab": 256} for h in (16, 32))
    labels = {c.axes()["model"] for c in expand(Scenario(name="t", model=[small, big], seq_len=16))}
    assert labels == {"py-tiny_lm[hidden=16]", "py-tiny_lm[hidden=32]"}


def test_a_factory_module_is_imported_outside_the_meta_device():
    sys.modules.pop(FACTORY, None)
    shape = PythonShape(family="python", factory=f"{FACTORY}:scaled_lm", inputs="tokens", vocab=256)
    assert sys.modules[FACTORY].SCALE.device.type == "cpu"
    assert shape.num_parameters() == sum(p.numel() for p in build_model(shape, 0).parameters())


def test_a_rank_refuses_another_version_of_the_model():
    shape = PythonShape(family="python", factory=f"{FACTORY}:tiny_lm", inputs="tokens", vocab=256)
    with pytest.raises(RuntimeError, match="validated with 7"):
        build_model(shape.model_copy(update={"probed": {**shape.probed, "parameters": 7}}), 0)
    with pytest.raises(RuntimeError, match="not the one the scenario was validated with"):
        build_model(shape.model_copy(update={"probed": {**shape.probed, "source_digest": "0" * 16}}), 0)


def test_traced_only_models_have_no_mfu():
    from suite.runner.aggregate import mfu
    from suite.results.schema import Throughput

    tp = Throughput(tokens_per_s=1e6, tokens_per_s_per_device=1e6, samples_per_s=1e3)
    assert mfu(tp, 1e9, "NVIDIA H200", "bf16-mixed").value is not None
    m = mfu(tp, 1e9, "NVIDIA H200", "bf16-mixed", "traced only: x")
    assert m.value is None and "no MFU" in m.formula


def test_a_hub_id_is_refused_as_such():
    with pytest.raises(ValueError, match="looks like a hub id: suite never downloads"):
        read_config("meta-llama/Llama-3.1-8B")


def test_missing_extra_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    with pytest.raises(ValueError, match=r"pip install 'suite\[hf\]'"):
        read_config(LLAMA)


def test_python_factory_is_probed_on_meta():
    shape = PythonShape(family="python", factory=f"{FACTORY}:tiny_lm", args={"hidden": 16}, inputs="tokens",
                        vocab=256)
    model = build_model(shape, 0)
    assert shape.num_parameters() == model.num_parameters() == sum(p.numel() for p in model.parameters())
    assert shape.layers == 2 and shape.block_parameters() == sum(p.numel() for p in model.blocks[0].parameters())
    assert len(shape.probed["source_digest"]) == 16
    cell = make_cell(model=shape.model_dump(exclude={"probed"}))
    assert cell.axes()["model"] == "py-tiny_lm[hidden=16]"
    p = predict(cell)
    assert p.memory_bytes is None and "your own module" in p.analytic
    assert p.flops_per_token == 6 * shape.num_parameters()  # width unknown: the 6 Psi floor


def test_python_image_model_has_one_token_per_sample():
    cell = make_cell(model={"family": "python", "factory": f"{FACTORY}:tiny_classifier", "inputs": "images",
                            "image_size": 8, "num_classes": 4}, seq_len=None)
    assert cell.seq_len == 1
    from suite.data import build_data

    x, y = build_data(cell, 0, 1).micro_batches(0)[0]
    assert x.shape == (2, 3, 8, 8) and int(y.max()) < 4
    assert build_model(cell.model, 0)(x, y).ndim == 0


BAD_FACTORIES = {
    "nomodule.anywhere:build": "module 'nomodule.anywhere' is not inside the scenario's project",
    f"{FACTORY}:absent": "has no function 'absent'",
    f"{FACTORY}:raises": "raised RuntimeError: cannot build size 1",
    f"{FACTORY}:not_a_module": "returned a dict, not a torch.nn.Module",
    f"{FACTORY}:no_blocks": "no .blocks",
    f"{FACTORY}:one_argument": "forward takes 1 positional argument",
    f"{FACTORY}:wrong_count": "num_parameters says 7 but the module holds",
}


@pytest.mark.parametrize("factory", list(BAD_FACTORIES))
def test_bad_factories_fail_validation_naming_the_factory(factory):
    with pytest.raises(ValueError) as err:
        Scenario(name="own", seq_len=16, model={"family": "python", "factory": factory, "inputs": "tokens",
                                                "vocab": 256})
    text = str(err.value)
    assert BAD_FACTORIES[factory] in text and factory in text, text


def test_a_factory_needs_what_its_inputs_need():
    with pytest.raises(ValueError, match="inputs images needs image_size and num_classes"):
        PythonShape(family="python", factory=f"{FACTORY}:tiny_lm", inputs="images")


def test_shipped_scenario_validates():
    scenario, source = load_scenario(ROOT / "scenarios/own-model.yaml")
    cells = expand(scenario, source)
    assert len(cells) == 8 and {c.axes()["model"] for c in cells} == {"hf-llama-tiny-hf", "hf-qwen2-tiny"}
    assert all(c.model.analytic and predict(c).as_implemented is not None for c in cells)
