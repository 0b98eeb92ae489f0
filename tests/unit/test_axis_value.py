"""A new value of an axis is one entry in the axis table plus its implementation.

The throw-away test below copies suite/ and adds a checkpointing mode, `all-but-first` (checkpoint every block
but the first), the way a contributor would: one entry in suite/axes.py's CHECKPOINTING, its case in
techniques/checkpointing._block_kwargs, and its arithmetic in the planner's two memory models and its
recompute FLOPs.  Then, in
a fresh interpreter on that copy, the mode is accepted by scenario validation and the JSON Schema, expands into
its own cell, is planned, wraps a real model, is stored and read back in a result, and sorts after `full` in the
report -- with no other file touched.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from suite.axes import CHECKPOINTING, PRECISIONS
from suite.scenario.experiment import Scenario
from suite.techniques.checkpointing import POLICIES

ROOT = Path(__file__).resolve().parents[2]

EDITS = {
    "suite/axes.py": [('CHECKPOINTING = ("none", "every-4", "every-2", "selective", "op-level", "full")',
                       'CHECKPOINTING = ("none", "every-4", "every-2", "selective", "op-level", "full", "all-but-first")')],
    "suite/techniques/checkpointing.py": [
        ('    if mode == "full":\n        return _FULL\n',
         '    if mode == "full" or (mode == "all-but-first" and index > 0):\n        return _FULL\n'
         '    if mode == "all-but-first":\n        return None\n'),
    ],
    "suite/plan/memory.py": [('        "full": 2 * s * b * h / rest,\n',
                              '        "full": 2 * s * b * h / rest,\n'
                              '        "all-but-first": (2 * s * b * h * (layers - 1) + s * b * h * (10 + 24 / tp + 5 * a * s / (h * tp))) / layers,\n')],
    "suite/plan/implemented.py": [('    loss = _loss_bytes(shape, seq_len, micro_batch) / vocab_split if ends else 0.0',
                                   '    per_layer["all-but-first"] = (per_layer["full"] * (shape.layers - 1) + per_layer["none"]) / shape.layers\n'
                                   '    loss = _loss_bytes(shape, seq_len, micro_batch) / vocab_split if ends else 0.0')],
    "suite/plan/recompute.py": [('        "full": block,\n', '        "full": block,\n        "all-but-first": block * (layers - 1) / layers,\n')],
}

PROBE = r'''
import json
from suite import axes
from suite.models.build import build_model
from suite.plan import predict
from suite.results.schema import Axes, CellResult
from suite.scenario import Scenario, expand
from suite.techniques.checkpointing import apply_checkpointing

scenario = Scenario(name="t", model="gpt-tiny", seq_len=32, activation_checkpointing=["none", "all-but-first"],
                    gpus=2, micro_batch_size=2, global_batch_size=4, device="cpu")
cells = expand(scenario)
enum = Scenario.model_json_schema()["$defs"]
modes = sorted({c.activation_checkpointing for c in cells})
new = next(c for c in cells if c.activation_checkpointing == "all-but-first")
old = next(c for c in cells if c.activation_checkpointing == "none")
model = build_model(new.model, new.seed)
apply_checkpointing(model, "all-but-first")
wrapped = [type(b).__name__ for b in model.blocks]
stored = CellResult(cell_id=new.id, axes=Axes(**new.axes()), cell=new, status="ok", started_at="", finished_at="",
                    launcher="torchrun", prediction={})
back = CellResult.model_validate_json(stored.model_dump_json())
print(json.dumps({
    "modes": modes, "ids": len({c.id for c in cells}),
    "schema": "all-but-first" in json.dumps(Scenario.model_json_schema()),
    "activations": [predict(c).memory_bytes.activations for c in (old, new)],
    "wrapped": wrapped,
    "stored": back.axes.activation_checkpointing, "cell": back.cell.activation_checkpointing,
    "rank": [axes.rank("activation_checkpointing", m) for m in ("full", "all-but-first")],
}))
'''


def test_every_mode_of_the_axis_is_implemented_and_planned():
    from suite.plan import implemented, memory
    from suite.scenario.cell import Cell

    assert tuple(POLICIES) == CHECKPOINTING
    assert Scenario.model_fields["activation_checkpointing"].annotation is not None
    assert Cell.model_fields["precision"].annotation.__args__ == PRECISIONS
    for mode in CHECKPOINTING:  # the planner's arithmetic has every mode (a KeyError otherwise)
        from suite.models.presets import resolve

        shape = resolve("gpt-tiny")
        assert memory.activation_bytes(shape, 32, 2, mode, "fp32") > 0
        assert implemented.activation_bytes(shape, 32, 2, mode, "fp32") > 0


def test_a_new_checkpointing_mode_is_one_table_entry_plus_its_implementation(tmp_path):
    shutil.copytree(ROOT / "suite", tmp_path / "suite", ignore=shutil.ignore_patterns("__pycache__"))
    for rel, edits in EDITS.items():
        path = tmp_path / rel
        text = path.read_text()
        for old, new in edits:
            assert text.count(old) == 1, f"{rel}: the throw-away edit no longer applies: {old!r}"
            text = text.replace(old, new)
        path.write_text(text)
    changed = sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "suite").rglob("*.py")
                     if p.read_bytes() != (ROOT / p.relative_to(tmp_path)).read_bytes())
    assert changed == sorted(EDITS)  # the table entry and the implementation: nothing else

    out = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["modes"] == ["all-but-first", "none"] and got["ids"] == 2 and got["schema"]
    none, all_but_first = got["activations"]
    assert 0 < all_but_first < none
    assert got["wrapped"][0] != "CheckpointWrapper" and got["wrapped"][1] == "CheckpointWrapper"
    assert got["stored"] == got["cell"] == "all-but-first"
    assert got["rank"] == [5, 6]  # the report lists it after full, in the table's order


def test_without_its_implementation_a_new_mode_is_a_clear_error(tmp_path):
    shutil.copytree(ROOT / "suite", tmp_path / "suite", ignore=shutil.ignore_patterns("__pycache__"))
    path = tmp_path / "suite/axes.py"
    old, new = EDITS["suite/axes.py"][0]
    path.write_text(path.read_text().replace(old, new))
    probe = ("from suite.scenario import Scenario, expand\n"
             "from suite.techniques.checkpointing import apply_checkpointing\n"
             "from suite.models.build import build_model\n"
             "(c,) = expand(Scenario(name='t', model='gpt-tiny', seq_len=32, activation_checkpointing='all-but-first'))\n"
             "apply_checkpointing(build_model(c.model, c.seed), c.activation_checkpointing)\n")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert out.returncode != 0
    assert "activation_checkpointing 'all-but-first' has no implementation" in out.stderr
