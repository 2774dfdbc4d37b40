"""Job scripts (jobscripts/, .ci/slurm/): syntax, shellcheck, and real runs.

The generic Slurm script is submitted for real with ``sbatch --wait`` to a single-node Slurm that
the ``slurm`` fixture starts with .ci/slurm/up.sh and stops with .ci/slurm/down.sh (root and apt
needed). Without root/apt the Slurm and shellcheck tests are skipped with the reason, except when
CI=true, where they fail instead. Serial pytest pass only (``mpi_skip``): under mpirun every rank
would submit the same jobs.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SBATCH = ROOT / "jobscripts" / "generic" / "train.sbatch"
LOCAL = ROOT / "jobscripts" / "local" / "train-mpirun.sh"
UP = ROOT / ".ci" / "slurm" / "up.sh"
DOWN = ROOT / ".ci" / "slurm" / "down.sh"
SCRIPTS = sorted({*ROOT.glob("jobscripts/**/*.sh"), *ROOT.glob("jobscripts/**/*.sbatch"),
                  *ROOT.glob(".ci/slurm/*.sh")})
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
# A tiny but complete training: 600 Pendulum steps (3 episodes), learning from step 300.
STEPS = 600
SMALL = ["--replay.size", "600", "--replay.learn-start", "300", "--vracer.batch", "32",
         "--vracer.hidden", "16,16", "--log-every", "200"]

pytestmark = pytest.mark.mpi_skip


def unavailable(reason: str) -> None:
    """Skip with the reason, or fail when CI=true (CI must run these tests)."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: not skipping)")
    pytest.skip(reason)


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def pid_alive(pidfile: str) -> bool:
    try:
        os.kill(int(Path(pidfile).read_text().strip()), 0)
    except (OSError, ValueError):
        return False
    return True


def mpi_env(**extra: str) -> dict[str, str]:
    """Environment for jobs and mpirun: this interpreter's venv, Open MPI 5 as root on few cores."""
    env = dict(os.environ)
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        PYTHON=sys.executable,
        OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        PRTE_ALLOW_RUN_AS_ROOT="1", PRTE_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        OMPI_MCA_btl="^ofi",
        # Slurm advertises 8 CPUs on a 2-core machine: Open MPI must neither bind nor busy-poll.
        PRTE_MCA_hwloc_default_binding_policy="none", OMPI_MCA_mpi_yield_when_idle="1",
        # The wheel's PMIx has no munge security component; without this every rank prints
        # "Sorry! You were supposed to get help about: find-available:not-valid".
        PMIX_MCA_psec="native",
        ENV="Pendulum-v1", STEPS=str(STEPS), SEED="0",
    )
    for key in ("LEARNERS", "RANKS_PER_ENV", "RUN_DIR", "LAUNCHER", "SRUN_ARGS", "MPIRUN_ARGS"):
        env.pop(key, None)
    env.update(extra)
    return env


# --------------------------------------------------------------------------------------------
# Static checks


def test_every_expected_script_exists_and_is_executable():
    names = {p.relative_to(ROOT).as_posix() for p in SCRIPTS}
    assert {"jobscripts/generic/train.sbatch", "jobscripts/local/train-mpirun.sh",
            ".ci/slurm/up.sh", ".ci/slurm/down.sh"} <= names
    for path in (LOCAL, UP, DOWN):
        assert os.access(path, os.X_OK), path


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_bash_n(script):
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def shellcheck():
    exe = shutil.which("shellcheck")
    if exe is None and is_root() and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "shellcheck"]
        if subprocess.run(cmd, capture_output=True, env=env, check=False).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env, check=False)
            subprocess.run(cmd, capture_output=True, env=env, check=False)
        exe = shutil.which("shellcheck")
    if exe is None:
        unavailable("shellcheck is not installed and cannot be installed (needs root and apt-get)")
    return exe


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_shellcheck(shellcheck, script):
    proc = subprocess.run([shellcheck, "--severity=style", str(script)], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_sbatch_header_and_launch_line():
    text = SBATCH.read_text()
    header = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    for option in ("--job-name=", "--nodes=", "--ntasks=", "--ntasks-per-node=",
                   "--cpus-per-task=1", "--time=", "--output="):
        assert any(option in line for line in header), option
    assert text.index("srun --mpi=pmix") < text.index("set -euo pipefail")  # launch line on top
    assert "export OMP_NUM_THREADS=1" in text


# --------------------------------------------------------------------------------------------
# The local mpirun script


def run_local(tmp_path, ranks, *args, **env):
    return subprocess.run(["bash", str(LOCAL), str(ranks), *args], cwd=tmp_path, text=True,
                          capture_output=True, env=mpi_env(**env), timeout=300, check=False)


def test_local_script_rejects_a_world_that_does_not_fit(tmp_path):
    proc = run_local(tmp_path, 5, LEARNERS="2", RANKS_PER_ENV="2")
    assert proc.returncode == 2
    assert "RANKS=5 does not fit LEARNERS=2, RANKS_PER_ENV=2" in proc.stderr
    assert "one of 4, 6, 8" in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_local_script_trains_with_mpirun(tmp_path):
    proc = run_local(tmp_path, 2, *SMALL, LEARNERS="1", RANKS_PER_ENV="1", RUN_DIR="run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "mpirun -n 2 " in proc.stdout and "--learners 1 --ranks-per-env 1" in proc.stdout
    run_dir = tmp_path / "run"
    assert tomllib.loads((run_dir / "config.toml").read_text())["run"]["learners"] == 1
    ranks = {int(e["rank"]) for e in read_episodes(run_dir)}
    assert ranks == {1}  # rank 0 learns, rank 1 is the only actor


# --------------------------------------------------------------------------------------------
# The generic Slurm script, submitted for real


@pytest.fixture(scope="module")
def slurm():
    """A single-node Slurm for this module: up.sh before, down.sh after (if this started it)."""
    if not is_root():
        unavailable("starting a single-node Slurm needs root")
    if shutil.which("sbatch") is None and shutil.which("apt-get") is None:
        unavailable("Slurm is not installed and apt-get is unavailable to install it")
    was_running = pid_alive("/run/slurmctld.pid")
    proc = subprocess.run(["bash", str(UP)], capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, f"{UP} failed:\n{proc.stdout}\n{proc.stderr}"
    yield
    if not was_running:
        proc = subprocess.run(["bash", str(DOWN)], capture_output=True, text=True, timeout=120,
                              check=False)
        assert proc.returncode == 0, f"{DOWN} failed:\n{proc.stdout}\n{proc.stderr}"
        assert not pid_alive("/run/slurmctld.pid") and not pid_alive("/run/slurmd.pid")


def sbatch(tmp_path, ntasks, *args, **env):
    """``sbatch --wait`` the generic script from tmp_path; returns (CompletedProcess, job name)."""
    name = f"hpc_refer_test_{uuid.uuid4().hex[:8]}"
    cmd = ["sbatch", "--wait", f"--job-name={name}", "--nodes=1", f"--ntasks={ntasks}",
           f"--ntasks-per-node={ntasks}", "--time=3", str(SBATCH), *args]
    try:
        proc = subprocess.run(cmd, cwd=tmp_path, text=True, capture_output=True,
                              env=mpi_env(**env), timeout=210, check=False)
    except subprocess.TimeoutExpired:
        subprocess.run(["scancel", f"--name={name}"], check=False)
        raise
    return proc, name


def read_episodes(run_dir):
    with (run_dir / "episodes.csv").open() as f:
        return list(csv.DictReader(f))


def check_run_dir(run_dir, name, learners, ranks_per_env, world, launch):
    """The run directory of a finished job: config, episodes from several actors, metrics, log."""
    files = {p.name for p in run_dir.iterdir()}
    assert {"config.toml", "episodes.csv", "train.jsonl", "log.txt"} <= files, files
    cfg = tomllib.loads((run_dir / "config.toml").read_text())
    assert cfg["run"]["learners"] == learners and cfg["run"]["ranks_per_env"] == ranks_per_env
    assert cfg["run"]["env"] == "Pendulum-v1" and cfg["run"]["run_dir"] == str(run_dir)
    episodes = read_episodes(run_dir)
    ranks = {int(e["rank"]) for e in episodes}
    assert ranks <= set(range(learners, world)), ranks  # only actor ranks collect episodes
    assert len(ranks) >= 2, f"episodes from one actor rank only: {ranks}"
    records = [json.loads(x) for x in (run_dir / "train.jsonl").read_text().splitlines()]
    assert records and records[-1]["env_step"] >= STEPS and records[-1]["grad_step"] > 0
    logs = [p for p in run_dir.iterdir() if p.name.startswith(f"slurm-{name}-")]
    assert len(logs) == 1, files  # the job log was moved into the run directory
    log = logs[0].read_text()
    teams = (world - learners) // ranks_per_env
    assert f"{world} ranks = {learners} learners + {teams} teams x {ranks_per_env}" in log
    assert f"train.sbatch: {launch}" in log and "--learners" in log
    assert f"steps {records[-1]['env_step']}/{STEPS}" in log  # the program's progress lines
    assert "Sorry!" not in log  # PMIx help-file noise (see mpi_env)
    return log


def test_sbatch_trains_with_srun_one_learner_three_actors(slurm, tmp_path):
    proc, name = sbatch(tmp_path, 4, *SMALL, LEARNERS="1", RANKS_PER_ENV="1", RUN_DIR="run",
                        SRUN_ARGS="")  # task/none in the CI slurm.conf: no --cpu-bind
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check_run_dir(tmp_path / "run", name, 1, 1, 4, "srun --mpi=pmix --ntasks=4")
    assert not list(tmp_path.glob("slurm-*.out"))  # nothing left in the submit directory


def test_sbatch_trains_with_mpirun_two_learners(slurm, tmp_path):
    proc, name = sbatch(tmp_path, 4, *SMALL, LEARNERS="2", RANKS_PER_ENV="1",
                        LAUNCHER="mpirun", MPIRUN_ARGS="--bind-to none")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = list((tmp_path / "runs").iterdir())  # default: runs/<env>-L<L>-K<K>-job<id>
    assert len(runs) == 1 and runs[0].name.startswith("Pendulum-v1-L2-K1-job"), runs
    check_run_dir(runs[0], name, 2, 1, 4, "mpirun -n 4 --bind-to none")


def test_sbatch_rejects_a_world_that_does_not_fit(slurm, tmp_path):
    proc, name = sbatch(tmp_path, 4, LEARNERS="2", RANKS_PER_ENV="3", RUN_DIR="run")
    assert proc.returncode != 0
    logs = list(tmp_path.glob(f"slurm-{name}-*.out"))
    assert len(logs) == 1
    log = logs[0].read_text()
    assert "ntasks=4 does not fit LEARNERS=2, RANKS_PER_ENV=3" in log
    assert "one of 5, 8, 11" in log
    assert not (tmp_path / "run").exists()
