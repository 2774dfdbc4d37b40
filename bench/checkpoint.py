"""Checkpoint benchmark (issue 10): ``python bench/checkpoint.py [--quick]``.

A V-RACER learner with the defaults (128-128 network, Adam, replay N = 2^18 states) at
HalfCheetah sizes (17 observations, 6 actions), its replay filled with synthetic truncated
episodes of 1000 steps and 20 gradient steps taken (so Adam holds its moments). Timed, median
of the repeats, each on a new run directory:

- write: ``Learner.checkpoint_state`` (the copy of the state), ``write_tree`` of the part
  (with its fsync and rename), ``publish`` (SHA-256 of the part, manifest, renames, fsyncs);
- read: ``verify`` (SHA-256 again), ``read_tree``, ``restore_state`` into a fresh learner;
- the part's size in bytes.

One learner (one shard of 2^18), and two learners (two shards of 2^17, written one after the
other by one process; under MPI each learner rank writes its own part at the same time). The
file's pages stay in the page cache, so reads are warm. The write time is compared with the
time between two checkpoints at the default ``run.checkpoint_every`` (100,000 environment
steps), at the learner speed measured in BENCHMARKS.md section 1 (227 environment steps/s
while training, one process on this machine) and at 600 steps/s (a faster machine).

Writes bench/results/checkpoint.json (``--out``: another directory). ``--size``: another N;
``--compile``: the learners' ``run.compile`` (default auto, which compiles at the default run
length); ``--smoke``: ``--quick --size 4096 --compile off`` (bench/common.py).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from common import median, parse, smoke, synthetic_episode, write

from hpc_refer.algorithms.kit.collectives import SerialReducer
from hpc_refer.algorithms.registry import make_algorithm
from hpc_refer.config.resolve import build_config
from hpc_refer.loop import checkpoint
from hpc_refer.loop.learner import Learner

OBS, ACT, T = 17, 6, 1000
N = 2**18
CHECKPOINT_EVERY = 100_000
SPEEDS = {"measured_227": 227.0, "fast_600": 600.0}
"""Learner speeds (environment steps/s while training) to compare the write time with."""


class Learners(SerialReducer):
    """One of ``size`` learners (shard N / size); the benchmark needs no reduction."""

    def __init__(self, size: int) -> None:
        self.size = size


def make(learners: int, seed: int, size: int = N, compile_mode: str = "auto") -> Learner:
    cfg = build_config({"run": {"compile": compile_mode}, "replay": {"size": size}})
    algo = make_algorithm(cfg, OBS, ACT, seed)
    return Learner(algo, cfg, seed, Learners(learners))


def filled(learners: int, seed: int, size: int = N, compile_mode: str = "auto") -> Learner:
    """A learner whose shard is full of synthetic 1000-step episodes, after 20 steps."""
    learner = make(learners, seed, size, compile_mode)
    rng = np.random.default_rng(seed)
    while learner.replay.size < learner.replay.capacity or learner.replay.n_removed == 0:
        learner.store(synthetic_episode(rng, T, OBS, ACT))
    learner.update_start(learner.replay.size, 0)
    for _ in range(20):
        learner.train_step()
    return learner


def one_round(learners: list[Learner], run_dir: Path, size: int = N) -> dict[str, float]:
    """Write all parts one after the other and publish; then verify, read, restore each."""
    out = dict.fromkeys(("state", "write_tree", "publish", "verify", "read_tree",
                         "restore"), 0.0)
    part = checkpoint.partial_dir(run_dir, 1)
    for rank, learner in enumerate(learners):
        t0 = time.perf_counter()
        tree = learner.checkpoint_state()
        t1 = time.perf_counter()
        checkpoint.write_tree(part / f"learner-{rank}.h5", {"learner": tree},
                              {"kind": "learner"})
        out["state"] += t1 - t0
        out["write_tree"] += time.perf_counter() - t1
    t0 = time.perf_counter()
    ckpt = checkpoint.publish(run_dir, 1, {"learners": len(learners)}, 2)
    t1 = time.perf_counter()
    checkpoint.verify(ckpt)
    out["publish"], out["verify"] = t1 - t0, time.perf_counter() - t1
    for rank in range(len(learners)):
        fresh = make(len(learners), 99, size)
        t0 = time.perf_counter()
        tree = checkpoint.read_tree(ckpt / f"learner-{rank}.h5")
        t1 = time.perf_counter()
        fresh.restore_state(tree["learner"])
        out["read_tree"] += t1 - t0
        out["restore"] += time.perf_counter() - t1
    out["bytes"] = float(sum((ckpt / f"learner-{r}.h5").stat().st_size
                             for r in range(len(learners))))
    out["column_bytes"] = float(sum(x.replay.column_bytes for x in learners))
    return out


def filesystem(path: Path) -> str:
    """Type of the file system that holds ``path`` (longest mount point in /proc/mounts)."""
    best, kind = "", "unknown"
    for line in Path("/proc/mounts").read_text().splitlines():
        _, mount, fstype, *_ = line.split()
        if str(path).startswith(mount) and len(mount) > len(best):
            best, kind = mount, fstype
    return kind


def bench(n_learners: int, repeats: int, root: Path, size: int = N,
          compile_mode: str = "auto") -> dict:
    learners = [filled(n_learners, r, size, compile_mode) for r in range(n_learners)]
    rounds = []
    for i in range(repeats):
        run_dir = root / f"run-{n_learners}-{i}"
        rounds.append(one_round(learners, run_dir, size))
        shutil.rmtree(run_dir)
    out: dict = {"learners": n_learners, "shard_states": learners[0].replay.capacity,
                 "rounds": rounds}
    for key in rounds[0]:
        out[f"{key}_median"] = median([r[key] for r in rounds])
    out["write_s"] = out["state_median"] + out["write_tree_median"] + out["publish_median"]
    out["read_s"] = out["verify_median"] + out["read_tree_median"] + out["restore_median"]
    out["write_fraction_of_interval"] = {
        label: out["write_s"] / (CHECKPOINT_EVERY / speed) for label, speed in SPEEDS.items()}
    return out


def smoke_runs(out: Path) -> list[list[str]]:
    return [["--quick", "--size", "4096", "--compile", "off"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repeat")
    parser.add_argument("--size", type=int, default=N, help="replay states N (all shards)")
    parser.add_argument("--compile", choices=("auto", "off", "on"), default="auto",
                        help="the learners' run.compile")
    args = parse(parser, argv, smoke_runs)
    if args.smoke:
        return smoke(main, smoke_runs, args.out)
    torch.set_num_threads(1)
    repeats = 1 if args.quick else 5
    here = Path(__file__).resolve().parent
    with tempfile.TemporaryDirectory(dir=here) as tmp:
        results = [bench(n, repeats, Path(tmp), args.size, args.compile) for n in (1, 2)]
    path = write("checkpoint", {
        "checkpoint_every": CHECKPOINT_EVERY, "speeds_env_steps_per_s": SPEEDS,
        "filesystem": filesystem(here), "results": results,
        "target_write_fraction": 0.05})
    for r in results:
        print(f"{r['learners']} learner(s), shards of {r['shard_states']} states: "
              f"{r['bytes_median'] / 2**20:.1f} MiB ({r['column_bytes_median'] / 2**20:.1f} MiB "
              f"of columns); write {r['write_s']:.2f} s (state {r['state_median']:.2f}, "
              f"write_tree {r['write_tree_median']:.2f}, publish {r['publish_median']:.2f}); "
              f"read {r['read_s']:.2f} s (verify {r['verify_median']:.2f}, read_tree "
              f"{r['read_tree_median']:.2f}, restore {r['restore_median']:.2f}); write = "
              + ", ".join(f"{100 * v:.2f} % of the interval at {k}"
                          for k, v in r["write_fraction_of_interval"].items()))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
