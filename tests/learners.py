"""Small learners for the tests of the learner's wiring and of prioritized replay: one
factory, so that every such test builds them alike (the sizes of a real run, scaled down)."""

from __future__ import annotations

from typing import Any

from hpc_refer.algorithms.kit.collectives import SerialReducer
from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.config.resolve import build_config
from hpc_refer.loop.learner import Learner
from hpc_refer.run.learning import make_learner

OBS, ACT = 3, 2
"""The state and action sizes of the synthetic chunks these learners store."""

SMALL_NETWORKS: dict[str, dict[str, Any]] = {"crossq": {"critic_hidden": [32, 32]}}
"""Beyond ``hidden``, the widths that make an algorithm's networks small in the tests
(CrossQ's critics default to 1024 x 1024)."""


def small_table(algorithm: str, **table: Any) -> dict[str, Any]:
    """An algorithm's table of small networks (``hidden`` [16, 16] unless given) with
    ``table``'s keys over it."""
    return {"hidden": [16, 16], **SMALL_NETWORKS.get(algorithm, {}), **table}


def small_learner(algorithm: str = VRacer.name, refer: dict[str, Any] | None = None,
                  **replay: Any) -> Learner:
    """A learner of ``algorithm`` as ``training.make_learner`` builds one: a 16-wide network,
    B = 32, N = 512 states, training from 64, 1000 run steps; ``refer`` and the ``[replay]``
    keys given override those."""
    cfg = build_config({"run": {"algorithm": algorithm, "steps": 1000},
                        algorithm: small_table(algorithm, hidden=[16], batch=32),
                        "refer": refer or {},
                        "replay": {"size": 512, "learn_start": 64, **replay}})
    return make_learner(cfg, OBS, ACT, SerialReducer())
