"""External solvers over MPI: the example solver in C (built with the wheel's mpicc) and in
Fortran (built with the system Open MPI's mpifort, hpc_refer then runs on that MPI through
MPI4PY_LIBMPI), trained against in an MPMD mpirun, through MPI_Comm_spawn (with injected
solver faults) and as a separate job that connects to a port (MPI_Comm_connect under the
system Open MPI 4 and its ompi-server; also the Python example of hpc_refer.client);
protocol 2's PARAMS and step metrics (scripted messages, and the C and Fortran clients
driven directly); validation of the ``--env external`` ids; timeouts of a spawned solver in
Python (``tests/stuck_solver.py``) that never says HELLO or stops answering."""

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

import numpy as np
import pytest
from output_lines import last_json, lines_with, one_line_with
from system_mpi import (
    FORTRAN,
    SYSTEM_MPI,
    SystemOpenMPI,
    build_heat1d_fortran,
    fortran_openmpi,
    needs_fortran,
    needs_system_mpi,
)

from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.client import (
    TAG_BOUNDS,
    TAG_HELLO,
    TAG_METRICS,
    TAG_STATE,
    app_number,
    parse_params,
)
from hpc_refer.config.modes import ConfigError
from hpc_refer.config.resolve import build_config
from hpc_refer.envs.driver import TeamDriver
from hpc_refer.envs.external import (
    ExternalEnv,
    ExternalSolverError,
    SolverFailure,
    SolverFault,
    SolverStartError,
)
from hpc_refer.envs.launch import (
    CONNECT,
    SPAWN,
    check_apps,
    check_port_dir,
    check_spawn_launcher,
    parse_spec,
)
from hpc_refer.envs.registry import SolverSpec, env_kind, make_driver
from hpc_refer.report.metrics import RunDirectory
from hpc_refer.report.records import LoggedEpisode
from hpc_refer.report.schema import EPISODE_FIELDS

COLUMNS = ",".join(EPISODE_FIELDS)
"""The fixed columns of episodes.csv (the solver's episode metrics follow them)."""

ROOT = Path(__file__).resolve().parents[1]
POLICY_C = ROOT / "hpc_refer" / "export" / "c"
"""The C routine and Fortran module of exported policies (heat1d's --controller mode)."""
BIN = Path(sys.executable).parent
MPICC = shutil.which("mpicc", path=str(BIN)) or shutil.which("mpicc")
MPIRUN = shutil.which("mpirun", path=str(BIN)) or shutil.which("mpirun")
ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
       "PRTE_ALLOW_RUN_AS_ROOT": "1", "PRTE_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
       "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe", "OMPI_MCA_btl": "^ofi"}
SMALL = ["--chunk-len", "20", "--log-every", "100", f"--{VRacer.name}.hidden", "16,16",
         f"--{VRacer.name}.batch", "16", "--replay.learn-start", "100", "--replay.size", "4096"]

needs_mpicc = pytest.mark.skipif(MPICC is None or MPIRUN is None, reason="no mpicc/mpirun")


def _build_heat1d(mpicc: str, out: Path) -> Path:
    """Compile the example solver with ``mpicc`` (warnings are errors)."""
    subprocess.run([mpicc, "-O2", "-Wall", "-Wextra", "-Werror",
                    f"-I{ROOT / 'solvers/coupling'}", f"-I{POLICY_C}",
                    str(ROOT / "solvers/examples/heat1d/heat1d.c"),
                    str(POLICY_C / "hpc_refer_policy.c"), "-o", str(out), "-lm"],
                   check=True, timeout=120)
    return out


@pytest.fixture(scope="module")
def heat1d(tmp_path_factory) -> Path:
    """The example solver, compiled with the wheel's mpicc."""
    assert MPICC is not None
    return _build_heat1d(MPICC, tmp_path_factory.mktemp("bin") / "heat1d")


@pytest.fixture(scope="module")
def fortran_mpi() -> SystemOpenMPI:
    """The Open MPI of the Fortran wrapper found on PATH."""
    return fortran_openmpi()


@pytest.fixture(scope="module")
def heat1d_fortran(tmp_path_factory) -> Path:
    """The Fortran port of the example solver (:func:`build_heat1d_fortran`)."""
    return build_heat1d_fortran(tmp_path_factory.mktemp("bin-fortran"))


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


def _check_run(proc: subprocess.CompletedProcess, run_dir: Path, steps: int,
               length: int = 50) -> list[dict]:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert {"checkpoints", "config.toml", "episodes.csv", "log.txt", "machine.json",
            "policy.h5", "state.txt", "train.jsonl"} <= {p.name for p in run_dir.iterdir()}
    assert (run_dir / "state.txt").read_text() == "finished\n"
    records = _records(run_dir)
    assert records[-1]["env_step"] >= steps and records[-1]["grad_step"] > 0
    episodes = (run_dir / "episodes.csv").read_text().splitlines()[1:]
    assert episodes and all(line.split(",")[3] == str(length) for line in episodes)
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
    _check_injected_faults(proc.stderr, records, "heat1d")


@needs_mpicc
def test_a_wrong_step_index_is_a_fault_and_the_episode_restarts(heat1d, tmp_path):
    """heat1d --fault-kind step answers the 3rd ACTION of every 2nd episode with step index
    4: each is a solver fault naming the field 'step', the episode restarts (RESET, step 0
    again: every other episode runs its 50 steps without fault) and training goes on. With
    --chunk-len 2 steps 1-2 reached the learner before the fault, so each fault sends a
    closing chunk of the last valid state alone (no action) through the MPI channel."""
    run_dir = tmp_path / "run"
    spec = f"external:-n 2 {heat1d} --fault-every 2 --fault-kind step"
    proc = _mpirun(["-n", "2", sys.executable, "-m", "hpc_refer.run", "--env", spec,
                    "--steps", "300", *SMALL, "--chunk-len", "2", "--run-dir", str(run_dir)],
                   tmp_path)
    records = _check_run(proc, run_dir, 300)
    faults = lines_with(proc.stderr, "solver fault")
    assert len(faults) == records[-1]["solver_faults"] >= 3
    assert all("(spawned rank 0 of heat1d): field 'step' = 4.0, expected 3" in line
               for line in faults), faults
    episodes = (run_dir / "episodes.csv").read_text().splitlines()[1:]
    assert len(episodes) >= len(faults) - 1


def _check_injected_faults(output: str, records: list[dict], program: str) -> None:
    """The faults of ``--fault-every 2`` (300 steps, one actor on rank 1): counted, and each
    logged with the actor's rank, the environment and the field. Faulty episodes are never
    reported: every recorded episode ran its 50 steps (checked by :func:`_check_run`)."""
    faults = lines_with(output, "[1] warning: actor rank 1: solver fault")
    assert len(faults) == len(lines_with(output, "solver fault"))  # and none of another form
    assert len(faults) == records[-1]["solver_faults"] >= 3
    bad = [line for line in faults
           if f"external env 0 (spawned rank 0 of {program}): field '" not in line]
    assert not bad, bad
    for field in ("'reward' = nan", "'size' = 37 values", "'status' = 7.0"):
        assert any(field in line for line in faults), field


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
    """Run several jobs (command, environment) at the same time; each one's exit status,
    stdout and stderr (via files: no pipe can fill up). Jobs still running at the timeout
    are killed with their process group and fail the test."""
    procs = []
    for i, (command, env) in enumerate(jobs):
        with open(cwd / f"job{i}.out", "w") as out, open(cwd / f"job{i}.err", "w") as err:
            procs.append(subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=err,
                                          start_new_session=True))
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
                                        (cwd / f"job{i}.out").read_text(),
                                        (cwd / f"job{i}.err").read_text())
            for i, p in enumerate(procs)]


def _train_connected(mpi: SystemOpenMPI, solver: list[str], tmp_path: Path,
                     length: int = 50) -> list[dict]:
    """Two mpiruns under one ompi-server: hpc_refer (learner, actor) with --env
    "external:--connect ports" and a 2-rank ``solver`` command started with
    HPC_REFER_PORT=ports/env-0.port, 300 steps. Checks that both exit 0, that the episodes
    have ``length`` steps, that the port file is removed once the solver is connected and
    that the name server is stopped; returns the training records."""
    mpirun = str(mpi.bin / "mpirun")
    with _ompi_server(mpi, tmp_path) as server:
        common = [mpirun, "--ompi-server", f"file:{server.uri}", "-n", "2"]
        trainer, job = _jobs([
            ([*common, sys.executable, "-m", "hpc_refer.run", "--env",
              "external:--connect ports", "--steps", "300", *SMALL, "--run-dir", "run"],
             mpi.env()),
            ([*common, *solver], mpi.env(HPC_REFER_PORT="ports/env-0.port")),
        ], tmp_path, timeout=300)
    assert server.process.returncode is not None, "ompi-server still running"
    records = _check_run(trainer, tmp_path / "run", 300, length)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    assert list((tmp_path / "ports").iterdir()) == []
    return records


@needs_system_mpi
def test_a_separate_solver_job_connects_through_a_port_file(heat1d_system, tmp_path):
    """The C solver as a separate job: MPI_Comm_connect over its COMM_WORLD (2 ranks)."""
    assert SYSTEM_MPI is not None
    records = _train_connected(SYSTEM_MPI, [str(heat1d_system)], tmp_path)
    assert records[-1]["solver_faults"] == 0


@needs_system_mpi
def test_a_python_solver_connects_as_a_separate_job(tmp_path):
    """The Python example (hpc_refer.client) as a separate 2-rank job, its halo exchange on
    its own COMM_WORLD (--world)."""
    assert SYSTEM_MPI is not None
    solver = ROOT / "solvers/examples/halo_python/solver.py"
    records = _train_connected(SYSTEM_MPI, [sys.executable, str(solver), "--world"],
                               tmp_path, length=40)
    assert records[-1]["solver_faults"] == 0
    summary = json.loads((tmp_path / "run/halo-env0.json").read_text())
    assert summary["ranks"] == summary["world_ranks"] == 2
    assert summary["halo_exchanges"] == 2 * summary["steps"] >= 600


def _run_on(mpi: SystemOpenMPI, args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """One mpirun job of ``mpi`` (hpc_refer on mpi4py with that MPI's libmpi)."""
    return _jobs([([str(mpi.bin / "mpirun"), *args], mpi.env())], tmp_path, timeout=240)[0]


@needs_fortran
def test_fortran_solver_beside_hpc_refer_in_one_mpirun(fortran_mpi, heat1d_fortran, tmp_path):
    """MPMD: mpirun -n 2 hpc_refer (learner, actor) : -n 2 heat1d_f (halo exchange between
    its 2 ranks), under the Open MPI of the Fortran wrapper."""
    proc = _run_on(fortran_mpi, ["-n", "2", sys.executable, "-m", "hpc_refer.run", "--env",
                                 "external", "--steps", "300", *SMALL, "--run-dir", "run",
                                 ":", "-n", "2", str(heat1d_fortran)], tmp_path)
    records = _check_run(proc, tmp_path / "run", 300)
    assert records[-1]["solver_faults"] == 0


@needs_fortran
def test_fortran_solver_spawned_with_injected_faults(fortran_mpi, heat1d_fortran, tmp_path):
    """Spawn: the actor starts 2 heat1d_f ranks that send an invalid STATE every 2nd
    episode; the faults are counted and training goes on."""
    spec = f"external:-n 2 {heat1d_fortran} --fault-every 2"
    proc = _run_on(fortran_mpi, ["-n", "2", sys.executable, "-m", "hpc_refer.run", "--env",
                                 spec, "--steps", "300", *SMALL, "--run-dir", "run"], tmp_path)
    records = _check_run(proc, tmp_path / "run", 300)
    _check_injected_faults(proc.stderr, records, "heat1d_f")


@needs_fortran
def test_fortran_solver_connects_as_a_separate_job(fortran_mpi, heat1d_fortran, tmp_path):
    """Connect: heat1d_f as its own mpirun, joined through the port file."""
    if fortran_mpi.server is None:
        pytest.skip(f"no ompi-server beside {FORTRAN} (Debian: openmpi-bin)")
    records = _train_connected(fortran_mpi, [str(heat1d_fortran)], tmp_path)
    assert records[-1]["solver_faults"] == 0


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
        parse_spec(env_id)
    assert needle in str(exc.value) and "external:[-n K] PROGRAM" in str(exc.value)


def test_external_needs_one_rank_per_env():
    with pytest.raises(ConfigError, match="ranks_per_env = 2 is invalid, allowed is 1"):
        env_kind("external:true").dims(SolverSpec("external:true", ranks_per_env=2))


def test_spawn_spec_resolves_the_program():
    launch = parse_spec("external:-n 3 true --flag 'a b'")
    assert launch.how == SPAWN and launch.ranks == 3 and launch.args == ("--flag", "a b")
    assert Path(launch.program).name == "true" and Path(launch.program).is_absolute()
    # A program may take a --connect option of its own.
    assert parse_spec("external:true --connect x").args == ("--connect", "x")


def test_mpmd_needs_hpc_refer_and_one_solver_app():
    """The app count comes from the caller (run.py counts the apps of the mpirun, the links
    of an ExternalEnv count them): ``external`` needs exactly two, the other forms any."""
    message = ("run.env = 'external' but this mpirun has {} app(s), not hpc_refer and one "
               "solver; allowed are 'external'")
    for apps in (1, 3):
        with pytest.raises(ConfigError, match=message.format(apps).replace("(", r"\(")
                           .replace(")", r"\)")):
            check_apps("external", apps)
    check_apps("external", 2)
    check_apps("external:true", 1)
    assert parse_spec("external").how == "mpmd"  # the form alone is valid
    with pytest.raises(ConfigError, match=r"this mpirun has 1 app\(s\)"):
        env_kind("external").check(SolverSpec("external"), 1)
    with pytest.raises(ConfigError, match=r"this mpirun has 1 app\(s\)"):
        ExternalEnv("external", 0, 1, links=ScriptedLinks(ScriptedLink([]), apps=1))


def test_an_external_driver_needs_the_links():
    with pytest.raises(TypeError, match=r"needs the links to external solvers \(hpc_refer"
                                        r"\.parallel\.solver_link\.MpiLinks\)"):
        make_driver(SolverSpec("external:true"), None)


def test_connect_spec_and_its_port_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    launch = parse_spec("external:--connect ports")
    assert launch == (CONNECT, "", (), 1, str(tmp_path / "ports"))
    check_port_dir("external:--connect ports")  # absent: the actors create it
    (tmp_path / "ports").mkdir()
    (tmp_path / "ports/env-1.port").write_text("left by a crashed run\n")
    with pytest.raises(ConfigError, match=r"holds port files of another run \(env-1.port\)"):
        check_port_dir("external:--connect ports")
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="file is not a directory"):
        check_port_dir("external:--connect file")


STUCK_DRIVER = """
import sys, time
import numpy as np
from mpi4py import MPI
from hpc_refer.envs.driver import TeamDriver
from hpc_refer.envs.interface import SolverFailure, SolverStartError
from hpc_refer.envs.external import ExternalEnv
from hpc_refer.parallel.solver_link import MpiLinks

mode, spec = sys.argv[1], sys.argv[2]
start = time.monotonic()
try:
    env = TeamDriver(ExternalEnv(spec, 0, 1, timeout=2.0, links=MpiLinks()), None, timeout=2.0)
    print("started", env.reset(1).tolist(), env.step(np.zeros(1))[0].tolist(), flush=True)
    env.step(np.zeros(1))
    start = time.monotonic()
    env.step(np.zeros(1))
except (SolverStartError, SolverFailure) as err:
    print(f"{type(err).__name__} after {time.monotonic() - start:.1f} s: {err}", flush=True)
    if mode == "stall":
        try:
            env.reset(None)
        except SolverFailure as again:
            print(f"again: {again}", flush=True)
        env.close()  # no MPI_Comm_disconnect with a stuck group
        print("closed", flush=True)
MPI.COMM_WORLD.Abort(3)  # as hpc_refer.run does after a failure: a stuck group stays
"""


def _run_stuck(mode: str, tmp_path: Path) -> str:
    """Drive tests/stuck_solver.py (spawned, in Python) with a 2 s timeout; its output. The
    solver, left sleeping, is killed."""
    driver = tmp_path / "driver.py"
    driver.write_text(STUCK_DRIVER)
    pidfile = tmp_path / "solver.pid"
    spec = f"external:-n 1 {sys.executable} {ROOT / 'tests/stuck_solver.py'} {pidfile} {mode}"
    env = {**os.environ, **ENV, "PATH": f"{BIN}:{os.environ['PATH']}"}
    try:
        proc = subprocess.run([sys.executable, str(driver), mode.split()[0], spec],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=90)
    finally:
        if pidfile.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.skipif(MPIRUN is None, reason="no mpirun (MPI_Comm_spawn needs its runtime)")
def test_a_spawned_solver_that_never_says_hello_is_a_start_up_error(tmp_path):
    """The program starts (MPI initialised) but never sends HELLO: a start-up error naming
    the environment, the launch mode and the timeout, not a hang (the actor's ASSIGN is not
    a blocking send: the spawned process never takes part in setting up the connection)."""
    out = _run_stuck("silent", tmp_path)
    assert "SolverStartError after" in out, out
    assert ("external env 0 (spawned rank 0 of python), launched by spawn: no HELLO within "
            "run.env_step_timeout = 2 s") in out.replace(Path(sys.executable).name, "python")


@pytest.mark.skipif(MPIRUN is None, reason="no mpirun (MPI_Comm_spawn needs its runtime)")
def test_an_external_solver_that_stops_answering_fails_within_the_timeout(tmp_path):
    """It answers RESET and two ACTIONs, then never the third: SolverFailure after the
    2 s timeout, every later call fails at once, and close() returns."""
    out = _run_stuck("stall 2", tmp_path)
    # the driver's four lines, found by their starts (the spawned solver's output may come too)
    assert one_line_with(out, "started ") == "started [0.5, 0.5] [0.5, 0.5]", out
    failure = one_line_with(out, "SolverFailure after ")
    seconds = float(failure.split(" after ")[1].split(" s:")[0])
    assert 2 <= seconds < 4, out
    assert failure.endswith("no answer to ACTION within run.env_step_timeout = 2 s; the "
                            "solver is no longer driven"), out
    assert "stopped answering earlier" in one_line_with(out, "again: "), out
    assert "closed" in out.splitlines(), out
    assert (out.index("started ") < out.index("SolverFailure after ") < out.index("again: ")
            < out.rindex("closed")), out


class ScriptedLink:
    """A :class:`~hpc_refer.envs.external.Link` that answers with scripted (tag, values)
    messages and records what the actor sends."""

    peer = 0

    def __init__(self, messages: list[tuple[int, np.ndarray]]) -> None:
        self.messages = messages
        self.sent: list[tuple[str, object]] = []

    def recv(self, deadline: float | None = None) -> tuple[int, np.ndarray]:
        return self.messages.pop(0)

    def send_params(self, text: bytes) -> None:
        self.sent.append(("params", text))

    def send_reset(self, seed: int) -> None:
        self.sent.append(("reset", seed))

    def send_action(self, action: np.ndarray) -> None:
        self.sent.append(("action", action))

    def close(self, disconnect: bool = True) -> None:
        self.sent.append(("close", disconnect))


def _handshake(version: int = 2, metrics: bytes = b"cd\ncl") -> list[tuple[int, np.ndarray]]:
    """HELLO (obs_dim 2, act_dim 1), BOUNDS and METRICS of a scripted solver."""
    return [(TAG_HELLO, np.array([version, 2, 1, 1], np.int32)),
            (TAG_BOUNDS, np.array([-1.0, 1.0])),
            (TAG_METRICS, np.frombuffer(metrics, np.uint8))]


class ScriptedLinks:
    """The :class:`~hpc_refer.envs.external.Links` of one scripted spawned group (no MPI),
    in a job of ``apps`` apps."""

    def __init__(self, link: ScriptedLink, apps: int = 1) -> None:
        self.link, self.apps = link, apps
        self.spawned: list[tuple[object, ...]] = []

    def app_count(self) -> int:
        return self.apps

    def spawn(self, *args: object) -> ScriptedLink:
        self.spawned.append(args)
        return self.link

    def mpmd(self, index: int, envs: int) -> ScriptedLink:
        raise AssertionError("not under MPMD")

    def accept(self, port_file: str, index: int, envs: int) -> ScriptedLink:
        raise AssertionError("not connected")


def _scripted(messages: list[tuple[int, np.ndarray]],
              **kwargs: object) -> tuple[ExternalEnv, ScriptedLink]:
    link = ScriptedLink(messages)
    links = ScriptedLinks(link)
    env = ExternalEnv("external:true", 3, 4, links=links, **kwargs)  # type: ignore[arg-type]
    assert [args[2:] for args in links.spawned] == [(1, 3, 4)]  # ranks, index, envs
    return env, link


def test_params_metrics_and_step_values_of_protocol_2():
    """The actor sends PARAMS (the solver parameters, env_index, run_dir, seed) after
    HELLO, BOUNDS and METRICS; each STATE carries the step values after the state."""
    state = (TAG_STATE, np.array([0.0, 0.0, 0.0, 0.5, 0.25, 1.5, -2.0]))
    env, link = _scripted([*_handshake(), state],
                          params={"re": 100.0, "les": True, "mesh": "m.h5"}, run_dir="/r",
                          seed=11)
    assert env.step_metric_names == ("cd", "cl")
    assert env.step_values.dtype == np.float64 and env.step_values.tolist() == [0.0, 0.0]
    assert link.sent[0][0] == "params"
    assert parse_params(link.sent[0][1]) == {  # type: ignore[arg-type]
        "re": "100.0", "les": "true", "mesh": "m.h5", "env_index": "3", "run_dir": "/r",
        "seed": "11"}
    assert env.reset(1).tolist() == [0.5, 0.25]
    assert env.step_values.tolist() == [1.5, -2.0]
    env, link = _scripted(_handshake(metrics=b""))
    assert env.step_metric_names == () and env.step_values.shape == (0,)
    assert parse_params(link.sent[0][1]) == {  # type: ignore[arg-type]
        "env_index": "3", "run_dir": "", "seed": "0"}


class SilentAfterHandshake(ScriptedLink):
    """The handshake, then no answer: ``recv`` times out (a solver waiting in a collective on
    MPI_COMM_WORLD)."""

    def recv(self, deadline: float | None = None) -> tuple[int, np.ndarray]:
        if not self.messages:
            raise TimeoutError
        return super().recv(deadline)


class MpmdLinks(ScriptedLinks):
    def mpmd(self, index: int, envs: int) -> ScriptedLink:
        return self.link


def test_no_first_answer_under_mpmd_names_comm_world():
    """Under MPMD a first RESET without answer is a start-up error (one line) naming the
    usual cause, MPI_COMM_WORLD holding hpc_refer's ranks; after a first answer, or under
    spawn, it stays a failure of the environment."""
    env = ExternalEnv("external", 0, 1, 2.0,
                      links=MpmdLinks(SilentAfterHandshake(_handshake()), apps=2))
    with pytest.raises(SolverStartError) as exc:
        env.reset(1)
    text = str(exc.value)
    assert "\n" not in text and "no answer to its first RESET within run.env_step_timeout" in text
    assert "MPI_COMM_WORLD also holds hpc_refer's ranks" in text and "Client.comm" in text
    state = (TAG_STATE, np.array([0.0, 0.0, 0.0, 0.5, 0.25, 1.5, -2.0]))
    env = ExternalEnv("external", 0, 1, 2.0,
                      links=MpmdLinks(SilentAfterHandshake([*_handshake(), state]), apps=2))
    env.reset(1)
    with pytest.raises(SolverFailure) as failure:
        env.step(np.zeros(1))
    assert not isinstance(failure.value, SolverStartError)
    env, _ = _scripted(_handshake())
    env.link = SilentAfterHandshake([])
    with pytest.raises(SolverFailure) as failure:
        env.reset(1)
    assert "COMM_WORLD" not in str(failure.value)


@pytest.mark.parametrize(
    ("values", "field"),
    [([0.0, 1.0, 0.0, 0.5, 0.25, np.nan, 1.0], "field 'step value cd' = nan is not finite"),
     ([0.0, 1.0, 0.0, 0.5, 0.25, 1.0], "field 'size' = 6 values, expected 3 + obs_dim + "
                                       "step metrics = 7")],
)
def test_bad_step_values_are_solver_faults(values, field):
    reset = (TAG_STATE, np.array([0.0, 0.0, 0.0, 0.5, 0.25, 1.5, -2.0]))
    env, _ = _scripted([*_handshake(), reset, (TAG_STATE, np.array(values))])
    env.reset(1)
    with pytest.raises(SolverFault) as exc:
        env.step(np.zeros(1))
    assert str(exc.value) == f"external env 3 (spawned rank 0 of true): {field}"
    assert env.step_values.tolist() == [1.5, -2.0]  # the last valid STATE's


def test_bad_metric_names_and_old_clients_stop_the_start():
    """A start-up error (one line, a SolverStartError) names the field; a client of protocol
    1 gets the version error; a solver parameter may not take a reserved name."""
    with pytest.raises(ExternalSolverError) as exc:
        _scripted(_handshake(metrics=b"cd\nc d"))
    assert isinstance(exc.value, SolverStartError) and "\n" not in str(exc.value)
    assert str(exc.value) == ("external env 3 (spawned rank 0 of true): field 'METRICS' holds "
                              "'c d' among the step metrics, not an identifier "
                              "([A-Za-z_][A-Za-z0-9_]*); allowed are distinct identifiers, "
                              "one per line (the step metrics, then an empty line and the "
                              "episode metrics)")
    with pytest.raises(ExternalSolverError, match="HELLO declares protocol 1, obs_dim 2, "
                                                  "act_dim 1; allowed: protocol 2"):
        _scripted(_handshake(version=1))
    with pytest.raises(ConfigError, match=r"solver parameter\(s\) seed of run.env = "
                                          r"'external:true' are set by hpc_refer itself"):
        _scripted(_handshake(), params={"seed": 1})


def _episode_env() -> tuple[ExternalEnv, ScriptedLink]:
    """A scripted solver with step metrics cd, cl and the episode metric cd_mean, reset."""
    reset = (TAG_STATE, np.array([0.0, 0.0, 0.0, 0.5, 0.25, 1.5, -2.0]))
    env, link = _scripted([*_handshake(metrics=b"cd\ncl\n\ncd_mean"), reset])
    env.reset(1)
    return env, link


def test_episode_metrics_come_with_the_state_that_ends_the_episode():
    """METRICS: step names, an empty line, episode names; a CONTINUE STATE has 3 + d + m
    values, the STATE that ends the episode 3 + d + m + e, its last e the episode values,
    which the team driver records at the episode's end as a Python solver's."""
    env, link = _episode_env()
    assert env.step_metric_names == ("cd", "cl") and env.episode_metrics == ("cd_mean",)
    driver = TeamDriver(env, None)
    assert driver.metric_names == ("cd_mean",)
    link.messages += [(TAG_STATE, np.array([0.0, 1.0, -1.0, 0.5, 0.25, 1.0, 2.0])),
                      (TAG_STATE, np.array([2.0, 2.0, -1.0, 0.5, 0.25, 3.0, 4.0, 2.5]))]
    assert driver.step(np.zeros(1))[2] == 0
    state, reward, status = driver.step(np.zeros(1))
    assert status == 2 and state.tolist() == [0.5, 0.25] and reward == -1.0
    assert env.step_values.tolist() == [3.0, 4.0]
    assert env.episode_values() == (2.5,)
    assert driver.end_episode() == (2.5,)
    env, _ = _scripted(_handshake())  # an old client: no episode metrics
    assert env.episode_metrics == () and env.episode_values() == ()
    assert TeamDriver(env, None).metric_names == ()


@pytest.mark.parametrize(
    ("values", "field"),
    [([2.0, 1.0, 0.0, 0.5, 0.25, 1.0, 2.0], "field 'size' = 7 values with status 2 (the "
      "episode ends), expected 3 + obs_dim + step metrics + episode metrics = 8"),
     ([1.0, 1.0, 0.0, 0.5, 0.25, 1.0, 2.0, 3.0, 4.0], "field 'size' = 9 values with status 1 "
      "(the episode ends), expected 3 + obs_dim + step metrics + episode metrics = 8"),
     ([0.0, 1.0, 0.0, 0.5, 0.25, 1.0, 2.0, 3.0], "field 'size' = 8 values, expected 3 + "
      "obs_dim + step metrics = 7"),
     ([1.0, 1.0, 0.0, 0.5, 0.25, 1.0, 2.0, np.inf], "field 'episode value cd_mean' = inf is "
      "not finite")],
)
def test_bad_episode_values_are_solver_faults(values, field):
    env, link = _episode_env()
    link.messages.append((TAG_STATE, np.array(values)))
    with pytest.raises(SolverFault) as exc:
        env.step(np.zeros(1))
    assert str(exc.value) == f"external env 3 (spawned rank 0 of true): {field}"
    assert np.isnan(env.episode_values()[0])  # no episode ended


def test_episode_metric_names_are_checked_at_start_up():
    with pytest.raises(ExternalSolverError) as exc:
        _scripted(_handshake(metrics=b"cd\n\nreturn\nlength"))
    assert str(exc.value) == ("external env 3 (spawned rank 0 of true): field 'METRICS' names "
                              "the episode metric(s) length, return, taken by episodes.csv's "
                              f"columns {', '.join(EPISODE_FIELDS)}: rename them")
    with pytest.raises(ExternalSolverError, match="field 'METRICS' ends with an empty line"):
        _scripted(_handshake(metrics=b"cd\n"))


def _episode(step: int, value: float) -> LoggedEpisode:
    return LoggedEpisode(step, 1, -1.0, 40, (value,), 1.0)


def test_the_run_directory_takes_episode_metrics_declared_at_start(tmp_path):
    """An external solver's episode metric names come after the run directory was created:
    the header of the still-empty episodes.csv (and eval.csv) is rewritten; a restart
    continues with the same names and refuses others, naming both headers."""
    config = build_config({"run": {"env": "external", "eval_every": 100}})
    run = RunDirectory(tmp_path / "r", config)
    run.declare_episode_metrics(("energy_mean",))
    run.episode(_episode(40, 0.25))
    run.evaluation(_episode(40, 0.5))
    offsets = run.offsets()
    run.close()
    for name in ("episodes.csv", "eval.csv"):
        lines = (tmp_path / "r" / name).read_text().splitlines()
        assert lines[0] == f"{COLUMNS},energy_mean"
        assert len(lines) == 2
    assert (tmp_path / "r/episodes.csv").read_text().splitlines()[1].endswith(",0.25")
    run = RunDirectory(tmp_path / "r", config, resume=(offsets, 40))
    run.declare_episode_metrics(("energy_mean",))
    assert run.metric == "energy_mean"
    run.episode(_episode(80, 0.125))
    with pytest.raises(ValueError, match=rf"episodes.csv has the columns "
                                         rf"{COLUMNS},energy_mean, but the solver declares "
                                         r"the episode metrics \('cd',\)"):
        run.declare_episode_metrics(("cd",))
    run.close()
    assert (tmp_path / "r/episodes.csv").read_text().splitlines()[2].endswith(",0.125")


PARAM_DRIVER = """
import json, sys
import numpy as np
from hpc_refer.envs.external import ExternalEnv
from hpc_refer.parallel.solver_link import MpiLinks

env = ExternalEnv(sys.argv[1], 0, 1, timeout=60.0, links=MpiLinks(), params={"horizon": 3})
out = {"names": env.step_metric_names, "states": [env.reset(4).tolist()],
       "values": [env.step_values.tolist()], "status": []}
for _ in range(3):
    state, _, status = env.step(np.ones(4))  # heating: the mean rises
    out["states"].append(state.tolist())
    out["values"].append(env.step_values.tolist())
    out["status"].append(int(status))
env.close()
print(json.dumps(out))
"""


def _check_param_driver(proc: subprocess.CompletedProcess) -> None:
    """The solver read the parameter horizon = 3 (its 3rd step is truncated) and sent its
    step metric mean_u, the mean of the state, with every STATE."""
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = last_json(proc.stdout)
    assert out["names"] == ["mean_u"] and out["status"] == [0, 0, 2]
    for state, values in zip(out["states"], out["values"], strict=True):
        assert values == [pytest.approx(sum(state) / len(state), abs=1e-12)]
    assert len({round(v[0], 12) for v in out["values"]}) > 1  # the mean moves


@needs_mpicc
def test_c_client_reads_params_and_sends_step_metrics(heat1d, tmp_path):
    """heat1d (C, 2 spawned ranks) driven directly through ExternalEnv."""
    driver = tmp_path / "driver.py"
    driver.write_text(PARAM_DRIVER)
    env = {**os.environ, **ENV, "PATH": f"{BIN}:{os.environ['PATH']}"}
    proc = subprocess.run([sys.executable, str(driver), f"external:-n 2 {heat1d}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    _check_param_driver(proc)


@needs_fortran
def test_fortran_client_reads_params_and_sends_step_metrics(fortran_mpi, heat1d_fortran,
                                                            tmp_path):
    """heat1d_f (Fortran, 2 spawned ranks) driven directly through ExternalEnv."""
    driver = tmp_path / "driver.py"
    driver.write_text(PARAM_DRIVER)
    proc = _jobs([([str(fortran_mpi.bin / "mpirun"), "-n", "1", sys.executable, str(driver),
                    f"external:-n 2 {heat1d_fortran}"], fortran_mpi.env())], tmp_path,
                 timeout=120)[0]
    _check_param_driver(proc)


def test_a_failed_spawn_as_root_names_the_variables_to_set():
    """MPI_Comm_spawn as root under Open MPI 5 fails with a bare MPI_ERR_UNKNOWN unless the
    PRTE_ALLOW_RUN_AS_ROOT pair is set: the start-up error says which are missing."""
    from hpc_refer.parallel.solver_link import spawn_failure

    text = spawn_failure("./heat1d", 2, "MPI_ERR_UNKNOWN: unknown error", 0,
                         {"PRTE_ALLOW_RUN_AS_ROOT": "1"})
    assert text == ("MPI_Comm_spawn of 2 rank(s) of ./heat1d failed: MPI_ERR_UNKNOWN: unknown "
                    "error; running as root, Open MPI spawns only with "
                    "PRTE_ALLOW_RUN_AS_ROOT=1 and PRTE_ALLOW_RUN_AS_ROOT_CONFIRM=1 in the "
                    "environment (not set: PRTE_ALLOW_RUN_AS_ROOT_CONFIRM)")
    both = {"PRTE_ALLOW_RUN_AS_ROOT": "1", "PRTE_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    assert "root" not in spawn_failure("./heat1d", 2, "MPI_ERR_SPAWN", 0, both)
    assert "root" not in spawn_failure("./heat1d", 2, "MPI_ERR_SPAWN", 1000, {})


def _controller_returns(out: str) -> list[float]:
    """The returns that heat1d --controller prints, episode by episode."""
    return [float(line.split("return ")[1]) for line in out.splitlines()
            if line.startswith("controller episode ")]


def _check_controller(train, evaluate, controller, tmp_path: Path) -> None:
    """Train 300 steps (``train``), evaluate 3 episodes from seed 7 with the zero-action
    baseline beside them (``evaluate``), export the policy with the C/Fortran route alone
    and run the solver's --controller mode on 2 ranks (``controller``, each a function of
    its arguments that returns the finished process): the solver's returns are evaluate's,
    to the float32 round-off of the policy, and differ from the baseline's."""
    _check_run(train(["--steps", "300", *SMALL, "--run-dir", "run"]), tmp_path / "run", 300)
    done = evaluate(["run", "--episodes", "3", "--seed", "7", "--baseline", "zero"])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    stats = json.loads((tmp_path / "run" / "evaluation.json").read_text())
    exported = subprocess.run([sys.executable, "-m", "hpc_refer.export", "run", "--out", "x",
                               "--no-onnx"], cwd=tmp_path, capture_output=True, text=True)
    assert exported.returncode == 0, exported.stderr
    done = controller(["--controller", "x", "--episodes", "3", "--seed", "7"])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    returns = _controller_returns(done.stdout)
    np.testing.assert_allclose(returns, stats["episode_returns"], rtol=1e-5)
    assert not np.allclose(returns, stats["baseline"]["episode_returns"], rtol=1e-3)


@needs_mpicc
def test_the_exported_policy_runs_inside_the_c_solver(heat1d, tmp_path):
    """heat1d --controller (C): the exported policy inside the solver, no hpc_refer."""
    python = [sys.executable, "-m"]
    _check_controller(
        lambda a: _mpirun(["-n", "2", *python, "hpc_refer.run", "--env",
                           f"external:-n 1 {heat1d}", *a], tmp_path),
        lambda a: _mpirun(["-n", "1", *python, "hpc_refer.evaluate", *a], tmp_path),
        lambda a: _mpirun(["-n", "2", str(heat1d), *a], tmp_path), tmp_path)


@needs_fortran
def test_the_exported_policy_runs_inside_the_fortran_solver(fortran_mpi, heat1d_fortran,
                                                           tmp_path):
    """heat1d_f --controller (Fortran, the module over the C routine), under the Open MPI of
    the Fortran wrapper."""
    python = [sys.executable, "-m"]
    _check_controller(
        lambda a: _run_on(fortran_mpi, ["-n", "2", *python, "hpc_refer.run", "--env",
                                        f"external:-n 1 {heat1d_fortran}", *a], tmp_path),
        lambda a: _run_on(fortran_mpi, ["-n", "1", *python, "hpc_refer.evaluate", *a],
                          tmp_path),
        lambda a: _run_on(fortran_mpi, ["-n", "2", str(heat1d_fortran), *a], tmp_path),
        tmp_path)


@pytest.mark.parametrize(("environ", "refused"), [
    ({"SLURM_STEP_ID": "3"}, True),                                   # srun's own task
    ({"SLURM_STEP_ID": "3", "PRTE_LAUNCHED": "1"}, False),            # under Open MPI's mpirun
    ({"SLURM_STEP_ID": "3", "OMPI_COMM_WORLD_SIZE": "2"}, False),
    ({"SLURM_STEP_ID": "3", "PMI_PORT": "x:1"}, False),               # under MPICH's mpiexec
    ({"SLURM_STEP_ID": "4294967294"}, False),                         # the batch script
    ({}, False),                                                      # no Slurm
    ({"SLURM_STEP_ID": "3", "HPC_REFER_TRY_SPAWN": "1"}, False),      # asked to try
])
def test_a_spawned_solver_under_srun_is_refused_at_start_up(environ, refused):
    """Issue 38, point 4: under srun's direct launch MPI_Comm_spawn fails (Open MPI 5 with
    PMIx: MPI_ERR_UNKNOWN, seen here under the CI's Slurm) or crashes (MPICH, PMI-2): the
    start-up check refuses a spawned solver at once, naming the launches that work; MPMD and
    --connect ids, and spawns under mpirun, pass."""
    spec = f"external:-n 2 {sys.executable}"
    if refused:
        with pytest.raises(ConfigError) as err:
            check_spawn_launcher(spec, environ)
        text = str(err.value)
        assert text.startswith(f"run.env = {spec!r} starts its solver with MPI_Comm_spawn")
        assert "hpc_refer.run --env external ... : -n K" in text and "--connect DIR" in text
        assert "srun --multi-prog with HPC_REFER_APP=1 on the solver's line" in text
    else:
        check_spawn_launcher(spec, environ)
    check_spawn_launcher("external", environ)
    check_spawn_launcher("external:--connect /tmp/ports", environ)


def test_the_app_number_is_hpc_refer_app_when_set():
    """srun --multi-prog gives every line MPI_APPNUM 0: a line's HPC_REFER_APP says which
    program it is (hpc_refer and the clients gather it to split COMM_WORLD)."""
    assert app_number(None, {}) == 0 and app_number(2, {}) == 2
    assert app_number(0, {"HPC_REFER_APP": "1"}) == 1
    with pytest.raises(RuntimeError, match="HPC_REFER_APP = 'x' is invalid: allowed are"):
        app_number(0, {"HPC_REFER_APP": "x"})
