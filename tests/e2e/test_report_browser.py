"""The HTML report, rendered for real in headless Chromium: the page loads with its tables and every plot image.

Chromium (Debian: `apt-get install -y chromium`) loads a copy of the report with a small probe script appended:
on the window's load event it writes what the browser actually got (tables, rows, each <img>'s naturalWidth and
naturalHeight) into the DOM, and `--dump-dom` hands the DOM back.  A zero natural size means the browser could
not decode the image.  A screenshot of the report itself (no probe) must be a real, non-blank picture.
Without a Chromium binary the test skips, except under CI (CI set), where a missing browser is a failure.

A page must also fit a 1400x900 window (`check_fits`, used by test_site_browser.py too): nothing makes the page
wider than the window, every table, figure, SVG and image is at most as wide (one inside a sideways-scrolling
box counts as that box, which must be `max-width: 100%; overflow-x: auto`), the main tables need no sideways
scrolling at all, every SVG and image is drawn, and every relative link resolves to a file.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from report_fixtures import make_cells, make_manifest, make_result, write_run  # noqa: E402

from suite.results.schema import Gate  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SMOKE_BASELINE = ROOT / "results" / "baselines" / "smoke"
PROBE = """<script>
window.addEventListener("load", () => {
  const probe = {
    title: document.title,
    tables: document.querySelectorAll("table").length,
    cell_rows: document.querySelectorAll("table.cells tbody tr").length,
    pivots: document.querySelectorAll("section.pivot table").length,
    images: Array.from(document.images).map(i => ({complete: i.complete, w: i.naturalWidth, h: i.naturalHeight})),
  };
  const pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(probe);
  document.body.appendChild(pre);
});
</script>"""


WINDOW = (1400, 900)
FIT_PROBE = """<script>
window.addEventListener("load", () => {
  const W = window.innerWidth;
  const scroller = e => {  // the nearest box that scrolls sideways: it, not what it holds, takes page width
    for (let p = e.parentElement; p && p !== document.body; p = p.parentElement) {
      if (["auto", "scroll"].includes(getComputedStyle(p).overflowX)) return p;
    }
    return null;
  };
  const name = e => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "")
    + (typeof e.className === "string" && e.className ? "." + e.className.trim().split(/\\s+/).join(".") : "");
  const width = e => (scroller(e) || e).getBoundingClientRect().width;
  const all = s => Array.from(document.querySelectorAll(s));
  const probe = {
    window: [W, window.innerHeight],
    scroll_width: document.scrollingElement.scrollWidth,
    measured: all("table, figure, svg, img").length,
    too_wide: all("table, figure, svg, img").filter(e => width(e) > W).map(e => [name(e), width(e)]),
    boxes: all("body *").filter(e => ["auto", "scroll"].includes(getComputedStyle(e).overflowX))
      .map(e => [name(e), getComputedStyle(e).maxWidth, getComputedStyle(e).overflowX]),
    scrolled: all(MAIN).filter(t => { const b = scroller(t); return b && b.scrollWidth > b.clientWidth; })
      .map(t => [name(t), t.getBoundingClientRect().width]),
    main: all(MAIN).length,
    drawn: all("svg, img").length,
    undrawn: all("svg, img").filter(e => { const r = e.getBoundingClientRect();
      return !(r.width > 0 && r.height > 0) || (e.tagName === "IMG" && !(e.complete && e.naturalWidth > 0)); })
      .map(name),
    links: all("a[href]").map(a => a.getAttribute("href")),
    ids: all("[id]").map(e => e.id),
  };
  const pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(probe);
  document.body.appendChild(pre);
});
</script>"""


def check_fits(page: Path, tmp: Path, main: str, root: Path | None = None) -> dict:
    """Load `page` in a 1400x900 window and check that it fits (module docstring); `main`: a CSS selector of the
    tables that must fit without scrolling sideways; links must resolve inside `root` (default: the page's
    folder).  Returns the probe."""
    copy = page.with_name(page.stem + ".fit.html")  # beside the page: its relative links still resolve
    copy.write_text(page.read_text().replace("</body>", FIT_PROBE.replace("MAIN", json.dumps(main)) + "</body>"))
    try:
        dom = run_chromium(chromium(), tmp, f"--window-size={WINDOW[0]},{WINDOW[1]}", "--virtual-time-budget=10000",
                           "--dump-dom", copy.as_uri())
    finally:
        copy.unlink()
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom.stdout, re.S)
    assert found, f"the probe did not run on {page}; chromium exit {dom.returncode}: {dom.stderr[-2000:]}"
    got = json.loads(html.unescape(found.group(1)))
    assert got["window"][0] == WINDOW[0], got["window"]  # the width is what is checked
    assert got["scroll_width"] <= WINDOW[0], f"{page.name} is {got['scroll_width']} px wide"
    assert got["measured"] > 0 and not got["too_wide"], f"{page.name}: wider than the window: {got['too_wide']}"
    assert all(w == "100%" and x == "auto" for _, w, x in got["boxes"]), got["boxes"]
    assert got["main"] > 0 and not got["scrolled"], f"{page.name}: scrolls sideways at 1400 px: {got['scrolled']}"
    assert not got["undrawn"], f"{page.name}: not drawn: {got['undrawn']}"
    root = (root or page.parent).resolve()
    for url in got["links"]:
        parts = urlsplit(url)
        if parts.scheme or parts.netloc:
            continue
        if not parts.path:
            assert parts.fragment in got["ids"], f"{page.name}: {url} names no element"
            continue
        target = (page.parent / unquote(parts.path)).resolve()
        assert target.is_file() and (target == root or root in target.parents), f"{page.name}: {url} -> 404"
    return got


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI"):  # .ci/run installs it: in CI a missing browser is a failure, not a skip
        pytest.fail("no Chromium binary on PATH in CI (.ci/run should have installed Debian's chromium)")
    pytest.skip("no Chromium binary on PATH (Debian: apt-get install -y chromium)")


def run_chromium(binary: str, tmp: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           f"--user-data-dir={tmp / 'chromium-profile'}", "--hide-scrollbars", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def fixture_results(tmp_path: Path) -> Path:
    cells = make_cells(strategy=["ddp", "zero1", "zero2", "zero3"], gpus=[2, 4],
                       convergence={"match": {"strategy": "ddp"}})
    gates = [Gate(name="match", passed=True, detail="within rtol")]
    return write_run(tmp_path / "results", make_manifest(), [make_result(c, gates=gates) for c in cells])


def check_report_in_browser(results: Path, tmp_path: Path, expect_rows: int) -> None:
    binary = chromium()
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "suite", "report", str(results), "--format", "html", "--out",
                           str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    page = out / "report.html"
    probe_page = out / "probe.html"
    probe_page.write_text(page.read_text().replace("</body>", PROBE + "</body>"))

    dom = run_chromium(binary, tmp_path, "--virtual-time-budget=10000", "--dump-dom", probe_page.as_uri())
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom.stdout, re.S)
    assert found, f"the probe did not run; chromium exit {dom.returncode}: {dom.stderr[-2000:]}"
    probe = json.loads(html.unescape(found.group(1)))
    assert probe["title"] == "suite report"
    assert probe["cell_rows"] == expect_rows
    assert probe["tables"] >= 3 and probe["pivots"] >= 1
    assert len(probe["images"]) >= 3
    for img in probe["images"]:
        assert img["complete"] and img["w"] > 0 and img["h"] > 0, probe["images"]

    shot = tmp_path / "shot.png"
    run_chromium(binary, tmp_path, "--window-size=1280,1600", f"--screenshot={shot}", page.as_uri())
    assert shot.is_file(), "chromium wrote no screenshot"
    from matplotlib.image import imread

    pixels = imread(shot)
    assert pixels.shape[:2] == (1600, 1280)
    assert pixels[..., :3].std() > 0.05  # text, tables and plots, not a blank page


def test_fixture_report_renders_in_chromium(tmp_path):
    check_report_in_browser(fixture_results(tmp_path), tmp_path, expect_rows=8)


def test_smoke_baseline_report_renders_in_chromium(tmp_path):
    """The latest committed smoke run (results/baselines/smoke holds 5, a history): 4 cells, the memory pivot,
    loss and step-time plots."""
    runs = sorted(SMOKE_BASELINE.glob("*/manifest.json"))
    assert runs, f"no committed smoke baseline under {SMOKE_BASELINE}"
    check_report_in_browser(runs[-1].parent, tmp_path, expect_rows=4)


def test_smoke_baseline_report_fits_a_1400_window(tmp_path):
    """The report of the whole committed smoke baseline (5 runs, 20 rows: the run column too) fits 1400x900:
    its cells tables (speed; memory and convergence) need no sideways scrolling, its plots are drawn."""
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "suite", "report", str(SMOKE_BASELINE), "--format", "html", "--out",
                           str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    page = (out / "report.html").read_text()
    assert page.count('<table class="cells">') == page.count('<table class="cells-memory">') == 1
    got = check_fits(out / "report.html", tmp_path, "table.cells, table.cells-memory, table.runs")
    assert got["main"] == 3 and got["drawn"] >= 3
