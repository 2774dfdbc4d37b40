"""The off-policy algorithms, each in its own module, behind one contract
(:class:`~hpc_refer.algorithms.base.Algorithm`); ``run.algorithm`` picks one by name."""

from __future__ import annotations

from hpc_refer.algorithms.base import Algorithm
from hpc_refer.algorithms.ddpg import DDPG
from hpc_refer.algorithms.naf import NAF
from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.config import COMPILE_AUTO_STEPS, CompileMode, Config
from hpc_refer.parallel import Reducer

ALGORITHMS: dict[str, type[Algorithm]] = {
    "vracer": VRacer,
    "ddpg": DDPG,
    "naf": NAF,
}
"""Registry: ``run.algorithm`` -> class (the config table of the same name holds its settings)."""


def make_algorithm(config: Config, obs_dim: int, act_dim: int, seed: int,
                   reducer: Reducer | None = None) -> Algorithm:
    """The algorithm ``config.run.algorithm`` with its table, networks seeded by ``seed``,
    taking compiled steps as ``run.compile`` says (:func:`compiles`)."""
    cls = ALGORITHMS[config.run.algorithm]
    algo = cls(obs_dim, act_dim, config.algorithm, config.refer, seed, reducer)
    algo.use_compiled_step(compiles(config))
    return algo


def compiles(config: Config) -> bool:
    """Whether the run's learners compile their step: ``run.compile`` on, or auto with at
    least COMPILE_AUTO_STEPS gradient steps owed, grad_ratio x (run.steps - replay.start)."""
    mode = config.run.compile
    if mode is CompileMode.AUTO:
        owed = config.replay.grad_ratio * (config.run.steps - config.replay.start)
        return owed >= COMPILE_AUTO_STEPS
    return mode is CompileMode.ON
