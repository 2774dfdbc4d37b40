"""Pictures of a solver's field snapshots (``--snapshot``: arrays indexed [x, y], NaN inside
bodies): one diverging colour scale centred on 0, the bodies outlined. Used by the run report,
by the actors' driver (a PNG next to each snapshot file) and by the benchmarks' figures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np


def snapshot_scale(image: np.ndarray) -> float:
    """The colour range of a snapshot array: the 99th percentile of its finite |values|
    (1 when there are none)."""
    finite = np.abs(image[np.isfinite(image)])
    return float(np.percentile(finite, 99)) if finite.size and finite.max() > 0 else 1.0


def draw_snapshot(ax: Any, name: str, image: np.ndarray,
                  extent: tuple[float, float, float, float] | None = None,
                  circles: tuple[tuple[float, float, float], ...] = (),
                  vmax: float | None = None) -> Any:
    """One array of a solver's snapshot (indexed [x, y]) on ``ax``: a diverging colormap
    centred on 0 and clipped at ``vmax`` (default: :func:`snapshot_scale`), NaN (inside a
    body) grey, the ``circles`` (x, y, radius) outlined; returns the image for a colorbar."""
    vmax = snapshot_scale(image) if vmax is None else vmax
    cmap = plt.get_cmap("RdBu_r").with_extremes(bad="0.6")
    shown = ax.imshow(np.ma.masked_invalid(image.T), origin="lower", cmap=cmap, vmin=-vmax,
                      vmax=vmax, extent=extent, interpolation="nearest")
    for x, y, r in circles:
        ax.add_patch(plt.Circle((x, y), r, facecolor="0.6", edgecolor="k", linewidth=0.8,
                                gid="reference"))  # the body, not data
    ax.set_aspect("equal")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_title(name, fontsize=9)
    return shown


def snapshot_png(path: Path, name: str, image: np.ndarray, title: str,
                 extent: tuple[float, float, float, float] | None = None,
                 circles: tuple[tuple[float, float, float], ...] = ()) -> Path:
    """A PNG of one snapshot array (:func:`draw_snapshot`) with its colorbar, at ``path``."""
    fig, ax = plt.subplots(figsize=(10, 2.6), layout="constrained")
    fig.colorbar(draw_snapshot(ax, name, image, extent, circles), ax=ax, shrink=0.9,
                 label=name)
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
