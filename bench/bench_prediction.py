"""Wall time of the full off-policy prediction sweep (issue #4), with mpirun -n N for each N given.

    python bench/bench_prediction.py --ranks 2 1 --json bench/results/prediction.json
    python bench/bench_prediction.py --smoke [--out DIR]

Each measurement launches ``mpirun -n N python -m hpc_refer.prediction sweep --out ...`` (the
full protocol unless extra sweep arguments follow ``--``), records the wall time of the whole
command, the per-algorithm seconds that rank 0 stores in the HDF5 file, and the 1-minute load
average before and after (the machine may be shared: a load above the core count inflates times).
``--json`` defaults to ``<--out>/prediction.json`` (bench/results). ``--smoke``
(bench/common.py): 2 and 1 ranks, TD and ETD, WHOLE, two step sizes, 2 runs of 200
transitions, the HDF5 files and the JSON in DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import h5py
from common import parse, smoke

SMOKE_SWEEP = ("--algorithms", "td,etd", "--placements", "whole", "--alpha-exponents", "4:5",
               "--runs", "2", "--steps", "200")
"""The sweep of ``--smoke``: a few seconds."""


def machine() -> dict[str, object]:
    """CPU model (lscpu 'Model name'), core count, Python and numpy versions."""
    import numpy as np

    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    model = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines()
                  if line.startswith("Model name")), platform.processor())
    return {"cpu": model, "nproc": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__}


def measure(ranks: int, out: Path, sweep_args: list[str]) -> dict[str, object]:
    """Run the sweep on ``ranks`` MPI ranks; wall time and the stored per-algorithm times."""
    mpirun = shutil.which("mpirun") or "mpirun"
    command = [mpirun, "-n", str(ranks), sys.executable, "-m", "hpc_refer.prediction", "sweep",
               "--out", str(out), "--quiet", *sweep_args]
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    subprocess.run(command, check=True)
    wall = time.perf_counter() - start
    load_after = os.getloadavg()[0]
    with h5py.File(out) as fh:
        per_algorithm = {name: round(float(fh[name].attrs["seconds"]), 2) for name in fh}
        in_process = float(fh.attrs["seconds"])
    return {"ranks": ranks, "command": " ".join(["mpirun", "-n", str(ranks), "python", "-m",
                                                 "hpc_refer.prediction", "sweep", "--out",
                                                 out.name, *sweep_args]),
            "wall_seconds": round(wall, 1), "sweep_seconds_rank0": round(in_process, 1),
            "load_average_1min_before_after": [round(load_before, 2), round(load_after, 2)],
            "sweep_seconds_per_algorithm": per_algorithm}


def smoke_runs(out: Path) -> list[list[str | Path]]:
    return [["--ranks", "2", "1", "--results-dir", out, "--", *SMOKE_SWEEP]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 1], help="MPI sizes to time")
    parser.add_argument("--json", type=Path, help="the record (default OUT/prediction.json)")
    parser.add_argument("--results-dir", type=Path, default=Path("."),
                        help="where the HDF5 files go (prediction_nN.h5)")
    parser.add_argument("sweep_args", nargs="*", help="extra sweep arguments, after --")
    args = parse(parser, argv, smoke_runs)
    if args.smoke:
        return smoke(main, smoke_runs, args.out)
    args.json = args.json or args.out / "prediction.json"
    runs = [measure(n, args.results_dir / f"prediction_n{n}.h5", args.sweep_args)
            for n in args.ranks]
    record = {"benchmark": "full off-policy prediction sweep (issue #4)",
              "machine": machine(), "date": time.strftime("%Y-%m-%d"), "runs": runs}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
