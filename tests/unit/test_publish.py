"""`suite publish`: the site from several nights on four machines (site_fixtures.py), without a browser.

What is checked: the planted slow night is flagged (index, index.json, a red ring on its cell's trend) and
the clean nights are not; numbers of another device kind or suite major version never share a table or a
trend with this machine's; every link inside the site resolves; publishing again reads and renders only what
is new; the slim records the site keeps give compare's verdicts exactly; bad sites and inputs are clean errors.
"""

from __future__ import annotations

import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from site_fixtures import SLOW_CELL, baseline_runs, make_nights, slow_run

from suite.compare.comparison import compare
from suite.publish.command import publish
from suite.publish.state import slim
from suite.results.reader import load_runs


@pytest.fixture(scope="module")
def nights(tmp_path_factory) -> dict[str, Path]:
    return make_nights(tmp_path_factory.mktemp("nights"))


@pytest.fixture(scope="module")
def site(nights, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site") / "site"
    done = publish(list(nights.values()), out)
    assert done.added == 16 and done.known == 0
    return out


def index(site: Path) -> dict:
    return json.loads((site / "index.json").read_text())


class Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        for name in ("href", "xlink:href", "src"):
            if a.get(name):
                self.links.append(a[name])


def test_the_planted_slow_night_is_flagged_and_nothing_else(site):
    doc = index(site)
    slow_id = json.loads((slow_run() / "manifest.json").read_text())["run_id"].replace("0001_", "0006_", 1)
    flagged = {(f["run_id"], f["cell_id"], f["metric"]) for f in doc["flagged"]}
    assert (slow_id, SLOW_CELL, "step_time") in flagged
    assert (slow_id, SLOW_CELL, "tokens_per_s") in flagged
    assert {run for run, _, _ in flagged} == {slow_id}, f"a clean night was flagged: {flagged}"
    slow = [f for f in doc["flagged"] if f["metric"] == "step_time"][0]
    assert slow["change"] > 0.5  # x2 planted in the timed region
    point = [p for s in doc["series"] if s["cell_id"] == SLOW_CELL for p in s["points"] if p["run_id"] == slow_id][0]
    step = [v for v in point["verdicts"] if v["metric"] == "step_time"][0]
    assert step["verdict"] == "regression" and "history of 5 runs" in step["noise"]  # judged against the noise
    page = (site / "index.html").read_text()
    latest, earlier = page.split("Regressions in the latest runs")[1].split("Earlier runs flagged as a regression")
    assert slow_id in earlier and slow_id not in latest  # a later night came after it; each row in one table only
    cell = (site / slow["page"]).read_text()
    assert re.search(r'<g id="regression-step_time-g0-\d+"', cell), "no red ring on the step-time trend"
    assert cell.count('<tr class="regression">') == 1


def test_the_band_comes_from_the_nights_before(site):
    series = [s for s in index(site)["series"] if s["cell_id"] == SLOW_CELL and s["host"] == "vm"
              and s["suite_major"] == "0"][0]
    points = series["points"]
    assert [bool(p["band"]) for p in points] == [False] * 5 + [True, True]  # a history from the 6th run on
    slow = points[5]
    low, high = slow["band"]["step_time"]
    assert low < points[4]["values"]["step_time"] < high < slow["values"]["step_time"]


def test_other_device_kinds_and_major_versions_are_never_merged(site):
    doc = index(site)

    def kind(run: str) -> tuple:  # what the run was measured on, read from its manifest here, not by suite
        m = doc["runs"][run]["manifest"]
        return m["suite_version"].split(".")[0], tuple(sorted(set(m["devices"]))) or ("cpu", m["cpu_model"])

    for s in doc["series"]:  # every trend line: one device kind, one major version, one host
        assert len({kind(p["run"]) for p in s["points"]}) == 1, s
        assert {doc["runs"][p["run"]]["manifest"]["hostname"] for p in s["points"]} == {s["host"]}
    machines = {(m["host"], m["device_kind"], m["suite_major"]): len(m["runs"])
                for m in doc["scenarios"][0]["machines"]}
    assert machines == {("vm", "cpu: AMD EPYC", "0"): 7, ("ci-runner-2", "cpu: AMD EPYC", "0"): 5,
                        ("gpu-1", "NVIDIA H200", "0"): 2, ("vm", "cpu: AMD EPYC", "1"): 2}
    page = (site / "s" / "smoke" / "index.html").read_text()
    sections = re.split(r"<h2>", page)[1:]
    heads = [s.split("</h2>")[0] for s in sections]
    assert heads == ["cpu: AMD EPYC · suite 0.x", "NVIDIA H200 · suite 0.x", "cpu: AMD EPYC · suite 1.x"]
    cpu0 = sections[0]
    assert "host vm" in cpu0 and "host ci-runner-2" in cpu0  # comparable machines side by side
    assert "gpu-1" not in cpu0.split('<div class="apart">')[1].split("</div>")[1]
    assert "device kind differs (NVIDIA H200 vs cpu: AMD EPYC)" in cpu0
    assert "suite major version differs (1 vs 0)" in cpu0
    columns = re.findall(r"<th>([^<]*)</th>", sections[2].split("</table>")[0])
    assert columns[1:] and all("ci-runner-2" not in c for c in columns)


def test_every_link_inside_the_site_resolves(site):
    pages = sorted(site.rglob("*.html"))
    assert len(pages) == 1 + 1 + 4 + 16
    for page in pages:
        parser = Links()
        parser.feed(page.read_text())
        assert parser.links, page
        for url in parser.links:
            parts = urlsplit(url)
            assert not parts.scheme and not parts.netloc, f"{page}: links outside the site: {url}"
            if not parts.path:  # a reference inside the page (the SVG's markers): the id must be there
                assert parts.fragment in parser.ids, f"{page}: {url} names no element"
                continue
            target = (page.parent / unquote(parts.path)).resolve()
            assert target.is_file() and site.resolve() in target.parents, f"{page}: {url} -> 404"
    for f in site.rglob("*"):  # a static host serving the folder as another user can read every file
        assert f.stat().st_mode & 0o444 == 0o444, f"{f}: mode {f.stat().st_mode:o}"


def test_publishing_again_renders_only_what_changed(nights, tmp_path):
    out = tmp_path / "site"
    first = publish([nights["b"]], out)
    assert first.added == 5 and len(first.rendered) > 0
    again = publish([nights["b"]], out)
    assert again.added == 0 and again.known == 5
    assert again.rendered == ["summary.md"]  # "0 runs published now": the summary is of this publish
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*.html")}
    one_more = publish([nights["b"], nights["d"]], out)  # two more runs, of another group
    assert one_more.added == 2
    assert sorted(r for r in one_more.rendered if r.startswith("runs/")) == sorted(
        f"runs/{k}.{ext}" for k in index(out)["scenarios"][0]["machines"][-1]["runs"] for ext in ("html", "json"))
    unchanged = [p for p, t in before.items() if p.stat().st_mtime_ns == t]
    assert len(unchanged) == 5  # the first five run pages


def test_a_resumed_run_renders_its_pages_again(nights, tmp_path):
    """A run folder published while it ran, then resumed (one more cell file): read again, its pages redone."""
    from site_fixtures import copy_run

    root = tmp_path / "growing"
    run = copy_run(next(nights["c"].glob("smoke/*")), root)
    cells = sorted((run / "cells").glob("*.json"))
    held = cells[-1].read_bytes()
    cells[-1].unlink()
    out = tmp_path / "site"
    publish([root], out)
    (run / "cells" / cells[-1].name).write_bytes(held)  # the resumed launch's result lands
    again = publish([root], out)
    assert again.added == 1 and again.known == 0
    cell_id = cells[-1].name.split("-")[0]
    assert f"s/smoke/cell-{cell_id}.html" in again.rendered  # the new cell's page
    assert any(r.startswith("runs/") and r.endswith(".html") for r in again.rendered)
    assert not any(f"cell-{c.name.split('-')[0]}.html" in r for c in cells[:-1] for r in again.rendered)


def test_publish_without_matplotlib_is_a_clean_error(cli, nights, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import matplotlib.figure -> ImportError
    res = cli("publish", nights["c"], "--out", tmp_path / "site")
    assert res.exit_code == 2 and "pip install 'suite[report]'" in res.output
    assert not (tmp_path / "site").exists() or not any((tmp_path / "site").iterdir())  # nothing half-written


def test_publish_without_jinja2_is_a_clean_error(cli, nights, tmp_path, monkeypatch):
    from suite.report import templating

    monkeypatch.setitem(sys.modules, "jinja2", None)  # import jinja2 -> ImportError
    for cached in (templating.environment, templating.template):
        cached.cache_clear()
    try:
        res = cli("publish", nights["c"], "--out", tmp_path / "site")
        assert res.exit_code == 2 and "pip install jinja2" in res.output, res.output
        assert not (tmp_path / "site").exists() or not any((tmp_path / "site").iterdir())  # nothing half-written
    finally:
        for cached in (templating.environment, templating.template):
            cached.cache_clear()


def test_a_damaged_or_foreign_site_is_refused(cli, nights, tmp_path):
    out = tmp_path / "site"
    publish([nights["c"]], out)
    doc = index(out)
    for change, message in ((lambda d: d.update(version=99), "site format version 99"),
                            (lambda d: d["runs"].update({"../../escape": {}}), "is not a run key"),
                            (lambda d: d["runs"].update({"0" * 16: {"manifest": {}}}), "is damaged")):
        damaged = json.loads(json.dumps(doc))
        change(damaged)
        (out / "index.json").write_text(json.dumps(damaged))
        res = cli("publish", nights["c"], "--out", out)
        assert res.exit_code == 2 and message in res.output, res.output
    assert not (tmp_path / "escape.html").exists()


def test_slim_records_give_compares_verdicts_after_the_round_trip(tmp_path):
    """Slim records, through index.json and back, give compare's verdicts on the full records: with repeats
    (3 a run), a history, a diverged cell (NaN loss) and a slowed cell."""
    from report_fixtures import make_cells, make_manifest, make_result, write_run

    from suite.publish.state import SiteState, ingest, runs_of, save_state

    cells = make_cells(strategy=["ddp", "zero1", "zero3"])
    for n in range(1, 8):
        results = [make_result(c, repeat=k, seed=10 * n + k, noise=0.05,
                               step_time_s=0.13 if (n == 7 and c.strategy == "zero1") else 0.1,
                               status="diverged" if c.strategy == "zero3" and n == 7 else "ok")
                   for c in cells for k in range(3)]
        write_run(tmp_path / "runs", make_manifest("slim", n), results)
    full = load_runs([tmp_path / "runs"])
    st = SiteState()
    ingest([tmp_path / "runs"], st, lambda line: None)
    save_state(tmp_path, st, {})
    text = (tmp_path / "index.json").read_text()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"index.json holds {c}: not JSON"))
    from suite.publish.state import load_state

    back = sorted(runs_of(load_state(tmp_path), tmp_path).values(), key=lambda r: r.manifest.run_id)

    def verdicts(runs):
        out = compare(runs[:-1], runs[-1:]).findings
        return [(f.cell_id, f.metric, f.verdict, f.baseline, f.current, f.change, f.detail, f.method) for f in out]

    assert verdicts(back) == verdicts(full)
    got = {(c, m): v for c, m, v, *_ in verdicts(full)}
    zero1 = next(c.id for c in cells if c.strategy == "zero1")
    assert got[(zero1, "step_time")] == "regression"  # the slowed cell, judged against a history of 6
    assert "history of 6 runs" in [f.noise for f in compare(back[:-1], back[-1:]).findings
                                   if f.cell_id == zero1 and f.metric == "step_time"][0]


def test_slim_records_give_compares_verdicts(tmp_path):
    runs = load_runs(baseline_runs() + [slow_run()])
    slimmed = [r.__class__(path=r.path, manifest=r.manifest, results=[slim(x) for x in r.results]) for r in runs]
    full, cut = compare(runs[:-1], runs[-1:]), compare(slimmed[:-1], slimmed[-1:])
    strip = [(f.cell_id, f.metric, f.verdict, f.baseline, f.current, f.change, f.detail) for f in full.findings]
    assert strip == [(f.cell_id, f.metric, f.verdict, f.baseline, f.current, f.change, f.detail) for f in cut.findings]
    assert any(f.verdict == "regression" for f in full.findings)


def test_cli_publish_and_its_errors(cli, nights, tmp_path):
    out = tmp_path / "site"
    res = cli("publish", nights["c"], "--out", out)
    assert res.exit_code == 0, res.output
    assert "published 2 new run(s)" in res.output and (out / "index.html").is_file()
    not_a_site = tmp_path / "other"
    not_a_site.mkdir()
    (not_a_site / "notes.txt").write_text("mine")
    res = cli("publish", nights["c"], "--out", not_a_site)
    assert res.exit_code == 2 and "not a suite site" in res.output
    (out / "index.json").write_text("{broken")
    res = cli("publish", nights["c"], "--out", out)
    assert res.exit_code == 2 and "cannot read the site's index" in res.output
    empty = tmp_path / "empty"
    empty.mkdir()
    res = cli("publish", empty, "--out", tmp_path / "new")
    assert res.exit_code == 2 and "no run folders" in res.output


def test_text_from_results_is_escaped(nights, tmp_path):
    from site_fixtures import copy_run

    evil = "<script>alert(1)</script>"
    src = next(nights["c"].glob("smoke/*"))
    root = tmp_path / "evil"
    run = copy_run(src, root, hostname=evil, scenario=evil, container_image=evil, cpu_model=evil)
    cell = sorted((run / "cells").glob("*.json"))[0]
    record = json.loads(cell.read_text())
    record.update(status="failed", error=evil, axes={**record["axes"], "strategy": evil})
    cell.write_text(json.dumps(record))
    out = tmp_path / "site"
    publish([root], out)
    pages = {p: p.read_text() for p in out.rglob("*.html")}
    assert len(pages) == 1 + 1 + 4 + 1 and all(p.resolve().is_relative_to(out.resolve()) for p in pages)
    for page, text in pages.items():
        assert "<script>" not in text, page
    shown = "".join(pages.values())
    assert shown.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 5  # shown, as text: host, scenario, image, ...


def test_runs_numbered_alike_in_two_folders_get_distinct_labels(cli, tmp_path):
    from report_fixtures import make_cells, make_manifest, make_result, write_run

    cell = make_cells()[0]
    for folder, day in (("a", "2025-01-01T00:00:00Z"), ("b", "2025-01-02T00:00:00Z")):  # both number their run 0001
        write_run(tmp_path / "results" / folder, make_manifest(run_no=1, created_at=day), [make_result(cell)])
    assert cli("publish", tmp_path / "results", "--out", tmp_path / "site").exit_code == 0
    page = (tmp_path / "site" / "s" / "fixture" / f"cell-{cell.id}.html").read_text()
    labels = re.findall(r'<a href="\.\./\.\./runs/[^"]+">(0001[^<]*)</a>', page)
    assert len(labels) == 2 and len(set(labels)) == 2, labels


def test_cell_pages_show_predicted_beside_measured_memory(site):
    doc = index(site)
    point = next(p for s in doc["series"] for p in s["points"] if p["values"].get("peak_memory"))
    assert point["values"]["predicted_memory"] > 0
    page = next((site / "s").rglob("cell-*.html")).read_text()
    assert "predicted memory (MiB)" in page and "peak memory (MiB)" in page


def test_many_cell_pages_render_in_forked_workers_exactly_as_here(tmp_path, monkeypatch):
    from report_fixtures import make_cells, make_manifest, make_result, write_run

    from suite.publish import command

    cells = make_cells(strategy=["ddp", "zero1", "zero2", "zero3"], seq_len=[16, 32, 48, 64, 80, 96],
                       activation_checkpointing=["none", "full"])
    assert len(cells) >= command.PARALLEL_PAGES
    for n in (1, 2):
        write_run(tmp_path / "results", make_manifest(run_no=n), [make_result(c, seed=n) for c in cells])
    forked = command.publish([tmp_path / "results"], tmp_path / "forked")
    monkeypatch.setattr(command, "PARALLEL_PAGES", 10**9)  # every page here, in this process
    here = command.publish([tmp_path / "results"], tmp_path / "here")
    assert sorted(forked.rendered) == sorted(here.rendered)
    pages = sorted(p.relative_to(tmp_path / "here") for p in (tmp_path / "here").rglob("cell-*.html"))
    assert len(pages) == len(cells)
    for rel in pages:
        assert (tmp_path / "forked" / rel).read_bytes() == (tmp_path / "here" / rel).read_bytes(), rel


def test_a_reused_figure_draws_each_trend_exactly_as_a_new_one(nights):
    """Trends are drawn on one figure per panel count, cleared between cells: no line, band, ring, note or legend
    of one cell may survive into the next (the planted slow night gives rings, the long history bands)."""
    from suite.publish import command, state, trend

    st = state.SiteState()
    state.ingest(list(nights.values()), st, lambda line: None)
    views = command.build(state.runs_of(st, Path("unused")), 10)
    cells = [(v, c) for v in views for c in v.cells]
    assert len(cells) >= 4
    reused = [command._figures(v, c) for v, c in cells]
    for (view, cell_id), before in zip(reversed(cells), reversed(reused)):
        trend._CANVASES.clear()
        assert command._figures(view, cell_id) == before, cell_id
    assert any('id="regression-' in svg for figs in reused for svg in figs.values())
