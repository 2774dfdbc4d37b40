"""The MPI sweep equals the serial sweep (run with: mpirun -n 2 python -m pytest --with-mpi)."""

from pathlib import Path

import numpy as np
import pytest
from tolerances import F64

from hpc_refer.prediction.sweep import Collective, SweepConfig, run_sweep

CONFIG = SweepConfig(algorithms=("td", "gtd", "etdlb", "abtd"), runs=5, steps=300,
                     alpha_exponents=(1, 3, 5), eta_exponents=(-1, 2), betas=(0.0, 0.6),
                     zetas=(0.0, 0.5))


@pytest.mark.mpi(min_size=2)
def test_mpi_sweep_equals_serial() -> None:
    comm = Collective.world()
    parallel = run_sweep(CONFIG, comm)
    if comm.rank != 0:
        assert parallel is None
        return
    serial = run_sweep(CONFIG)
    assert parallel is not None and serial is not None and parallel.ranks == comm.size
    for name, res in serial.algorithms.items():
        par = parallel.algorithms[name]
        # Each rank runs its lanes as a batch of another width, whose vectorised sums may
        # round otherwise (test_engine.py): float64 round-off. The best settings: exactly.
        np.testing.assert_allclose(par.auc, res.auc, err_msg=name, **F64)
        np.testing.assert_allclose(par.final, res.final, err_msg=name, **F64)
        np.testing.assert_array_equal(par.rerun.best, res.rerun.best)
        for field in ("auc", "final", "curve_mean", "curve_se"):
            np.testing.assert_allclose(getattr(par.rerun, field), getattr(res.rerun, field),
                                       err_msg=f"{name} {field}", **F64)


@pytest.mark.mpi(min_size=2)
def test_mpi_cli_writes_one_file(tmp_path: Path) -> None:
    from hpc_refer.parallel import world
    from hpc_refer.prediction import results
    from hpc_refer.prediction.__main__ import main

    out = Path(world.bcast_object(str(tmp_path / "r.h5")))
    assert main(["sweep", "--out", str(out), "--algorithms", "td", "--runs", "4", "--steps",
                 "200", "--alpha-exponents", "2:4", "--quiet"]) == 0
    world.barrier()
    stored = results.read(out)
    assert stored.ranks == world.world_rank_size()[1]
    assert stored.algorithms["td"].auc.shape == (2, 1, 3, 4)
