"""The rank roles that step environments (see :mod:`hpc_refer.config.layout`): an actor's loop
(:func:`actor_main`: send each chunk, wait for new parameters or stop) and a solver rank's
(:func:`solver_main`), the factory of actors from the config and what both sides of a run
share; :func:`hpc_refer.run.main.run_role` sends each rank here or to the learning side
(:mod:`hpc_refer.run.learning`).

Actor and solver ranks stay light: this module imports neither torch nor the replay's
compiled kernels, and only a learner rank (or a run of one process) imports
:mod:`hpc_refer.run.learning`. An actor runs the behaviour policy's
:class:`~hpc_refer.algorithms.kit.program.Program` that its learner sends at the start, in
numpy; a rank that steps MuJoCo holds about 100 MB where a learner's imports alone take 300 MB
(BENCHMARKS.md, the design's example runs).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_refer.algorithms.kit.program import Program
from hpc_refer.config.layout import Layout, SeedRole, role_seed
from hpc_refer.config.modes import Warmup
from hpc_refer.config.resolve import Config
from hpc_refer.envs.driver import TeamDriver, serve_team
from hpc_refer.envs.interface import SolverFailure, SolverStartError
from hpc_refer.envs.registry import SolverSpec, env_kind, make_driver
from hpc_refer.envs.supervision import Watchdog
from hpc_refer.loop.actor import Actor
from hpc_refer.loop.actor_checkpoint import restore_actor, write_actor_part
from hpc_refer.loop.checkpoint import Resume
from hpc_refer.loop.local_channel import next_message
from hpc_refer.parallel.channels import ActorChannel, Fabric, Reply, recv_program
from hpc_refer.parallel.solver_link import MpiLinks
from hpc_refer.parallel.world import MpiTeam
from hpc_refer.report.metrics import RunDirectory

LOG = logging.getLogger(__name__)


Declared = tuple[int, int, tuple[str, ...]]
"""What a solver that declares its sizes when it starts (an external solver, in its
handshake: :attr:`~hpc_refer.envs.registry.EnvKind.declares_sizes`) declares that the
learners need: obs_dim, act_dim and its episode metric names (the extra columns of
episodes.csv)."""


def agreed_solver(fabric: Fabric, mine: Declared | None) -> Declared:
    """(obs_dim, act_dim, episode metric names) declared by every actor's solver
    (collective; learners pass None)."""
    declared = {d for d in fabric.allgather(mine) if d is not None}
    if len(declared) != 1:
        raise RuntimeError(f"the external solvers declare different (obs_dim, act_dim, "
                           f"episode metrics): {sorted(declared)}; every environment must "
                           f"declare the same sizes and episode metrics")
    return declared.pop()


def declare_episode_metrics(run: RunDirectory | None, names: tuple[str, ...]) -> None:
    """Give the run directory the episode metric names a solver declared when it started
    (before any episode is written); a restart whose episodes.csv has other columns is a
    start-up error (one line)."""
    if run is None:
        return
    try:
        run.declare_episode_metrics(names)
    except ValueError as err:
        raise SolverStartError(str(err)) from None


def warmup_steps(config: Config, envs: int, n_agents: int) -> int:
    """The environment steps each of ``envs`` actors of ``n_agents`` agents acts uniformly
    under ``replay.warmup = uniform``: ceil(learn_start / (envs n_agents)), so that together
    they store about ``replay.learn_start`` uniform transitions (0 under ``policy``)."""
    if config.replay.warmup is not Warmup.UNIFORM:
        return 0
    return -(-config.replay.start // (envs * n_agents))


def make_actor(config: Config, env: TeamDriver, policy: Program, index: int, source: int,
               envs: int = 1) -> Actor:
    """The actor of environment ``index`` of ``envs`` (a lane per agent of its simulation,
    see :mod:`hpc_refer.loop.actor`), acting with a copy of ``policy``."""
    return Actor(env, policy, config.action_bounds,
                 role_seed(config.run.seed, SeedRole.ACTOR, index), config.run.chunk_len,
                 source=source, exploration=config.algorithm.exploration,
                 max_failures=config.run.max_env_failures,
                 warmup_steps=warmup_steps(config, envs, env.n_agents))


def outputs_of(config: Config, run_dir: Path | None) -> dict[str, Any]:
    """Where actors save their solvers' episode fields (``RUN_DIR/fields``), step series
    (``RUN_DIR/series``) and snapshots (``RUN_DIR/snapshots``, the episodes of
    ``run.snapshot``), and the series' stride: :func:`~hpc_refer.envs.registry.make_driver`'s
    keywords (nothing saved without a run directory)."""
    return {"field_dir": run_dir / "fields" if run_dir is not None else None,
            "series_dir": run_dir / "series" if run_dir is not None else None,
            "series_stride": config.run.series_stride,
            "snapshot_dir": run_dir / "snapshots" if run_dir is not None else None,
            "snapshot_due": config.run.snapshot_due if config.run.snapshot else None}


@dataclass
class ActorResult:
    """What an actor rank ends with (tests inspect it)."""

    sent: int = 0
    """Transitions sent to the learner."""
    episodes: int = 0
    finished_early: bool = False
    faults: int = 0
    """Solver faults (episodes ended by invalid solver messages), the actor's count at the
    end."""
    failure: str = ""
    """Why the environment failed for good, if it did."""


def actor_main(config: Config, layout: Layout, fabric: Fabric, run_dir: Path | None = None,
               resume: Resume | None = None) -> ActorResult:
    """An actor rank: run its team's environment with a policy copy; chunks to its learner;
    checkpoint parts and evaluation rounds when its learner asks."""
    assert fabric.team is not None
    team = MpiTeam(fabric.team)
    index = layout.team(fabric.rank)
    env = make_driver(SolverSpec.of(config, run_dir), team, index=index, envs=layout.envs,
                      timeout=config.run.env_step_timeout, links=MpiLinks(),
                      **outputs_of(config, run_dir))
    if env_kind(config.run.env).declares_sizes:
        agreed_solver(fabric, (env.obs_dim, env.act_dim, env.metric_names))
    learner = layout.learner_of(index)
    actor = make_actor(config, env, recv_program(fabric.world, learner), index, fabric.rank,
                       layout.envs)
    if resume is not None:
        restore_actor(actor, resume, index)
    channel = ActorChannel(fabric.world, learner, actor.params.size)
    if index == 0:
        channel.send_bounds(env.low, env.high)
    watchdog = Watchdog(env, config.run.env_step_timeout,
                        lambda text: channel.send_failed(text, stuck=True))
    result = ActorResult()
    try:
        while (reply := channel.recv_reply()) is not Reply.STOP:
            if reply is Reply.CHECKPOINT:
                assert run_dir is not None
                write_actor_part(run_dir, channel.step, index, actor, config)
                channel.send_saved()
                continue
            actor.load(channel.params)
            if result.failure:
                channel.send_failed(result.failure)
                continue
            try:
                if reply is Reply.EVAL:
                    channel.send_evals(actor.evaluate(channel.episodes, final=channel.final))
                    continue
                actor.grant(channel.budget)
                message = next_message(actor, channel.cut_requested)
            except SolverFailure as failure:
                result.failure = str(failure)
                channel.send_failed(result.failure)
                continue
            if message is None:
                channel.send_done()
                result.finished_early = True
                return result
            chunk, episode = message
            channel.send_chunk(chunk, episode, actor.faults, actor.between_episodes)
            result.sent += chunk.act.shape[0]
            result.episodes += episode is not None
        return result
    except Exception as err:
        lost = fabric.lost(err)
        if lost is None:
            raise
        # A rank of this team is gone (ULFM): the learner checkpoints without the team and
        # rank 0 then ends the job; nothing more comes from it.
        channel.send_failed(lost, stuck=True)
        while channel.recv_reply() is not Reply.STOP:
            pass
        return result
    finally:
        result.faults = actor.faults
        watchdog.close()
        env.close()


def solver_main(config: Config, layout: Layout, fabric: Fabric,
                run_dir: Path | None = None) -> None:
    """A solver rank of a multi-rank environment team: follow the actor's calls."""
    assert fabric.team is not None
    team = MpiTeam(fabric.team)
    spec = SolverSpec.of(config, run_dir)
    serve_team(env_kind(spec.env_id).factory(spec, layout.team(fabric.rank)), team)
