"""Per-step series of a solver's metrics (``step_metrics``, e.g. drag and lift coefficients),
written by each actor to ``RUN_DIR/series/env-<index>.h5``.

Layout of one file (HDF5, one row per recorded step, all datasets of equal length)::

    episode     int64    the environment's episode number (1, 2, ... in this run and its
                         resumptions)
    step        int64    the step within the episode (1 = the first step after reset)
    <name>      float64  one dataset per name of the solver's ``step_metrics``
    attrs: names (the metric names, in order), stride

A step is recorded when its index within the episode is a multiple of ``run.series_stride``.
Rows are buffered and appended when an episode ends, every :data:`FLUSH_ROWS` rows, at a
checkpoint and at the end, so the file is opened rarely; a solver without ``step_metrics``
writes nothing. At a checkpoint the actor records the number of rows written; a resumed run
moves the rows written after it (steps that will be taken again) to
``env-<index>.after-row-<rows>.h5`` before appending, so no row is written twice and none is
lost.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

FLUSH_ROWS = 4096
"""Rows buffered before they are appended to the file."""


class StepSeries:
    """The per-step series of one environment (see the module docstring)."""

    def __init__(self, path: Path, names: tuple[str, ...], stride: int) -> None:
        self.path = path
        self.names = names
        self.stride = stride
        self.episode = 0
        self.step = 0
        self._rows: list[tuple[int, int, np.ndarray]] = []

    def reset(self) -> None:
        """A new episode begins."""
        self.episode += 1
        self.step = 0

    def add(self, values: np.ndarray) -> None:
        """The values of the step just taken (recorded at multiples of the stride)."""
        self.step += 1
        if self.step % self.stride == 0:
            self._rows.append((self.episode, self.step, np.asarray(values, np.float64)))
            if len(self._rows) >= FLUSH_ROWS:
                self.flush()

    def flush(self) -> int:
        """Append the buffered rows; return the number of rows in the file."""
        if not self._rows:
            return self.rows_written()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        columns = {"episode": np.array([r[0] for r in self._rows], np.int64),
                   "step": np.array([r[1] for r in self._rows], np.int64)}
        values = np.stack([r[2] for r in self._rows])
        columns.update({n: values[:, k] for k, n in enumerate(self.names)})
        with h5py.File(self.path, "a") as f:
            if "episode" not in f:
                f.attrs["names"] = list(self.names)
                f.attrs["stride"] = self.stride
                for name, column in columns.items():
                    f.create_dataset(name, data=column, maxshape=(None,), chunks=True)
            else:
                n = f["episode"].shape[0]
                for name, column in columns.items():
                    f[name].resize((n + column.size,))
                    f[name][n:] = column
            total = int(f["episode"].shape[0])
        self._rows = []
        return total

    def rows_written(self) -> int:
        """Rows in the file (0 when it does not exist yet)."""
        if not self.path.exists():
            return 0
        with h5py.File(self.path, "r") as f:
            return int(f["episode"].shape[0]) if "episode" in f else 0

    def checkpoint_state(self) -> dict[str, int]:
        """Flush, then the rows written and the episode counters."""
        return {"rows": self.flush(), "episode": self.episode, "step": self.step}

    def restore_state(self, tree: dict[str, int]) -> None:
        """Continue after :meth:`checkpoint_state`: rows beyond ``rows`` move to
        ``env-<index>.after-row-<rows>.h5``."""
        rows = int(tree["rows"])
        self.episode, self.step = int(tree["episode"]), int(tree["step"])
        self._rows = []
        if self.rows_written() <= rows:
            return
        kept = self.path.with_name(f"{self.path.stem}.after-row-{rows}.h5")
        with h5py.File(self.path, "a") as f, h5py.File(kept, "a") as tail:
            for key, value in f.attrs.items():
                tail.attrs[key] = value
            for name in list(f):
                tail.create_dataset(name, data=f[name][rows:])
                f[name].resize((rows,))


def read_series(path: Path) -> dict[str, np.ndarray]:
    """The columns of a series file (``episode``, ``step`` and one per metric name)."""
    with h5py.File(path, "r") as f:
        return {name: np.asarray(f[name]) for name in ("episode", "step",
                                                       *map(str, f.attrs["names"]))}
