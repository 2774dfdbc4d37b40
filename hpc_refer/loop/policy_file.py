"""Policy files: the behaviour policy alone, for evaluation or deployment
(``RUN_DIR/policy.h5``, written by learner 0 at every checkpoint and at the end; read by
``python -m hpc_refer.evaluate``). A state tree in the HDF5 layout of
:mod:`hpc_refer.loop.checkpoint` whose root attribute ``kind`` is ``"policy"``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from hpc_refer.algorithms.kit.base import Algorithm
from hpc_refer.algorithms.kit.networks import BehaviourPolicy
from hpc_refer.algorithms.registry import ALGORITHMS
from hpc_refer.config.modes import ConfigError
from hpc_refer.config.resolve import build_config
from hpc_refer.loop.checkpoint import STATE_GROUP, CheckpointError, read_tree, write_tree
from hpc_refer.report.formats import FormatError


def save_policy(path: Path, algo: Algorithm, config_dict: dict[str, Any], env_step: int,
                grad_step: int,
                action_box: tuple[np.ndarray, np.ndarray] | None = None) -> None:
    """Write the behaviour policy alone (for evaluation or deployment), atomically.

    The tree: ``algorithm`` (name), ``obs_dim``, ``act_dim``, ``hidden`` (int64 array),
    ``config`` (the resolved config as JSON), ``env_step`` and ``grad_step`` (the run's
    environment and gradient steps when the policy was saved), ``action_low`` and
    ``action_high`` (float64 [act_dim], the environment's action box, +-inf on unbounded
    dimensions; with ``action_box``: what deployment maps the policy's output into, see
    :class:`~hpc_refer.loop.actor.ActionMap`) and ``policy/<tensor>``: the
    behaviour module's parameters and buffers, the input normalisation included, and the
    version of this layout of them, the algorithm's ``policy_format`` (under its key,
    ``policy_version``). Root attribute ``kind`` = ``"policy"``.
    """
    state = algo.checkpoint_state()
    tree = {"algorithm": algo.name, "obs_dim": algo.obs_dim, "act_dim": algo.act_dim,
            "hidden": np.asarray(algo.config.hidden, np.int64),
            "config": json.dumps(config_dict), "env_step": env_step, "grad_step": grad_step,
            "policy": state["modules"][state["behaviour"]]}
    if action_box is not None:
        tree["action_low"], tree["action_high"] = (np.asarray(b, np.float64)
                                                   for b in action_box)
    write_tree(path, algo.policy_format.stamp(tree), {"kind": "policy"})


class PolicyFile(NamedTuple):
    """What a policy file holds: the behaviour module, the config dict it was saved with,
    its input and output widths (``obs_dim``: the stacked width with ``env.history``), the
    run's environment and gradient steps at the save and the environment's action box (each
    None in files written before it was recorded)."""

    policy: BehaviourPolicy
    config: dict[str, Any]
    obs_dim: int
    act_dim: int
    env_step: int | None
    grad_step: int | None
    action_low: np.ndarray | None = None
    action_high: np.ndarray | None = None


def load_policy(path: Path) -> PolicyFile:
    """A policy file's behaviour module (built from its algorithm and config, with its
    tensors loaded, upgraded from an older version by the algorithm's ``policy_format``),
    config and steps; CheckpointError naming the file if it is not a policy file or its
    tensors do not fit or it is newer than this hpc_refer reads."""
    tree = read_tree(path)
    if "policy" not in tree:
        raise CheckpointError(f"{path}: not a policy file (no /{STATE_GROUP}/policy group)")
    name = tree["algorithm"]
    config_dict = json.loads(tree["config"])
    try:
        config = build_config(config_dict)  # imports the run's plugins
    except ConfigError as err:
        raise CheckpointError(f"{path}: its config is not valid here ({err})") from None
    if name not in ALGORITHMS or config.run.algorithm != name:
        raise CheckpointError(f"{path}: unknown algorithm {name!r}")
    cls = ALGORITHMS[name]
    try:
        tree = cls.policy_format.upgrade(tree)  # a file of any version the algorithm reads
    except FormatError as err:
        raise CheckpointError(f"{path}: {err}") from None
    policy = cls.behaviour_policy(int(tree["obs_dim"]), int(tree["act_dim"]), config.algorithm)
    try:
        policy.load_state_dict({k: torch.from_numpy(v) for k, v in tree["policy"].items()})
    except RuntimeError as err:
        raise CheckpointError(f"{path}: the policy's tensors do not fit its network "
                              f"({err})") from None
    return PolicyFile(policy, config_dict, int(tree["obs_dim"]), int(tree["act_dim"]),
                      tree.get("env_step"), tree.get("grad_step"),
                      tree.get("action_low"), tree.get("action_high"))
