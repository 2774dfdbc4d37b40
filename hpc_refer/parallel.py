"""Every mpi4py call of hpc_refer lives in this module.

Algorithms, networks, replay, checkpoints and the prediction suite never import mpi4py; they
receive the helpers below (or communicator objects created here) as arguments.

mpi4py is imported lazily, at the first call that needs it, so importing hpc_refer never
initialises MPI.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np


@cache
def _mpi() -> Any:
    """Import and return ``mpi4py.MPI`` (initialises MPI once, at first use)."""
    from mpi4py import MPI

    return MPI


def world_rank_size() -> tuple[int, int]:
    """Rank of this process in COMM_WORLD and the world size."""
    comm = _mpi().COMM_WORLD
    return comm.Get_rank(), comm.Get_size()


def gather_object(obj: Any, root: int = 0) -> list[Any] | None:
    """Gather one pickled object per rank of COMM_WORLD onto ``root`` (rare control data)."""
    return _mpi().COMM_WORLD.gather(obj, root=root)


def bcast_object(obj: Any, root: int = 0) -> Any:
    """Broadcast one pickled object from ``root`` to every rank of COMM_WORLD."""
    return _mpi().COMM_WORLD.bcast(obj, root=root)


def barrier() -> None:
    """Synchronise all ranks of COMM_WORLD."""
    _mpi().COMM_WORLD.Barrier()


class SerialReducer:
    """The reductions of one learner alone (L = 1): every operation is the identity.

    The MPI learner communicator offers the same methods; algorithms take either as a
    constructor argument and never import mpi4py.
    """

    size = 1
    rank = 0

    def average_(self, flat: np.ndarray) -> None:
        """Average ``flat`` in place over all learners."""

    def sum(self, values: np.ndarray) -> np.ndarray:
        """Element-wise sum of ``values`` over all learners."""
        return values
