"""The built-in environment kinds, one light module per kind (a Python solver class, a
gymnasium id, a PettingZoo ParallelEnv, an external MPI solver): importing this package
registers every one of them with :mod:`hpc_refer.envs.registry`, which imports it the first
time a kind is asked for. Each imports what it builds (gymnasium, PettingZoo, the wire
protocol) only when it builds it.

A new kind adds its module here (or registers it from a module of ``run.plugins``); nothing
else names it.
"""

from __future__ import annotations

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
