"""The exported policy's speed (issue 37, point 6): one state per call of a 2 x 256 policy
(V-RACER's, softsign, HalfCheetah's sizes: 17 state values, 6 actions), by the C routine
compiled with ``cc -O2`` (a C timing loop, bench/export_speed.c), by policy.onnx in
onnxruntime (one intra-op thread; the Python call of the session, and the same through
:class:`~hpc_refer.export.onnx_model.OnnxPolicy`) and, for reference, by the numpy controller
that ``evaluate`` runs. Targets: C below 20 us, ONNX below 50 us per call on one core.

    python bench/export_speed.py [--calls 20000] [--repeats 7] [--out DIR] [--smoke]

The timing loops of the C routine and the Python forms run the state that a solver would
send each step (a drifting sine); the C loop's time includes filling the state. Writes
bench/results/export_speed.json: each form's microseconds per call, every repeat and their
median, and the load average before and after. ``--smoke``: 200 calls, one repeat.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from common import median, parse, smoke, write

from hpc_refer.algorithms.registry import make_algorithm
from hpc_refer.config.resolve import build_config
from hpc_refer.export.__main__ import export
from hpc_refer.export.controller import Controller
from hpc_refer.export.onnx_model import OnnxPolicy
from hpc_refer.loop.policy_file import save_policy

STATE_DIM, ACT_DIM, HIDDEN = 17, 6, [256, 256]
TIMER = Path(__file__).with_name("export_speed.c")


def exported_policy(where: Path) -> Path:
    """A 2 x 256 V-RACER policy file (fresh weights) and its exports in ``where``/x."""
    config = build_config({"run": {"algorithm": "vracer"}, "vracer": {"hidden": HIDDEN}})
    algo = make_algorithm(config, STATE_DIM, ACT_DIM, 0)
    box = (np.full(ACT_DIM, -1.0), np.full(ACT_DIM, 1.0))
    save_policy(where / "policy.h5", algo, config.to_dict(), 0, 0, box)
    export(where, where / "x")
    return where / "x"


def c_timings(exported: Path, calls: int, repeats: int) -> list[float]:
    """Microseconds per call of each repeat of the C timing loop (built with cc -O2)."""
    binary = exported / "export_speed"
    subprocess.run(["cc", "-std=c99", "-O2", f"-I{exported}", str(TIMER),
                    str(exported / "hpc_refer_policy.c"), "-o", str(binary), "-lm"], check=True)
    out = subprocess.run([str(binary), str(exported), str(calls), str(repeats)], check=True,
                         capture_output=True, text=True).stdout
    return [float(x) for x in out.split()]


def python_timings(act: Callable[[np.ndarray], object], calls: int,
                   repeats: int) -> list[float]:
    """Microseconds per call of ``act`` on the C loop's states, per repeat (after one call
    outside the timing: the numpy controller's box map is compiled at its first)."""
    states = np.sin(0.01 * (np.arange(calls)[:, None] + np.arange(STATE_DIM)[None, :]))
    act(states[0])
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        for s in states:
            act(s)
        out.append(1e6 * (time.perf_counter() - t) / calls)
    return out


def smoke_runs(out: Path) -> list[list[str]]:
    return [["--calls", "200", "--repeats", "1"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parse(parser, argv, smoke_runs)
    if args.smoke:
        return smoke(main, smoke_runs, args.out)
    if shutil.which("cc") is None:
        parser.error("no C compiler (cc) on PATH")
    torch.set_num_threads(1)
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        exported = exported_policy(Path(tmp))
        onnx = OnnxPolicy(exported / "policy.onnx")
        session_run = onnx.session.run
        controller = Controller.load(Path(tmp) / "policy.h5")
        samples: dict[str, list[float]] = {"c": [], "onnx_session": [], "onnx_policy": [],
                                           "numpy_controller": []}
        for _ in range(args.repeats):  # interleaved, so that each form sees the same load
            samples["c"] += c_timings(exported, args.calls, 1)
            samples["onnx_session"] += python_timings(
                lambda s: session_run(None, {"state": s[None]}), args.calls, 1)
            samples["onnx_policy"] += python_timings(onnx.act, args.calls, 1)
            samples["numpy_controller"] += python_timings(controller.act, args.calls, 1)
    med = {k: median(v) for k, v in samples.items()}
    out = {"network": {"state_dim": STATE_DIM, "act_dim": ACT_DIM, "hidden": HIDDEN,
                       "algorithm": "vracer", "activation": "softsign"},
           "us_per_call": med, "samples_us": samples,
           "targets_us": {"c": 20.0, "onnx_session": 50.0},
           "load_avg_before": round(load0, 2), "load_avg_after": round(os.getloadavg()[0], 2)}
    path = write("export_speed", out)
    print(f"us per call (median of {args.repeats}): C {med['c']:.2f} (target < 20) | ONNX "
          f"session.run {med['onnx_session']:.2f} (target < 50) | OnnxPolicy.act "
          f"{med['onnx_policy']:.2f} | numpy Controller.act {med['numpy_controller']:.2f} | "
          f"load {load0:.2f} -> {out['load_avg_after']:.2f}; wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
