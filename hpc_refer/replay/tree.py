"""The replay shard's checkpoint tree, which only the replay reads: its format and upgrades,
the episodes it stores, and how they are dealt out to another number of learners.

Format (:data:`REPLAY_FORMAT`, :mod:`hpc_refer.report.formats`): version 2 is what
:meth:`~hpc_refer.replay.shard.ReplayShard.checkpoint_state` writes: every column of
:data:`~hpc_refer.replay.shard.COLUMNS` (the ``episode`` id of each row included), the ring
counters, ``next_episode``, the open tails with the ``agent`` lane of each, and under PER the
sum tree. Version 1 is every tree written before the stamp (checkpoint schemas 1 and 2):
schema 1 had no episode ids, and the open tails got their agent with several agents per
simulation; :func:`episode_ids_and_agent_lanes` adds what such a tree lacks.

Another number of learners: :func:`split_episodes` reads the stored episodes of every old
shard (:func:`stored_episodes`, :func:`episode_chunk`) and deals them out;
:meth:`~hpc_refer.loop.learner.Learner.adopt` stores each learner's share again, one chunk per
episode.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hpc_refer.replay.kernels import HAS_ACTION, TERMINAL
from hpc_refer.report.formats import TreeFormat
from hpc_refer.report.records import OPEN, TERMINATED, TRUNCATED, Chunk, StateTree


def episode_ids_and_agent_lanes(tree: StateTree) -> StateTree:
    """Version 1 -> 2: the ``episode`` column and ``next_episode`` where the tree has none
    (schema 1: the ids 0, 1, ... of its episodes from the links, oldest first, -1 in rows
    not in use), and the ``agent`` of each open tail where it has none (written before
    several agents: lane 0)."""
    out = dict(tree)
    if "episode" not in tree:
        episode = np.full(len(tree["prev"]), -1, np.int64)
        found = stored_episodes(tree)
        for k, rows in enumerate(found):
            episode[rows] = k
        out["episode"], out["next_episode"] = episode, len(found)
    tails = tree["open"]
    if "agent" not in tails:
        out["open"] = {**tails, "agent": np.zeros(len(tails["source"]), np.int64)}
    return out


REPLAY_FORMAT = TreeFormat("replay shard", (episode_ids_and_agent_lanes,))
"""The replay shard's tree: version 2 (see the module docstring)."""


class StoredEpisode(NamedTuple):
    """One episode of a shard checkpoint, on its way to another shard (see
    :func:`split_episodes` and
    :meth:`~hpc_refer.loop.learner.Learner.adopt`)."""

    chunk: Chunk
    """Its stored rows as one chunk (:func:`episode_chunk`)."""
    priorities: np.ndarray | None
    """PER: the priority of each of its rows (0: not sampleable); None from a uniform shard."""
    max_priority: float
    """PER: the running maximum of its shard's tree (0.0 from a uniform shard)."""


def stored_episodes(tree: StateTree) -> list[np.ndarray]:
    """The rows of every episode stored in a shard checkpoint, each in link order, the
    episodes ordered by the ring age of their first row (oldest first).

    An episode starts at a row without predecessor (its start, or its first row not yet
    forgotten) and follows ``next`` to its last stored row.
    """
    n, head, capacity = int(tree["size"]), int(tree["head"]), int(tree["capacity"])
    prev, nxt = tree["prev"], tree["next"]
    starts = np.flatnonzero((prev[:n] < 0) & (tree["flags"][:n] != 0))
    starts = starts[np.argsort((starts - head) % capacity, kind="stable")]
    episodes = []
    for s in starts:
        rows = [int(s)]
        while nxt[rows[-1]] >= 0:
            rows.append(int(nxt[rows[-1]]))
            if len(rows) > n:
                raise ValueError("replay checkpoint: the next links of its rows form a cycle")
        episodes.append(np.array(rows, np.int64))
    return episodes


def episode_chunk(tree: StateTree, rows: np.ndarray) -> Chunk:
    """The stored ``rows`` of one episode (link order) of a shard checkpoint, as one chunk
    (of source 0: whoever stores it sets its own).

    Its end is TERMINATED after a terminal transition, TRUNCATED when the last row is a
    final state s_T (no action), and OPEN when the episode's next chunk had not arrived.
    """
    last = tree["flags"][rows[-1]]
    if last & TERMINAL:
        end, m = TERMINATED, rows.size
    elif last & HAS_ACTION:
        end, m = OPEN, rows.size
    else:
        end, m = TRUNCATED, rows.size - 1
    acts = rows[:m]
    return Chunk(tree["obs"][rows], tree["act"][acts], tree["rew"][acts], tree["mu_mean"][acts],
                 tree["mu_std"][acts], end)


def split_episodes(replay_trees: list[StateTree], n_learners: int,
                   capacity: int | None = None) -> list[list[StoredEpisode]]:
    """Deal the stored episodes of the shard checkpoints ``replay_trees`` (any number) out
    to ``n_learners`` learners; each learner stores its list with
    :meth:`~hpc_refer.loop.learner.Learner.adopt`.

    Balance: the longest episodes first, each to the learner with the fewest rows so far
    (greedy: without ``capacity`` no learner gets more than the mean plus one episode).
    Episodes move whole, so their links stay within one shard, except where ``capacity``
    (the rows of a new shard) requires a split: an episode larger than the room left on the
    least-loaded learner gives it its oldest rows, and the rest goes on to the next one.
    The first part then ends on a transition whose successor is in another shard (it stays
    stored and counted, but unsampleable); each split fills a shard, so there are at most
    ``n_learners - 1`` of them. So every stored row and transition is kept whenever the
    shards together have room for them. PER priorities travel with their rows.

    Each learner's list is in the order of age of its pieces' first rows in their old ring
    (as a fraction of its size), oldest first, so that FIFO forgetting drops the oldest
    first should a shard be too small.
    """
    if n_learners < 1:
        raise ValueError(f"n_learners must be >= 1, got {n_learners}")
    replay_trees = [REPLAY_FORMAT.upgrade(tree) for tree in replay_trees]
    found = [(shard, rows) for shard, tree in enumerate(replay_trees)
             for rows in stored_episodes(tree)]
    loads = [0] * n_learners
    shares: list[list[tuple[float, int, np.ndarray]]] = [[] for _ in range(n_learners)]
    for shard, rows in sorted(found, key=lambda x: -x[1].size):
        tree = replay_trees[shard]
        head, ring, size = int(tree["head"]), int(tree["capacity"]), int(tree["size"])
        while rows.size:
            target = loads.index(min(loads))
            room = rows.size if capacity is None else capacity - loads[target]
            take = rows.size if room >= rows.size or room <= 0 else room
            piece, rows = rows[:take], rows[take:]
            shares[target].append(((int(piece[0]) - head) % ring / size, shard, piece))
            loads[target] += take
    out = []
    for share in shares:
        episodes = []
        for _, shard, rows in sorted(share, key=lambda x: x[:2]):
            tree = replay_trees[shard]
            p = tree.get("priorities")
            episodes.append(StoredEpisode(episode_chunk(tree, rows),
                                          None if p is None else p["leaves"][rows],
                                          0.0 if p is None else float(p["max_priority"])))
        out.append(episodes)
    return out
