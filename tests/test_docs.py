"""The documentation (issue 39, point 5): the site builds in mkdocs' strict mode from the
repository's markdown (a broken link, a page missing from the nav or an unknown anchor
fails), holds the guide and every entry point's ``--help``; README's first screen says what
hpc_refer is for, the two commands and an example each for MuJoCo, a built-in flow and the
user's own solver."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))
from hooks import ENTRY_POINTS, PAGES  # noqa: E402

FIRST_SCREEN = 50
"""README lines a newcomer sees before scrolling (a terminal or the repository's page)."""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def test_the_site_builds_strictly_with_every_page(site):
    for page in PAGES:
        stem = Path(page).with_suffix("")
        html = site / ("index.html" if page == "README.md" else
                       stem.parent / "index.html" if stem.name == "README" else
                       stem / "index.html")
        assert html.is_file(), f"{page}: no {html.relative_to(site)}"
    assert "Remember-and-Forget" in (site / "index.html").read_text()


def test_the_command_line_page_holds_every_programs_help(site):
    page = (site / "docs" / "cli" / "index.html").read_text()
    for module in ENTRY_POINTS:
        assert f"usage: python -m {module}" in page, module
    assert "--refer.mode" in page and "--restart" in page


def test_readmes_first_screen_says_what_it_is_for_the_two_commands_and_three_examples():
    first = "\n".join((ROOT / "README.md").read_text().splitlines()[:FIRST_SCREEN])
    assert "ReF-ER" in first and "solver" in first
    for needed in ("make run", "make test", "--env Hopper-v5", "configs/ks.toml",
                   "--env CylinderJets", "--env mysolver:", "--env external", "make docs-serve"):
        assert needed in first, needed
