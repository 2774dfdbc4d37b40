"""Shared helpers of the benchmarks: machine description, medians, JSON results."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, str | int]:
    """CPU model, core count, memory, Python and library versions of this machine."""
    model = "unknown"
    try:
        lines = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        model = next(x.split(":", 1)[1].strip() for x in lines.splitlines()
                     if x.startswith("Model name"))
    except (OSError, StopIteration):
        pass
    import numpy
    import torch

    mem_kb = next(int(x.split()[1]) for x in Path("/proc/meminfo").read_text().splitlines()
                  if x.startswith("MemTotal"))
    return {"cpu": model, "cores": os.cpu_count() or 0, "memory_gib": round(mem_kb / 2**20, 1),
            "python": platform.python_version(), "torch": torch.__version__,
            "numpy": numpy.__version__, "load_avg_1min": round(os.getloadavg()[0], 2)}


def rate(fn: Callable[[], None], n: int, repeats: int) -> list[float]:
    """Calls per second of ``fn`` over ``repeats`` timed blocks of ``n`` calls."""
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        out.append(n / (time.perf_counter() - t))
    return out


def median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def write(name: str, payload: dict) -> Path:
    """Write ``bench/results/<name>.json`` with the command line and the machine."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"command": " ".join([Path(sys.executable).name, *sys.argv]),
               "date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine(), **payload}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def synthetic_episode(rng: Any, steps: int, obs_dim: int, act_dim: int) -> Any:
    """A truncated episode of ``steps`` random steps whose behaviour mu is near a fresh
    V-RACER policy (mean about 0, std 0.447), as a :class:`~hpc_refer.records.Chunk`."""
    import numpy as np

    from hpc_refer.records import TRUNCATED, Chunk

    return Chunk(rng.standard_normal((steps + 1, obs_dim)).astype(np.float32),
                 (0.45 * rng.standard_normal((steps, act_dim))).astype(np.float32),
                 rng.standard_normal(steps).astype(np.float32),
                 (0.02 * rng.standard_normal((steps, act_dim))).astype(np.float32),
                 np.full((steps, act_dim), 0.447, np.float32), TRUNCATED, 0)
