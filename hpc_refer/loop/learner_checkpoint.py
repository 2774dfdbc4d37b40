"""The learner's part of a checkpoint, ``learner-<r>.h5``: assembled, written and restored
here.

The part holds the learner's state (:meth:`~hpc_refer.loop.learner.Learner.checkpoint_state`:
the algorithm's networks and optimizers, the replay shard, ReF-ER's state, the generators)
under ``learner`` and the loop's (its actors, schedules and unlogged episodes) under
``loop``. A restart with the learner count of the checkpoint restores each learner from its
own part; with another count, every learner takes learner 0's networks and loop state and
its share of the episodes of every old shard (:func:`~hpc_refer.replay.tree.split_episodes`),
and learner 0 the episodes no old learner had logged yet.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from hpc_refer.config.resolve import Config
from hpc_refer.loop import checkpoint
from hpc_refer.loop.checkpoint import Resume
from hpc_refer.loop.learner import Learner
from hpc_refer.replay.tree import split_episodes
from hpc_refer.report.records import StateTree


class LoopState(Protocol):
    """What a learner loop gives to and takes from its part (the ``loop`` tree)."""

    def checkpoint_state(self) -> StateTree: ...

    def restore_state(self, tree: StateTree, same_actors: bool,
                      unlogged: list[StateTree]) -> None: ...


def part_name(rank: int) -> str:
    """The file of learner ``rank`` in a checkpoint."""
    return f"learner-{rank}.h5"


def write_learner_part(run_dir: Path, step: int, rank: int, learner: Learner,
                       loop: LoopState, config: Config) -> None:
    """Write learner ``rank``'s part into the checkpoint of ``step`` being assembled."""
    tree = {"learner": learner.checkpoint_state(), "loop": loop.checkpoint_state()}
    checkpoint.write_tree(checkpoint.partial_dir(run_dir, step) / part_name(rank), tree,
                          checkpoint.part_attrs(config.run.env, config.run.algorithm))


def restore_learner(learner: Learner, loop: LoopState, resume: Resume,
                    layout_same: bool) -> int:
    """Load learner ``learner.reducer.rank``'s state and its loop's from ``resume``: its own
    part when the learner count is unchanged (the loop's actor sets too when the whole
    layout is, ``layout_same``), else learner 0's networks and loop state and this learner's
    share of every old shard's episodes (collective). Returns the stored transitions of all
    learners."""
    rank, size = learner.reducer.rank, learner.reducer.size
    if resume.learners == size:
        tree = _part(resume, rank)
        learner.restore_state(tree["learner"])
        loop.restore_state(tree["loop"], layout_same, [tree["loop"]])
    else:
        trees = [_part(resume, r) for r in range(resume.learners)]
        share = split_episodes([t["learner"]["replay"] for t in trees], size,
                                          learner.replay.capacity)[rank]
        learner.restore_resized(trees[0]["learner"], share)
        loop.restore_state(trees[0]["loop"], False,
                           [t["loop"] for t in trees] if rank == 0 else [])
    return learner.far_counts().n_stored


def _part(resume: Resume, rank: int) -> StateTree:
    tree = resume.part(part_name(rank))
    if tree is None:
        raise checkpoint.CheckpointError(f"{resume.path}: no {part_name(rank)} (the manifest "
                                         f"lists {resume.learners} learners)")
    return tree
