"""`suite publish` with held-out evaluations: the site shows held-out loss, accuracy and time to target.

Three nights of the committed smoke baseline (site_fixtures.copy_run) given held-out evaluations: two points a
cell, the last one the value shown; one cell reaches its accuracy target the first two nights and misses it the
third; another cell's held-out loss and accuracy get worse the third night, which compare flags.  The same
three nights without evaluations must give a site with no trace of them.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest
from site_fixtures import SLOW_CELL, baseline_runs, copy_run

from suite.publish.command import publish
from suite.publish.state import load_state, runs_of

CELLS = sorted(f.name.split("-")[0] for f in (baseline_runs()[0] / "cells").glob("*.json"))
TARGET = CELLS[0]        # reaches its accuracy target on nights 0 and 1, not on night 2
WORSE = SLOW_CELL        # night 2: held-out loss +10 %, accuracy -20 points
REACHED = {"metric": "accuracy", "value": 0.8, "reached": True, "step": 20, "train_s": 1.25, "wall_s": 2.5,
           "best": 0.8137}
MISSED = {"metric": "accuracy", "value": 0.8, "reached": False, "best": 0.62}


def loss_of(cell: str, night: int) -> float:
    return (2.7183 + 0.1 * CELLS.index(cell)) * (1.1 if cell == WORSE and night == 2 else 1.0)


def accuracy_of(cell: str, night: int) -> float:
    return 0.8137 - 0.01 * CELLS.index(cell) - (0.2 if cell == WORSE and night == 2 else 0.0)


def point(step: int, loss: float, accuracy: float | None, **more) -> dict:
    return {"step": step, "loss": loss, "accuracy": accuracy, "perplexity": None, "samples": 64, "seconds": 0.05,
            "train_s": step * 0.06, "wall_s": step * 0.1, **more}


def evals(night: int) -> dict[str, dict]:
    """Every cell evaluated at steps 10 and 20 (the first point never shown: the last one is the value)."""
    out = {}
    for c in CELLS:
        out[c] = {"eval": [point(10, 3.9, 0.4), point(20, loss_of(c, night), accuracy_of(c, night))]}
        if c == TARGET:
            out[c]["time_to_target"] = MISSED if night == 2 else REACHED
    return out


def nights(root: Path, with_eval: bool) -> Path:
    for n, src in enumerate(baseline_runs()[:3]):
        copy_run(src, root, evals=evals(n) if with_eval else None)
    return root


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("eval")
    out = base / "site"
    assert publish([nights(base / "runs", True)], out).added == 3
    return out


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("plain")
    out = base / "site"
    publish([nights(base / "runs", False)], out)
    return out


def section(page: str, title: str) -> str:
    """The table under the scenario page's <h3>title</h3>."""
    assert f"<h3>{title}</h3>" in page, f"no {title} table"
    return page.split(f"<h3>{title}</h3>")[1].split("</table>")[0]


def cells_of(row: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", td).strip() for td in re.findall(r"<td[^>]*>(.*?)</td>", row)]


def row_of(table: str, cell: str) -> list[str]:
    rows = [r for r in table.split("<tr") if f"cell-{cell}.html" in r]
    assert len(rows) == 1, f"no single row of {cell}"
    return cells_of(rows[0])


def header(table: str) -> list[str]:
    return re.findall(r"<th>([^<]*)</th>", table)


def body_rows(page: str) -> list[list[str]]:
    """The rows of the first table after the figure (a cell page's every-run table), newest first."""
    table = page.split("</figure>")[1].split("</table>")[0]
    return [cells_of(r) for r in table.split("<tbody>")[1].split("</tr>") if "<td" in r]


def test_the_scenario_page_shows_the_last_held_out_values(site):
    page = (site / "s" / "smoke" / "index.html").read_text()
    loss, acc = section(page, "held-out loss"), section(page, "accuracy (%)")
    for c in CELLS:
        assert row_of(loss, c)[1].startswith(f"{loss_of(c, 2):.4f}"), row_of(loss, c)
        assert row_of(acc, c)[1].startswith(f"{accuracy_of(c, 2) * 100:.1f}%"), row_of(acc, c)
    assert row_of(loss, TARGET)[1].startswith("2.7183") and row_of(acc, TARGET)[1].startswith("81.4%")
    assert "3.9000" not in loss and "40.0%" not in acc  # the first evaluation is not the value
    assert "regression" in row_of(loss, WORSE)[1] and "regression" in row_of(acc, WORSE)[1]
    assert "regression" not in row_of(loss, TARGET)[1]
    assert "No values of held-out" not in page and "No values of accuracy" not in page


def test_the_cell_page_shows_them_and_the_time_to_target(site):
    page = (site / "s" / "smoke" / f"cell-{TARGET}.html").read_text()
    table = page.split("</figure>")[1].split("</table>")[0]
    head = header(table)
    assert head[-4:] == ["held-out loss", "accuracy (%)", "time to target", "verdict"], head
    rows = body_rows(page)  # newest first
    assert len(rows) == 3
    at = {h: i for i, h in enumerate(head)}
    assert [r[at["held-out loss"]] for r in rows] == ["2.7183"] * 3
    assert [r[at["accuracy (%)"]] for r in rows] == ["81.4%"] * 3
    assert [r[at["time to target"]] for r in rows] == ["not reached (best 0.62)"] + ["step 20: 1.25 s train, 2.5 s wall"] * 2
    assert 'title="target: accuracy 0.8"' in table
    svg = page.split('<figure class="trend">')[1].split("</figure>")[0]  # a trend panel for each of them
    assert "held-out loss" in svg and "accuracy (%)" in svg
    other = (site / "s" / "smoke" / f"cell-{CELLS[1]}.html").read_text()  # no run of it had a target
    assert "held-out loss" in other and "time to target" not in other


def test_compares_held_out_verdicts_come_along(site):
    doc = json.loads((site / "index.json").read_text())
    flagged = {(f["cell_id"], f["metric"]) for f in doc["flagged"]}
    assert {(WORSE, "eval_loss"), (WORSE, "accuracy")} <= flagged
    assert not {m for c, m in flagged if c != WORSE} & {"eval_loss", "accuracy"}, flagged
    series = next(s for s in doc["series"] if s["cell_id"] == WORSE)
    last = series["points"][-1]
    assert last["values"]["eval_loss"] == pytest.approx(loss_of(WORSE, 2))
    assert last["values"]["accuracy"] == pytest.approx(accuracy_of(WORSE, 2) * 100)
    verdicts = {v["metric"]: v["verdict"] for v in last["verdicts"]}
    assert verdicts["eval_loss"] == verdicts["accuracy"] == "regression"
    page = (site / "s" / "smoke" / f"cell-{WORSE}.html").read_text()
    assert re.search(r'<g id="regression-eval_loss-g0-\d+"', page) and re.search(r'<g id="regression-accuracy-g0-\d+"', page)
    assert "eval_loss +10.0%" in body_rows(page)[0][-1]
    target = next(s for s in doc["series"] if s["cell_id"] == TARGET)
    assert target["points"][-1]["time_to_target"]["reached"] is False


def test_the_run_page_shows_them(site):
    doc = json.loads((site / "index.json").read_text())
    key = next(s for s in doc["series"] if s["cell_id"] == TARGET)["points"][0]["run"]
    table = (site / "runs" / f"{key}.html").read_text().split("<h2>Cells</h2>")[1]
    head = header(table)
    assert "held-out loss" in head and "accuracy (%)" in head and "time to target" in head
    row = row_of(table, TARGET)
    assert row[head.index("held-out loss")] == "2.7183" and row[head.index("time to target")].startswith("step 20")


def test_a_site_without_eval_shows_none_of_it(plain):
    pages = {p.relative_to(plain).as_posix(): p.read_text() for p in plain.rglob("*.html")}
    assert len(pages) == 1 + 1 + 4 + 3
    for rel, text in pages.items():
        for word in ("held-out", "accuracy", "time to target"):
            assert word not in text, f"{rel} shows {word!r}"
    scenario = pages["s/smoke/index.html"]
    assert '<p class="muted">No values of MFU (%) (MFU needs' in scenario  # the note as it was
    assert re.findall(r"<h3>([^<]*)</h3>", scenario) == ["step time (ms)", "tokens/s", "peak memory (MiB)", "predicted memory (MiB)",
                                                         "final loss"]
    doc = json.loads((plain / "index.json").read_text())
    assert all(p["values"]["eval_loss"] is None and p["time_to_target"] is None
               for s in doc["series"] for p in s["points"])


def test_a_site_rebuilt_from_its_state_still_shows_them(tmp_path):
    """The slim records keep every evaluation and the time to target: a night published after the run folders
    are gone renders the older nights' values from index.json alone."""
    runs = nights(tmp_path / "runs", True)
    out = tmp_path / "site"
    publish([runs], out)
    for p in sorted(out.glob("s/smoke/*.html")):
        p.unlink()  # render them again, from the state
    shutil.rmtree(runs)
    later = copy_run(baseline_runs()[3], tmp_path / "later", evals=evals(1))
    assert publish([later], out).added == 1
    state = runs_of(load_state(out), out)
    got = {r.manifest.run_id: {x.cell_id: x for x in r.results} for r in state.values()}
    assert len(got) == 4
    for results in got.values():
        assert [len(x.eval) for x in results.values()] == [2] * len(CELLS)
    page = (out / "s" / "smoke" / f"cell-{TARGET}.html").read_text()
    rows = body_rows(page)
    assert len(rows) == 4 and all("2.7183" in r and "81.4%" in r for r in rows)
    assert sum("not reached (best 0.62)" in r for r in rows) == 1


def test_non_finite_held_out_values_keep_index_json_plain(tmp_path):
    """A diverged evaluation (NaN loss, infinite perplexity) is kept, as plain JSON, and reads back as it was."""
    bad = {c: {"eval": [point(10, float("nan"), None, perplexity=math.inf)]} for c in CELLS}
    runs = tmp_path / "runs"
    copy_run(baseline_runs()[0], runs, evals=bad)
    out = tmp_path / "site"
    publish([runs], out)
    json.loads((out / "index.json").read_text(), parse_constant=lambda c: pytest.fail(f"index.json holds {c}"))
    back = next(iter(runs_of(load_state(out), out).values())).results
    assert all(math.isnan(r.eval[-1].loss) and r.eval[-1].perplexity == math.inf for r in back)
    page = (out / "s" / "smoke" / "index.html").read_text()
    assert "held-out loss" not in page  # no finite value: nothing to show
