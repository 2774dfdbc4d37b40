"""MPI itself (imported lazily, at the first call that needs it), the world's helpers, the
learners' reducers and the environment teams' communicator (:class:`MpiTeam`, the MPI
implementation of the solvers' :class:`~hpc_refer.envs.interface.Team` protocol)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import cache
from typing import Any

import numpy as np

from hpc_refer.client import app_number
from hpc_refer.envs.interface import TeamCommand
from hpc_refer.envs.launch import in_srun_step
from hpc_refer.envs.timeouts import poll_until


@cache
def _mpi() -> Any:
    """Import and return ``mpi4py.MPI`` (initialises MPI once, at first use)."""
    from mpi4py import MPI

    return MPI


def mpi_library() -> str:
    """The first line of the MPI library's own name and version
    (``MPI_Get_library_version``)."""
    return _mpi().Get_library_version().strip().splitlines()[0].strip()


@cache
def _proc_failed_classes() -> frozenset[int]:
    """The MPI error classes that say a peer process failed (ULFM: MPI_ERR_PROC_FAILED and
    MPI_ERR_PROC_FAILED_PENDING; none where mpi4py's MPI does not define them)."""
    mpi = _mpi()
    return frozenset(getattr(mpi, name) for name in ("ERR_PROC_FAILED",
                                                     "ERR_PROC_FAILED_PENDING")
                     if hasattr(mpi, name))


def proc_failed(err: BaseException) -> bool:
    """Whether ``err`` is MPI's report that a peer process failed (ULFM)."""
    return (isinstance(err, _mpi().Exception)
            and err.Get_error_class() in _proc_failed_classes())


@cache
def _appnums() -> tuple[int, ...]:
    """MPI_APPNUM of every rank of COMM_WORLD (one Allgather, on every process of the job).

    Under an MPMD launch (``mpirun ... : ...``) COMM_WORLD spans every app; an external
    solver's ``hpc_refer_init`` makes the same Allgather (then the same Split, see
    :func:`_app_comm`), so both apps call the same collectives in the same order.
    """
    mpi = _mpi()
    world = mpi.COMM_WORLD
    mine = app_number(world.Get_attr(mpi.APPNUM), os.environ)
    out = np.empty(world.Get_size(), np.int32)
    world.Allgather(np.array([mine], np.int32), out)
    return tuple(int(a) for a in out)


@cache
def _app_comm() -> Any:
    """hpc_refer's own communicator: COMM_WORLD, or the ranks of its app under MPMD.

    With several apps every process of the job splits COMM_WORLD by APPNUM exactly once
    (``MPI_Comm_split(COMM_WORLD, appnum, world rank)``, also inside ``hpc_refer_init``).
    """
    world = _mpi().COMM_WORLD
    apps = _appnums()
    if len(set(apps)) == 1:
        return world
    return world.Split(apps[world.Get_rank()], world.Get_rank())


def app_count() -> int:
    """Number of apps in this mpirun (2 when an external solver runs beside hpc_refer)."""
    return len(set(_appnums()))


def abort_job(code: int) -> None:
    """MPI_Abort on COMM_WORLD: ends every app of the job (an external solver waiting for
    hpc_refer would otherwise wait forever)."""
    _mpi().COMM_WORLD.Abort(code)


LAUNCHER_SIZES = (
    ("SLURM_STEP_NUM_TASKS", "srun"),
    ("SLURM_NTASKS", "srun"),
    ("OMPI_COMM_WORLD_SIZE", "Open MPI's mpirun"),
    ("PMI_SIZE", "a PMI launcher (MPICH's mpiexec, or srun --mpi=pmi2)"),
)
"""The variables in which launchers announce how many processes they started, and who sets
each. ``SLURM_NTASKS`` counts only inside an srun step (``SLURM_STEP_ID`` a step's number): a
batch script has it too, where a one-process run is legitimate."""


def launcher_mismatch(world_size: int, environ: Mapping[str, str],
                      library: str = "") -> str | None:
    """The start-up error of a silent singleton, None when there is none: a COMM_WORLD of one
    rank while a launcher announced more (:data:`LAUNCHER_SIZES`) means the launcher and the
    MPI library do not speak the same process-management interface, so each process started
    alone, as a separate one-process training. One line naming the launcher's count, the
    world's, the library and the launch lines to try."""
    if world_size != 1:
        return None
    in_step = in_srun_step(environ)
    for var, launcher in LAUNCHER_SIZES:
        value = environ.get(var, "")
        if var == "SLURM_NTASKS" and not in_step:
            continue
        if value.isdigit() and int(value) > 1:
            uses = f" (mpi4py uses {library})" if library else ""
            return (f"{launcher} started {value} processes ({var}={value}) but this MPI world "
                    f"holds 1 rank: each process would train alone. The launcher and the MPI "
                    f"library{uses} do not match: under Slurm try srun --mpi=pmix (Open MPI) "
                    f"or srun --mpi=pmi2 (MPICH, Intel MPI; srun --mpi=list shows what this "
                    f"Slurm offers), or the MPI's own mpirun inside the allocation; with "
                    f"mpirun, the mpirun of the MPI that mpi4py loads (INSTALL.md)")
    return None


def singleton_error() -> str | None:
    """:func:`launcher_mismatch` of this process (COMM_WORLD's size, the environment, the MPI
    library's name)."""
    world = _mpi().COMM_WORLD.Get_size()
    if world != 1:
        return None
    library = _mpi().Get_library_version().splitlines()[0].strip()
    return launcher_mismatch(world, os.environ, library)


def world_rank_size() -> tuple[int, int]:
    """Rank of this process in hpc_refer's communicator (COMM_WORLD, or its MPMD app) and
    that communicator's size."""
    comm = _app_comm()
    return comm.Get_rank(), comm.Get_size()


def gather_object(obj: Any, root: int = 0) -> list[Any] | None:
    """Gather one pickled object per rank of hpc_refer's communicator onto ``root``."""
    return _app_comm().gather(obj, root=root)


def bcast_object(obj: Any, root: int = 0) -> Any:
    """Broadcast one pickled object from ``root`` to every rank of hpc_refer's communicator."""
    return _app_comm().bcast(obj, root=root)


def world_team() -> MpiTeam:
    """hpc_refer's whole communicator as one environment team (``hpc_refer.evaluate`` of a
    multi-rank solver)."""
    return MpiTeam(_app_comm())


def barrier() -> None:
    """Synchronise all ranks of hpc_refer's communicator."""
    _app_comm().Barrier()


class MpiReducer:
    """Reductions over the learner communicator (L > 1 learners).

    Notes
    -----
    ``average_`` is one in-place Allreduce (sum) of a float32 vector followed by a division
    by L: every learner receives the same bits, so identical optimiser steps keep the weights
    bitwise identical (checked by :func:`checksums_agree`).
    """

    def __init__(self, comm: Any) -> None:
        self.comm = comm
        self.size = comm.Get_size()
        self.rank = comm.Get_rank()

    def average_(self, flat: np.ndarray) -> None:
        self.comm.Allreduce(_mpi().IN_PLACE, flat, op=_mpi().SUM)
        flat /= self.size

    def sum(self, values: np.ndarray) -> np.ndarray:
        out = np.asarray(values, np.float64).copy()
        self.comm.Allreduce(_mpi().IN_PLACE, out, op=_mpi().SUM)
        return out

    def gather(self, obj: Any) -> list[Any] | None:
        """Pickled gather onto learner 0 (metrics and episode records, once per interval)."""
        return self.comm.gather(obj, root=0)

    def checksums_agree(self, checksum: float) -> bool:
        """True when every learner reports the same checksum of its weights."""
        values = self.comm.allgather(checksum)
        return all(v == values[0] for v in values)


TAG_HEADER, TAG_DATA, TAG_PARAMS, TAG_STOP, TAG_DONE, TAG_TEAM = 11, 12, 13, 14, 15, 16
TAG_CUT, TAG_CHECKPOINT, TAG_SAVED, TAG_EVAL, TAG_EVAL_RESULT, TAG_FAILED, TAG_STUCK = range(
    17, 24)
TAG_BOUNDS, TAG_PROGRAM = 24, 25
"""Tags of the actor <-> learner messages; a chunk's header is a
:class:`~hpc_refer.report.records.ChunkHeader` (float64, variable length: the episode's metric
values follow its fixed part)."""


_ABANDONED: list[Any] = []
"""Non-blocking requests given up at a deadline, with their buffers, kept for the life of the
process: a late rank may still complete them, and MPI then writes into the buffers (freeing
them with the MpiTeam that posted them corrupted the heap of a later test)."""


class MpiTeam:
    """An environment team over the mpi4py communicator ``comm`` (team rank = rank in
    ``comm``): the :class:`~hpc_refer.envs.interface.Team` protocol, whose docstrings say
    what each call does.

    Notes
    -----
    Commands are two Bcasts from rank 0 (int64 [command, payload size], then the float64
    payload); results and error texts are point-to-point sends to rank 0 (tags ``TAG_TEAM``
    and :attr:`TAG_ERROR`), received with whatever size they have after an Iprobe polled
    until the deadline; the agreement is a non-blocking Allreduce (MAX) polled the same way,
    never a blocking Probe or Wait.
    """

    TAG_ERROR = 30
    """Tag of a solver rank's error text (utf-8 bytes) to team rank 0."""

    def __init__(self, comm: Any) -> None:
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()

    def send_command(self, command: TeamCommand, payload: np.ndarray) -> None:
        """Team rank 0: broadcast a command and its float64 payload to the solver ranks."""
        self.comm.Bcast(np.array([int(command), payload.size], np.int64), root=0)
        self.comm.Bcast(np.ascontiguousarray(payload, np.float64), root=0)

    def receive_command(self) -> tuple[TeamCommand, np.ndarray]:
        """Solver ranks: the next command of team rank 0."""
        head = np.empty(2, np.int64)
        self.comm.Bcast(head, root=0)
        payload = np.empty(int(head[1]), np.float64)
        self.comm.Bcast(payload, root=0)
        return TeamCommand(int(head[0])), payload

    def sum(self, value: float) -> float:
        """Sum of a scalar over the team."""
        return float(self.comm.allreduce(value, op=_mpi().SUM))

    def gather_rows(self, local: np.ndarray, root: int = 0) -> np.ndarray | None:
        """Concatenate every rank's float64 vector on team rank ``root`` (None elsewhere)."""
        counts = np.array(self.comm.allgather(local.size), np.int64)
        out = np.empty(int(counts.sum()), np.float64) if self.rank == root else None
        self.comm.Gatherv(np.ascontiguousarray(local, np.float64),
                          [out, counts] if self.rank == root else None, root=root)
        return out

    def send_result(self, values: np.ndarray) -> None:
        """The solver's state rank: send its reset/step result (float64) to team rank 0."""
        self.comm.Send(np.ascontiguousarray(values, np.float64), dest=0, tag=TAG_TEAM)

    def receive_result(self, source: int, deadline: float | None = None) -> np.ndarray:
        """Team rank 0: the result that team rank ``source`` sent, whatever its length;
        TimeoutError when none came by the :func:`time.monotonic` ``deadline`` (None: no
        limit)."""
        return self._receive(source, TAG_TEAM, np.float64, deadline)

    def send_error(self, text: str) -> None:
        """A solver rank whose call failed: its error text to team rank 0."""
        self.comm.Send(np.frombuffer(text.encode(), np.uint8).copy(), dest=0,
                       tag=self.TAG_ERROR)

    def receive_error(self, source: int, deadline: float | None = None) -> str:
        """Team rank 0: the error text of team rank ``source`` (TimeoutError at the
        deadline)."""
        return self._receive(source, self.TAG_ERROR, np.uint8, deadline).tobytes().decode(
            errors="replace")

    def _receive(self, source: int, tag: int, dtype: type[np.generic],
                 deadline: float | None) -> np.ndarray:
        mpi = _mpi()
        status = mpi.Status()
        if not poll_until(lambda: self.comm.Iprobe(source=source, tag=tag, status=status),
                          deadline):
            raise TimeoutError(f"team rank {source} sent nothing")
        out = np.empty(status.Get_count(mpi.DOUBLE if dtype is np.float64 else mpi.BYTE),
                       dtype)
        self.comm.Recv(out, source=source, tag=tag)
        return out

    def agree(self, value: int, deadline: float | None = None) -> int:
        """The maximum of ``value`` over the team's ranks, on every rank (one non-blocking
        Allreduce, polled; a request given up at the deadline is kept in
        :data:`_ABANDONED`); TimeoutError when some rank has not joined by the
        :func:`time.monotonic` ``deadline`` (None: no limit)."""
        mine = np.array([value], np.int64)
        out = np.empty(1, np.int64)
        request = self.comm.Iallreduce(mine, out, op=_mpi().MAX)
        if not poll_until(request.Test, deadline):
            _ABANDONED.append((request, mine, out))
            raise TimeoutError("a team rank did not answer")
        return int(out[0])

    def halo(self, left_edge: float, right_edge: float) -> tuple[float, float]:
        """Periodic neighbour exchange: returns (right edge of left rank, left edge of right)."""
        left, right = (self.rank - 1) % self.size, (self.rank + 1) % self.size
        from_left = np.empty(1)
        from_right = np.empty(1)
        self.comm.Sendrecv(np.array([right_edge]), dest=right, recvbuf=from_left, source=left)
        self.comm.Sendrecv(np.array([left_edge]), dest=left, recvbuf=from_right, source=right)
        return float(from_left[0]), float(from_right[0])

    def exchange_slabs(self, to_left: np.ndarray, to_right: np.ndarray
                       ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Non-periodic halo exchange of float64 arrays along the team's ranks (a domain cut
        into slabs, rank r between r - 1 and r + 1): sends ``to_left`` to rank - 1 and
        ``to_right`` to rank + 1, returns (what rank - 1 sent right, what rank + 1 sent left),
        None on a side without a neighbour. Both arrays have the same shape on every rank;
        two Sendrecv, each rank's edges paired with MPI.PROC_NULL."""
        null = _mpi().PROC_NULL
        left = self.rank - 1 if self.rank > 0 else null
        right = self.rank + 1 if self.rank < self.size - 1 else null
        send_l = np.ascontiguousarray(to_left, np.float64)
        send_r = np.ascontiguousarray(to_right, np.float64)
        from_left, from_right = np.empty_like(send_r), np.empty_like(send_l)
        self.comm.Sendrecv(send_r, dest=right, recvbuf=from_left, source=left)
        self.comm.Sendrecv(send_l, dest=left, recvbuf=from_right, source=right)
        return (from_left if left != null else None, from_right if right != null else None)

    def sum_array(self, local: np.ndarray) -> np.ndarray:
        """Element-wise sum of a float64 array over the team, on every rank (one Allreduce)."""
        out = np.array(local, np.float64)
        self.comm.Allreduce(_mpi().IN_PLACE, out, op=_mpi().SUM)
        return out
