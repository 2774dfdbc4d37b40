"""The learning side of the rank roles (:mod:`hpc_refer.run.roles`), which imports torch and the
learner's stack: a learner rank's loop (:func:`learner_main`), a whole training in one process
(:func:`train_local`: the learner loop over a
:class:`~hpc_refer.loop.local_channel.LocalChannel` with one actor) and the learners' factory.
Actor and solver ranks never import this module: they run the behaviour policy's
:class:`~hpc_refer.algorithms.kit.program.Program` that their learner sends them.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from hpc_refer.algorithms.kit.collectives import Reducer, SerialReducer
from hpc_refer.algorithms.registry import make_algorithm
from hpc_refer.config.layout import Layout, SeedRole, role_seed
from hpc_refer.config.resolve import Config
from hpc_refer.envs.registry import SolverSpec, env_kind, make_driver
from hpc_refer.envs.supervision import Watchdog, end_stuck_process
from hpc_refer.loop.actor_checkpoint import restore_actor
from hpc_refer.loop.checkpoint import Resume
from hpc_refer.loop.learner import Learner
from hpc_refer.loop.learner_checkpoint import restore_learner
from hpc_refer.loop.learner_loop import LearnerLoop, LearnerResult
from hpc_refer.loop.local_channel import LocalChannel
from hpc_refer.parallel.channels import Fabric, LearnerChannel
from hpc_refer.parallel.solver_link import MpiLinks
from hpc_refer.report.metrics import RunDirectory
from hpc_refer.run.roles import agreed_solver, declare_episode_metrics, make_actor, outputs_of

LOG = logging.getLogger(__name__)


def make_learner(config: Config, obs_dim: int, act_dim: int, reducer: Reducer) -> Learner:
    """The learner of learner rank ``reducer.rank``: networks seeded alike on every learner,
    minibatch sampling seeded per learner."""
    algo = make_algorithm(config, obs_dim, act_dim, role_seed(config.run.seed, SeedRole.NETWORKS))
    return Learner(algo, config, role_seed(config.run.seed, SeedRole.SAMPLING, reducer.rank),
                   reducer)


def train_local(config: Config, run: RunDirectory | None, run_dir: Path | None = None,
                resume: Resume | None = None) -> LearnerResult:
    """One process: one learner and one actor, the learner loop over a :class:`LocalChannel`."""
    env = make_driver(SolverSpec.of(config, run_dir), None, timeout=config.run.env_step_timeout,
                      links=MpiLinks(), **outputs_of(config, run_dir))
    watchdog = Watchdog(env, config.run.env_step_timeout,
                        lambda text: end_stuck_process(text, run))
    try:
        if env_kind(config.run.env).declares_sizes:
            declare_episode_metrics(run, env.metric_names)
        learner = make_learner(config, env.obs_dim, env.act_dim, SerialReducer())
        actor = make_actor(config, env, learner.algo.behaviour.program(), 0, 0)
        channel = LocalChannel(actor, config, 0, run_dir)
        loop = LearnerLoop(config, learner, channel, [0], 1, run, run_dir, eval_actor=0,
                           meta={"learners": 1, "envs": 1, "config": config.to_dict(),
                                 "obs_dim": env.obs_dim, "act_dim": env.act_dim},
                           action_box=(env.low, env.high))
        if resume is not None:
            _resumed(restore_learner(learner, loop, resume, layout_same=resume.envs == 1),
                     resume, learner)
            restore_actor(actor, resume, 0)
        return loop.loop()
    finally:
        watchdog.close()
        env.close()


def learner_main(config: Config, layout: Layout, fabric: Fabric, run: RunDirectory | None,
                 run_dir: Path | None = None, resume: Resume | None = None) -> LearnerResult:
    """A learner rank: serve its actors, train with the other learners, log (rank 0)."""
    dims = env_kind(config.run.env).dims(SolverSpec.of(config, run_dir))
    if dims is not None:
        obs_dim, act_dim = dims
    else:  # the solvers declare their sizes when they start: they come from the actors
        obs_dim, act_dim, names = agreed_solver(fabric, None)
        declare_episode_metrics(run, names)
    learner = make_learner(config, obs_dim, act_dim, fabric.reducer())
    channel = LearnerChannel(fabric.world, learner.algo.row_dim, act_dim,
                             lambda rank: (None if rank < layout.learners
                                           else layout.actor_rank(layout.team(rank))),
                             fabric.hosts)
    actors = layout.actors_of(fabric.rank)
    eval_actor = layout.actor_rank(0) if layout.learner_of(0) == fabric.rank else None
    program = learner.algo.behaviour.program()
    for actor in actors:
        channel.send_program(actor, program)
    meta = {"learners": layout.learners, "envs": layout.envs, "config": config.to_dict(),
            "obs_dim": obs_dim, "act_dim": act_dim}
    # the learner of environment 0 (learner 0, which writes policy files) hears its box
    box = channel.recv_bounds(eval_actor) if eval_actor is not None else None
    loop = LearnerLoop(config, learner, channel, actors, layout.envs, run, run_dir,
                       eval_actor, meta, action_box=box)
    if resume is not None:
        same = (resume.learners, resume.envs) == (layout.learners, layout.envs)
        _resumed(restore_learner(learner, loop, resume, layout_same=same), resume, learner)
    return loop.loop()


def _resumed(stored: int, resume: Resume, learner: Learner) -> None:
    LOG.info("resumed %d stored transitions of %d learner(s) on %d learner(s) from %s",
             stored, resume.learners, learner.reducer.size, resume.path)


def set_threads(config: Config) -> None:
    """One (or ``run.threads``) torch thread per rank."""
    torch.set_num_threads(config.run.threads)
