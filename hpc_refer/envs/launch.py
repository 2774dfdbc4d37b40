"""How an external solver is reached (``--env external...``, see
:mod:`hpc_refer.envs.external`): the env id parsed into a :class:`Launch` (MPMD, spawn or
connect), its checks at start-up (the apps of the mpirun, the port directory), and the
protocols of the links to a solver group that hpc_refer's entry points pass in
(:class:`Links`, :class:`Link`; their MPI implementation is
:class:`hpc_refer.parallel.solver_link.MpiLinks`). No MPI call here.
"""

from __future__ import annotations

import glob
import os
import shlex
import shutil
from collections.abc import Mapping
from typing import NamedTuple, Protocol

import numpy as np

from hpc_refer.config.modes import ConfigError

PREFIX = "external"
USAGE = ("allowed are 'external' (solver in the same mpirun: mpirun -n N python -m "
         "hpc_refer.run --env external ... : -n M ./solver), 'external:[-n K] PROGRAM "
         "[ARGS...]' (each actor spawns K ranks of PROGRAM) or 'external:--connect DIR' (the "
         "solver of env e is a separate job started with HPC_REFER_PORT=DIR/env-<e>.port)")
MPMD, SPAWN, CONNECT = "mpmd", "spawn", "connect"
PORT_FILE = "env-{}.port"
"""Name of the port file of environment e in a ``--connect`` directory."""


class Launch(NamedTuple):
    """How the solvers of an ``external`` env id are reached."""

    how: str
    """MPMD, SPAWN or CONNECT."""
    program: str = ""
    """SPAWN: absolute path of the program."""
    args: tuple[str, ...] = ()
    """SPAWN: its arguments."""
    ranks: int = 1
    """SPAWN: ranks per solver group."""
    ports: str = ""
    """CONNECT: the directory of the port files."""


class Link(Protocol):
    """The actor's end of the wire protocol with one solver group (over MPI:
    :class:`hpc_refer.parallel.solver_link.SolverLink`, whose docstring has the messages' table)."""

    @property
    def peer(self) -> int:
        """The rank of the group's leader on the link's communicator (MPMD: its world rank,
        known once its HELLO came)."""
        ...

    def recv(self, deadline: float | None = None) -> tuple[int, np.ndarray]:
        """The leader's next message, whatever its tag and size: (tag, values);
        TimeoutError when none came by the :func:`time.monotonic` ``deadline`` (None: no
        limit)."""
        ...

    def send_params(self, text: bytes) -> None:
        """PARAMS: the run's solver parameters as UTF-8 ``key=value`` lines."""
        ...

    def send_reset(self, seed: int) -> None:
        """RESET with ``seed`` (-1: none)."""
        ...

    def send_action(self, action: np.ndarray) -> None:
        """ACTION: one step (float64; with several agents their rows, flattened)."""
        ...

    def close(self, disconnect: bool = True) -> None:
        """STOP, then a disconnect of a spawned or connected group unless ``disconnect`` is
        False (a group that stopped answering would never join it)."""
        ...


class Links(Protocol):
    """How an actor reaches the solver group of its environment ``index`` (of ``envs``): one
    constructor per launch form. hpc_refer's entry points create the MPI one
    (:class:`hpc_refer.parallel.solver_link.MpiLinks`) and pass it in."""

    def app_count(self) -> int:
        """Number of apps in this mpirun (2 when a solver app runs beside hpc_refer)."""
        ...

    def mpmd(self, index: int, envs: int) -> Link:
        """The group of the solver app launched in the same mpirun (MPMD)."""
        ...

    def spawn(self, program: str, args: list[str], ranks: int, index: int,
              envs: int) -> Link:
        """``ranks`` processes of ``program`` started with MPI_Comm_spawn."""
        ...

    def accept(self, port_file: str, index: int, envs: int) -> Link:
        """The solver job that connects to the port this actor publishes in
        ``port_file``."""
        ...


def port_file(directory: str, index: int) -> str:
    """The file in which the actor of environment ``index`` publishes its MPI port name."""
    return os.path.join(directory, PORT_FILE.format(index))


def parse_spec(env_id: str) -> Launch:
    """Parse and validate an ``external`` env id; raises ConfigError with the allowed forms.

    Checks the syntax and the program (spawn); for the app count of the mpirun (MPMD) see
    :func:`check_apps`, for the state of a ``--connect`` directory :func:`check_port_dir`
    (``run.ranks_per_env``, 1, is its kind's,
    :class:`~hpc_refer.envs.kinds.external_solver.ExternalSolver`).
    """
    if env_id == PREFIX:
        return Launch(MPMD)
    try:
        words = shlex.split(env_id[len(PREFIX) + 1 :])
    except ValueError as err:
        raise ConfigError(f"run.env = {env_id!r}: {err}; {USAGE}") from None
    ranks = 0  # no -n
    if words[:1] == ["-n"]:
        if len(words) < 2 or not words[1].isdigit() or int(words[1]) < 1:
            raise ConfigError(f"run.env = {env_id!r}: -n needs an integer >= 1; {USAGE}")
        ranks, words = int(words[1]), words[2:]
    if words[:1] == ["--connect"]:
        if len(words) != 2 or ranks:
            raise ConfigError(f"run.env = {env_id!r}: --connect takes exactly one directory "
                              f"(no -n, no program); {USAGE}")
        return Launch(CONNECT, ports=os.path.abspath(words[1]))
    if not words:
        raise ConfigError(f"run.env = {env_id!r} names no program; {USAGE}")
    program = shutil.which(words[0]) if os.sep not in words[0] else words[0]
    if program is None or not (os.path.isfile(program) and os.access(program, os.X_OK)):
        raise ConfigError(f"run.env = {env_id!r}: program {words[0]!r} is not an executable "
                          f"file; {USAGE}")
    return Launch(SPAWN, os.path.abspath(program), tuple(words[1:]), ranks or 1)


def check_apps(env_id: str, apps: int) -> None:
    """Start-up check of the launch of ``env_id`` in an mpirun of ``apps`` apps
    (:meth:`Links.app_count`): ``external`` (MPMD) needs exactly two, hpc_refer and one
    solver; nothing to check for the other ids. Raises ConfigError with the allowed forms."""
    if env_id == PREFIX and apps != 2:
        raise ConfigError(f"run.env = 'external' but this mpirun has {apps} app(s), not "
                          f"hpc_refer and one solver; {USAGE}")


MPIRUN_MARKS = ("PRTE_LAUNCHED", "OMPI_COMM_WORLD_SIZE", "HYDI_CONTROL_FD", "PMI_PORT")
"""Variables that Open MPI's mpirun (PRRTE) or MPICH's mpiexec (Hydra) set in the processes
they start: a process with one of them was not started by srun directly, even inside a Slurm
step (mpirun starts its daemons with srun)."""


SLURM_SPECIAL_STEPS = 0xFFFFFFF0
"""Slurm's step ids from here up name the batch script, the extern and interactive steps
(SLURM_BATCH_SCRIPT = 0xFFFFFFFE, ...), not an srun step."""


def in_srun_step(environ: Mapping[str, str]) -> bool:
    """Whether this process runs inside an srun job step (``SLURM_STEP_ID`` a step's number;
    a batch script, where one process is legitimate, has none or a special one)."""
    step = environ.get("SLURM_STEP_ID", environ.get("SLURM_STEPID", ""))
    return step.isdigit() and int(step) < SLURM_SPECIAL_STEPS


def direct_srun(environ: Mapping[str, str]) -> bool:
    """Whether this process was started by ``srun`` itself (a Slurm job step's task, no mpirun
    or mpiexec between), where MPI_Comm_spawn is not available (PMIx under srun: one
    MPI_Init per step) or crashes (MPICH's PMI-2)."""
    return in_srun_step(environ) and not any(mark in environ for mark in MPIRUN_MARKS)


def check_spawn_launcher(env_id: str, environ: Mapping[str, str]) -> None:
    """Start-up check of a spawned solver (``external:[-n K] PROGRAM``): under srun's direct
    launch (:func:`direct_srun`) it cannot start, so refuse at once, in one line naming the
    launches that work there, instead of failing (or hanging) in the actors' spawn.
    ``HPC_REFER_TRY_SPAWN=1`` tries anyway (a site whose srun can spawn)."""
    if env_id == PREFIX or environ.get("HPC_REFER_TRY_SPAWN") == "1":
        return
    launch = parse_spec(env_id)
    if launch.how != SPAWN or not direct_srun(environ):
        return
    program = " ".join([os.path.basename(launch.program), *launch.args])
    raise ConfigError(
        f"run.env = {env_id!r} starts its solver with MPI_Comm_spawn, which srun's direct "
        f"launch does not offer (PMIx: one MPI_Init per step; MPICH's PMI-2 crashes). Inside "
        f"the allocation, run the solver MPMD in the same step, srun --multi-prog with "
        f"HPC_REFER_APP=1 on the solver's line (SOLVER='{program}' in "
        f"jobscripts/generic/train.sbatch writes it) or mpirun -n N python -m hpc_refer.run "
        f"--env external ... : -n K {program}; or launch with the MPI's mpirun, where spawn "
        f"works; or run the solver as a job of its own with --env 'external:--connect DIR' "
        f"(solvers/README.md). HPC_REFER_TRY_SPAWN=1 tries the spawn anyway")


def check_port_dir(env_id: str) -> None:
    """Start-up check of an ``external:--connect DIR`` id (nothing to check for the others).

    DIR must be a directory (or not exist yet: the actors create it) and hold no port file:
    a solver could read a stale one left by an earlier run and connect to a port that is
    gone. Run on every rank before any actor starts (actors write their files later).
    """
    launch = parse_spec(env_id)
    if launch.how != CONNECT:
        return
    if os.path.exists(launch.ports) and not os.path.isdir(launch.ports):
        raise ConfigError(f"run.env = {env_id!r}: {launch.ports} is not a directory; {USAGE}")
    stale = sorted(glob.glob(os.path.join(glob.escape(launch.ports), PORT_FILE.format("*"))))
    if stale:
        raise ConfigError(f"run.env = {env_id!r}: {launch.ports} holds port files of another "
                          f"run ({', '.join(os.path.basename(f) for f in stale)}): delete "
                          f"them or use an empty directory")
