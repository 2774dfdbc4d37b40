"""Formats of checkpoint trees: each owner's version, and the chain of upgrades to it.

Every owner of a state tree in a checkpoint declares a :class:`TreeFormat`: its name, the key
of its tree that holds the version, and its upgrades, pure functions tree -> tree, the i-th
taking version i + 1 to i + 2, so that the current version is ``len(upgrades) + 1``. The
owner's ``checkpoint_state`` stamps its tree (:meth:`TreeFormat.stamp`); its
``restore_state`` receives the tree at whatever version was written and calls
:meth:`TreeFormat.upgrade` first, so the code that restores reads the current format only
and holds no defaults for older trees. A change to a tree is then one new upgrade appended
to its owner's chain, tested on frozen fixtures of the version before (``tests/fixtures/``).

The owners (ARCHITECTURE.md, "Checkpoint schema"): the checkpoint directory's manifest
(:data:`~hpc_refer.loop.checkpoint.MANIFEST_FORMAT`, whose version is the checkpoint schema,
``schema_version``), the learner (:data:`~hpc_refer.loop.learner.LEARNER_FORMAT`), its
algorithm (each algorithm's ``state_format``) and replay shard
(:data:`~hpc_refer.replay.tree.REPLAY_FORMAT`), the learner loop
(:data:`~hpc_refer.loop.learner_loop.LOOP_FORMAT`) and the actor
(:data:`~hpc_refer.loop.actor.ACTOR_FORMAT`). The trees inside them (the sum tree, ReF-ER's
state, the interval sums, the actor's environment state) are their owner's: a change to one
is an upgrade of that owner.

Version 1 of the trees stamped with ``tree_version`` is every tree written before the stamp
existed (checkpoint schemas 1 and 2, which already differed in what later code added without
a version: agent lanes, carries' history, episode end times); an upgrade from 1 therefore
adds what the tree lacks, each addition guarded by its absence.

No torch, numpy or h5py here: formats are plain functions on nested dicts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hpc_refer.report.records import StateTree

Upgrade = Callable[["StateTree"], "StateTree"]
"""One step of a chain: a tree of version v in, a new tree of version v + 1 out (the input is
never modified)."""

VERSION_KEY = "tree_version"
"""The key of a state tree that holds its owner's version."""


class FormatError(ValueError):
    """A tree is newer than this hpc_refer reads, or its version is not a positive integer;
    the message names the owner and both versions."""


@dataclass(frozen=True)
class TreeFormat:
    """An owner's tree format: ``owner`` (its name in messages), ``upgrades`` (the chain, the
    i-th from version i + 1 to i + 2) and ``key`` (where the version is stored)."""

    owner: str
    upgrades: tuple[Upgrade, ...] = ()
    key: str = VERSION_KEY

    @property
    def version(self) -> int:
        """The current version: the chain's length plus one."""
        return len(self.upgrades) + 1

    def stamp(self, tree: StateTree) -> StateTree:
        """``tree`` (modified in place) with the current version under :attr:`key`."""
        tree[self.key] = self.version
        return tree

    def version_of(self, tree: StateTree) -> int:
        """The version ``tree`` was written in: its stamp, 1 without one (FormatError when
        the stamp is not a positive integer or is newer than :attr:`version`)."""
        raw = tree.get(self.key, 1)
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
            raise FormatError(f"{self.owner} tree: {self.key} = {raw!r} is not a version "
                              f"(a positive integer)")
        if raw > self.version:
            raise FormatError(f"{self.owner} tree of version {raw} is newer than version "
                              f"{self.version}, the newest this hpc_refer reads: resume it "
                              f"with the hpc_refer that wrote it, or a later one")
        return raw

    def upgrade(self, tree: StateTree) -> StateTree:
        """``tree`` in the current format: the upgrades from its version on, in order, then
        the stamp (a new tree; ``tree`` itself is left as it was)."""
        version = self.version_of(tree)
        for step in self.upgrades[version - 1:]:
            tree = step(tree)
        return self.stamp(dict(tree))
