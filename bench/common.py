"""Shared helpers of the benchmarks: machine description, medians, JSON results, and the
command line every script shares (``--out``, ``--smoke``).

``--out DIR``: the directory of the script's results (its JSON, figures and tables; default
bench/results). :func:`parse` adds it to the script's parser and points :func:`write` at it.

``--smoke``: the benchmark at a few hundred steps and its smallest sizes, to show that it
still runs (tests/test_bench_smoke.py runs every script so), not to measure anything. Each
script lists its smoke run as its own command lines (its ``smoke_runs``, shown by ``--help``):
the same functions as a real run, only tiny budgets, run in this process by :func:`smoke`
with ``--out`` prepended. Its results go to ``--out`` or, without one, a new temporary
directory, never bench/results (refused there); its JSON holds ``"smoke": true``; its runs
go under ``--out``/runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPOSITORY = Path(__file__).resolve().parent.parent
RESULTS = REPOSITORY / "bench" / "results"
"""The committed results: where a real run writes by default; a smoke run never does."""
_OUTPUT = {"dir": RESULTS, "smoke": False}
"""Where :func:`write` puts results (set by :func:`parse`), and whether a smoke run is on."""

Argv = Sequence[str | Path]


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


def repository_path(path: Path) -> str:
    """``path`` as results files store it: relative to the repository where it lies inside
    it (so that a result reads the same on every checkout), else absolute."""
    full = path.resolve()
    return str(full.relative_to(REPOSITORY)) if full.is_relative_to(REPOSITORY) else str(full)


def runs_dir(out: Path, name: str) -> Path:
    """Where a benchmark's run directories go: bench/runs/<name> for the results of
    bench/results, else <out>/runs/<name> (``--out``, and smoke runs)."""
    results = REPOSITORY / "bench" / "results"
    return (out / "runs" if out != results else REPOSITORY / "bench" / "runs") / name


def mean_interval(xs: list[float]) -> list[float] | None:
    """The 95 % confidence interval of the mean of ``xs`` (Student's t with n - 1 degrees of
    freedom: xbar -/+ t_0.975 s / sqrt(n)); None for fewer than two values."""
    if len(xs) < 2:
        return None
    from scipy import stats  # the bench extra's

    mean = statistics.fmean(xs)
    half = float(stats.t.ppf(0.975, len(xs) - 1)) * statistics.stdev(xs) / len(xs) ** 0.5
    return [mean - half, mean + half]


def welch(xs: list[float], against: list[float]) -> dict[str, float]:
    """Welch's t-test of ``xs`` against ``against`` (two-sided, unequal variances: scipy's
    ``ttest_ind(equal_var=False)``): both means, t and p."""
    from scipy import stats  # the bench extra's

    t, p = stats.ttest_ind(xs, against, equal_var=False)
    return {"mean": statistics.fmean(xs), "mean_against": statistics.fmean(against),
            "t": float(t), "p": float(p)}


def median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def write(name: str, payload: dict) -> Path:
    """Write ``<name>.json`` into the results directory (bench/results, or ``--out``) with
    the command line and the machine (and ``"smoke": true`` in a smoke run)."""
    out = Path(_OUTPUT["dir"])
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    payload = {"command": " ".join([Path(sys.executable).name, *sys.argv]),
               "date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine(),
               **({"smoke": True} if _OUTPUT["smoke"] else {}), **payload}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def synthetic_episode(rng: Any, steps: int, obs_dim: int, act_dim: int) -> Any:
    """A truncated episode of ``steps`` random steps whose behaviour mu is near a fresh
    V-RACER policy (mean about 0, std 0.447), as a :class:`~hpc_refer.report.records.Chunk`."""
    import numpy as np

    from hpc_refer.report.records import TRUNCATED, Chunk

    return Chunk(rng.standard_normal((steps + 1, obs_dim)).astype(np.float32),
                 (0.45 * rng.standard_normal((steps, act_dim))).astype(np.float32),
                 rng.standard_normal(steps).astype(np.float32),
                 (0.02 * rng.standard_normal((steps, act_dim))).astype(np.float32),
                 np.full((steps, act_dim), 0.447, np.float32), TRUNCATED, 0)


def out_flag(parser: argparse.ArgumentParser) -> None:
    """``--out`` on a subcommand's parser too (``report --out DIR``), beside :func:`parse`'s
    on the script's own."""
    parser.add_argument("--out", type=Path, default=argparse.SUPPRESS,
                        help="results directory (default bench/results)")


Smoke = Callable[[Path], Sequence[Argv]]
"""A script's smoke run: its command lines (argv lists, without ``--out``) for a results
directory."""


def parse(parser: argparse.ArgumentParser, argv: Argv | None, smoke: Smoke,
          results: Path = RESULTS) -> argparse.Namespace:
    """Parse ``argv`` (None: the command line) with ``--out`` and ``--smoke`` added to
    ``parser`` (``smoke``, the script's smoke run, is shown in the help), and set the
    directory :func:`write` uses, returned as ``args.out``: ``--out``, else ``results``.
    ``--smoke`` takes only ``--out`` beside it (the script's other arguments, subcommand
    included, are its smoke run's); it returns ``smoke`` and ``out`` alone, ``out`` being
    ``--out`` or a new temporary directory, and refuses bench/results."""
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    shown = "; then ".join(" ".join(map(str, a)) for a in smoke(Path("OUT")))
    parser.add_argument("--out", type=Path, default=None,
                        help="results directory (JSON, figures, tables; default bench/results)")
    parser.add_argument("--smoke", action="store_true",
                        help="show that the benchmark still runs, at tiny budgets, into --out or "
                             f"a new temporary directory, never bench/results: runs {shown}")
    alone = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    alone.add_argument("--smoke", action="store_true")
    alone.add_argument("--out", type=Path)
    first, rest = alone.parse_known_args(argv)
    if first.smoke:
        if rest:
            parser.error(f"--smoke takes no other arguments than --out (not {' '.join(rest)})")
        args = argparse.Namespace(smoke=True,
                                  out=first.out or Path(tempfile.mkdtemp(prefix="bench-smoke-")))
        if args.out.resolve().is_relative_to(RESULTS.resolve()):
            parser.error(f"--smoke never writes into {RESULTS}: give another --out")
        args.out.mkdir(parents=True, exist_ok=True)
    else:
        args = parser.parse_args(argv)
        args.out = args.out or results
    _OUTPUT["dir"] = args.out
    return args


def smoke(main: Callable[[list[str]], object], runs: Smoke, out: Path) -> int:
    """The smoke run: ``main(["--out", out, *argv])`` for each argv of ``runs(out)`` in
    turn, in this process; a return value other than None and 0 stops it and is returned."""
    _OUTPUT["smoke"] = True
    try:
        for argv in runs(out):
            command = ["--out", str(out), *map(str, argv)]
            print(f"smoke: {Path(sys.argv[0]).name} {' '.join(command)}", flush=True)
            rc = main(command)
            if rc not in (None, 0):
                return int(rc)  # type: ignore[call-overload]
    finally:
        _OUTPUT["smoke"] = False
    print(f"smoke: results in {out}", flush=True)
    return 0
