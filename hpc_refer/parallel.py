"""Every mpi4py call of hpc_refer lives in this module.

Algorithms, networks, replay, checkpoints and the prediction suite never import mpi4py; they
receive the helpers below (or communicator objects created here) as arguments.

mpi4py is imported lazily, at the first call that needs it, so importing hpc_refer never
initialises MPI.
"""

from __future__ import annotations

import os
from enum import IntEnum
from functools import cache
from typing import Any, Protocol

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
from hpc_refer.records import (
    ChunkHeader,
    EpisodeRecord,
    Incoming,
    MessageKind,
    pack_episodes,
    unpack_episodes,
)
from hpc_refer.replay import Chunk
from hpc_refer.timeouts import poll_until


@cache
def _mpi() -> Any:
    """Import and return ``mpi4py.MPI`` (initialises MPI once, at first use)."""
    from mpi4py import MPI

    return MPI


@cache
def _appnums() -> tuple[int, ...]:
    """MPI_APPNUM of every rank of COMM_WORLD (one Allgather, on every process of the job).

    Under an MPMD launch (``mpirun ... : ...``) COMM_WORLD spans every app; an external
    solver's ``hpc_refer_init`` makes the same Allgather (then the same Split, see
    :func:`_app_comm`), so both apps call the same collectives in the same order.
    """
    mpi = _mpi()
    world = mpi.COMM_WORLD
    mine = world.Get_attr(mpi.APPNUM)
    out = np.empty(world.Get_size(), np.int32)
    world.Allgather(np.array([0 if mine is None else mine], np.int32), out)
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


def world_team() -> Team:
    """hpc_refer's whole communicator as one environment team (``hpc_refer.evaluate`` of a
    multi-rank solver)."""
    return Team(_app_comm())


def barrier() -> None:
    """Synchronise all ranks of hpc_refer's communicator."""
    _app_comm().Barrier()


class Reducer(Protocol):
    """Reductions over the learners, as algorithms see them (serial or MPI)."""

    size: int
    rank: int

    def average_(self, flat: np.ndarray) -> None: ...

    def sum(self, values: np.ndarray) -> np.ndarray: ...

    def gather(self, obj: Any) -> list[Any] | None: ...

    def checksums_agree(self, checksum: float) -> bool: ...


class SerialReducer:
    """The reductions of one learner alone (L = 1): every operation is the identity.

    The MPI learner communicator offers the same methods; algorithms take either as a
    constructor argument and never import mpi4py.
    """

    size = 1
    rank = 0

    def average_(self, flat: np.ndarray) -> None:
        """Average ``flat`` in place over all learners."""

    def sum(self, values: np.ndarray) -> np.ndarray:
        """Element-wise sum of ``values`` over all learners."""
        return values

    def gather(self, obj: Any) -> list[Any] | None:
        """Every learner's ``obj``, as a list on learner 0 (None on the others)."""
        return [obj]

    def checksums_agree(self, checksum: float) -> bool:
        """True when every learner reports the same checksum of its weights."""
        return True


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
"""Tags of the actor <-> learner messages; a chunk's header is a
:class:`~hpc_refer.records.ChunkHeader` (float64, variable length: the episode's metric values
follow its fixed part)."""


class Reply(IntEnum):
    """What a learner answers an actor that waits (see :class:`ActorChannel`)."""

    PARAMS = 0
    """New parameters: collect the next chunk."""
    STOP = 1
    CHECKPOINT = 2
    """Write this actor's part of checkpoint ``ActorChannel.step``, then say SAVED."""
    EVAL = 3
    """New parameters, then ``ActorChannel.episodes`` evaluation episodes of the mean policy."""


class Fabric:
    """The communicators of one rank: world, learners, and its environment team.

    Notes
    -----
    Built collectively by every rank from the same :class:`~hpc_refer.layout.Layout`:
    ``world`` is hpc_refer's communicator (COMM_WORLD, or hpc_refer's app under MPMD),
    ``learners`` a communicator over the L learner ranks (None elsewhere) and ``team`` one
    over the K ranks of this rank's environment team (None on learners).
    """

    def __init__(self, layout: Any) -> None:
        mpi = _mpi()
        world = _app_comm()
        self.world = world
        self.rank = world.Get_rank()
        self.size = world.Get_size()
        learner = self.rank < layout.learners
        self.learners = world.Split(0 if learner else mpi.UNDEFINED, self.rank)
        color = mpi.UNDEFINED if learner else layout.team(self.rank)
        self.team = world.Split(color, self.rank)
        if self.learners == mpi.COMM_NULL:
            self.learners = None
        if self.team == mpi.COMM_NULL:
            self.team = None

    def reducer(self) -> Reducer:
        """The learners' reducer (serial when L = 1)."""
        if self.learners is None or self.learners.Get_size() == 1:
            return SerialReducer()
        return MpiReducer(self.learners)

    def abort(self, code: int = 1) -> None:
        """Stop every rank of the job (after a fatal error on this one)."""
        self.world.Abort(code)

    def agree(self, ok: bool) -> bool:
        """True on every rank when ``ok`` holds on every rank."""
        return bool(self.world.allreduce(int(ok), op=_mpi().MIN))

    def bcast(self, obj: Any) -> Any:
        return self.world.bcast(obj, root=0)

    def allgather(self, obj: Any) -> list[Any]:
        """Every rank's pickled ``obj``, on every rank (rare control data)."""
        return self.world.allgather(obj)


class ActorChannel:
    """The actor's side of the actor <-> learner messages (buffer-based).

    Actor to learner: a :class:`~hpc_refer.records.ChunkHeader` (float64) then one float32
    payload with the chunk's columns (obs, act, rew, mu_mean, mu_std); TAG_DONE (empty) when
    the actor's environment ended its work early; TAG_SAVED (empty) once its checkpoint part
    is written; TAG_EVAL_RESULT (float64, :func:`~hpc_refer.records.pack_episodes`) after an
    evaluation round; TAG_FAILED (the failure's text, utf-8 bytes) when its environment
    failed for good, TAG_STUCK (likewise, from its watchdog thread) when it hangs in a
    solver call. Learner to actor: TAG_PARAMS (the float32 parameters, then the step budget
    of this release: the bits of an int32, so any budget is exact), TAG_STOP,
    TAG_CHECKPOINT (float64 [env step]), TAG_EVAL (float32 parameters then the number of
    episodes), and TAG_CUT (empty: send the steps collected so far now, without waiting for
    the chunk to fill; an actor that sent its chunk already ignores it). ``faults`` (the
    actor's solver faults so far) travels in every header.
    """

    def __init__(self, world: Any, learner: int, n_params: int) -> None:
        self.world = world
        self.learner = learner
        self._message = np.empty(n_params + 1, np.float32)
        """A PARAMS or EVAL message: the parameters, then one more value."""
        self.params = self._message[:-1]
        """The parameters of the latest PARAMS or EVAL reply (a view of the message)."""
        self.budget = 0
        """Environment steps this actor may take (after a PARAMS reply)."""
        self.step = 0
        """The env step of the checkpoint asked for (after a CHECKPOINT reply)."""
        self.episodes = 0
        """Episodes of the evaluation round asked for (after an EVAL reply)."""
        self.faults = 0
        self._status = _mpi().Status()

    def send_chunk(self, chunk: Chunk, episode: EpisodeRecord | None) -> None:
        """Send a chunk, with the episode it ends."""
        header = ChunkHeader.of(chunk, episode, self.faults)
        payload = np.concatenate([chunk.obs.ravel(), chunk.act.ravel(), chunk.rew,
                                  chunk.mu_mean.ravel(), chunk.mu_std.ravel()])
        self.world.Send(header.pack(), dest=self.learner, tag=TAG_HEADER)
        self.world.Send(payload.astype(np.float32, copy=False), dest=self.learner,
                        tag=TAG_DATA)

    def send_done(self) -> None:
        self.world.Send(np.empty(0, np.float32), dest=self.learner, tag=TAG_DONE)

    def send_saved(self) -> None:
        self.world.Send(np.empty(0, np.float32), dest=self.learner, tag=TAG_SAVED)

    def send_evals(self, episodes: list[EpisodeRecord]) -> None:
        self.world.Send(pack_episodes(episodes), dest=self.learner, tag=TAG_EVAL_RESULT)

    def send_failed(self, text: str, stuck: bool = False) -> None:
        """The environment failed for good; ``stuck``: sent by the watchdog thread while the
        main thread hangs in a solver call (needs MPI_THREAD_MULTIPLE, mpi4py's default)."""
        self.world.Send(np.frombuffer(text.encode(), np.uint8).copy(), dest=self.learner,
                        tag=TAG_STUCK if stuck else TAG_FAILED)

    def cut_requested(self) -> bool:
        """True (once) when the learner asked for the steps collected so far (TAG_CUT)."""
        if not self.world.Iprobe(source=self.learner, tag=TAG_CUT):
            return False
        self.world.Recv(np.empty(0, np.float32), source=self.learner, tag=TAG_CUT)
        return True

    def recv_reply(self) -> Reply:
        """Wait for the learner's next command (a stale TAG_CUT is dropped): new parameters
        go to ``params`` with the step budget in ``budget``, a checkpoint's step to ``step``,
        an evaluation's size to ``episodes``."""
        while True:
            self.world.Probe(source=self.learner, tag=_mpi().ANY_TAG, status=self._status)
            tag = self._status.Get_tag()
            if tag == TAG_CUT:
                self.cut_requested()
                continue
            if tag == TAG_STOP:
                self.world.Recv(np.empty(0, np.float32), source=self.learner, tag=TAG_STOP)
                return Reply.STOP
            if tag == TAG_CHECKPOINT:
                step = np.empty(1, np.float64)
                self.world.Recv(step, source=self.learner, tag=TAG_CHECKPOINT)
                self.step = int(step[0])
                return Reply.CHECKPOINT
            if tag == TAG_EVAL:
                self.world.Recv(self._message, source=self.learner, tag=TAG_EVAL)
                self.episodes = int(self._message[-1])
                return Reply.EVAL
            self.world.Recv(self._message, source=self.learner, tag=TAG_PARAMS)
            self.budget = int(self._message[-1:].view(np.int32)[0])
            return Reply.PARAMS


class LearnerChannel:
    """The learner's side of the actor <-> learner messages (see :class:`ActorChannel`)."""

    def __init__(self, world: Any, obs_dim: int, act_dim: int) -> None:
        self.world = world
        self.obs_dim = obs_dim
        self.act_dim = act_dim
        self._status = _mpi().Status()
        self.faults: dict[int, int] = {}
        """Solver faults of each actor so far (from the latest header of each)."""

    def poll(self, block: bool) -> Incoming | None:
        """Receive one message from any actor; None when nothing is pending and ``block`` is
        False."""
        mpi = _mpi()
        if block:
            self.world.Probe(source=mpi.ANY_SOURCE, tag=mpi.ANY_TAG, status=self._status)
        elif not self.world.Iprobe(source=mpi.ANY_SOURCE, tag=mpi.ANY_TAG, status=self._status):
            return None
        source, tag = self._status.Get_source(), self._status.Get_tag()
        if tag == TAG_DONE:
            self.world.Recv(np.empty(0, np.float32), source=source, tag=TAG_DONE)
            return Incoming(source, MessageKind.FINISHED)
        if tag == TAG_EVAL_RESULT:
            raw = np.empty(self._status.Get_count(mpi.DOUBLE), np.float64)
            self.world.Recv(raw, source=source, tag=tag)
            return Incoming(source, MessageKind.EVAL, evals=unpack_episodes(raw))
        if tag in (TAG_FAILED, TAG_STUCK):
            text = np.empty(self._status.Get_count(mpi.BYTE), np.uint8)
            self.world.Recv(text, source=source, tag=tag)
            kind = MessageKind.STUCK if tag == TAG_STUCK else MessageKind.FAILED
            return Incoming(source, kind, failure=text.tobytes().decode())
        if tag != TAG_HEADER:
            raise RuntimeError(f"learner: unexpected message tag {tag} from rank {source}")
        raw = np.empty(self._status.Get_count(mpi.DOUBLE), np.float64)
        self.world.Recv(raw, source=source, tag=TAG_HEADER)
        header = ChunkHeader.unpack(raw)
        self.faults[source] = header.faults
        return Incoming(source, MessageKind.CHUNK, self._recv_chunk(source, header),
                        header.episode)

    def _recv_chunk(self, source: int, header: ChunkHeader) -> Chunk:
        n, m = header.n_states, header.n_actions
        ds, da = self.obs_dim, self.act_dim
        sizes = [n * ds, m * da, m, m * da, m * da]
        payload = np.empty(sum(sizes), np.float32)
        self.world.Recv(payload, source=source, tag=TAG_DATA)
        obs, act, rew, mean, std = np.split(payload, np.cumsum(sizes)[:-1])
        return Chunk(obs.reshape(n, ds), act.reshape(m, da), rew, mean.reshape(m, da),
                     std.reshape(m, da), header.end, source)

    def send_params(self, actor: int, flat: np.ndarray, budget: int) -> None:
        """The float32 parameters ``flat`` and the environment steps the actor may take."""
        bits = np.array([budget], np.int32).view(np.float32)
        self.world.Send(np.concatenate([np.asarray(flat, np.float32), bits]), dest=actor,
                        tag=TAG_PARAMS)

    def send_stop(self, actor: int) -> None:
        self.world.Send(np.empty(0, np.float32), dest=actor, tag=TAG_STOP)

    def send_cut(self, actor: int) -> None:
        self.world.Send(np.empty(0, np.float32), dest=actor, tag=TAG_CUT)

    def send_eval(self, actor: int, flat: np.ndarray, episodes: int) -> None:
        self.world.Send(np.append(flat, np.float32(episodes)), dest=actor, tag=TAG_EVAL)

    def request_checkpoints(self, actors: list[int], step: int) -> None:
        """Ask each (waiting) actor to write its checkpoint part; wait until all have."""
        for actor in actors:
            self.world.Send(np.array([step], np.float64), dest=actor, tag=TAG_CHECKPOINT)
        for actor in actors:
            self.world.Recv(np.empty(0, np.float32), source=actor, tag=TAG_SAVED)




class SolverLink:
    """The actor's end of the wire protocol with one external solver group.

    The solver group (any number of ranks of a code using ``solvers/coupling/
    hpc_refer_client.h``, ``hpc_refer_client.f90`` or :mod:`hpc_refer.client`) is reached
    over COMM_WORLD when it was started in the same mpirun (MPMD), or over an
    intercommunicator: that of ``MPI_Comm_spawn``, or that of ``MPI_Comm_accept`` when the
    solver is a separate MPI job that connects to a port (see :meth:`accept`). Only the
    group's rank 0 (the *leader*) exchanges messages with the actor (protocol version 2,
    the constants are in :mod:`hpc_refer.client`):

    ====== ========== ================ ====================================================
    tag    direction  type[count]      content
    ====== ========== ================ ====================================================
    101    A -> S     int32[2]         ASSIGN: environment index e, number of envs E
    102    S -> A     int32[4]         HELLO: protocol version (2), obs_dim, act_dim, ranks
    103    S -> A     float64[2 a]     BOUNDS: action low[a], then high[a]
    108    S -> A     char[n]          METRICS: step metric names, UTF-8, one per line
                                       (n = 0: none)
    109    A -> S     char[n]          PARAMS: UTF-8 ``key=value`` lines: the run's solver
                                       parameters, ``env_index``, ``run_dir``, ``seed``
    106    A -> S     int32[1]         RESET: seed (-1: none); solver answers with a STATE
    105    A -> S     float64[a]       ACTION: one step; solver answers with a STATE
    104    S -> A     float64[3+d+m]   STATE: status, step index, reward, state[d], the
                                       step metrics' values[m]
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
        return cls._join(_mpi().COMM_SELF.Spawn(program, args=args, maxprocs=ranks), index,
                         envs)

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
        polling (``Iprobe``, see :func:`~hpc_refer.timeouts.poll_until`) until the
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


_ABANDONED: list[Any] = []
"""Non-blocking requests given up at a deadline, with their buffers, kept for the life of the
process: a late rank may still complete them, and MPI then writes into the buffers (freeing
them with the Team that posted them corrupted the heap of a later test)."""


class TeamCommand(IntEnum):
    """What team rank 0 (the actor) asks the solver ranks of its team to do."""

    RESET = 0
    STEP = 1
    STOP = 2
    REBUILD = 3
    """Close the solver and construct it anew (after a solver fault)."""
    SNAPSHOT = 4
    """Take the solver's ``snapshot()`` (collective; team rank 0 writes it)."""


class Team:
    """An environment team's communicator, as a solver receives it.

    ``comm`` is the mpi4py communicator itself, for users' solvers that do their own MPI;
    hpc_refer's built-in solvers use the helpers below. Rank 0 of the team is the actor; the
    solver's ``state_rank`` (see :mod:`hpc_refer.envs`) sends its results with
    :meth:`send_result` when it is not rank 0. After each call the team agrees on how it went
    (:meth:`agree`); a rank whose call failed sends its error text (:meth:`send_error`).
    Team rank 0 waits for these with a deadline (polling, never a blocking Probe or Wait),
    so a rank that stops answering is seen as a TimeoutError, not a hang.
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
        Allreduce, polled); TimeoutError when some rank has not joined by the
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
