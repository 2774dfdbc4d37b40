"""Typed records that cross module or process boundaries (actor -> learner -> run directory).

Each record that travels in an MPI message has ``pack`` (to the float64 vector that is sent)
and ``unpack`` (which validates what it reads), so no code indexes positions of a vector.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

import numpy as np
import torch

from hpc_refer.replay import Chunk, ChunkEnd


class EpisodeRecord(NamedTuple):
    """A finished episode: undiscounted return, number of steps, the solver's metric values."""

    ret: float
    length: int
    values: tuple[float, ...] = ()


HEADER_FIXED = 7
"""Length of the fixed part of a packed :class:`ChunkHeader`; the episode's metric values
follow it."""


class ChunkHeader(NamedTuple):
    """What precedes a chunk's payload: its sizes and end, the episode it closes (if any),
    and the actor's solver faults so far."""

    n_states: int
    n_actions: int
    end: ChunkEnd
    episode: EpisodeRecord | None
    faults: int

    @classmethod
    def of(cls, chunk: Chunk, episode: EpisodeRecord | None, faults: int) -> ChunkHeader:
        return cls(chunk.obs.shape[0], chunk.act.shape[0], chunk.end, episode, faults)

    def pack(self) -> np.ndarray:
        """float64 [n_states, n_actions, end, has_episode, length, return, faults, values...]."""
        ep = self.episode if self.episode is not None else EpisodeRecord(0.0, 0)
        return np.array([self.n_states, self.n_actions, int(self.end),
                         self.episode is not None, ep.length, ep.ret, self.faults, *ep.values],
                        np.float64)

    @classmethod
    def unpack(cls, flat: np.ndarray) -> ChunkHeader:
        """Read a packed header; a wrong length or chunk end raises ValueError."""
        if flat.size < HEADER_FIXED:
            raise ValueError(f"chunk header of {flat.size} values, expected >= {HEADER_FIXED}")
        n, m, end, has_ep, length = (int(x) for x in flat[:5])
        episode = (EpisodeRecord(float(flat[5]), length,
                                 tuple(float(x) for x in flat[HEADER_FIXED:])) if has_ep else None)
        return cls(n, m, ChunkEnd(end), episode, int(flat[6]))


class Incoming(NamedTuple):
    """A message from an actor as the learner receives it: a chunk (with the episode it
    ends, if any), or ``chunk = None`` when the actor's environment has finished its work."""

    actor: int
    chunk: Chunk | None
    episode: EpisodeRecord | None


class LoggedEpisode(NamedTuple):
    """An episode as ``episodes.csv`` records it."""

    env_step: int
    actor: int
    ret: float
    length: int
    values: tuple[float, ...]


StateTree = dict[str, Any]
"""What an owner of run state hands to a checkpoint (``checkpoint_state()``) and takes back
(``restore_state(tree)``): nested dicts whose leaves are numpy arrays, Python scalars
(bool, int, float, str) or None. :mod:`hpc_refer.checkpoint` maps dicts to HDF5 groups, arrays
to datasets and scalars to attributes, so nothing in it is pickled."""


def numpy_rng_state(rng: np.random.Generator) -> str:
    """The full state of a numpy Generator as a JSON string (its 128-bit integers exceed
    int64, so they travel as JSON numbers rather than HDF5 integers)."""
    return json.dumps(rng.bit_generator.state)


def set_numpy_rng_state(rng: np.random.Generator, state: str) -> None:
    """Inverse of :func:`numpy_rng_state` (the generator continues bit for bit)."""
    rng.bit_generator.state = json.loads(state)


def torch_rng_state() -> np.ndarray:
    """torch's CPU generator state as a uint8 array."""
    return torch.get_rng_state().numpy().copy()


def set_torch_rng_state(state: np.ndarray) -> None:
    """Inverse of :func:`torch_rng_state`."""
    torch.set_rng_state(torch.from_numpy(np.asarray(state, np.uint8).copy()))
