"""Job scripts (jobscripts/, .ci/slurm/): syntax, shellcheck, the scripts' logic with stub
launchers, and real runs.

The logic tests run both scripts with stub ``srun``/``mpirun``/``scontrol`` on PATH that record
their arguments (no MPI, no Slurm, no hpc_refer needed): which flags are passed, the world-size
check, the restart branch, the requeue after a preemption, signal forwarding, the job log's name.

The generic Slurm script is submitted for real with ``sbatch`` to a single-node Slurm that
the ``slurm`` fixture starts with .ci/slurm/up.sh and stops with .ci/slurm/down.sh (root and apt
needed). Without root/apt the Slurm and shellcheck tests are skipped with the reason, except when
CI=true, where they fail instead. Serial pytest pass only (``mpi_skip``): under mpirun every rank
would submit the same jobs.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import uuid
from pathlib import Path

import pytest
from system_mpi import build_heat1d_fortran, fortran_openmpi, needs_fortran

from hpc_refer.algorithms.vracer import VRacer

ROOT = Path(__file__).resolve().parents[1]
SBATCH = ROOT / "jobscripts" / "generic" / "train.sbatch"
KS_CONFIG = ROOT / "configs" / "ks.toml"
LOCAL = ROOT / "jobscripts" / "local" / "train-mpirun.sh"
UP = ROOT / ".ci" / "slurm" / "up.sh"
DOWN = ROOT / ".ci" / "slurm" / "down.sh"
SCRIPTS = sorted({*ROOT.glob("jobscripts/**/*.sh"), *ROOT.glob("jobscripts/**/*.sbatch"),
                  *ROOT.glob(".ci/slurm/*.sh")})
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
# A tiny but complete training: 600 Pendulum steps, learning from step 300.
STEPS = 600
SMALL = ["--replay.size", "600", "--replay.learn-start", "300", f"--{VRacer.name}.batch", "32",
         f"--{VRacer.name}.hidden", "16,16", "--log-every", "200", "--chunk-len", "50"]
"""A run of STEPS = 600 steps: actors take exactly their share of the steps, so chunks of 50
(not the default 1000, a whole share) let the learner start training before the end."""
PENDULUM = [*SMALL, "--env.max_episode_steps", "50"]
"""Pendulum's episodes cut at 50 steps (gymnasium.make's keyword, through the [env] table):
every actor finishes episodes, however the 600 steps are shared among them."""

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


def mpi_env(**extra: str | None) -> dict[str, str]:
    """Environment for jobs and mpirun: this interpreter's venv, Open MPI 5 as root on few cores;
    ``NAME=None`` leaves NAME unset."""
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
    return {k: v for k, v in env.items() if v is not None}


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
                   "--cpus-per-task=1", "--time=", "--output=", "--open-mode=append",
                   "--requeue", "--signal=B:USR1@300"):
        assert any(option in line for line in header), option
    assert text.index("srun --mpi=pmix") < text.index("set -euo pipefail")  # launch line on top
    assert "export OMP_NUM_THREADS=1" in text


# --------------------------------------------------------------------------------------------
# The scripts' logic, with stub launchers (no MPI, no Slurm, no hpc_refer)

STUB_LAUNCHER = r"""#!/usr/bin/env bash
# Stub srun/mpirun: records its arguments one per line in $STUB_OUT/argv; with STUB_WAIT set it
# waits (at most 30 s) for SIGUSR1 or SIGTERM and records which in $STUB_OUT/signal; then writes
# STUB_STATE to <run dir>/state.txt (the --run-dir or --restart argument) and exits STUB_RC.
if [ "${1:-}" = --version ]; then echo "mpirun (Open MPI) 5.0.0"; exit 0; fi
printf '%s\n' "$(basename "$0")" "$@" > "$STUB_OUT/argv"
run_dir=""; prev=""
for a in "$@"; do
    case "$prev" in --run-dir|--restart) run_dir=$a ;; esac
    prev=$a
done
if [ -n "${STUB_WAIT:-}" ]; then
    got=""
    trap 'got=USR1' USR1
    trap 'got=TERM' TERM
    touch "$STUB_OUT/ready"
    for _ in $(seq 300); do [ -n "$got" ] && break; sleep 0.1; done
    echo "$got" > "$STUB_OUT/signal"
fi
if [ -n "${STUB_STATE:-}" ]; then mkdir -p "$run_dir"; echo "$STUB_STATE" > "$run_dir/state.txt"; fi
exit "${STUB_RC:-0}"
"""
STUB_SCONTROL = r"""#!/usr/bin/env bash
# Stub scontrol: records each call in $STUB_OUT/scontrol; `show job` prints StdOut=$STUB_STDOUT;
# with STUB_REQUEUE_KILLS set, `requeue` kills its caller (SIGKILL, no EXIT trap), as Slurm may.
echo "$*" >> "$STUB_OUT/scontrol"
if [ "${1:-}" = show ] && [ -n "${STUB_STDOUT:-}" ]; then echo "   StdOut=$STUB_STDOUT"; fi
if [ "${1:-}" = requeue ] && [ -n "${STUB_REQUEUE_KILLS:-}" ]; then kill -KILL "$PPID"; fi
exit "${STUB_SCONTROL_RC:-0}"
"""
JOB_ID = "4242"
VARIABLES = ("ENV", "STEPS", "SEED", "LEARNERS", "RANKS_PER_ENV", "RUN_DIR", "LAUNCHER",
             "SRUN_ARGS", "MPIRUN_ARGS", "MPIRUN", "PYTHON", "SOLVER", "SOLVER_RANKS")


@pytest.fixture
def stubs(tmp_path):
    """A bin/ with stub srun, mpirun and scontrol, and the directory they record into."""
    bin_dir, out = tmp_path / "bin", tmp_path / "out"
    bin_dir.mkdir()
    out.mkdir()
    for name, text in (("srun", STUB_LAUNCHER), ("mpirun", STUB_LAUNCHER),
                       ("scontrol", STUB_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir, out


def stub_env(stubs, **extra: str) -> dict[str, str]:
    """A clean environment: none of the scripts' variables and no Slurm job unless given."""
    bin_dir, out = stubs
    env = {k: v for k, v in os.environ.items()
           if k not in VARIABLES and not k.startswith(("SLURM_", "STUB_"))}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", STUB_OUT=str(out))
    env.update(extra)
    return env


def slurm_vars(tmp_path, ntasks: int = 4) -> dict[str, str]:
    return {"SLURM_JOB_ID": JOB_ID, "SLURM_NTASKS": str(ntasks),
            "SLURM_SUBMIT_DIR": str(tmp_path), "SLURM_JOB_NAME": "t"}


def run_script(script, args, cwd, env, timeout=60):
    return subprocess.run(["bash", str(script), *args], cwd=cwd, text=True, capture_output=True,
                          env=env, timeout=timeout, check=False)


def launched(stubs) -> list[str]:
    """The stub launcher's argv: [launcher, its options..., python, -m, hpc_refer.run, ...]."""
    return (stubs[1] / "argv").read_text().splitlines()


def program_args(stubs) -> list[str]:
    """The arguments after ``-m hpc_refer.run``."""
    argv = launched(stubs)
    return argv[argv.index("hpc_refer.run") + 1:]


def flag_values(args: list[str]) -> dict[str, str]:
    return {a: b for a, b in itertools.pairwise(args) if a.startswith("--")}


LAYOUT_AND_RUN_FLAGS = ("--env", "--steps", "--seed", "--learners", "--ranks-per-env")


def test_sbatch_passes_only_the_variables_that_are_set(stubs, tmp_path):
    env = stub_env(stubs, **slurm_vars(tmp_path))
    gamma = f"--{VRacer.name}.gamma"
    proc = run_script(SBATCH, ["--config", "my.toml", gamma, "0.9"], tmp_path, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    args = program_args(stubs)
    assert not set(LAYOUT_AND_RUN_FLAGS) & set(args), args
    run_dir = tmp_path / "runs" / f"job{JOB_ID}"  # the name claims no env, no layout
    assert args == ["--run-dir", str(run_dir), "--config", "my.toml", gamma, "0.9"]
    assert launched(stubs)[:4] == ["srun", "--mpi=pmix", "--ntasks=4", "--cpus-per-task=1"]
    assert "4 ranks = 1 learners + 3 teams x 1" in proc.stdout
    assert not (stubs[1] / "scontrol").read_text().count("requeue")


def test_sbatch_passes_every_variable_that_is_set(stubs, tmp_path):
    env = stub_env(stubs, **slurm_vars(tmp_path, 5), ENV="Hopper-v5", STEPS="1234",
                   SEED="7", LEARNERS="1", RANKS_PER_ENV="2", LAUNCHER="mpirun",
                   MPIRUN_ARGS="--bind-to none")
    proc = run_script(SBATCH, ["--log-every", "10"], tmp_path, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    args = program_args(stubs)
    run_dir = tmp_path / "runs" / f"Hopper-v5-L1-K2-job{JOB_ID}"
    assert flag_values(args) == {"--env": "Hopper-v5", "--steps": "1234", "--seed": "7",
                                 "--learners": "1", "--ranks-per-env": "2",
                                 "--run-dir": str(run_dir), "--log-every": "10"}
    assert args[-2:] == ["--log-every", "10"]  # the user's flags last: they win
    assert launched(stubs)[:5] == ["mpirun", "-n", "5", "--bind-to", "none"]
    assert "5 ranks = 1 learners + 2 teams x 2" in proc.stdout


@pytest.mark.parametrize("variable", ["STEPS", "SEED", "LEARNERS"])
def test_sbatch_rejects_a_variable_that_is_not_an_integer(stubs, tmp_path, variable):
    env = stub_env(stubs, **slurm_vars(tmp_path), **{variable: "1e6"})
    proc = run_script(SBATCH, [], tmp_path, env)
    assert proc.returncode == 2 and f"{variable}='1e6' is not a non-negative integer" in proc.stderr
    assert not (stubs[1] / "argv").exists()


def test_sbatch_world_check_without_slurm(stubs, tmp_path):
    env = stub_env(stubs, **slurm_vars(tmp_path), LEARNERS="2", RANKS_PER_ENV="3")
    proc = run_script(SBATCH, [], tmp_path, env)
    assert proc.returncode == 2
    assert "ntasks=4 does not fit LEARNERS=2, RANKS_PER_ENV=3" in proc.stderr
    assert "one of 5, 8, 11" in proc.stderr
    assert not (stubs[1] / "argv").exists() and not (tmp_path / "runs").exists()
    # Unset LEARNERS counts as 1 in the check: 1 + 3 teams of 1 fits 4, RANKS_PER_ENV=2 does not.
    env = stub_env(stubs, **slurm_vars(tmp_path), RANKS_PER_ENV="2")
    proc = run_script(SBATCH, [], tmp_path, env)
    assert proc.returncode == 2 and "LEARNERS=1, RANKS_PER_ENV=2" in proc.stderr
    env = stub_env(stubs, **slurm_vars(tmp_path))
    assert run_script(SBATCH, [], tmp_path, env).returncode == 0


def test_sbatch_outside_slurm_is_refused(stubs, tmp_path):
    proc = run_script(SBATCH, [], tmp_path, stub_env(stubs))
    assert proc.returncode == 2 and "not inside a Slurm job" in proc.stderr


def test_sbatch_runs_a_solver_mpmd_with_a_multi_prog_file(stubs, tmp_path):
    """SOLVER (issue 38, point 4): 5 tasks = 3 of hpc_refer (1 learner, 2 teams) + 2 of the
    solver, one step of two programs: srun --multi-prog with HPC_REFER_APP on each line (srun
    gives every line APPNUM 0); under mpirun, an MPMD line."""
    env = stub_env(stubs, **slurm_vars(tmp_path, 5), SOLVER="./heat1d --cells 8",
                   SOLVER_RANKS="2", RUN_DIR="r")
    proc = run_script(SBATCH, [], tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    argv = launched(stubs)
    assert "hpc_refer.run" not in argv, argv  # both programs are in the file
    lines = Path(argv[argv.index("--multi-prog") + 1]).read_text().splitlines()
    assert lines[0].startswith("0-2 env HPC_REFER_APP=0 python -m hpc_refer.run --env external ")
    assert lines[1] == "3-4 env HPC_REFER_APP=1 ./heat1d --cells 8"
    assert "5 ranks = 1 learners + 2 teams x 1 + 2 ranks of the solver" in proc.stdout
    env["LAUNCHER"] = "mpirun"
    assert run_script(SBATCH, [], tmp_path, env).returncode == 0
    argv = launched(stubs)
    assert argv[:3] == ["mpirun", "-n", "3"]
    assert argv[-6:] == [":", "-n", "2", "./heat1d", "--cells", "8"], argv


@pytest.mark.parametrize(("ntasks", "extra", "words"), [
    (5, {"SOLVER_RANKS": ""}, "SOLVER needs SOLVER_RANKS"),
    (6, {"SOLVER_RANKS": "3"}, "SOLVER_RANKS=3 does not split into 2 equal groups"),
    (5, {"SOLVER_RANKS": "2", "ENV": "Pendulum-v1"}, "leave ENV unset, not ENV='Pendulum-v1'"),
    (5, {"SOLVER_RANKS": "4"}, "leaves 1 rank(s) to hpc_refer"),
])
def test_sbatch_refuses_a_solver_that_does_not_fit(stubs, tmp_path, ntasks, extra, words):
    env = stub_env(stubs, **slurm_vars(tmp_path, ntasks), SOLVER="./heat1d", **extra)
    proc = run_script(SBATCH, [], tmp_path, env)
    assert proc.returncode == 2 and words in proc.stderr, proc.stderr


def make_checkpoint(run_dir: Path) -> None:
    (run_dir / "checkpoints" / "step-000000000100").mkdir(parents=True)
    (run_dir / "config.toml").write_text('[run]\nenv = "Pendulum-v1"\n')


def test_sbatch_resumes_a_run_dir_with_a_checkpoint(stubs, tmp_path):
    run_dir = tmp_path / "runs" / f"Pendulum-v1-job{JOB_ID}"  # the default: stable on requeue
    make_checkpoint(run_dir)
    env = stub_env(stubs, **slurm_vars(tmp_path), ENV="Pendulum-v1", STEPS="5000",
                   SEED="3", STUB_STATE="finished")
    proc = run_script(SBATCH, ["--config", "my.toml"], tmp_path, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Only what a restart may set: the config (env, seed, the extra flags) is the run's own.
    assert program_args(stubs) == ["--restart", str(run_dir), "--steps", "5000"]
    assert "resuming" in proc.stdout and "not passed on a restart: --config my.toml" in proc.stdout
    # A run directory without a checkpoint (here: an empty checkpoints/) starts afresh.
    other = tmp_path / "other"
    (other / "checkpoints").mkdir(parents=True)
    env = stub_env(stubs, **slurm_vars(tmp_path), RUN_DIR="other", LEARNERS="2")
    assert run_script(SBATCH, [], tmp_path, env).returncode == 0
    assert program_args(stubs) == ["--learners", "2", "--run-dir", str(other)]


def test_sbatch_restart_passes_learners_but_not_ranks_per_env(stubs, tmp_path):
    make_checkpoint(tmp_path / "r")
    env = stub_env(stubs, **slurm_vars(tmp_path), RUN_DIR="r", LEARNERS="2",
                   RANKS_PER_ENV="2")
    proc = run_script(SBATCH, [], tmp_path, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert program_args(stubs) == ["--restart", str(tmp_path / "r"), "--learners", "2"]


@pytest.mark.parametrize("state", ["preempted: signal 10", "finished",
                                   "failed: env 0: 3 consecutive solver faults", "running"])
def test_sbatch_requeues_only_a_preempted_run(stubs, tmp_path, state):
    log = tmp_path / f"slurm-t-{JOB_ID}.out"
    log.write_text("job log\n")
    failed = state.startswith("failed")
    env = stub_env(stubs, **slurm_vars(tmp_path), RUN_DIR="r", STUB_STATE=state,
                   STUB_RC="1" if failed else "0", STUB_STDOUT=str(log))
    proc = run_script(SBATCH, [], tmp_path, env)
    calls = (stubs[1] / "scontrol").read_text().splitlines()
    assert f"state.txt: {state}" in proc.stdout
    if state.startswith("preempted"):
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert calls[-1] == f"requeue {JOB_ID}"
        assert "requeued job" in proc.stdout
    else:  # a run that still says running when its launcher exited 0 lost a rank (issue 38)
        assert proc.returncode == (1 if failed else 3 if state == "running" else 0)
        assert ("ended without a stop record" in proc.stderr) == (state == "running")
        assert not any(c.startswith("requeue") for c in calls), calls
    assert not log.exists() and (tmp_path / "r" / log.name).read_text() == "job log\n"


def test_sbatch_moves_the_job_log_before_it_requeues(stubs, tmp_path):
    """Slurm ends the requeued job's batch shell (KILL after KillWait): no EXIT trap runs then."""
    log = tmp_path / f"slurm-t-{JOB_ID}.out"
    log.write_text("job log\n")
    env = stub_env(stubs, **slurm_vars(tmp_path), RUN_DIR="r", STUB_STATE="preempted",
                   STUB_STDOUT=str(log), STUB_REQUEUE_KILLS="1")
    proc = run_script(SBATCH, [], tmp_path, env)
    assert proc.returncode == -signal.SIGKILL
    assert not log.exists() and (tmp_path / "r" / log.name).exists()


@pytest.mark.parametrize("script", [SBATCH, LOCAL], ids=["sbatch", "local"])
def test_scripts_refuse_a_shell_start_up_file_as_env(stubs, tmp_path, script):
    """ENV is also the POSIX shell's start-up file variable: a path is not a gymnasium id."""
    env = stub_env(stubs, **slurm_vars(tmp_path), ENV="/home/u/.kshrc")
    proc = run_script(script, ["2"] if script == LOCAL else [], tmp_path, env)
    assert proc.returncode == 2 and "looks like a shell start-up file" in proc.stderr
    assert not (stubs[1] / "argv").exists()


def test_sbatch_reports_a_failed_requeue(stubs, tmp_path):
    env = stub_env(stubs, **slurm_vars(tmp_path), RUN_DIR="r", STUB_STATE="preempted",
                   STUB_SCONTROL_RC="1")
    proc = run_script(SBATCH, [], tmp_path, env)
    assert proc.returncode == 2 and f"scontrol requeue {JOB_ID} failed" in proc.stderr


def test_sbatch_keeps_the_job_log_of_every_attempt(stubs, tmp_path):
    """A requeued job writes a new log under the same name: the first one's move is kept."""
    run_dir = tmp_path / "r"
    make_checkpoint(run_dir)
    (run_dir / f"slurm-t-{JOB_ID}.out").write_text("attempt 0\n")
    (run_dir / f"slurm-t-{JOB_ID}.1.out").write_text("attempt 1\n")
    log = tmp_path / f"slurm-t-{JOB_ID}.out"
    log.write_text("attempt 2\n")
    env = stub_env(stubs, **slurm_vars(tmp_path), RUN_DIR="r", STUB_STDOUT=str(log))
    assert run_script(SBATCH, [], tmp_path, env).returncode == 0
    assert (run_dir / f"slurm-t-{JOB_ID}.out").read_text() == "attempt 0\n"
    assert (run_dir / f"slurm-t-{JOB_ID}.1.out").read_text() == "attempt 1\n"
    assert (run_dir / f"slurm-t-{JOB_ID}.2.out").read_text() == "attempt 2\n"


def signal_script(script, args, cwd, env, out: Path, signum) -> subprocess.CompletedProcess:
    """Start the script, wait until the stub launcher waits for a signal, send ``signum`` to
    the script (not to the launcher), and return the finished process."""
    proc = subprocess.Popen(["bash", str(script), *args], cwd=cwd, text=True, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not (out / "ready").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the stub launcher never started"
            time.sleep(0.05)
        time.sleep(0.3)  # the script's traps are set right after it starts the launcher
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGTERM], ids=["USR1", "TERM"])
def test_sbatch_forwards_the_warning_signal_and_requeues(stubs, tmp_path, signum):
    env = stub_env(stubs, **slurm_vars(tmp_path), RUN_DIR="r", STUB_WAIT="1",
                   STUB_STATE="preempted")
    proc = signal_script(SBATCH, [], tmp_path, env, stubs[1], signum)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Both reach the launcher as SIGUSR1 (SIGTERM would make mpirun kill the ranks).
    assert (stubs[1] / "signal").read_text().strip() == "USR1"
    assert f"{signum.name} received" in proc.stdout
    assert "launcher exit status 0, state.txt: preempted" in proc.stdout
    assert (stubs[1] / "scontrol").read_text().splitlines()[-1] == f"requeue {JOB_ID}"


def test_local_script_passes_only_the_variables_that_are_set(stubs, tmp_path):
    env = stub_env(stubs, MPIRUN="mpirun")
    proc = run_script(LOCAL, ["3", "--config", "my.toml"], tmp_path, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert program_args(stubs) == ["--config", "my.toml"]  # hpc_refer picks runs/<name>
    env = stub_env(stubs, ENV="Hopper-v5", STEPS="99", SEED="4", LEARNERS="1",
                   RANKS_PER_ENV="2", RUN_DIR="r", MPIRUN_ARGS="--bind-to none")
    proc = run_script(LOCAL, ["3", "--log-every", "10"], tmp_path, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    args = program_args(stubs)
    assert flag_values(args) == {"--env": "Hopper-v5", "--steps": "99", "--seed": "4",
                                 "--learners": "1", "--ranks-per-env": "2", "--run-dir": "r",
                                 "--log-every": "10"}
    assert args[-2:] == ["--log-every", "10"]
    assert launched(stubs)[:5] == ["mpirun", "-n", "3", "--bind-to", "none"]


def test_local_script_resumes_a_run_dir_with_a_checkpoint(stubs, tmp_path):
    make_checkpoint(tmp_path / "r")
    env = stub_env(stubs, RUN_DIR="r", ENV="Pendulum-v1", STEPS="800", SEED="1",
                   LEARNERS="1", RANKS_PER_ENV="1", MPIRUN_ARGS="")
    proc = run_script(LOCAL, ["2", f"--{VRacer.name}.gamma", "0.9"], tmp_path, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert program_args(stubs) == ["--restart", "r", "--steps", "800", "--learners", "1"]
    assert f"not passed on a restart: --{VRacer.name}.gamma 0.9" in proc.stdout


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGTERM], ids=["USR1", "TERM"])
def test_local_script_forwards_signals_to_mpirun(stubs, tmp_path, signum):
    env = stub_env(stubs, RUN_DIR="r", STUB_WAIT="1", STUB_STATE="preempted: signal 10",
                   MPIRUN_ARGS="")
    proc = signal_script(LOCAL, ["2"], tmp_path, env, stubs[1], signum)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (stubs[1] / "signal").read_text().strip() == "USR1"
    assert "run the same command again to resume" in proc.stdout


def test_local_script_exit_status_is_mpiruns(stubs, tmp_path):
    env = stub_env(stubs, STUB_RC="3", MPIRUN_ARGS="")
    assert run_script(LOCAL, ["2"], tmp_path, env).returncode == 3


def test_local_script_fails_a_run_that_ended_without_a_stop_record(stubs, tmp_path):
    """mpirun exited 0 but state.txt still says running (a lost host ends a job so: issue
    38, point 2): an error, exit 3."""
    env = stub_env(stubs, RUN_DIR="r", STUB_STATE="running", MPIRUN_ARGS="")
    proc = run_script(LOCAL, ["2"], tmp_path, env)
    assert proc.returncode == 3 and "ended without a stop record" in proc.stderr, proc.stderr


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
    proc = run_local(tmp_path, 2, *PENDULUM, LEARNERS="1", RANKS_PER_ENV="1", RUN_DIR="run")
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


def sbatch(tmp_path, ntasks, *args, during=None, timeout=210, **env):
    """``sbatch --wait`` the generic script from tmp_path; ``during(name, proc)`` runs while the
    job does. Returns (CompletedProcess, job name).

    --time=10 keeps the header's time-limit warning (--signal=B:USR1@300, up to 60 s early)
    at 4 minutes or later, after these short jobs have ended."""
    name = f"hpc_refer_test_{uuid.uuid4().hex[:8]}"
    cmd = ["sbatch", "--wait", f"--job-name={name}", "--nodes=1", f"--ntasks={ntasks}",
           f"--ntasks-per-node={ntasks}", "--time=10", str(SBATCH), *args]
    proc = subprocess.Popen(cmd, cwd=tmp_path, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=mpi_env(**env))
    try:
        if during is not None:
            during(name, proc)
        stdout, stderr = proc.communicate(timeout=timeout)
    except BaseException:
        subprocess.run(["scancel", f"--name={name}"], check=False)
        proc.kill()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr), name


def job_id(name: str) -> str:
    out = subprocess.run(["squeue", "-h", "--name", name, "-o", "%i"], capture_output=True,
                         text=True, check=False).stdout.split()
    assert len(out) == 1, f"job {name}: squeue shows {out}"
    return out[0]


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
    proc, name = sbatch(tmp_path, 4, *PENDULUM, LEARNERS="1", RANKS_PER_ENV="1", RUN_DIR="run",
                        SRUN_ARGS="")  # task/none in the CI slurm.conf: no --cpu-bind
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check_run_dir(tmp_path / "run", name, 1, 1, 4, "srun --mpi=pmix --ntasks=4")
    assert not list(tmp_path.glob("slurm-*.out"))  # nothing left in the submit directory


def test_sbatch_trains_with_mpirun_two_learners(slurm, tmp_path):
    proc, name = sbatch(tmp_path, 4, *PENDULUM, LEARNERS="2", RANKS_PER_ENV="1",
                        LAUNCHER="mpirun", MPIRUN_ARGS="--bind-to none")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = list((tmp_path / "runs").iterdir())  # default: runs/<ENV>-L<L>-K<K>-job<id>
    assert len(runs) == 1 and runs[0].name.startswith("Pendulum-v1-L2-K1-job"), runs
    check_run_dir(runs[0], name, 2, 1, 4, "mpirun -n 4 --bind-to none")


def test_sbatch_keeps_the_values_of_a_config_file(slurm, tmp_path):
    """configs/ks.toml with only STEPS set: env, gamma, lr, ... come from the file, the seed from
    hpc_refer's defaults, the steps from STEPS, and the run directory's name claims no env."""
    proc, name = sbatch(tmp_path, 4, "--config", str(KS_CONFIG), *SMALL, ENV=None, SEED=None,
                        STEPS=str(STEPS), SRUN_ARGS="")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = list((tmp_path / "runs").iterdir())
    assert len(runs) == 1 and runs[0].name.startswith("job"), runs  # job<id>: nothing was set
    run_dir = runs[0]
    ks = tomllib.loads(KS_CONFIG.read_text())
    cfg = tomllib.loads((run_dir / "config.toml").read_text())
    assert cfg["run"]["env"] == ks["run"]["env"] == "KS"
    assert cfg[VRacer.name]["gamma"] == ks[VRacer.name]["gamma"] != 0.99
    assert cfg[VRacer.name]["lr"] == ks[VRacer.name]["lr"]
    assert cfg["refer"]["beta_init"] == ks["refer"]["beta_init"]
    assert cfg["run"]["steps"] == STEPS != ks["run"]["steps"]  # STEPS beats the file
    assert cfg["run"]["seed"] == 0 and cfg["run"]["learners"] == 1  # hpc_refer's defaults
    assert cfg["replay"]["size"] == 600  # the extra flags beat the file
    log = next(p for p in run_dir.iterdir() if p.name.startswith(f"slurm-{name}-")).read_text()
    launch = next(x for x in log.splitlines() if x.startswith("train.sbatch: srun "))
    for flag in ("--env", "--seed", "--learners", "--ranks-per-env"):
        assert f"{flag} " not in launch, launch
    assert f"--steps {STEPS} " in launch
    records = [json.loads(x) for x in (run_dir / "train.jsonl").read_text().splitlines()]
    assert f"steps {records[-1]['env_step']}/{STEPS}" in log  # the progress line's total


def test_sbatch_requeues_a_preempted_run_and_finishes_it(slurm, tmp_path):
    """USR1 to the batch shell mid-run (as Slurm's --signal=B:USR1 does before the time limit):
    the ranks checkpoint and stop, the script requeues the job, the requeued job (same id) resumes
    RUN_DIR with --restart and finishes: state.txt = finished, every episode once."""
    steps = 4000
    run_dir = tmp_path / "run"
    signalled: list[str] = []

    def preempt(name, proc):
        deadline = time.monotonic() + 180
        log = run_dir / "log.txt"
        while not (log.exists() and "steps " in log.read_text()):  # a first progress line
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no progress line within 180 s"
            time.sleep(0.2)
        assert (run_dir / "state.txt").read_text().strip() == "running"
        job = job_id(name)
        subprocess.run(["scancel", "--signal=USR1", "--batch", job], check=True)
        signalled.append(job)

    proc, name = sbatch(tmp_path, 4, *PENDULUM, during=preempt, timeout=480, STEPS=str(steps),
                        LEARNERS="1", RANKS_PER_ENV="1", RUN_DIR="run", SRUN_ARGS="")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (run_dir / "state.txt").read_text().strip() == "finished"
    job = signalled[0]
    first = (run_dir / f"slurm-{name}-{job}.out").read_text()
    second = (run_dir / f"slurm-{name}-{job}.1.out").read_text()  # the requeued job's log
    assert "SIGUSR1 received" in first and "state.txt: preempted" in first, first
    assert f"requeued job {job}" in first
    assert "(restart count 1)" in second and f"--restart {run_dir} --steps {steps}" in second
    assert "state.txt: finished" in second, second
    text = (run_dir / "log.txt").read_text()
    assert "stopped at step" in text and "resumed from" in text
    stopped = int(text.split("stopped at step ")[1].split()[0])
    assert 0 < stopped < steps
    records = [json.loads(x) for x in (run_dir / "train.jsonl").read_text().splitlines()]
    env_steps = [r["env_step"] for r in records]
    assert env_steps == sorted(env_steps) and env_steps[-1] >= steps
    episodes = read_episodes(run_dir)
    ends = [int(e["env_step"]) for e in episodes]
    assert ends == sorted(ends)
    assert {int(e["length"]) for e in episodes} == {50}  # whole episodes (cut at 50), none twice
    assert len(episodes) >= steps // 200 - 2 * 3  # at most one open episode per actor and run
    assert {int(e["rank"]) for e in episodes} <= {1, 2, 3}


def heat1d_for(language: str, where: Path) -> tuple[Path, dict[str, str], str]:
    """The example solver in ``language`` built in ``where``, the job's extra environment and
    the MPI library the job must name: C with the wheel's mpicc (Open MPI 5); Fortran with
    the system Open MPI's mpifort (the wheel has no Fortran bindings), hpc_refer then on that
    MPI through MPI4PY_LIBMPI (Debian's Open MPI 4)."""
    if language == "fortran":
        mpi = fortran_openmpi()
        return build_heat1d_fortran(where), {
            "MPI4PY_LIBMPI": str(mpi.libmpi),
            "PATH": f"{Path(sys.executable).parent}:{mpi.bin}:{os.environ['PATH']}"}, "v4"
    heat1d, policy_c = where / "heat1d", ROOT / "hpc_refer" / "export" / "c"
    subprocess.run([str(Path(sys.executable).parent / "mpicc"), "-O2",
                    f"-I{ROOT / 'solvers' / 'coupling'}", f"-I{policy_c}",
                    str(ROOT / "solvers" / "examples" / "heat1d" / "heat1d.c"),
                    str(policy_c / "hpc_refer_policy.c"), "-o", str(heat1d), "-lm"],
                   check=True, timeout=120)
    return heat1d, {}, "v5"


@pytest.mark.parametrize("language", ["c", pytest.param("fortran", marks=needs_fortran)])
def test_sbatch_runs_an_external_solver_mpmd_under_srun(slurm, tmp_path, language):
    """SOLVER under CI's Slurm (issue 38, point 4): one srun step of two programs through the
    script's --multi-prog file, hpc_refer (1 learner, 1 actor) and heat1d on 2 ranks (their
    halo exchange inside the step), in C and in Fortran (whose client module reads
    HPC_REFER_APP from its line: srun gives every line MPI_APPNUM 0): it trains and
    finishes, episodes of heat1d's 50 steps, on the MPI library of the solver's language."""
    heat1d, extra, version = heat1d_for(language, tmp_path)
    proc, name = sbatch(tmp_path, 4, *SMALL, ENV=None, STEPS="400", SOLVER=str(heat1d),
                        SOLVER_RANKS="2", RUN_DIR="run", SRUN_ARGS="", **extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = tmp_path / "run"
    log = next(p for p in run_dir.iterdir() if p.name.startswith(f"slurm-{name}-")).read_text()
    assert "--multi-prog" in log and "env HPC_REFER_APP=1" in log, log
    assert (run_dir / "state.txt").read_text().strip() == "finished", log
    episodes = read_episodes(run_dir)
    assert episodes and {(e["rank"], e["length"]) for e in episodes} == {("1", "50")}
    assert tomllib.loads((run_dir / "config.toml").read_text())["run"]["env"] == "external"
    machine = json.loads((run_dir / "machine.json").read_text())[-1]
    assert machine["mpi_library"].startswith(f"Open MPI {version}"), machine


def test_sbatch_rejects_a_world_that_does_not_fit(slurm, tmp_path):
    proc, name = sbatch(tmp_path, 4, LEARNERS="2", RANKS_PER_ENV="3", RUN_DIR="run")
    assert proc.returncode != 0
    logs = list(tmp_path.glob(f"slurm-{name}-*.out"))
    assert len(logs) == 1
    log = logs[0].read_text()
    assert "ntasks=4 does not fit LEARNERS=2, RANKS_PER_ENV=3" in log
    assert "one of 5, 8, 11" in log
    assert not (tmp_path / "run").exists()
