"""mkdocs hooks of the documentation site (mkdocs.yml): the site is built from the
repository's own markdown, where it lives, and from each entry point's ``--help``.

- Every page of :data:`PAGES` (README.md, INSTALL.md, docs/guide.md, ...) and every picture
  they show is added under its path in the repository, so that the links between them work
  on the site as they do on the repository's web view; nothing is copied (mkdocs.yml
  excludes everything of ``docs_dir`` from mkdocs' own collection).
- ``docs/cli.md`` is generated: the ``--help`` text of every entry point of
  :data:`ENTRY_POINTS`, run in this interpreter (``python -m ...``), so the page says what the
  installed program says.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/guide.md", "INSTALL.md", "ARCHITECTURE.md", "BENCHMARKS.md",
         "jobscripts/README.md", "solvers/README.md", "tests/README.md",
         "hpc_refer/prediction/README.md")
"""The repository's markdown pages of the site, by their paths in the repository."""
ENTRY_POINTS = ("hpc_refer.run", "hpc_refer.evaluate", "hpc_refer.export", "hpc_refer.report",
                "hpc_refer.plot", "hpc_refer.prediction")
"""The command-line programs whose ``--help`` the site holds (``python -m NAME``)."""
PICTURE = re.compile(r"!\[[^\]]*\]\(([^)\s]+\.(?:png|svg|jpg))\)")


def help_text(module: str) -> str:
    """``python -m module --help``, as this interpreter runs it."""
    done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                          text=True, timeout=300, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"python -m {module} --help exited {done.returncode}: "
                           f"{done.stderr.strip()[-2000:]}")
    return done.stdout


def cli_page() -> str:
    """The page of every entry point's ``--help``."""
    parts = ["# Command line\n\nEvery program of hpc_refer, with the help it prints "
             "(`python -m NAME --help`, generated when the site is built).\n"]
    for module in ENTRY_POINTS:
        parts.append(f"\n## `python -m {module}`\n\n```text\n{help_text(module).rstrip()}\n```\n")
    return "".join(parts)


def on_files(files: Files, config: Any) -> Files:
    """Add the repository's pages, the pictures they show and the generated ``cli.md``."""
    for page in PAGES:
        files.append(File.generated(config, page, abs_src_path=str(ROOT / page)))
        folder = Path(page).parent
        for target in PICTURE.findall((ROOT / page).read_text()):
            picture = (folder / target).as_posix()
            if files.get_file_from_path(picture) is None:
                files.append(File.generated(config, picture, abs_src_path=str(ROOT / picture)))
    files.append(File.generated(config, "docs/cli.md", content=cli_page()))
    return files
