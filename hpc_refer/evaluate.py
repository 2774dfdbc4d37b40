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

``--baseline ACTION`` runs, beside the policy, the uncontrolled reference: the same number
of episodes from the same seeds with one constant action in the environment's units
(``zero``, one value for every dimension, or one per dimension, comma-separated), and prints
both with the solver's episode metrics, so that a policy that barely acts is not taken for a
result. The JSON then holds the baseline's statistics under ``baseline``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np

from hpc_refer.algorithms.kit.program import Place, Program
from hpc_refer.config.modes import ActionBounds, ConfigError
from hpc_refer.config.resolve import build_config, load_toml
from hpc_refer.envs.driver import TeamDriver, serve_team
from hpc_refer.envs.external import SolverFault
from hpc_refer.envs.interface import SolverStartError
from hpc_refer.envs.registry import SolverSpec, env_kind, make_driver
from hpc_refer.export.onnx_model import OnnxPolicy
from hpc_refer.loop.actor import Actor, action_box, evaluation_episode
from hpc_refer.loop.checkpoint import CheckpointError
from hpc_refer.loop.policy_file import load_policy
from hpc_refer.parallel.solver_link import MpiLinks
from hpc_refer.parallel.world import abort_job, singleton_error, world_rank_size, world_team
from hpc_refer.report.records import EpisodeRecord


def statistics(episodes: list[EpisodeRecord], names: tuple[str, ...]) -> dict[str, Any]:
    """Mean, std, min and max of the returns; mean of each episode metric. With several
    agents (records of agent 0..n-1 for each simulation) also ``agents``, each agent's mean
    return and the mean and std over simulations of the summed return sum_i R_i."""
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
    agents = 1 + max((e.agent for e in episodes), default=0)
    if agents > 1:  # one record per agent and simulation, in agent order (Actor.evaluate)
        per_sim = returns.reshape(-1, agents)
        out.update(agents=agents, return_mean_per_agent=per_sim.mean(axis=0).tolist(),
                   summed_return_mean=float(per_sim.sum(axis=1).mean()),
                   summed_return_std=float(per_sim.sum(axis=1).std()))
    return out


def baseline_action(text: str, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """The constant action of ``--baseline``: ``zero``, one number for every dimension or
    one per dimension (comma-separated); ConfigError naming the flag, the allowed forms and
    the box when it is malformed or outside [low, high]."""
    dim = low.size
    try:
        values = np.zeros(dim) if text == "zero" else np.array(
            [float(v) for v in text.split(",")], np.float64)
    except ValueError:
        values = np.zeros(0)
    if values.size not in (1, dim) or not np.isfinite(values).all():
        raise ConfigError(f"--baseline {text!r} is invalid: allowed are 'zero', one number or "
                          f"{dim} comma-separated numbers (the action in the environment's "
                          f"units)")
    action = np.broadcast_to(values, (dim,)).astype(np.float64)
    outside = np.flatnonzero((action < low) | (action > high))
    if outside.size:
        i = int(outside[0])
        raise ConfigError(f"--baseline {text!r}: action[{i}] = {action[i]:g} is outside the "
                          f"action box [{low[i]:g}, {high[i]:g}]; allowed are values in it")
    return action


def constant_action(action: np.ndarray, low: np.ndarray, high: np.ndarray, squash: bool,
                    obs_dim: int) -> Program:
    """The uncontrolled reference: a program (what an actor runs) that gives every state of
    ``obs_dim`` values the mean u whose mapped action
    (:class:`~hpc_refer.loop.actor.ActionMap`) is ``action``, to float32 round-off (the
    actors' precision), with std 0. On a bounded dimension z = (a - c) / h with c, h the
    box's centre and half-width, and u = z (clip) or u = artanh(z) (tanh, z kept inside
    (-1, 1)); on an unbounded one u = a."""
    bounded, center, half = action_box(low, high)
    z = np.where(bounded, (action - center) / half, action)
    if squash:
        z = np.where(bounded, np.arctanh(np.clip(z, -1 + 1e-12, 1 - 1e-12)), z)
    n = z.size
    return Program(obs_dim, 0, (), (("const", (Place(0, (n,), (1,)),), {}),),
                   (("const", (Place(n, (n,), (1,)),), {}),),
                   np.concatenate([z, np.zeros(n)]).astype(np.float32))


def report(label: str, episodes: list[EpisodeRecord], names: tuple[str, ...],
           faults: int) -> dict[str, Any]:
    """Print one line per episode and the statistics of ``label``; return them."""
    for k, e in enumerate(episodes):
        shown = "".join(f" | {n} {v:.6g}" for n, v in zip(names, e.values, strict=True))
        print(f"{label} episode {k}: return {e.ret:.6g} | length {e.length}{shown}")
    stats = statistics(episodes, names)
    means = "".join(f", {n} {stats[f'{n}_mean']:.6g}" for n in names)
    print(f"{label}: mean return {stats['return_mean']:.6g} +- {stats['return_std']:.3g} over "
          f"{len(episodes)} episodes (min {stats['return_min']:.6g}, max "
          f"{stats['return_max']:.6g}{means}); solver faults {faults}")
    if "agents" in stats:
        per_agent = ", ".join(f"{r:.6g}" for r in stats["return_mean_per_agent"])
        print(f"{label}: {stats['agents']} agents, summed return {stats['summed_return_mean']:.6g}"
              f" +- {stats['summed_return_std']:.3g} per simulation; mean return per agent "
              f"{per_agent}")
    stats.update(faults=faults, episode_returns=[e.ret for e in episodes],
                 episode_metrics={n: [e.values[i] for e in episodes]
                                  for i, n in enumerate(names)})
    return stats


def exported_episodes(env: TeamDriver, policy: OnnxPolicy, episodes: int,
                      seed: int) -> tuple[list[EpisodeRecord], int]:
    """``episodes`` episodes of an exported policy (``--policy policy.onnx``) on the same
    episodes as the saved policy's (the first reset with ``seed``): the policy takes each raw
    state, the newest of the driver's stack with ``env.history``, keeps its own stack and
    carry, and returns the action in the solver's units. Records and the solver faults
    counted (a faulty episode ends without a record, as the actors' evaluation)."""
    records: list[EpisodeRecord] = []
    faults, width = 0, env.state_dim

    def step(obs: np.ndarray) -> tuple[np.ndarray, Any, Any]:
        return env.step(policy.act(obs[..., :width]))  # type: ignore[return-value]

    for k in range(episodes):
        policy.reset()
        try:
            records += evaluation_episode(env, env.reset(seed if k == 0 else None), step)
        except SolverFault as fault:
            faults += 1
            print(f"hpc_refer.evaluate: evaluation episode {k} ended by a solver fault: {fault}",
                  file=sys.stderr)
    return records, faults


def start_failed(err: SolverStartError, size: int) -> int:
    """A solver that cannot start: one line (and its traceback, when it raised), then exit 2;
    under mpirun the job is aborted, since the team's other ranks may wait in the solver."""
    if err.details:
        print(err.details, file=sys.stderr, end="" if err.details.endswith("\n") else "\n")
    print(f"hpc_refer.evaluate: error: {err}", file=sys.stderr, flush=True)
    if size > 1:
        abort_job(2)
    return 2


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
    parser.add_argument("--policy", type=Path,
                        help="policy file (default RUN_DIR/policy.h5), or a policy.onnx "
                        "written by python -m hpc_refer.export (needs the export extra)")
    parser.add_argument("--out", type=Path,
                        help="JSON file to write (default RUN_DIR/evaluation.json)")
    parser.add_argument("--snapshot", default="",
                        help="episodes whose end state the solver's snapshot() writes to "
                        "RUN_DIR/evaluation-snapshots/env-0-episode-<n>.h5 and .png: episode "
                        "numbers from 1 and/or every:K, comma-separated (run.snapshot's "
                        "syntax); default none")
    parser.add_argument("--baseline", metavar="ACTION",
                        help="also run the uncontrolled reference, a constant action in the "
                        "environment's units: 'zero', one number for every dimension or one "
                        "per dimension (comma-separated); same episodes and seeds, printed "
                        "beside the policy and stored under 'baseline' in the JSON")
    args = parser.parse_args(argv)
    rank, size = world_rank_size()
    singleton = singleton_error()
    if singleton is not None:
        print(f"hpc_refer.evaluate: error: {singleton}", file=sys.stderr)
        return 2
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
        exported = OnnxPolicy(policy_path) if policy_path.suffix == ".onnx" else None
        saved = load_policy(policy_path) if exported is None else None
    except ImportError as err:
        if rank == 0:
            print(f"hpc_refer.evaluate: error: a policy.onnx needs the export extra (pip "
                  f"install 'hpc_refer[export]'): {err}", file=sys.stderr)
        return 2
    except (ConfigError, CheckpointError, OSError, ValueError) as err:
        if rank == 0:
            print(f"hpc_refer.evaluate: error: {err}", file=sys.stderr)
        return 2
    team = world_team() if size > 1 else None
    spec = SolverSpec.of(config, args.run_dir)
    if rank != 0:
        assert team is not None
        serve_team(env_kind(spec.env_id).factory(spec), team)
        return 0
    timeout = config.run.env_step_timeout
    try:
        env = make_driver(spec, team, timeout=timeout, links=MpiLinks(),
                          snapshot_dir=args.run_dir / "evaluation-snapshots",
                          snapshot_due=snapshots.snapshot_due if args.snapshot else None)
    except SolverStartError as err:
        return start_failed(err, size)
    try:
        reference = None
        if args.baseline is not None:
            action = baseline_action(args.baseline, env.low, env.high)
            reference = constant_action(action, env.low, env.high,
                                        config.action_bounds is ActionBounds.TANH,
                                        env.state_dim)
        if exported is not None:
            if (exported.state_dim, exported.act_dim) != (env.state_dim, env.act_dim):
                raise ConfigError(f"{policy_path} takes states of {exported.state_dim} values "
                                  f"and gives {exported.act_dim}; this environment's have "
                                  f"{env.state_dim} and {env.act_dim}")
            episodes, faults = exported_episodes(env, exported, args.episodes, args.seed)
        else:
            assert saved is not None
            actor = Actor(env, saved.policy.program(), config.action_bounds, args.seed,
                          config.run.chunk_len, max_failures=config.run.max_env_failures)
            episodes = actor.evaluate(args.episodes, seed=args.seed)
            faults = actor.faults
        if reference is not None:
            uncontrolled = Actor(env, reference, config.action_bounds, args.seed,
                                 config.run.chunk_len,
                                 max_failures=config.run.max_env_failures)
            baseline = uncontrolled.evaluate(args.episodes, seed=args.seed)
    except ConfigError as err:
        print(f"hpc_refer.evaluate: error: {err}", file=sys.stderr)
        return 2
    except SolverStartError as err:
        return start_failed(err, size)
    finally:
        env.close()
    stats = report("policy", episodes, env.metric_names, faults)
    source = exported if exported is not None else saved
    assert source is not None
    stats.update(policy=str(policy_path), env=config.run.env, env_step=source.env_step,
                 grad_step=source.grad_step)
    if reference is not None:
        stats["baseline"] = report("baseline", baseline, env.metric_names, uncontrolled.faults)
        stats["baseline"]["action"] = action.tolist()
        print(f"policy - baseline: mean return {stats['return_mean']:.6g} - "
              f"{stats['baseline']['return_mean']:.6g} = "
              f"{stats['return_mean'] - stats['baseline']['return_mean']:.6g}")
    out = args.out or args.run_dir / "evaluation.json"
    out.write_text(json.dumps(stats, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


def evaluate(run_dir: str | Path, episodes: int = 10, seed: int = 12345,
             policy: str | Path | None = None, *flags: str) -> dict[str, Any]:
    """``hpc_refer.evaluate(RUN_DIR, ...)``: :func:`main` from Python, in this process (a
    solver of one rank); returns the statistics it writes to RUN_DIR/evaluation.json.
    ``flags``: further flags of the command (``"--baseline", "zero"``). A ValueError
    carries the command's one-line error."""
    argv = [str(run_dir), "--episodes", str(episodes), "--seed", str(seed), *flags]
    if policy is not None:
        argv += ["--policy", str(policy)]
    out = Path(run_dir) / "evaluation.json"
    if "--out" in flags:
        out = Path(flags[flags.index("--out") + 1])
    if main(argv) != 0:
        raise ValueError(f"hpc_refer.evaluate({str(run_dir)!r}) failed: see the message above")
    return json.loads(out.read_text())  # type: ignore[no-any-return]


class _CallableModule(types.ModuleType):
    """This module, called: ``hpc_refer.evaluate(run_dir, ...)`` is :func:`evaluate` (the
    name ``hpc_refer.evaluate`` is the module, which ``python -m`` runs)."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return evaluate(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

if __name__ == "__main__":
    sys.exit(main())
