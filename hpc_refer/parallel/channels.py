"""The actor <-> learner messages: the ranks' communicators (:class:`Fabric`) and the two ends
of the chunk / parameter exchange."""

from __future__ import annotations

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

    def __init__(self, world: Any, obs_dim: int, act_dim: int) -> None:
        self.world = world
        self.obs_dim = obs_dim
        self.act_dim = act_dim
        self._status = _mpi().Status()

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
        self.world.Send(np.concatenate([np.asarray(flat, np.float32), bits]), dest=actor,
                        tag=TAG_PARAMS)

    def send_stop(self, actor: int) -> None:
        self.world.Send(np.empty(0, np.float32), dest=actor, tag=TAG_STOP)

    def send_cut(self, actor: int) -> None:
        self.world.Send(np.empty(0, np.float32), dest=actor, tag=TAG_CUT)

    def send_eval(self, actor: int, flat: np.ndarray, episodes: int, final: bool = False) -> None:
        """An evaluation round of ``episodes`` with the parameters ``flat``; ``final``: the
        run's last, which drops the actor's training episode in progress."""
        self.world.Send(np.append(flat, np.array([episodes, final], np.float32)), dest=actor,
                        tag=TAG_EVAL)

    def resume(self, budgets: dict[int, int]) -> None:
        """Nothing to resume: actor ranks wait for their learner's first reply."""

    def request_checkpoints(self, actors: list[int], step: int) -> None:
        """Ask each (waiting) actor to write its checkpoint part; wait until all have."""
        for actor in actors:
            self.world.Send(np.array([step], np.float64), dest=actor, tag=TAG_CHECKPOINT)
        for actor in actors:
            self.world.Recv(np.empty(0, np.float32), source=actor, tag=TAG_SAVED)
