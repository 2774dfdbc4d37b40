"""The run directory: resolved config, metrics, log and progress lines.

Layout of ``runs/<name>/``::

    config.toml       the resolved configuration (defaults < TOML file < flags)
    episodes.csv      env_step, rank, return, length, wall_s: one line per finished episode
    train.jsonl       one JSON object per interval of ``run.log_every`` environment steps
    log.txt           the progress lines and messages of rank 0
"""

from __future__ import annotations

import csv
import json
import re
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, TextIO

from hpc_refer.config import Config

EPISODE_FIELDS = ("env_step", "rank", "return", "length", "wall_s")


def default_run_name(config: Config) -> str:
    """``<env>-vracer-<mode>-seed<seed>`` with characters unsafe in paths replaced."""
    name = f"{config.run.env}-vracer-{config.refer.mode}-seed{config.run.seed}"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def new_run_dir(config: Config, root: Path = Path("runs")) -> Path:
    """The run directory to create: ``run.run_dir`` if set, else a fresh ``runs/<name>[-k]``.

    An existing non-empty directory is never reused (nothing already written is touched).
    """
    if config.run.run_dir:
        path = Path(config.run.run_dir)
        if path.exists() and any(path.iterdir()):
            raise FileExistsError(
                f"run.run_dir = {str(path)!r} already holds files: choose a new directory"
            )
        return path
    base = root / default_run_name(config)
    path, k = base, 1
    while path.exists():
        k += 1
        path = base.with_name(f"{base.name}-{k}")
    return path


class RunDirectory:
    """Writes the run's files; created only after the whole configuration was validated."""

    def __init__(self, path: Path, config: Config, quiet: bool = False) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        config.write_toml(path / "config.toml")
        self._episodes = (path / "episodes.csv").open("w", newline="")
        self._episode_writer = csv.writer(self._episodes)
        self._episode_writer.writerow(EPISODE_FIELDS)
        self._train = (path / "train.jsonl").open("w")
        self._log = (path / "log.txt").open("w")
        self._out: TextIO | None = None if quiet else sys.stdout
        self.t0 = time.perf_counter()
        self.recent: deque[float] = deque(maxlen=20)

    def wall(self) -> float:
        return time.perf_counter() - self.t0

    def episode(self, env_step: int, rank: int, ret: float, length: int) -> None:
        self._episode_writer.writerow((env_step, rank, f"{ret:.6g}", length, f"{self.wall():.3f}"))
        self.recent.append(ret)

    def interval(self, record: dict[str, Any]) -> None:
        self._train.write(json.dumps(record) + "\n")
        self._train.flush()
        self._episodes.flush()

    def log(self, line: str) -> None:
        self._log.write(line + "\n")
        self._log.flush()
        if self._out is not None:
            print(line, file=self._out, flush=True)

    def close(self) -> None:
        for f in (self._episodes, self._train, self._log):
            f.close()


def progress_line(step: int, total: int, rate: float, recent: float | None, beta: float,
                  far: float, c_max: float) -> str:
    """``steps 120000/1000000 (12.0%) | 510 steps/s | return 1234.5 | beta ... | ETA 28m``."""
    eta_s = max(total - step, 0) / rate if rate > 0 else float("inf")
    eta = f"{eta_s / 60:.0f}m" if eta_s < float("inf") else "?"
    ret = f"{recent:.1f}" if recent is not None else "-"
    return (
        f"steps {step}/{total} ({100.0 * step / total:.1f}%) | {rate:.0f} steps/s | "
        f"return {ret} | beta {beta:.3f} | far {far:.3f} | c_max {c_max:.3f} | ETA {eta}"
    )
