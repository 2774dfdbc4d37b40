"""The off-policy algorithms, each in its own module, behind one contract
(:class:`~hpc_refer.algorithms.base.Algorithm`); ``run.algorithm`` picks one by name."""

from __future__ import annotations

from hpc_refer.algorithms.base import Algorithm
from hpc_refer.algorithms.ddpg import DDPG
from hpc_refer.algorithms.naf import NAF
from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.config import Config
from hpc_refer.parallel import Reducer

ALGORITHMS: dict[str, type[Algorithm]] = {
    "vracer": VRacer,
    "ddpg": DDPG,
    "naf": NAF,
}
"""Registry: ``run.algorithm`` -> class (the config table of the same name holds its settings)."""


def make_algorithm(config: Config, obs_dim: int, act_dim: int, seed: int,
                   reducer: Reducer | None = None) -> Algorithm:
    """The algorithm ``config.run.algorithm`` with its table, networks seeded by ``seed``."""
    cls = ALGORITHMS[config.run.algorithm]
    return cls(obs_dim, act_dim, config.algorithm, config.refer, seed, reducer)
