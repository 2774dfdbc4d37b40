"""Continuing a run from a checkpoint: the checkpoint parts of actors, and the restore of a
learner (its own part, or, with another learner count, learner 0's networks and a share of
every old shard's episodes). The loop's own state is :meth:`LearnerLoop.checkpoint_state`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hpc_refer import checkpoint
from hpc_refer.actor import Actor
from hpc_refer.config import Config
from hpc_refer.networks import flat_state
from hpc_refer.records import StateTree, episodes_from

if TYPE_CHECKING:
    from hpc_refer.learner_loop import LearnerLoop


def actor_part(actor: Actor) -> StateTree:
    """An actor's checkpoint part: its own state and the policy copy it acts with."""
    return {"actor": actor.checkpoint_state(), "policy": flat_state(actor.net)}


def restore_actor(actor: Actor, tree: StateTree) -> None:
    """Inverse of :func:`actor_part`."""
    actor.restore_state(tree["actor"])
    actor.load(np.asarray(tree["policy"], np.float32))


def part_attrs(config: Config) -> dict[str, Any]:
    """Root attributes of every checkpoint part of a run (for tools reading one file)."""
    return {"env_id": config.run.env, "algorithm": config.run.algorithm}


@dataclass
class Resume:
    """Where a run continues from: a verified checkpoint and its manifest."""

    path: Path
    manifest: dict[str, Any]

    @property
    def learners(self) -> int:
        return int(self.manifest["meta"]["learners"])

    @property
    def envs(self) -> int:
        return int(self.manifest["meta"]["envs"])

    def part(self, name: str) -> StateTree | None:
        """A part of the checkpoint, None when it has none of that name."""
        path = self.path / name
        return checkpoint.read_tree(path) if path.exists() else None


def restore_learner(loop: LearnerLoop, resume: Resume, layout_same: bool) -> None:
    """Load this learner's state: its own part when the learner count is unchanged, else
    the networks of learner 0 and its share of every old shard's episodes."""
    rank, size = loop.reducer.rank, loop.reducer.size
    if resume.learners == size:
        tree = resume.part(f"learner-{rank}.h5")
        assert tree is not None
        loop.learner.restore_state(tree["learner"])
        loop.restore_state(tree["loop"], layout_same)
    else:
        _restore_resized(loop, resume)
    stored = loop.learner.far_counts().n_stored
    if loop.run is not None:
        loop.run.log(f"resumed {stored} stored transitions of {resume.learners} learner(s) "
                     f"on {size} learner(s) from {resume.path}")


def _restore_resized(loop: LearnerLoop, resume: Resume) -> None:
    """Another learner count: learner 0's networks, ReF-ER state and loop state, and this
    learner's share of the episodes of every old shard."""
    rank, size = loop.reducer.rank, loop.reducer.size
    trees = [resume.part(f"learner-{r}.h5") for r in range(resume.learners)]
    assert all(t is not None for t in trees)
    first = trees[0]
    assert first is not None
    share = checkpoint.split_episodes([t["learner"]["replay"] for t in trees if t], size,
                                      loop.learner.replay.capacity)[rank]
    loop.learner.restore_resized(first["learner"], share)
    loop.restore_state(first["loop"], same_actors=False)
    loop.result.episodes, loop.result.evals = [], []
    if rank == 0:  # the episodes every old learner had not logged yet
        for tree in trees:
            assert tree is not None
            loop.result.episodes += episodes_from(tree["loop"]["episodes"])
            loop.result.evals += episodes_from(tree["loop"]["evals"])
