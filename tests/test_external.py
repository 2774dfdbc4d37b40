"""External solvers over MPI: the C example solver built with mpicc, trained against in an
MPMD mpirun and through MPI_Comm_spawn, with injected solver faults; the Fortran module
compiled when a Fortran MPI compiler is present; validation of the ``--env external`` ids."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hpc_refer.config import ConfigError
from hpc_refer.envs.external import parse_spec

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


@pytest.fixture(scope="module")
def heat1d(tmp_path_factory) -> Path:
    """The example solver, compiled with mpicc (warnings are errors)."""
    out = tmp_path_factory.mktemp("bin") / "heat1d"
    subprocess.run([MPICC, "-O2", "-Wall", "-Wextra", "-Werror",
                    f"-I{ROOT / 'solvers/coupling'}",
                    str(ROOT / "solvers/examples/heat1d/heat1d.c"), "-o", str(out), "-lm"],
                   check=True)
    return out


def _mpirun(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    import os

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
    program, args, ranks = parse_spec("external:-n 3 true --flag 'a b'", 1)
    assert Path(program).name == "true" and Path(program).is_absolute()
    assert args == ["--flag", "a b"] and ranks == 3
