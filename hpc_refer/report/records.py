"""Typed records that cross module or process boundaries (actor -> learner -> run directory).

Each record that travels in an MPI message has ``pack`` (to the float64 vector that is sent)
and ``unpack`` (which validates what it reads), so no code indexes positions of a vector.

Plain data, the bottom layer: numpy only (no torch, no numba, nothing of hpc_refer), so that
the replay, the environments and the channels all import their records from here.
"""

from __future__ import annotations

import json
import math
from enum import IntEnum
from typing import Any, NamedTuple

import numpy as np


class ChunkEnd(IntEnum):
    """How a chunk stops: the episode goes on, reached a terminal state, or was cut."""

    OPEN = 0
    TERMINATED = 1
    TRUNCATED = 2


OPEN, TERMINATED, TRUNCATED = ChunkEnd.OPEN, ChunkEnd.TERMINATED, ChunkEnd.TRUNCATED


class Chunk(NamedTuple):
    """Consecutive steps of one episode, as an actor sends them.

    ``obs`` has one row per state: the m states that carry an action, plus the final state
    s_T when ``end`` is TRUNCATED. ``act``, ``rew``, ``mu_mean`` and ``mu_std`` have m rows.
    ``end`` says how the chunk stops: OPEN (the episode continues in the next chunk of the same
    ``source`` and ``agent``), TERMINATED (the last transition reached a terminal state) or
    TRUNCATED. ``agent``: which agent of the actor's simulation took the steps (0 for a
    solver of one agent): each agent's trajectory is an episode of its own.
    """

    obs: np.ndarray
    act: np.ndarray
    rew: np.ndarray
    mu_mean: np.ndarray
    mu_std: np.ndarray
    end: ChunkEnd
    source: int = 0
    agent: int = 0


class EpisodeRecord(NamedTuple):
    """A finished episode: undiscounted return, number of steps, the solver's metric values,
    when it ended, and of which agent of its simulation."""

    ret: float
    length: int
    values: tuple[float, ...] = ()
    wall_s: float = math.nan
    """Seconds since the run started (:mod:`hpc_refer.report.clock`) when the episode ended,
    read by the actor that ran it; nan: not known."""
    agent: int = 0
    """The agent (0..n_agents-1) whose episode it is (0 for a solver of one agent)."""


HEADER_FIXED = 10
"""Length of the fixed part of a packed :class:`ChunkHeader`; the episode's metric values
follow it."""


class ChunkHeader(NamedTuple):
    """What precedes a chunk's payload: its sizes and end, the episode it closes (if any),
    the actor's solver faults so far, the agent of the chunk and whether the actor is
    between episodes after it (every agent's episode over, nothing held back to send)."""

    n_states: int
    n_actions: int
    end: ChunkEnd
    episode: EpisodeRecord | None
    faults: int
    agent: int = 0
    between: bool = True

    @classmethod
    def of(cls, chunk: Chunk, episode: EpisodeRecord | None, faults: int,
           between: bool) -> ChunkHeader:
        return cls(chunk.obs.shape[0], chunk.act.shape[0], chunk.end, episode, faults,
                   chunk.agent, between)

    def pack(self) -> np.ndarray:
        """float64 [n_states, n_actions, end, has_episode, length, return, faults, wall_s,
        agent, between, values...]."""
        ep = self.episode if self.episode is not None else EpisodeRecord(0.0, 0)
        return np.array([self.n_states, self.n_actions, int(self.end),
                         self.episode is not None, ep.length, ep.ret, self.faults, ep.wall_s,
                         self.agent, self.between, *ep.values], np.float64)

    @classmethod
    def unpack(cls, flat: np.ndarray) -> ChunkHeader:
        """Read a packed header; a wrong length or chunk end raises ValueError."""
        if flat.size < HEADER_FIXED:
            raise ValueError(f"chunk header of {flat.size} values, expected >= {HEADER_FIXED}")
        n, m, end, has_ep, length = (int(x) for x in flat[:5])
        agent = int(flat[8])
        episode = (EpisodeRecord(float(flat[5]), length,
                                 tuple(float(x) for x in flat[HEADER_FIXED:]), float(flat[7]),
                                 agent)
                   if has_ep else None)
        return cls(n, m, ChunkEnd(end), episode, int(flat[6]), agent, bool(flat[9]))


class MessageKind(IntEnum):
    """What an actor's message to its learner is."""

    CHUNK = 0
    """Steps for the replay (possibly none: the answer to a cut request with nothing
    pending), with the episode they end, if any."""
    FINISHED = 1
    """The actor's environment has finished its work (it raised EnvironmentFinished)."""
    EVAL = 2
    """The episodes of an evaluation round of the mean policy."""
    FAILED = 3
    """The environment failed for good (``run.max_env_failures`` faults in a row, or a
    solver that stopped answering); the text says which and why."""
    STUCK = 4
    """The actor's process is stuck in a solver call (its watchdog thread says so): it
    answers nothing any more, so the run checkpoints without it and ends the job."""
    LOST = 5
    """A rank of the actor's team is gone (its process died or its host went down; MPI
    reported it, under ``mpirun --with-ft ulfm``): like STUCK, the run checkpoints without
    the team and ends the job; the text names the lost ranks and their hosts."""


class Incoming(NamedTuple):
    """A message from an actor as the learner receives it (see :class:`MessageKind`)."""

    actor: int
    kind: MessageKind
    chunk: Chunk | None = None
    episode: EpisodeRecord | None = None
    evals: tuple[EpisodeRecord, ...] = ()
    failure: str = ""
    faults: int | None = None
    """The actor's solver faults so far, when the message reports them (chunk headers)."""
    between: bool | None = None
    """Whether the actor is between episodes after this chunk (evaluation may then run);
    None: as the chunk's end says (not OPEN)."""


EPISODE_FIXED = 4
"""Values of each packed episode (:func:`pack_episodes`) before its metric values."""


def pack_episodes(episodes: list[EpisodeRecord]) -> np.ndarray:
    """float64 [count, values per episode, then per episode: return, length, wall_s, agent,
    values...]."""
    width = len(episodes[0].values) if episodes else 0
    rows = [[e.ret, e.length, e.wall_s, e.agent, *e.values] for e in episodes]
    return np.concatenate([[len(episodes), width], np.ravel(rows)]).astype(np.float64)


def unpack_episodes(flat: np.ndarray) -> tuple[EpisodeRecord, ...]:
    """Inverse of :func:`pack_episodes`; a length that does not match raises ValueError."""
    if flat.size < 2:
        raise ValueError(f"episode list of {flat.size} values, expected >= 2")
    count, width = int(flat[0]), int(flat[1])
    if flat.size != 2 + count * (EPISODE_FIXED + width):
        raise ValueError(f"episode list of {flat.size} values does not hold {count} episodes "
                         f"of {width} metric values")
    rows = flat[2:].reshape(count, EPISODE_FIXED + width)
    return tuple(EpisodeRecord(float(r[0]), int(r[1]),
                               tuple(float(v) for v in r[EPISODE_FIXED:]), float(r[2]),
                               int(r[3]))
                 for r in rows)


class LoggedEpisode(NamedTuple):
    """An episode as ``episodes.csv`` records it."""

    env_step: int
    actor: int
    ret: float
    length: int
    values: tuple[float, ...]
    wall_s: float
    """When it ended (:attr:`EpisodeRecord.wall_s`)."""
    agent: int = 0
    """Whose episode it is (:attr:`EpisodeRecord.agent`)."""


class Simulation(NamedTuple):
    """The episodes of one simulation of several agents, as its actor's episodes show it."""

    env_step: int
    """Env step of its last agent's episode."""
    summed_return: float
    """The sum of its agents' returns."""
    agents: int
    """The agents recorded (fewer than the simulation's when a fault cut it)."""


class Simulations:
    """Groups each actor's episodes, in the order they are logged, into simulations: every
    agent of a simulation ends its episode once, so a simulation ends where an agent index
    of the same actor repeats (its sum is known when the next one begins; :meth:`open` holds
    the last ones)."""

    def __init__(self) -> None:
        self._open: dict[int, tuple[set[int], float, int]] = {}

    def add(self, actor: int, agent: int, ret: float, env_step: int) -> Simulation | None:
        """Book an episode; the simulation it closes (the actor's previous one), if any."""
        seen, total, step = self._open.get(actor, (set(), 0.0, 0))
        done = None
        if agent in seen:
            done = Simulation(step, total, len(seen))
            seen, total = set(), 0.0
        seen.add(agent)
        self._open[actor] = (seen, total + ret, env_step)
        return done

    def open(self) -> list[Simulation]:
        """The simulations whose end no later episode has shown yet, one per actor."""
        return [Simulation(step, total, len(seen)) for seen, total, step in self._open.values()]


StateTree = dict[str, Any]
"""What an owner of run state hands to a checkpoint (``checkpoint_state()``) and takes back
(``restore_state(tree)``): nested dicts whose leaves are numpy arrays, Python scalars
(bool, int, float, str) or None. :mod:`hpc_refer.loop.checkpoint` maps dicts to HDF5 groups, arrays
to datasets and scalars to attributes, so nothing in it is pickled."""


def numpy_rng_state(rng: np.random.Generator) -> str:
    """The full state of a numpy Generator as a JSON string (its 128-bit integers exceed
    int64, so they travel as JSON numbers rather than HDF5 integers)."""
    return json.dumps(rng.bit_generator.state)


def set_numpy_rng_state(rng: np.random.Generator, state: str) -> None:
    """Inverse of :func:`numpy_rng_state` (the generator continues bit for bit)."""
    rng.bit_generator.state = json.loads(state)


def episodes_tree(episodes: list[LoggedEpisode]) -> StateTree:
    """Logged episodes as arrays of a checkpoint (``values``: one row per episode)."""
    width = len(episodes[0].values) if episodes else 0
    return {"env_step": np.array([e.env_step for e in episodes], np.int64),
            "actor": np.array([e.actor for e in episodes], np.int64),
            "ret": np.array([e.ret for e in episodes], np.float64),
            "length": np.array([e.length for e in episodes], np.int64),
            "values": np.array([e.values for e in episodes], np.float64).reshape(
                len(episodes), width),
            "wall_s": np.array([e.wall_s for e in episodes], np.float64),
            "agent": np.array([e.agent for e in episodes], np.int64)}


def episodes_from(tree: StateTree) -> list[LoggedEpisode]:
    """Inverse of :func:`episodes_tree` (older trees are upgraded by their owner, the learner
    loop's format)."""
    return [LoggedEpisode(int(s), int(a), float(r), int(n), tuple(float(x) for x in v),
                          float(w), int(g))
            for s, a, r, n, v, w, g in zip(tree["env_step"], tree["actor"], tree["ret"],
                                           tree["length"], tree["values"], tree["wall_s"],
                                           tree["agent"], strict=True)]
