"""MPI benchmark (issue: MPI-parallel training): ``python bench/bench_mpi.py [--quick]``.

(a) L = 1, 2 learners, full shards, with ``replay.batch_scaling`` fixed (global batch B = 256,
    B / L each) and per-learner (B on each learner): gradient steps/s, gradient samples/s
    (steps/s x the global batch), and the time of the per-step reductions (gradient
    Allreduce, counter Allreduce).
(b) Environment steps/s with E = 1, 2, 4, 8 actors on HalfCheetah-v5 through the real entry
    point (``mpirun -n 1+E python -m hpc_refer.run``, training not started: acting, chunk
    messages and parameter replies only).
(c) A cost model from (a) and (b) that predicts, for each batch scaling, the steps/s and the
    gradient samples/s of 64 ranks (8 learners + 56 actors) on a cluster node of such cores
    against one learner's; a prediction, not a measurement.
(d) Training through the real entry point with ``mpirun -n 2`` (1 learner + 1 actor, the two
    cores), HalfCheetah-v5, eager and compiled learner step: env steps/s and the learner's
    busy fraction (``learner_busy``: 1 - its time blocked waiting for a message) in the steady
    state.

The 1-minute load before each part is recorded (``load_avg_1min_before``): the 4- and 8-actor
runs of (b), last, oversubscribe the two cores by design, so the load at the end (``machine``)
says nothing about (a) and (d).

The learner steps of (a) and (d, compiled) are the compiled ones (``run.compile on``). The
driver starts the MPI parts with ``mpirun`` (the one next to this Python). Writes
bench/results/mpi.json (``--out``: another directory).

Budgets (default: the full benchmark; ``--quick`` shorter): ``--size`` (replay states of
(a)), ``--block``/``--repeats`` (its timed blocks), ``--compile`` (its learner step),
``--scalings`` (its batch scalings: fixed on L = 1 and 2, per-learner on L = 2),
``--actors`` (the E of (b)), ``--env-steps`` (of each (b) run), ``--train-steps``,
``--learn-start`` and ``--training`` (the learner steps, ``off on``, of (d)), ``--chunk-len``
(the runs'). ``--smoke`` (bench/common.py), what the cost model needs on at most 2 ranks:
(a) fixed on 1 and 2 ranks, eager, 4,096 states, one block of 5 steps; (b) E = 1, 200
steps; (d) eager only, 600 steps from 300; chunks of 25.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import median, parse, smoke, write

OBS, ACT, T = 17, 6, 1000
MPI_ENV = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe", "OMPI_MCA_btl": "^ofi"}


def mpirun(n: int, args: list[str], cwd: str | None = None) -> str:
    exe = shutil.which("mpirun", path=str(Path(sys.executable).parent)) or "mpirun"
    proc = subprocess.run([exe, "-n", str(n), sys.executable, *args], capture_output=True,
                          text=True, env=MPI_ENV, cwd=cwd, timeout=1800, check=True)
    return proc.stdout


def learners_part(n: int, repeats: int, scaling: str, replay_size: int = 2**18,
                  compile_mode: str = "on") -> None:
    """Run under mpirun -n L: time train_step and the reductions; rank 0 prints JSON."""
    import torch
    from bench_learner import fill
    from mpi4py import MPI

    from hpc_refer.algorithms.kit.collectives import SerialReducer
    from hpc_refer.config.resolve import build_config
    from hpc_refer.parallel.world import MpiReducer
    from hpc_refer.run.learning import make_learner

    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    size = comm.Get_size()
    reducer = MpiReducer(comm) if size > 1 else SerialReducer()
    cfg = build_config({"run": {"learners": size, "compile": compile_mode},
                        "replay": {"size": replay_size, "batch_scaling": scaling}})
    learner = make_learner(cfg, OBS, ACT, reducer)
    fill(learner, np.random.default_rng(comm.Get_rank()), learner.replay.capacity)
    learner.update_start(learner.replay.size * size, 0)
    for _ in range(30):
        learner.train_step()
    flat = np.zeros(sum(p.numel() for m in learner.algo.modules.values()
                        for p in m.parameters()), np.float32)
    counts = np.zeros(2)
    steps, grad_ar, count_ar = [], [], []
    for _ in range(repeats):
        comm.Barrier()
        t = time.perf_counter()
        for _ in range(n):
            learner.train_step()
        steps.append(n / (time.perf_counter() - t))
        comm.Barrier()
        t = time.perf_counter()
        for _ in range(n):
            reducer.average_(flat)
        grad_ar.append((time.perf_counter() - t) / n)
        comm.Barrier()
        t = time.perf_counter()
        for _ in range(n):
            reducer.sum(counts)
        count_ar.append((time.perf_counter() - t) / n)
    if comm.Get_rank() == 0:
        print(json.dumps({"learners": size, "scaling": scaling,
                          "local_batch": learner.local_batch,
                          "samples_per_s": [r * learner.local_batch * size for r in steps],
                          "steps_per_s": steps, "grad_allreduce_s": grad_ar,
                          "count_allreduce_s": count_ar, "grad_floats": int(flat.size)}))


def chunk_flags(chunk_len: int | None) -> list[str]:
    """The runs' ``--chunk-len`` (none: hpc_refer's default)."""
    return [] if chunk_len is None else ["--chunk-len", str(chunk_len)]


def actors_part(e: int, steps: int, tmp: str, chunk_len: int | None = None) -> dict:
    run_dir = Path(tmp) / f"actors{e}"
    t = time.perf_counter()
    mpirun(1 + e, ["-m", "hpc_refer.run", *chunk_flags(chunk_len), "--env", "HalfCheetah-v5",
                   "--steps", str(steps),
                   "--replay.learn-start", str(2**18), "--log-every", str(steps),
                   "--run-dir", str(run_dir)], cwd=tmp)
    wall = time.perf_counter() - t
    record = json.loads((run_dir / "train.jsonl").read_text().splitlines()[-1])
    return {"actors": e, "env_steps": record["env_step"], "wall_s_with_launch": wall,
            "env_steps_per_s": record["env_steps_per_s"]}


def training_part(steps: int, compile_mode: str, tmp: str, learn_start: int = 5000,
                  chunk_len: int | None = None) -> dict:
    """``mpirun -n 2``: one learner and one actor (the two cores) train on HalfCheetah-v5,
    1 gradient step per env step from step 5,000; the steady state is the median over the
    train.jsonl intervals after the first one with training (which holds the compile)."""
    run_dir = Path(tmp) / f"training-{compile_mode}"
    every = steps // 8
    mpirun(2, ["-m", "hpc_refer.run", *chunk_flags(chunk_len), "--env", "HalfCheetah-v5",
               "--steps", str(steps), "--replay.learn-start", str(learn_start),
               "--log-every", str(every), "--compile",
               compile_mode, "--checkpoint-every", "0", "--run-dir", str(run_dir)], cwd=tmp)
    records = [json.loads(x) for x in (run_dir / "train.jsonl").read_text().splitlines()]
    training = [r for r in records if r["grad_step"] > 0][1:]
    return {"compile": compile_mode, "env_steps": records[-1]["env_step"],
            "intervals": [{k: r[k] for k in ("env_step", "env_steps_per_s", "grad_steps_per_s",
                                             "learner_busy")} for r in records],
            "env_steps_per_s": median([r["env_steps_per_s"] for r in training]),
            "learner_busy": median([r["learner_busy"] for r in training])}


def cost_model(learn: dict[str, dict[int, dict]], act: list[dict], ranks: int = 64,
               n_learners: int = 8, batch: int = 256) -> dict:
    """Predicted rates of ``n_learners`` + ``ranks - n_learners`` actors, one core each, for
    each batch scaling, against one learner.

    Learner side (gradient steps/s = environment steps/s at ratio 1):
        t_step(L) = t_compute(b) + t_allreduce(L),   b the rows per learner
    t_compute(b) is linear in b through the measured compute times (step time minus the
    measured reductions) of b = 256 (L = 1) and b = 128 (fixed, L = 2); t_allreduce(L) =
    t_allreduce(2) log2(L) (latency-bound recursive doubling of ~20k floats). fixed: b = B / L,
    global batch B; per-learner: b = B, global batch L B. Gradient samples/s = global batch /
    t_step. Actor side: E actors give E r_1 steps/s, r_1 the one-actor rate measured in (b);
    the run goes at the slower side's rate.
    """
    t1 = 1 / median(learn["fixed"][1]["steps_per_s"])
    fixed2 = learn["fixed"][2]
    ar2 = median(fixed2["grad_allreduce_s"]) + median(fixed2["count_allreduce_s"])
    t2 = 1 / median(fixed2["steps_per_s"]) - ar2
    slope = (t1 - t2) / (batch - batch / 2)

    def t_compute(rows: float) -> float:
        return max(t2 - slope * (batch / 2 - rows), 0.25 * t2)

    t_ar = ar2 * math.log2(n_learners)
    r1 = next(a["env_steps_per_s"] for a in act if a["actors"] == 1)
    actor_rate = (ranks - n_learners) * r1
    one_learner_samples = batch / t1
    out: dict = {"ranks": ranks, "learners": n_learners, "actors": ranks - n_learners,
                 "t_allreduce_s": t_ar, "actor_bound_steps_per_s": actor_rate,
                 "one_learner_samples_per_s": one_learner_samples,
                 "mpi_fraction_of_step_at_L2": ar2 / (t2 + ar2)}
    for scaling, rows, global_batch in (("fixed", batch / n_learners, batch),
                                        ("per-learner", batch, batch * n_learners)):
        t_step = t_compute(rows) + t_ar
        rate = min(1 / t_step, actor_rate)
        out[scaling] = {"t_compute_s": t_compute(rows), "learner_bound_steps_per_s": 1 / t_step,
                        "predicted_steps_per_s": rate,
                        "predicted_samples_per_s": rate * global_batch,
                        "samples_over_one_learner": rate * global_batch / one_learner_samples}
    return out


def smoke_runs(out: Path) -> list[list[str]]:
    return [["--size", "4096", "--block", "5", "--repeats", "1", "--compile", "off",
             "--scalings", "fixed", "--actors", "1", "--env-steps", "200", "--train-steps", "600",
             "--learn-start", "300", "--training", "off", "--chunk-len", "25"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs")
    parser.add_argument("--part", choices=["learners"], help=argparse.SUPPRESS)
    parser.add_argument("--scaling", default="fixed", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, default=2**18, help="(a): replay states per learner")
    parser.add_argument("--block", type=int, help="(a): steps per timed block (300; --quick 50)")
    parser.add_argument("--repeats", type=int, help="(a): timed blocks (5; --quick 3)")
    parser.add_argument("--compile", choices=("on", "off"), default="on",
                        help="(a): the learner step")
    parser.add_argument("--scalings", nargs="+", choices=("fixed", "per-learner"),
                        default=["fixed", "per-learner"],
                        help="(a): fixed (the cost model's: L = 1, 2), per-learner (L = 2)")
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4, 8],
                        help="(b): the actor counts E (1 among them: the cost model's)")
    parser.add_argument("--env-steps", type=int, help="(b): steps per run (40,000; --quick 4,000)")
    parser.add_argument("--train-steps", type=int,
                        help="(d): steps per run (60,000; --quick 12,000)")
    parser.add_argument("--learn-start", type=int, default=5000, help="(d): the learning start")
    parser.add_argument("--training", nargs="+", choices=("off", "on"), default=["off", "on"],
                        help="(d): the learner steps, eager (off) and compiled (on)")
    parser.add_argument("--chunk-len", type=int,
                        help="the runs' --chunk-len (default hpc_refer's, 1000 steps)")
    args = parse(parser, argv, smoke_runs)
    if args.smoke:
        return smoke(main, smoke_runs, args.out)
    n, repeats, env_steps = (50, 3, 4000) if args.quick else (300, 5, 40000)
    train_steps = 12000 if args.quick else 60000
    n, repeats = args.block or n, args.repeats or repeats
    env_steps, train_steps = args.env_steps or env_steps, args.train_steps or train_steps
    if args.part == "learners":
        learners_part(n, repeats, args.scaling, args.size, args.compile)
        return 0
    here = str(Path(__file__).resolve())
    loads = {"learners": os.getloadavg()[0]}
    learn: dict[str, dict[int, dict]] = {"fixed": {}, "per-learner": {}}
    part = ["--block", str(n), "--repeats", str(repeats), "--size", str(args.size),
            "--compile", args.compile]
    for scaling, size in (("fixed", 1), ("fixed", 2), ("per-learner", 2)):
        if scaling not in args.scalings:
            continue
        out = mpirun(size, [here, "--part", "learners", "--scaling", scaling, *part])
        learn[scaling][size] = json.loads(out.strip().splitlines()[-1])
    with tempfile.TemporaryDirectory() as tmp:
        loads["training_2_ranks"] = os.getloadavg()[0]
        train = [training_part(train_steps, mode, tmp, args.learn_start, args.chunk_len)
                 for mode in args.training]
        loads["actors"] = os.getloadavg()[0]
        act = [actors_part(e, env_steps, tmp, args.chunk_len) for e in args.actors]
    model = cost_model(learn, act)
    path = write("mpi", {"learners": learn, "training_2_ranks": train, "actors": act,
                         "cost_model_64_ranks": model,
                         "load_avg_1min_before": {k: round(v, 2) for k, v in loads.items()}})
    for scaling, by_size in learn.items():
        for size, r in by_size.items():
            ar = median(r["grad_allreduce_s"]) + median(r["count_allreduce_s"])
            print(f"{scaling} L={size}: {median(r['steps_per_s']):.0f} gradient steps/s, "
                  f"{median(r['samples_per_s']):.0f} samples/s ({r['local_batch']} rows per "
                  f"learner), reductions {ar * 1e6:.0f} us per step")
    for t in train:
        print(f"mpirun -n 2 training, compile {t['compile']}: {t['env_steps_per_s']:.0f} env "
              f"steps/s, learner busy {100 * t['learner_busy']:.0f}%")
    for a in act:
        print(f"E={a['actors']}: {a['env_steps_per_s']:.0f} env steps/s")
    print(f"MPI share of a gradient step at L=2: {100 * model['mpi_fraction_of_step_at_L2']:.1f}%")
    for scaling in ("fixed", "per-learner"):
        m = model[scaling]
        print(f"predicted 64 ranks (8 learners + 56 actors), {scaling}: "
              f"{m['predicted_steps_per_s']:.0f} steps/s, {m['predicted_samples_per_s']:.0f} "
              f"gradient samples/s = {m['samples_over_one_learner']:.1f}x one learner")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
