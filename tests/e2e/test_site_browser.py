"""The published site, rendered for real in headless Chromium: index, a scenario page and a cell page.

The site is built by `suite publish` (a subprocess, as a user runs it) from several nights on four machines
(tests/unit/site_fixtures.py: real smoke runs of this machine, one with a planted x2 slowdown, the others
relabelled as other machines).  Each page gets a probe script (as in test_report_browser.py) that reports
what the browser drew: every <img> decoded, every inline <svg> with a non-empty box and drawn paths, the
stylesheet applied, the red rings of regressions with a non-empty box, and every link.  Each link must
resolve to a file inside the site (or an element of the page): no 404 when the site is served statically.
The index and the slowed cell's page must fit a 1400x900 window (test_report_browser.check_fits).
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from site_fixtures import SLOW_CELL, make_nights  # noqa: E402
from test_report_browser import ROOT, check_fits, chromium, run_chromium  # noqa: E402

pytestmark = pytest.mark.slow
PROBE = """<script>
window.addEventListener("load", () => {
  const box = e => { const b = e.getBBox(); return [b.width, b.height]; };
  const probe = {
    title: document.title,
    styled: getComputedStyle(document.body).maxWidth,
    images: Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight]),
    svgs: Array.from(document.querySelectorAll("svg")).map(s => [...box(s), s.querySelectorAll("path").length]),
    rings: Array.from(document.querySelectorAll('g[id^="regression-"]')).map(g => [g.id, ...box(g)]),
    links: Array.from(document.querySelectorAll("a")).map(a => a.getAttribute("href") ||
             a.getAttributeNS("http://www.w3.org/1999/xlink", "href")),
    ids: Array.from(document.querySelectorAll("[id]")).map(e => e.id),
    flagged_rows: document.querySelectorAll("tr.regression").length,
    text: document.body.innerText.slice(0, 20000),
  };
  const pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(probe);
  document.body.appendChild(pre);
});
</script>"""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("site")
    roots = make_nights(tmp / "nights")
    out = tmp / "site"
    proc = subprocess.run([sys.executable, "-m", "suite", "publish", *map(str, roots.values()), "--out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "published 16 new run(s)" in proc.stderr
    return out


def probe(site: Path, rel: str, tmp: Path) -> dict:
    page = site / rel
    copy = page.with_name(page.stem + ".probe.html")  # beside the page: its relative links still resolve
    copy.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    try:
        dom = run_chromium(chromium(), tmp, "--virtual-time-budget=10000", "--dump-dom", copy.as_uri())
    finally:
        copy.unlink()
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom.stdout, re.S)
    assert found, f"the probe did not run on {rel}; chromium exit {dom.returncode}: {dom.stderr[-2000:]}"
    got = json.loads(html.unescape(found.group(1)))
    assert got["styled"] == "1280px", f"{rel}: style.css not applied"
    for img in got["images"]:
        assert img[0] and img[1] > 0 and img[2] > 0, f"{rel}: an image was not drawn: {got['images']}"
    for w, h, paths in got["svgs"]:
        assert w > 100 and h > 100 and paths > 10, f"{rel}: an SVG was not drawn: {got['svgs']}"
    assert got["links"], rel
    for url in got["links"]:
        assert url, f"{rel}: a link without a target"
        parts = urlsplit(url)
        assert not parts.scheme and not parts.netloc, f"{rel}: a link leaves the site: {url}"
        if not parts.path:
            assert parts.fragment in got["ids"], f"{rel}: {url} names no element"
            continue
        target = (page.parent / unquote(parts.path)).resolve()
        assert target.is_file() and site.resolve() in target.parents, f"{rel}: {url} would be a 404"
    return got


def test_index_lists_the_planted_slowdown(site, tmp_path):
    got = probe(site, "index.html", tmp_path)
    assert got["title"] == "suite results"
    latest, flagged = got["text"].split("Regressions in the latest runs")[1].split("Earlier runs flagged")
    assert "0006_" not in latest  # listed once: later nights came after it
    assert "0006_" in flagged and "step_time" in flagged and "strategy=zero2" in flagged
    assert "ci-runner-2" in got["text"] and "NVIDIA H200" in got["text"] and "suite 1.x" in got["text"]


def test_scenario_page_keeps_groups_apart(site, tmp_path):
    got = probe(site, "s/smoke/index.html", tmp_path)
    assert "device kind differs" in got["text"] and "suite major version differs" in got["text"]
    assert sum(1 for u in got["links"] if u.endswith(".html") and not u.startswith("..")) >= 4  # the cell pages


def test_cell_page_marks_the_slow_night_on_its_trend(site, tmp_path):
    got = probe(site, f"s/smoke/cell-{SLOW_CELL}.html", tmp_path)
    assert len(got["svgs"]) == 3  # one trend per group
    rings = {"-".join(name.split("-")[:2]): (w, h) for name, w, h in got["rings"]}  # regression-<metric>-g<i>-<n>
    assert len({name for name, _, _ in got["rings"]}) == len(got["rings"])  # ids unique on the page
    assert set(rings) == {"regression-step_time", "regression-tokens_per_s"}, got["rings"]
    assert all(w > 0 and h > 0 for w, h in rings.values())
    assert got["flagged_rows"] == 1
    assert sum(1 for u in got["links"] if "runs/" in u) >= 16  # every point of every trend, and the table
    shot = tmp_path / "cell.png"
    run_chromium(chromium(), tmp_path, "--window-size=1280,1600", f"--screenshot={shot}",
                 (site / "s" / "smoke" / f"cell-{SLOW_CELL}.html").as_uri())
    from matplotlib.image import imread

    pixels = imread(shot)
    assert pixels.shape[:2] == (1600, 1280) and pixels[..., :3].std() > 0.05


@pytest.mark.parametrize("rel,main", [("index.html", "table"), (f"s/smoke/cell-{SLOW_CELL}.html", "table")])
def test_pages_fit_a_1400_window(site, tmp_path, rel, main):
    """No table of the index or of a cell page scrolls sideways at 1400 px; the cell page's trends are drawn."""
    got = check_fits(site / rel, tmp_path, main, root=site)
    assert got["links"]
    if rel != "index.html":
        assert got["drawn"] == 3  # one trend per group
