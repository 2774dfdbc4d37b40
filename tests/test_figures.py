"""Figures tied to result files (issue 39, point 4): a figure quoted in README.md,
BENCHMARKS.md or the guide carries a marker naming the committed result file and the value
it quotes, ``<!--fig FILE PATH [*SCALE]-->`` right after it (invisible where the markdown is
rendered). FILE is under bench/results/, PATH the keys down to the value (``a.b.c``, ``a[2]``
for a list's item), SCALE a factor (100 for a percentage of a ratio). The test reads both and
fails where the figure is not the file's value rounded to the figure's own decimals, or where
a marker names a file or key that is not there.

Which figures carry a marker so far: BENCHMARKS sections 12 (its tests), 14 (the table and its
tests), 15 (its control), 17 (its table), 20 (its IQM, per-task tests and Ant), 23, 24 and 25,
and the guide's figures of the preset and CrossQ. The other sections' figures are not checked
yet."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
DOCUMENTS = ("README.md", "BENCHMARKS.md", "docs/guide.md")
MARK = re.compile(r"(?P<figure>-?\d[\d,]*(?:\.\d+)?)(?P<between>[^<\d]{0,12}?)"
                  r"<!--fig (?P<file>[\w./-]+) (?P<path>[\w.\[\]-]+)"
                  r"(?: \*(?P<scale>[\d.e+-]+))?-->")
KEY = re.compile(r"(?P<name>[\w-]+)(?:\[(?P<index>\d+)\])?")


def lookup(tree: Any, path: str) -> Any:
    """The value at ``path`` (``a.b[2].c``) of a JSON tree; KeyError naming the missing key."""
    for part in path.split("."):
        match = KEY.fullmatch(part)
        if match is None:
            raise KeyError(f"{path}: {part!r} is not a key")
        tree = tree[match["name"]]
        if match["index"] is not None:
            tree = tree[int(match["index"])]
    return tree


def marks(text: str) -> list[re.Match[str]]:
    return list(MARK.finditer(text))


def check(mark: re.Match[str]) -> str | None:
    """Why the marked figure is not its file's value, or None."""
    path = RESULTS / mark["file"]
    if not path.is_file():
        return f"{mark['file']}: no such file under bench/results"
    try:
        value = float(lookup(json.loads(path.read_text()), mark["path"]))
    except (KeyError, IndexError, TypeError) as err:
        return f"{mark['file']}: no value at {mark['path']} ({err})"
    value *= float(mark["scale"] or 1)
    figure = mark["figure"].replace(",", "")
    decimals = len(figure.split(".")[1]) if "." in figure else 0
    if round(value, decimals) != float(figure):
        return (f"{mark['figure']} quotes {mark['file']} {mark['path']}, which holds "
                f"{round(value, decimals)}")
    return None


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_marked_figure_is_its_files_value(document):
    found = marks((ROOT / document).read_text())
    wrong = [f"{document}: {why}" for mark in found if (why := check(mark))]
    assert not wrong, "\n".join(wrong)


def test_the_marked_sections_keep_their_marks():
    text = (ROOT / "BENCHMARKS.md").read_text()
    for section, least in (("## 12.", 10), ("## 14.", 35), ("## 15.", 20), ("## 17.", 40),
                           ("## 20.", 24),
                           ("## 23.", 12), ("## 24.", 15), ("## 25.", 25)):
        start = text.index(section)
        end = text.find("\n## ", start + 1)
        body = text[start:end if end >= 0 else len(text)]
        assert len(marks(body)) >= least, f"{section} marks {len(marks(body))} figures"


ACTOR_RSS = "example_runs.json cases.mujoco.memory_and_cpu.actors.peak_rss_mib_mean"


def test_a_figure_that_the_file_does_not_hold_is_found():
    assert [check(m) for m in marks(f"95.5 MB<!--fig {ACTOR_RSS}-->")] == [None]
    for wrong, why in (
            (f"95.6 MB<!--fig {ACTOR_RSS}-->", "holds 95.5"),
            ("96 %<!--fig example_runs.json cases.nothing *100-->", "no value at cases.nothing"),
            ("1.0<!--fig missing.json a-->", "no such file")):
        (mark,) = marks(wrong)
        assert why in (check(mark) or ""), wrong
