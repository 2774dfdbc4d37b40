"""The actor's end of the wire protocol with an external solver group (:class:`SolverLink`),
and how the entry points hand the making of links down to the environments
(:class:`MpiLinks`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from hpc_refer.client import (  # the external-solver wire protocol (see SolverLink)
    TAG_ACTION,
    TAG_ASSIGN,
    TAG_HELLO,
    TAG_METRICS,
    TAG_RESET,
)
from hpc_refer.client import TAG_PARAMS as TAG_SOLVER_PARAMS
from hpc_refer.client import TAG_STOP as TAG_SOLVER_STOP
from hpc_refer.envs.interface import SolverStartError
from hpc_refer.envs.timeouts import poll_until
from hpc_refer.parallel.world import _appnums, _mpi, app_count

ROOT_SPAWN_VARIABLES = ("PRTE_ALLOW_RUN_AS_ROOT", "PRTE_ALLOW_RUN_AS_ROOT_CONFIRM")
"""What Open MPI 5's runtime needs in the environment to spawn processes as root (the
``OMPI_ALLOW_RUN_AS_ROOT`` pair only lets ``mpirun`` itself start)."""


def spawn_failure(program: str, ranks: int, error: str, euid: int,
                  environ: Mapping[str, str]) -> str:
    """The one-line start-up error of a failed MPI_Comm_spawn: the program, the MPI error
    and, for root without :data:`ROOT_SPAWN_VARIABLES` set, the variables to set."""
    text = f"MPI_Comm_spawn of {ranks} rank(s) of {program} failed: {error}"
    missing = [v for v in ROOT_SPAWN_VARIABLES if environ.get(v) != "1"]
    if euid == 0 and missing:
        text += (f"; running as root, Open MPI spawns only with "
                 f"{' and '.join(f'{v}=1' for v in ROOT_SPAWN_VARIABLES)} in the environment "
                 f"(not set: {', '.join(missing)})")
    return text


class SolverLink:
    """The actor's end of the wire protocol with one external solver group.

    The solver group (any number of ranks of a code using ``solvers/coupling/
    hpc_refer_client.h``, ``hpc_refer_client.f90`` or :mod:`hpc_refer.client`) is reached
    over COMM_WORLD when it was started in the same mpirun (MPMD), or over an
    intercommunicator: that of ``MPI_Comm_spawn``, or that of ``MPI_Comm_accept`` when the
    solver is a separate MPI job that connects to a port (see :meth:`accept`). Only the
    group's rank 0 (the *leader*) exchanges messages with the actor (protocol version 3;
    version 2, the same without n_agents, is still accepted; the constants are in
    :mod:`hpc_refer.client`, the messages of several agents in
    :mod:`hpc_refer.envs.external`):

    ====== ========== ================ ====================================================
    tag    direction  type[count]      content
    ====== ========== ================ ====================================================
    101    A -> S     int32[2]         ASSIGN: environment index e, number of envs E
    102    S -> A     int32[5]         HELLO: protocol version (3), obs_dim, act_dim, ranks,
                                       n_agents (version 2: int32[4], one agent)
    103    S -> A     float64[2 a]     BOUNDS: action low[a], then high[a]
    108    S -> A     char[n]          METRICS: step metric names, UTF-8, one per line
                                       (n = 0: none); then optionally an empty line and
                                       the episode metric names (the Python client)
    109    A -> S     char[n]          PARAMS: UTF-8 ``key=value`` lines: the run's solver
                                       parameters, ``env_index``, ``run_dir``, ``seed``
    106    A -> S     int32[1]         RESET: seed (-1: none); solver answers with a STATE
    105    A -> S     float64[a]       ACTION: one step; solver answers with a STATE
    104    S -> A     float64[3+d+m]   STATE: status, step index, reward, state[d], the
                                       step metrics' values[m]; on a state that ends an
                                       episode after an ACTION, the q episode metrics'
                                       values after them (3+d+m+q)
    107    A -> S     int32[0]         STOP: no more work; the solver finalises
    ====== ========== ================ ====================================================

    (A = actor, S = solver leader; d = obs_dim, a = act_dim, m = number of step metrics;
    status 0 continue, 1 terminal, 2 truncated; step index 0 after RESET, k after the k-th
    ACTION of the episode.) The solver sends HELLO, BOUNDS and METRICS unasked; the actor
    answers with PARAMS, then drives it with RESET and ACTION. Messages are received with
    whatever size they have (probe first), so a message of the wrong size is drained and
    reported instead of truncating.
    """

    def __init__(self, comm: Any, peer: int, intercomm: bool) -> None:
        self.comm = comm
        self.peer = peer
        self.intercomm = intercomm
        """Whether ``comm`` is an intercommunicator to the group (disconnected at close)."""
        self._status = _mpi().Status()
        self._assign: tuple[Any, np.ndarray] | None = None
        """The ASSIGN send in flight (request, buffer) until the group answers."""

    def _send_assign(self, dest: int, index: int, envs: int) -> None:
        """Start sending ASSIGN without blocking: a connection to a spawned (or otherwise
        new) process is set up by both sides, so a solver that never makes another MPI
        call would hold a blocking send forever; :meth:`recv` polls instead, with its
        deadline, and completes the send once the group answers."""
        buffer = np.array([index, envs], np.int32)
        self._assign = (self.comm.Isend(buffer, dest=dest, tag=TAG_ASSIGN), buffer)

    @classmethod
    def mpmd(cls, index: int, envs: int) -> SolverLink:
        """Environment ``index`` of ``envs``, solver launched in the same mpirun (MPMD).

        Sends ASSIGN to the leader of the other app (its lowest COMM_WORLD rank), which
        splits its ranks into ``envs`` equal groups; group ``index``'s leader says HELLO. Its
        world rank is unknown until then: the first :meth:`recv` takes HELLO from any rank
        and makes that rank the peer.
        """
        apps = _appnums()
        mine = apps[_mpi().COMM_WORLD.Get_rank()]
        others = sorted(set(apps) - {mine})
        if len(others) != 1:
            raise RuntimeError(
                f"run.env = 'external' needs exactly one solver app beside hpc_refer in the "
                f"same mpirun (mpirun -n N python -m hpc_refer.run --env external ... : "
                f"-n M ./solver); this job has {len(set(apps))} app(s)"
            )
        leader = apps.index(others[0])
        link = cls(_mpi().COMM_WORLD, -1, intercomm=False)
        link._send_assign(leader, index, envs)
        return link

    @classmethod
    def spawn(cls, program: str, args: list[str], ranks: int, index: int,
              envs: int) -> SolverLink:
        """Start ``ranks`` processes of ``program`` with MPI_Comm_spawn (they find this actor
        with MPI_Comm_get_parent) and send them ASSIGN."""
        mpi = _mpi()
        try:
            inter = mpi.COMM_SELF.Spawn(program, args=args, maxprocs=ranks)
        except mpi.Exception as err:
            raise SolverStartError(spawn_failure(program, ranks, err.Get_error_string(),
                                                 os.geteuid(), os.environ)) from None
        return cls._join(inter, index, envs)

    @classmethod
    def accept(cls, port_file: str, index: int, envs: int) -> SolverLink:
        """Wait for a solver job that connects to this actor, and send it ASSIGN.

        Opens an MPI port, writes its name to ``port_file`` (a temporary file renamed into
        place, so a reader never sees a partial name) and waits in MPI_Comm_accept for one
        group, which connects collectively over its COMM_WORLD (``hpc_refer_init`` with
        ``HPC_REFER_PORT=port_file``). The port is closed and the file removed once the group
        is connected: a file left behind after a run means that no solver ever came.
        """
        mpi = _mpi()
        port = mpi.Open_port()
        partial = f"{port_file}.partial"
        with open(partial, "w") as out:
            out.write(port + "\n")
        os.replace(partial, port_file)
        inter = mpi.COMM_SELF.Accept(port)
        os.remove(port_file)
        mpi.Close_port(port)
        return cls._join(inter, index, envs)

    @classmethod
    def _join(cls, inter: Any, index: int, envs: int) -> SolverLink:
        """The link over intercommunicator ``inter`` (the solver group is its remote group;
        its rank 0 is the leader), sending ASSIGN."""
        link = cls(inter, 0, intercomm=True)
        link._send_assign(0, index, envs)
        return link

    def recv(self, deadline: float | None = None) -> tuple[int, np.ndarray]:
        """The leader's next message, whatever its tag and size: (tag, values).

        HELLO arrives as int32, METRICS as uint8 (its UTF-8 bytes), every other tag as
        float64 (never truncated: the buffer has the size the message has). Waits by
        polling (``Iprobe``, see :func:`~hpc_refer.envs.timeouts.poll_until`) until the
        :func:`time.monotonic` ``deadline`` (None: no limit), then raises TimeoutError.
        Before the peer is known (MPMD) only a HELLO from any rank is taken.
        """
        mpi = _mpi()
        known = self.peer >= 0
        source, tag = (self.peer, mpi.ANY_TAG) if known else (mpi.ANY_SOURCE, TAG_HELLO)
        if not poll_until(lambda: self.comm.Iprobe(source=source, tag=tag,
                                                   status=self._status), deadline):
            raise TimeoutError("no message from the solver")
        if not known:
            self.peer = int(self._status.Get_source())
        if self._assign is not None:  # the group answers only after it received ASSIGN
            self._assign[0].Wait()
            self._assign = None
        tag = int(self._status.Get_tag())
        kind, dtype = {TAG_HELLO: (mpi.INT32_T, np.int32),
                       TAG_METRICS: (mpi.BYTE, np.uint8)}.get(tag, (mpi.DOUBLE, np.float64))
        out = np.empty(max(self._status.Get_count(kind), 0), dtype)
        self.comm.Recv(out, source=self.peer, tag=tag)
        return tag, out

    def send_params(self, text: bytes) -> None:
        """PARAMS: the run's solver parameters as UTF-8 ``key=value`` lines."""
        self.comm.Send(np.frombuffer(text, np.uint8), dest=self.peer, tag=TAG_SOLVER_PARAMS)

    def send_reset(self, seed: int) -> None:
        self.comm.Send(np.array([seed], np.int32), dest=self.peer, tag=TAG_RESET)

    def send_action(self, action: np.ndarray) -> None:
        self.comm.Send(np.ascontiguousarray(action, np.float64), dest=self.peer, tag=TAG_ACTION)

    def close(self, disconnect: bool = True) -> None:
        """Send STOP; a spawned or connected group is then disconnected, unless
        ``disconnect`` is False (a group that stopped answering would never join the
        collective ``MPI_Comm_disconnect``)."""
        if self.peer >= 0:
            self.comm.Send(np.empty(0, np.int32), dest=self.peer, tag=TAG_SOLVER_STOP)
        if self.intercomm and disconnect:
            self.comm.Disconnect()


class MpiLinks:
    """How actors reach their external solver groups over MPI: the
    :class:`~hpc_refer.envs.launch.Links` that hpc_refer's entry points (training, evaluate)
    create and pass to the environments, so that :mod:`hpc_refer.envs` makes no MPI call of
    its own. Each method is the :class:`SolverLink` constructor of the same name."""

    def app_count(self) -> int:
        """Number of apps in this mpirun (:func:`~hpc_refer.parallel.world.app_count`)."""
        return app_count()

    def mpmd(self, index: int, envs: int) -> SolverLink:
        return SolverLink.mpmd(index, envs)

    def spawn(self, program: str, args: list[str], ranks: int, index: int,
              envs: int) -> SolverLink:
        return SolverLink.spawn(program, args, ranks, index, envs)

    def accept(self, port_file: str, index: int, envs: int) -> SolverLink:
        return SolverLink.accept(port_file, index, envs)
