"""Evaluate a run's saved policy: ``python -m hpc_refer.evaluate RUN_DIR --episodes K``.

Loads ``RUN_DIR/policy.h5`` (written at every checkpoint and at the end of a run) and the
run's ``config.toml``, builds the run's environment, and runs K episodes of the deterministic
policy: the action is the mean m_w(s) of the behaviour Gaussian, mapped to the action box
like training does (``Config.action_bounds``), nothing is learned or stored. A solver spanning
K ranks (``run.ranks_per_env``) is evaluated under ``mpirun -n K``: rank 0 acts, the others
follow the solver's calls. Prints one line per episode and the statistics, and writes them
to ``RUN_DIR/evaluation.json`` (or ``--out``). ``--snapshot RULE`` (the syntax of
``run.snapshot``, episodes of this evaluation counted from 1) writes the solver's snapshots
(CylinderJets: the vorticity, .h5 and .png) to ``RUN_DIR/evaluation-snapshots``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from hpc_refer.actor import Actor
from hpc_refer.checkpoint import CheckpointError
from hpc_refer.config import ConfigError, build_config, load_toml
from hpc_refer.envs import SolverSpec, env_factory, make_driver, serve_team
from hpc_refer.parallel import MpiLinks, world_rank_size, world_team
from hpc_refer.policy_file import load_policy
from hpc_refer.records import EpisodeRecord


def statistics(episodes: list[EpisodeRecord], names: tuple[str, ...]) -> dict[str, Any]:
    """Mean, std, min and max of the returns; mean of each episode metric."""
    returns = np.array([e.ret for e in episodes])
    out: dict[str, Any] = {
        "episodes": len(episodes),
        "return_mean": float(returns.mean()) if episodes else float("nan"),
        "return_std": float(returns.std()) if episodes else float("nan"),
        "return_min": float(returns.min()) if episodes else float("nan"),
        "return_max": float(returns.max()) if episodes else float("nan"),
        "length_mean": float(np.mean([e.length for e in episodes])) if episodes else 0.0,
    }
    for i, name in enumerate(names):
        out[f"{name}_mean"] = float(np.mean([e.values[i] for e in episodes]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hpc_refer.evaluate",
        description="Run the deterministic (mean) policy saved in RUN_DIR/policy.h5 on the "
        "run's environment and report return statistics and the solver's episode metrics.",
    )
    parser.add_argument("run_dir", type=Path, help="a run directory of python -m hpc_refer.run")
    parser.add_argument("--episodes", type=int, default=10, help="episodes to run (default 10)")
    parser.add_argument("--seed", type=int, default=12345,
                        help="seed of the first episode's reset (default 12345)")
    parser.add_argument("--policy", type=Path, help="policy file (default RUN_DIR/policy.h5)")
    parser.add_argument("--out", type=Path,
                        help="JSON file to write (default RUN_DIR/evaluation.json)")
    parser.add_argument("--snapshot", default="",
                        help="episodes whose end state the solver's snapshot() writes to "
                        "RUN_DIR/evaluation-snapshots/env-0-episode-<n>.h5 and .png: episode "
                        "numbers from 1 and/or every:K, comma-separated (run.snapshot's "
                        "syntax); default none")
    args = parser.parse_args(argv)
    rank, size = world_rank_size()
    try:
        if args.episodes < 1:
            raise ConfigError(f"--episodes {args.episodes} is invalid: allowed are integers >= 1")
        config = build_config(load_toml(args.run_dir / "config.toml"))
        snapshots = dataclasses.replace(config.run, snapshot=args.snapshot)
        if size != config.run.ranks_per_env:
            raise ConfigError(f"the run's solver spans run.ranks_per_env = "
                              f"{config.run.ranks_per_env} ranks: evaluate it under mpirun -n "
                              f"{config.run.ranks_per_env} (this job has {size})")
        policy_path = args.policy or args.run_dir / "policy.h5"
        saved = load_policy(policy_path)
    except (ConfigError, CheckpointError, OSError) as err:
        if rank == 0:
            print(f"hpc_refer.evaluate: error: {err}", file=sys.stderr)
        return 2
    team = world_team() if size > 1 else None
    if rank != 0:
        assert team is not None
        serve_team(env_factory(SolverSpec.of(config, args.run_dir)), team)
        return 0
    timeout = config.run.env_step_timeout
    env = make_driver(SolverSpec.of(config, args.run_dir), team, timeout=timeout,
                      links=MpiLinks(), snapshot_dir=args.run_dir / "evaluation-snapshots",
                      snapshot_due=snapshots.snapshot_due if args.snapshot else None)
    try:
        actor = Actor(env, saved.policy, config.action_bounds, args.seed, config.run.chunk_len,
                      max_failures=config.run.max_env_failures)
        episodes = actor.evaluate(args.episodes, seed=args.seed)
    finally:
        env.close()
    for k, e in enumerate(episodes):
        shown = "".join(f" | {n} {v:.6g}" for n, v in zip(env.metric_names, e.values,
                                                           strict=True))
        print(f"episode {k}: return {e.ret:.6g} | length {e.length}{shown}")
    stats = statistics(episodes, env.metric_names)
    stats.update(policy=str(policy_path), env=config.run.env, faults=actor.faults,
                 episode_returns=[e.ret for e in episodes],
                 episode_metrics={n: [e.values[i] for e in episodes]
                                  for i, n in enumerate(env.metric_names)})
    stats.update(env_step=saved.env_step, grad_step=saved.grad_step)
    print(f"mean return {stats['return_mean']:.6g} +- {stats['return_std']:.3g} over "
          f"{len(episodes)} episodes (min {stats['return_min']:.6g}, max "
          f"{stats['return_max']:.6g}); solver faults {actor.faults}")
    out = args.out or args.run_dir / "evaluation.json"
    out.write_text(json.dumps(stats, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
