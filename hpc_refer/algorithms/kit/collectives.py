"""The reductions over the learners, as the learner and its gradient step see them.

:class:`Reducer` is the protocol; :class:`SerialReducer` is one learner alone (every
operation the identity) and :class:`hpc_refer.parallel.world.MpiReducer` the learner communicator
of an MPI run. The learner receives one and hands it to its gradient step
(:mod:`hpc_refer.algorithms.kit.step`), so nothing below the loop imports mpi4py or
:mod:`hpc_refer.parallel`.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np


class Reducer(Protocol):
    """Reductions over the learners (serial or MPI); every learner calls each one."""

    size: int
    rank: int

    def average_(self, flat: np.ndarray) -> None:
        """Average ``flat`` in place over all learners."""
        ...

    def sum(self, values: np.ndarray) -> np.ndarray:
        """Element-wise sum of ``values`` over all learners."""
        ...

    def gather(self, obj: Any) -> list[Any] | None:
        """Every learner's ``obj``, as a list on learner 0 (None on the others)."""
        ...

    def checksums_agree(self, checksum: float) -> bool:
        """True when every learner reports the same checksum of its weights."""
        ...


class SerialReducer:
    """The reductions of one learner alone (L = 1): every operation is the identity."""

    size = 1
    rank = 0

    def average_(self, flat: np.ndarray) -> None:
        """Average ``flat`` in place over all learners (one: nothing to do)."""

    def sum(self, values: np.ndarray) -> np.ndarray:
        """Element-wise sum of ``values`` over all learners."""
        return values

    def gather(self, obj: Any) -> list[Any] | None:
        """Every learner's ``obj``, as a list on learner 0 (None on the others)."""
        return [obj]

    def checksums_agree(self, checksum: float) -> bool:
        """True when every learner reports the same checksum of its weights."""
        return True
