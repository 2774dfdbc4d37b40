"""Team helpers for solvers split over ranks (run under ``mpirun -n 2..4 --only-mpi``)."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.mark.mpi(min_size=2)
def test_slab_exchange_pairs_each_rank_with_its_neighbours():
    from mpi4py import MPI

    from hpc_refer.parallel.world import MpiTeam

    team = MpiTeam(MPI.COMM_WORLD)
    shape = (3, 5)
    from_left, from_right = team.exchange_slabs(np.full(shape, 10.0 * team.rank),
                                                np.full(shape, 10.0 * team.rank + 1))
    if team.rank == 0:
        assert from_left is None
    else:
        np.testing.assert_array_equal(from_left, np.full(shape, 10.0 * (team.rank - 1) + 1))
    if team.rank == team.size - 1:
        assert from_right is None
    else:
        np.testing.assert_array_equal(from_right, np.full(shape, 10.0 * (team.rank + 1)))
