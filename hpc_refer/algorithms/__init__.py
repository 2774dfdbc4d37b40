"""The off-policy algorithms: plug-ins behind one contract
(:class:`~hpc_refer.algorithms.base.Algorithm`), each in its own module, registered by name
(:mod:`hpc_refer.algorithms.registry`); ``run.algorithm`` picks one.

Importing this package imports every module in it, so each algorithm module registers
itself; algorithms of other packages register when ``run.plugins`` imports their modules.
"""

from __future__ import annotations

import importlib
import pkgutil

from hpc_refer.algorithms.base import Algorithm
from hpc_refer.algorithms.registry import ALGORITHMS, algorithm_class, register
from hpc_refer.config import Config

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def make_algorithm(config: Config, obs_dim: int, act_dim: int, seed: int) -> Algorithm:
    """The algorithm ``config.run.algorithm`` with its table, networks seeded by ``seed``."""
    cls = algorithm_class(config.run.algorithm)
    return cls(obs_dim, act_dim, config.algorithm, config.refer, seed)


__all__ = ["ALGORITHMS", "Algorithm", "algorithm_class", "make_algorithm", "register"]
