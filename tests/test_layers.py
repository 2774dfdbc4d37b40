"""The import layers (issue 23, point 3; DESIGN.md, "Layers"): the records are plain data.
Imports are measured in a fresh interpreter."""

from __future__ import annotations

import ast

from mpi_launch import run_snippet


def loaded(module: str, watched: tuple[str, ...]) -> list[str]:
    """The modules of ``watched`` that importing ``module`` loads (a fresh interpreter)."""
    out = run_snippet(f"import sys\nimport {module}\n"
                      f"print(sorted(m for m in {watched!r} if m in sys.modules))\n")
    return ast.literal_eval(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_the_records_are_plain_data():
    """No torch, no numba, and neither the replay nor its sum tree (they import the records:
    the circle records -> replay -> sumtree -> records is gone)."""
    watched = ("torch", "numba", "hpc_refer.replay", "hpc_refer.sumtree")
    assert loaded("hpc_refer.records", watched) == []
