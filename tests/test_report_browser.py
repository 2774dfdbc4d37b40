"""The report of a short run, rendered by a real browser (issue 14, point 2): headless
Chromium (Debian's package, installed by ``make system-browser``) driven by Playwright opens
``report.html`` from disk, and the test fails on a console or page error, on any request that
leaves the file (the page must be self-contained), on a figure that is missing or has no size,
and on a plot with nothing drawn in it. The screenshot is kept as a CI artifact beside the
run: ``build/ci-artifacts/report-run/report.png`` (``HPC_REFER_ARTIFACTS`` moves it).

Without Chromium the test is skipped, except under CI (``CI`` set), where it fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_launch import HERE, mpi_env, mpirun_exe

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(os.environ.get("HPC_REFER_ARTIFACTS", HERE.parent / "build" / "ci-artifacts"))
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
"""Chromium as root on a machine without network: no sandbox, no background connections."""

INSPECT = """() => [...document.querySelectorAll('figure.plot')].map(fig => {
  const svg = fig.querySelector('svg');
  const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
  const drawn = svg ? [...svg.querySelectorAll('[id^="data-"]')].filter(g => {
    const b = g.getBBox();
    const vertices = [...g.querySelectorAll('path')].reduce(
      (n, p) => n + ((p.getAttribute('d') || '').match(/[ML]/g) || []).length, 0);
    const images = g.tagName === 'image' ? 1 : g.querySelectorAll('image').length;
    return (b.width > 0 || b.height > 0) && (vertices >= 2 || images > 0);
  }).length : 0;
  return {points: Number(fig.dataset.points), width: box.width, height: box.height, drawn,
          caption: fig.querySelector('figcaption').textContent.slice(0, 60)};
})"""
"""Per figure: its data-points, the rendered size of its SVG, and how many of its data
artists the browser actually drew (a box of some size, a line of at least two vertices or
a picture)."""


@pytest.fixture(scope="module")
def chromium() -> str:
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("no chromium on PATH under CI: `make system-browser` installs it")
        pytest.skip("no chromium on PATH (make system-browser installs Debian's package)")
    return CHROMIUM


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """A short KS run over three ranks (one learner, two actors) that writes its report."""
    run = ARTIFACTS / "report-run"
    shutil.rmtree(run, ignore_errors=True)
    run.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [mpirun_exe(), "-n", "3", sys.executable, "-m", "hpc_refer.run", "--env", "KS",
         "--steps", "1600", "--replay.learn-start", "400", "--log-every", "200",
         "--report-every", "800", "--run-dir", str(run)],
        env=mpi_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return run / "report.html"


def test_the_report_renders_in_headless_chromium(chromium, report):
    from playwright.sync_api import sync_playwright

    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=FLAGS, headless=True)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
                if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.on("request", lambda r: problems.append(f"request: {r.url}")
                if not r.url.startswith(("file:", "data:")) else None)
        page.goto(report.as_uri(), wait_until="load")
        shown = page.evaluate(INSPECT)
        page.screenshot(path=str(report.with_name("report.png")), full_page=True)
        browser.close()
    assert problems == []
    # learning curve, ReF-ER, rho, losses, throughput, energy, and u(x, t) of both actors
    assert len(shown) == 8, [f["caption"] for f in shown]
    for figure in shown:
        assert figure["width"] > 200 and figure["height"] > 100, figure
        assert figure["points"] > 0 and figure["drawn"] > 0, figure
    assert report.with_name("report.png").stat().st_size > 10_000
