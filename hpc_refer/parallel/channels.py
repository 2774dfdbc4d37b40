"""The actor <-> learner messages: the ranks' communicators (:class:`Fabric`) and the two ends
of the chunk / parameter exchange."""

from __future__ import annotations

import platform
from collections.abc import Callable, Sequence
from enum import IntEnum
from typing import TYPE_CHECKING, Any

import numpy as np

from hpc_refer.algorithms.kit.collectives import Reducer, SerialReducer
from hpc_refer.parallel.world import (
    TAG_BOUNDS,
    TAG_CHECKPOINT,
    TAG_CUT,
    TAG_DATA,
    TAG_DONE,
    TAG_EVAL,
    TAG_EVAL_RESULT,
    TAG_FAILED,
    TAG_HEADER,
    TAG_PARAMS,
    TAG_PROGRAM,
    TAG_SAVED,
    TAG_STOP,
    TAG_STUCK,
    MpiReducer,
    _app_comm,
    _mpi,
    proc_failed,
)
from hpc_refer.report.records import (
    Chunk,
    ChunkHeader,
    EpisodeRecord,
    Incoming,
    MessageKind,
    pack_episodes,
    unpack_episodes,
)

if TYPE_CHECKING:
    from hpc_refer.algorithms.kit.program import Program


def failed_ranks(comm: Any) -> list[int]:
    """The ranks of ``comm`` that this process knows to have failed (ULFM)."""
    failed = comm.Get_failed()
    return _mpi().Group.Translate_ranks(failed, list(range(failed.Get_size())),
                                        comm.Get_group())


def lost_text(ranks: Sequence[int], hosts: Sequence[str]) -> str:
    """The stop reason of a run that lost ``ranks`` (world ranks; ``hosts``: each rank's
    host name, or empty)."""
    where = ", ".join(f"{r}{f' ({hosts[r]})' if hosts else ''}" for r in ranks)
    return f"MPI ranks lost: {where} (their processes died or their host went down)"


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
    Built collectively by every rank from the same :class:`~hpc_refer.config.layout.Layout`:
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
        self.hosts: list[str] = []
        """Each rank's host name once :meth:`gather_hosts` ran."""

    def reducer(self) -> Reducer:
        """The learners' reducer (serial when L = 1)."""
        if self.learners is None or self.learners.Get_size() == 1:
            return SerialReducer()
        return MpiReducer(self.learners)

    def abort(self, code: int = 1) -> None:
        """Stop every rank of the job (after a fatal error on this one)."""
        self.world.Abort(code)

    def bcast(self, obj: Any) -> Any:
        return self.world.bcast(obj, root=0)

    def allgather(self, obj: Any) -> list[Any]:
        """Every rank's pickled ``obj``, on every rank (rare control data)."""
        return self.world.allgather(obj)

    def exit_status(self, status: int) -> int:
        """Collective: rank 0's exit ``status`` on every rank; where ranks of the job are
        lost (ULFM), the run failed and rank 0 aborts the job: 1 without a word."""
        try:
            return int(self.bcast(status))
        except Exception as err:
            if not proc_failed(err):
                raise
            return 1

    def lost(self, err: BaseException) -> str | None:
        """The stop reason :func:`lost_text` where ``err`` says that ranks of the job
        failed (ULFM), else None."""
        return lost_text(failed_ranks(self.world), self.hosts) if proc_failed(err) else None

    def gather_hosts(self) -> list[str]:
        """Collective: every rank's host name, in rank order, on every rank (kept as
        ``hosts``: the learners name the hosts of lost ranks)."""
        self.hosts = self.allgather(platform.node())
        return self.hosts


class ActorChannel:
    """The actor's side of the actor <-> learner messages (buffer-based).

    Actor to learner: a :class:`~hpc_refer.report.records.ChunkHeader` (float64) then one float32
    payload with the chunk's columns (obs, act, rew, mu_mean, mu_std); TAG_DONE (empty) when
    the actor's environment ended its work early; TAG_SAVED (empty) once its checkpoint part
    is written; TAG_EVAL_RESULT (float64, :func:`~hpc_refer.report.records.pack_episodes`) after an
    evaluation round; TAG_FAILED (the failure's text, utf-8 bytes) when its environment
    failed for good, TAG_STUCK (likewise, from its watchdog thread) when it hangs in a
    solver call; TAG_BOUNDS (float64 [low, high], once at the start, by the actor of
    environment 0 only: the action box, which its learner writes into policy files). Learner
    to actor: TAG_PROGRAM (once at the start, pickled: the behaviour policy's
    :class:`~hpc_refer.algorithms.kit.program.Program`, :func:`recv_program`), TAG_PARAMS
    (the float32 parameters, then the step budget of this release: the bits of an int32, so
    any budget is exact, then 0), TAG_STOP,
    TAG_CHECKPOINT (float64 [env step]), TAG_EVAL (float32 parameters, the number of
    episodes, then 1 for the round at the end of the run, else 0), and TAG_CUT (empty: send
    the steps collected so far now, without waiting for the chunk to fill; an actor that
    sent its chunk already ignores it). The actor's solver faults so far travel in every
    header, and each episode's end time (on the run's clock of the actor that ran it) with
    the episode, in the header or the evaluation round's list.
    """

    def __init__(self, world: Any, learner: int, n_params: int) -> None:
        self.world = world
        self.learner = learner
        self._message = np.empty(n_params + 2, np.float32)
        """A PARAMS or EVAL message: the parameters, then two more values."""
        self.params = self._message[:-2]
        """The parameters of the latest PARAMS or EVAL reply (a view of the message)."""
        self.budget = 0
        """Environment steps this actor may take (after a PARAMS reply)."""
        self.step = 0
        """The env step of the checkpoint asked for (after a CHECKPOINT reply)."""
        self.episodes = 0
        """Episodes of the evaluation round asked for (after an EVAL reply)."""
        self.final = False
        """Whether that round is the one at the end of the run (after an EVAL reply)."""
        self._status = _mpi().Status()

    def send_chunk(self, chunk: Chunk, episode: EpisodeRecord | None, faults: int,
                   between: bool) -> None:
        """Send a chunk, with the episode it ends, the actor's solver faults so far and
        whether the actor is between episodes after it."""
        header = ChunkHeader.of(chunk, episode, faults, between)
        payload = np.concatenate([chunk.obs.ravel(), chunk.act.ravel(), chunk.rew,
                                  chunk.mu_mean.ravel(), chunk.mu_std.ravel()])
        self.world.Send(header.pack(), dest=self.learner, tag=TAG_HEADER)
        self.world.Send(payload.astype(np.float32, copy=False), dest=self.learner,
                        tag=TAG_DATA)

    def send_done(self) -> None:
        self.world.Send(np.empty(0, np.float32), dest=self.learner, tag=TAG_DONE)

    def send_saved(self) -> None:
        self.world.Send(np.empty(0, np.float32), dest=self.learner, tag=TAG_SAVED)

    def send_bounds(self, low: np.ndarray, high: np.ndarray) -> None:
        """The environment's action box (once, at the start: environment 0's actor)."""
        self.world.Send(np.concatenate([low, high]).astype(np.float64), dest=self.learner,
                        tag=TAG_BOUNDS)

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
                self.episodes, self.final = int(self._message[-2]), bool(self._message[-1])
                return Reply.EVAL
            self.world.Recv(self._message, source=self.learner, tag=TAG_PARAMS)
            self.budget = int(self._message[-2:-1].view(np.int32)[0])
            return Reply.PARAMS


def recv_program(world: Any, learner: int) -> Program:
    """The behaviour policy an actor rank runs, as its learner sends it at the start
    (TAG_PROGRAM): the actor builds no network of its own (and imports no torch)."""
    program: Program = world.recv(source=learner, tag=TAG_PROGRAM)
    return program


class LearnerChannel:
    """The learner's side of the actor <-> learner messages (see :class:`ActorChannel`)."""

    in_process = False
    """Actors run in their own processes (see the learner loop's ``LearnerSide``)."""

    def __init__(self, world: Any, obs_dim: int, act_dim: int,
                 actor_of: Callable[[int], int | None] = lambda rank: rank,
                 hosts: Sequence[str] = ()) -> None:
        self.world = world
        self.obs_dim = obs_dim
        self.act_dim = act_dim
        self.actor_of = actor_of
        """The actor rank of a rank's team (None for a learner rank)."""
        self.hosts = hosts
        """Each world rank's host name (empty: unknown), for the text of lost ranks."""
        self.lost: list[int] = []
        """World ranks that MPI reported failed (under ULFM), in the order found."""
        self._unreported: list[int] = []
        self._status = _mpi().Status()

    def poll(self, block: bool) -> Incoming | None:
        """Receive one message from any actor; None when nothing is pending and ``block`` is
        False. A rank that MPI reports failed (``mpirun --with-ft ulfm``) comes as a LOST
        message of its team's actor, one per lost rank."""
        mpi = _mpi()
        try:
            if self._unreported:
                return self._lost_message()
            if block:
                self.world.Probe(source=mpi.ANY_SOURCE, tag=mpi.ANY_TAG, status=self._status)
            elif not self.world.Iprobe(source=mpi.ANY_SOURCE, tag=mpi.ANY_TAG,
                                       status=self._status):
                return None
            return self._receive(self._status.Get_source(), self._status.Get_tag())
        except mpi.Exception as err:
            if not self._note_failures(err):
                raise
            return self._lost_message()

    def _note_failures(self, err: Any) -> bool:
        """Whether ``err`` says that ranks failed; if so, book the newly failed ones (and
        acknowledge them, so that receives from any source work again)."""
        if not proc_failed(err):
            return False
        self.world.Ack_failed()
        new = [r for r in failed_ranks(self.world) if r not in self.lost]
        self.lost += new
        self._unreported += new
        return True

    def _lost_message(self) -> Incoming:
        rank = self._unreported.pop(0)
        actor = self.actor_of(rank)
        return Incoming(rank if actor is None else actor, MessageKind.LOST,
                        failure=lost_text(self.lost, self.hosts))

    def _send(self, buffer: np.ndarray, dest: int, tag: int) -> None:
        """Send to an actor; one that failed is booked (a LOST message follows), not fatal."""
        mpi = _mpi()
        try:
            self.world.Send(buffer, dest=dest, tag=tag)
        except mpi.Exception as err:
            if not self._note_failures(err):
                raise

    def _receive(self, source: int, tag: int) -> Incoming:
        mpi = _mpi()
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
        return Incoming(source, MessageKind.CHUNK, self._recv_chunk(source, header),
                        header.episode, faults=header.faults, between=header.between)

    def _recv_chunk(self, source: int, header: ChunkHeader) -> Chunk:
        n, m = header.n_states, header.n_actions
        ds, da = self.obs_dim, self.act_dim
        sizes = [n * ds, m * da, m, m * da, m * da]
        payload = np.empty(sum(sizes), np.float32)
        self.world.Recv(payload, source=source, tag=TAG_DATA)
        obs, act, rew, mean, std = np.split(payload, np.cumsum(sizes)[:-1])
        return Chunk(obs.reshape(n, ds), act.reshape(m, da), rew, mean.reshape(m, da),
                     std.reshape(m, da), header.end, source, header.agent)

    def recv_bounds(self, actor: int) -> tuple[np.ndarray, np.ndarray]:
        """The action box (low, high) that ``actor`` sends at its start (TAG_BOUNDS)."""
        bounds = np.empty(2 * self.act_dim, np.float64)
        self.world.Recv(bounds, source=actor, tag=TAG_BOUNDS)
        return bounds[:self.act_dim], bounds[self.act_dim:]

    def send_program(self, actor: int, program: Program) -> None:
        """The behaviour policy ``actor`` runs (:func:`recv_program`)."""
        self.world.send(program, dest=actor, tag=TAG_PROGRAM)

    def send_params(self, actor: int, flat: np.ndarray, budget: int) -> None:
        """The float32 parameters ``flat`` and the environment steps the actor may take."""
        bits = np.array([budget, 0], np.int32).view(np.float32)
        self._send(np.concatenate([np.asarray(flat, np.float32), bits]), actor, TAG_PARAMS)

    def send_stop(self, actor: int) -> None:
        self._send(np.empty(0, np.float32), actor, TAG_STOP)

    def send_cut(self, actor: int) -> None:
        self._send(np.empty(0, np.float32), actor, TAG_CUT)

    def send_eval(self, actor: int, flat: np.ndarray, episodes: int, final: bool = False) -> None:
        """An evaluation round of ``episodes`` with the parameters ``flat``; ``final``: the
        run's last, which drops the actor's training episode in progress."""
        self._send(np.append(flat, np.array([episodes, final], np.float32)), actor, TAG_EVAL)

    def resume(self, budgets: dict[int, int]) -> None:
        """Nothing to resume: actor ranks wait for their learner's first reply."""

    def request_checkpoints(self, actors: list[int], step: int) -> None:
        """Ask each (waiting) actor to write its checkpoint part; wait until all have (or
        are lost: the checkpoint then has no part of theirs)."""
        mpi = _mpi()
        for actor in actors:
            self._send(np.array([step], np.float64), actor, TAG_CHECKPOINT)
        for actor in actors:
            try:
                self.world.Recv(np.empty(0, np.float32), source=actor, tag=TAG_SAVED)
            except mpi.Exception as err:
                if not self._note_failures(err):
                    raise
