"""The actor's part of a checkpoint, ``actor-<e>.h5``: assembled, written and restored here,
for an actor rank and for the actor of one process alike.

The part holds the actor's own state (:meth:`~hpc_refer.loop.actor.Actor.checkpoint_state`: its
generator, the episode in progress, the environment's state) and the policy copy it acts
with; the root attributes name the run's environment and algorithm
(:func:`~hpc_refer.loop.checkpoint.part_attrs`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hpc_refer.config.resolve import Config
from hpc_refer.loop import checkpoint
from hpc_refer.loop.actor import Actor
from hpc_refer.loop.checkpoint import Resume


def part_name(index: int) -> str:
    """The file of environment ``index``'s actor in a checkpoint."""
    return f"actor-{index}.h5"


def write_actor_part(run_dir: Path, step: int, index: int, actor: Actor,
                     config: Config) -> None:
    """Write the part of environment ``index``'s actor into the checkpoint of ``step``
    being assembled."""
    tree = {"actor": actor.checkpoint_state(), "policy": actor.params.copy()}
    checkpoint.write_tree(checkpoint.partial_dir(run_dir, step) / part_name(index), tree,
                          checkpoint.part_attrs(config.run.env, config.run.algorithm))


def restore_actor(actor: Actor, resume: Resume, index: int) -> bool:
    """Continue environment ``index``'s actor from ``resume``'s part; False when the
    checkpoint has none for it (the actor then starts afresh)."""
    tree = resume.part(part_name(index))
    if tree is None:
        return False
    actor.restore_state(tree["actor"])
    actor.load(np.asarray(tree["policy"], np.float32))
    return True
