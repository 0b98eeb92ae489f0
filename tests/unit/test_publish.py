"""`suite publish`: the site from several nights on four machines (site_fixtures.py), without a browser.

What is checked: the planted slow night is flagged (index, index.json, a red ring on its cell's trend) and
the clean nights are not; numbers of another device kind or suite major version never share a table or a
trend with this machine's; every link inside the site resolves; publishing again reads and renders only what
is new; the slim records the site keeps give compare's verdicts exactly; bad sites and inputs are clean errors.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from site_fixtures import SLOW_CELL, baseline_runs, make_nights, slow_run
from typer.testing import CliRunner

from suite.cli import app
from suite.publish.command import publish
from suite.publish.state import slim
from suite.report.compare import compare
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
    assert slow_id in page.split("Every run flagged as a regression")[1]
    cell = (site / slow["page"]).read_text()
    assert re.search(r'<g id="regression-step_time-\d+"', cell), "no red ring on the step-time trend"
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
    for s in doc["series"]:  # every trend line: one device kind, one major version
        kinds = {(doc["runs"][p["run"]]["manifest"]["suite_version"].split(".")[0],
                  ", ".join(sorted(set(doc["runs"][p["run"]]["manifest"]["devices"]))) or "cpu")
                 for p in s["points"]}
        assert len(kinds) == 1, s
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
    assert again.added == 0 and again.known == 5 and again.rendered == []
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*.html")}
    one_more = publish([nights["b"], nights["d"]], out)  # two more runs, of another group
    assert one_more.added == 2
    assert sorted(r for r in one_more.rendered if r.startswith("runs/")) == sorted(
        f"runs/{k}.{ext}" for k in index(out)["scenarios"][0]["machines"][-1]["runs"] for ext in ("html", "json"))
    unchanged = [p for p, t in before.items() if p.stat().st_mtime_ns == t]
    assert len(unchanged) == 5  # the first five run pages


def test_slim_records_give_compares_verdicts(tmp_path):
    runs = load_runs(baseline_runs() + [slow_run()])
    slimmed = [r.__class__(path=r.path, manifest=r.manifest, results=[slim(x) for x in r.results]) for r in runs]
    full, cut = compare(runs[:-1], runs[-1:]), compare(slimmed[:-1], slimmed[-1:])
    strip = [(f.cell_id, f.metric, f.verdict, f.baseline, f.current, f.change, f.detail) for f in full.findings]
    assert strip == [(f.cell_id, f.metric, f.verdict, f.baseline, f.current, f.change, f.detail) for f in cut.findings]
    assert any(f.verdict == "regression" for f in full.findings)


def test_cli_publish_and_its_errors(nights, tmp_path):
    runner = CliRunner()
    out = tmp_path / "site"
    res = runner.invoke(app, ["publish", str(nights["c"]), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "published 2 new run(s)" in res.output and (out / "index.html").is_file()
    not_a_site = tmp_path / "other"
    not_a_site.mkdir()
    (not_a_site / "notes.txt").write_text("mine")
    res = runner.invoke(app, ["publish", str(nights["c"]), "--out", str(not_a_site)])
    assert res.exit_code == 2 and "not a suite site" in res.output
    (out / "index.json").write_text("{broken")
    res = runner.invoke(app, ["publish", str(nights["c"]), "--out", str(out)])
    assert res.exit_code == 2 and "cannot read the site's index" in res.output
    empty = tmp_path / "empty"
    empty.mkdir()
    res = runner.invoke(app, ["publish", str(empty), "--out", str(tmp_path / "new")])
    assert res.exit_code == 2 and "no run folders" in res.output


def test_text_from_results_is_escaped(nights, tmp_path):
    from site_fixtures import copy_run

    src = next(nights["c"].glob("smoke/*"))
    root = tmp_path / "evil"
    copy_run(src, root, hostname="<script>alert(1)</script>")
    out = tmp_path / "site"
    publish([root], out)
    for page in out.rglob("*.html"):
        assert "<script>" not in page.read_text(), page
