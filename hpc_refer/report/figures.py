"""The pieces every section of the run report (:mod:`hpc_refer.report`) is made of: a
matplotlib figure as inline SVG with its caption and its data artists tagged (so that the
browser check can count what was drawn), the line for what is absent, reference lines, and
the run files' CSV rows. Matplotlib, numpy and the standard library only.
"""

from __future__ import annotations

import csv
import html
import io
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

DATA_GID = "data"
"""The SVG id prefix of every drawn data artist: the browser check counts them."""


def read_csv(path: Path) -> list[dict[str, str]]:
    """The rows of a run file's CSV (episodes.csv, eval.csv) as dicts; none when absent."""
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def tag_data(fig: Any) -> int:
    """Give every data artist of ``fig`` (lines, bands, bars, images; not the reference
    lines, whose gid is set) an SVG id starting with :data:`DATA_GID`; return the number of
    finite data values drawn."""
    n, points = 0, 0
    for ax in fig.axes:
        if getattr(ax, "_colorbar", None) is not None:  # a colour scale, not data
            continue
        for artist in [*ax.lines, *ax.collections, *ax.patches, *ax.images]:
            if artist.get_gid() is not None or artist is ax.patch:
                continue
            artist.set_gid(f"{DATA_GID}-{n}")
            n += 1
            if hasattr(artist, "get_ydata"):
                points += int(np.isfinite(np.asarray(artist.get_ydata(), float)).sum())
            elif hasattr(artist, "get_array") and artist.get_array() is not None:
                points += int(np.isfinite(np.asarray(artist.get_array(), float)).sum())
            elif hasattr(artist, "get_height"):
                points += int(np.isfinite(artist.get_height()))
    return points


def reference(line: Any) -> None:
    """Mark a line as a reference (target, bound), not data."""
    line.set_gid("reference")


def figure(fig: Any, caption: str) -> str:
    """``fig`` as an inline SVG ``<figure>`` with its caption; closes the figure."""
    points = tag_data(fig)
    buf = io.StringIO()
    # text as <text>, not glyph paths; each picture its own <image> inside its data group
    with matplotlib.rc_context({"svg.fonttype": "none", "image.composite_image": False}):
        fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]  # drop the XML prolog and doctype: HTML5 inline SVG
    return (f'<figure class="plot" data-points="{points}">{svg}'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def absent(text: str) -> str:
    return f'<p class="absent">{html.escape(text)}</p>'
