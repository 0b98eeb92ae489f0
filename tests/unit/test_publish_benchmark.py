"""Publishing must stay cheap night after night: measured with pytest-benchmark.

100 runs (one a night) of a 4-cell scenario publish into a new site; one more night added to that site
re-renders the index, the scenario page, the 4 cell pages (each got a point: the figures are most of the time)
and the new run's page, and leaves the other 100 run pages alone.  That incremental behaviour is asserted on
what was rendered, not on the clock; pytest-benchmark reports the times.  Measured on the 2-core development
machine (2026-12-02): beside one busy loop (scripts/test-under-load), from scratch 0.90 s and one more night
0.73 s (median of 3); at nice 19 beside two CPU-bound processes, 19 s and 0.67 s (4.2 s for its slowest
round).  The time caps (120 s, 30 s) only catch a blow-up (every page re-rendered, a quadratic scan), with
room for a starved machine.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from report_fixtures import make_cells, make_manifest, make_result, write_run

from suite.publish.command import publish

NIGHTS = 100


@pytest.fixture(scope="module")
def nights(tmp_path_factory) -> tuple[Path, Path]:
    """(root with 100 nights, root with the 101st)."""
    root = tmp_path_factory.mktemp("nights")
    cells = make_cells(strategy=["ddp", "zero1", "zero2", "zero3"])
    assert len(cells) == 4
    for n in range(1, NIGHTS + 2):
        when = f"2026-{1 + (n - 1) // 28:02d}-{1 + (n - 1) % 28:02d}T02:00:00+00:00"
        write_run(root / ("all" if n <= NIGHTS else "next"), make_manifest("nightly", n, created_at=when),
                  [make_result(c, seed=n, memory="states") for c in cells])
    return root / "all", root / "next"


@pytest.fixture(scope="module")
def built(nights, tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("built") / "site"
    publish([nights[0]], site)
    return site


def test_publish_100_runs_from_scratch(benchmark, nights, tmp_path):
    sites = iter(tmp_path / f"site{i}" for i in range(100))
    done = benchmark.pedantic(lambda: publish([nights[0]], next(sites)), rounds=1, iterations=1)
    assert done.added == NIGHTS and done.runs == NIGHTS
    assert len([r for r in done.rendered if r.startswith("runs/") and r.endswith(".html")]) == NIGHTS
    if benchmark.stats is not None:  # None under --benchmark-disable
        assert benchmark.stats.stats.median < 120, "100 nights should publish from scratch in well under 2 min"


def test_publish_one_more_night(benchmark, nights, built, tmp_path):
    copies = iter(range(100))

    def setup():
        site = tmp_path / f"copy{next(copies)}"
        shutil.copytree(built, site)
        return (site,), {}

    def one_more(site: Path):
        return publish([nights[0], nights[1]], site)

    done = benchmark.pedantic(one_more, setup=setup, rounds=3, iterations=1)
    assert done.added == 1 and done.known == NIGHTS
    cell_pages = [r for r in done.rendered if r.startswith("s/nightly/") and r != "s/nightly/index.html"]
    run_files = [r for r in done.rendered if r.startswith("runs/")]
    assert len(cell_pages) == 4 and len(run_files) == 2  # the new run's page and manifest; no other run page
    rest = set(done.rendered) - set(cell_pages) - set(run_files)
    assert {"index.html", "s/nightly/index.html"} <= rest <= {"index.html", "s/nightly/index.html", "summary.md"}
    assert done.unchanged >= 2 * NIGHTS  # every earlier run's page and manifest, untouched
    if benchmark.stats is not None:
        assert benchmark.stats.stats.median < 30, "one more night should publish in seconds, not re-render the site"
