"""Finding the lines a test expects in what a process printed: a subprocess's or mpirun's
standard output and error, or what capsys captured of code that may be noisy.

Such a stream holds more than the program's own lines on a busy machine: mpirun's banner of
dashes, which may land on the same line as a rank's message (before or right after it),
other ranks' lines, and warnings (Python's, torch's, MuJoCo's). So a test finds its line by
a marker, the text it begins with (``hpc_refer.run: error:``, say), instead of comparing
whole lines or counting all of them; what it then asserts of that line stays exact. A file
the program wrote (train.jsonl, episodes.csv, log.txt) has no such noise and is read as it
is, without these helpers.
"""

from __future__ import annotations

import json
import re
from typing import Any

BANNER = re.compile(r"-{10,}")
"""mpirun's banner: a run of dashes (a line of them, ended by a rank's output or not)."""

TRACEBACK = "Traceback (most recent call last)"


def cut(line: str, marker: str) -> str:
    """``line`` from ``marker`` on, up to a banner of dashes glued after it, stripped of
    trailing white space."""
    line = line[line.index(marker):]
    return BANNER.split(line, maxsplit=1)[0].rstrip()


def lines_with(text: str, marker: str) -> list[str]:
    """Every line of ``text`` that holds ``marker``, each cut to begin at it (whatever came
    before it on the line is gone) and to end before a banner of dashes (:func:`cut`)."""
    return [cut(x, marker) for x in text.splitlines() if marker in x]


def one_line_with(text: str, marker: str) -> str:
    """The one line of ``text`` that holds ``marker`` (as :func:`lines_with` cuts it); fails
    unless there is exactly one, showing the end of ``text``."""
    found = lines_with(text, marker)
    assert len(found) == 1, f"{len(found)} lines with {marker!r}: {found}\n{text[-3000:]}"
    return found[0]


def one_error_line(text: str, prefix: str = "hpc_refer.run: error:") -> str:
    """A one-line error inside noise: exactly one line of ``text`` holds ``prefix`` (the
    error's form: ``hpc_refer.run: error:``, ``hpc_refer.report: error:``, ...) and no
    traceback is anywhere in it. Returns that line from ``prefix`` on (:func:`cut`)."""
    line = one_line_with(text, prefix)
    assert TRACEBACK not in text, text[-3000:]
    return line


def last_json(text: str) -> Any:
    """The last line of ``text`` that holds a JSON object (from its first ``{`` on), read."""
    for line in reversed(text.splitlines()):
        if "{" in line:
            try:
                return json.loads(cut(line, "{"))
            except json.JSONDecodeError:
                continue
    raise AssertionError(f"no line of JSON in:\n{text[-3000:]}")
