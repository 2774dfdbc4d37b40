"""hpc_refer: MPI-parallel off-policy deep RL with Remember-and-Forget Experience Replay.

The Python API, for notebooks and scripts (the conventions of Stable-Baselines3)::

    import hpc_refer
    run_dir = hpc_refer.train({"run": {"env": "Pendulum-v1", "steps": 5000}}, run_dir="runs/x")
    policy = hpc_refer.load_policy(run_dir)     # or a policy file's path
    action = policy.act(state)                  # raw state -> action in the solver's units
    policy.reset()                              # at an episode's start
    stats = hpc_refer.evaluate(run_dir, episodes=10)

``train`` runs the trainer of ``python -m hpc_refer.run`` in this process, ``evaluate`` that
of ``python -m hpc_refer.evaluate`` (the module itself is called), ``load_policy`` gives a
:class:`~hpc_refer.export.controller.Controller`. The package hands these three names on
(their addresses: :mod:`hpc_refer.export.api` and :mod:`hpc_refer.evaluate`), loaded on first
use: importing ``hpc_refer`` loads none of them.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_API = {"load_policy": "hpc_refer.export.api", "train": "hpc_refer.export.api"}


def __getattr__(name: str) -> Any:
    """The API's names, imported on first use (``evaluate``: the module, which is called)."""
    if name == "evaluate":
        return importlib.import_module("hpc_refer.evaluate")
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'hpc_refer' has no attribute {name!r}")
