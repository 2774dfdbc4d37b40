"""What a learner knows of its actors: who runs, who waits for a reply, what each was
granted, whether its last chunk ended an episode, which finished, failed or hang, and the
solver faults each reported (the one place on the learner side that holds them).

The learner loop (:mod:`hpc_refer.loop.learner_loop`) updates the book from every message
(:meth:`ActorBook.note`) and asks it whom to answer; its state is part of the learner's
checkpoint part (:meth:`ActorBook.checkpoint_state`, keys of the loop tree).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from hpc_refer.report.records import ChunkEnd, Incoming, MessageKind, StateTree

SPEED_CAP = 10**9
"""The largest speed (:func:`speed`): a million steps per second. Speeds are integers so that
their sums over learners (float64 allreduces) are exact and every learner grants alike."""


def speed(steps: int, seconds: float) -> int:
    """An actor's speed, the weight of its step budgets (:func:`~hpc_refer.loop.learner_loop
    .grant_steps`): ``steps`` taken in ``seconds``, as steps per 1000 s rounded to an
    integer in [1, :data:`SPEED_CAP`]."""
    if seconds <= 0:
        return SPEED_CAP
    return max(1, min(SPEED_CAP, round(1000 * steps / seconds)))


@dataclass
class ActorBook:
    """The actors served by one learner (world ranks) and their state as the learner sees
    it."""

    actors: list[int]
    running: set[int] = field(default_factory=set)
    """Released (parameters or an evaluation round sent), no answer yet."""
    waiting: list[int] = field(default_factory=list)
    """Waiting for a reply, in the order their messages arrived."""
    granted: dict[int, int] = field(default_factory=dict)
    """Step budget of each actor released with parameters, until its next message."""
    between_episodes: dict[int, bool] = field(default_factory=dict)
    """Whether each actor's last chunk ended an episode (evaluation may then run)."""
    finished: list[int] = field(default_factory=list)
    """Actors whose environments finished their work."""
    stuck: set[int] = field(default_factory=set)
    """Actors stuck in a solver call, or whose team lost a rank: they answer nothing any
    more."""
    failures: list[str] = field(default_factory=list)
    """Why environments failed for good (one text each)."""
    faults: dict[int, int] = field(default_factory=dict)
    """Solver faults of each actor so far, as its latest message reported them."""
    released_at: dict[int, float] = field(default_factory=dict)
    """When each actor running with a step budget was released (``time.perf_counter()``)."""
    speeds: dict[int, int] = field(default_factory=dict)
    """Each actor's speed, the weight of its step budgets (:func:`speed`): that of its latest
    chunk, from its release to its message; none before its first chunk."""

    @classmethod
    def of(cls, actors: list[int]) -> ActorBook:
        """A book in which every actor waits for its first release."""
        return cls(list(actors), waiting=list(actors),
                   between_episodes=dict.fromkeys(actors, True))

    def note(self, message: Incoming, now: float) -> bool:
        """Book a message that arrived at ``now`` (``time.perf_counter()``): the sender no
        longer runs; it waits for a reply unless it finished or is stuck; a chunk of steps
        taken on a budget measures its speed. Returns whether the message carries steps to
        store (a chunk with at least one state)."""
        actor = message.actor
        if actor in self.stuck:  # a team that lost a rank may still send: it is out
            return False
        self.running.discard(actor)
        released_at = self.released_at.pop(actor, None)
        self.granted.pop(actor, None)
        if message.faults is not None:
            self.faults[actor] = message.faults
        if message.kind is MessageKind.FINISHED:
            self.finished.append(actor)
            return False
        if message.kind in (MessageKind.STUCK, MessageKind.LOST):
            if actor in self.waiting:  # its main thread answered after all, then hung
                self.waiting.remove(actor)
            self.failures.append(message.failure)
            self.stuck.add(actor)
            return False
        self.waiting.append(actor)
        if message.kind is MessageKind.FAILED:
            self.failures.append(message.failure)
            return False
        if message.kind is MessageKind.EVAL:
            return False
        chunk = message.chunk
        assert chunk is not None
        if chunk.obs.shape[0] == 0:
            return False
        self.between_episodes[actor] = (chunk.end != ChunkEnd.OPEN if message.between is None
                                        else message.between)
        if released_at is not None and chunk.act.shape[0]:
            self.speeds[actor] = speed(chunk.act.shape[0], now - released_at)
        return True

    def release(self, actor: int, budget: int | None, now: float) -> None:
        """``actor`` was answered at ``now``: with parameters and a step ``budget``, or
        (None) with an evaluation round."""
        self.running.add(actor)
        if budget is not None:
            self.granted[actor] = budget
            self.released_at[actor] = now

    @property
    def unmeasured(self) -> int:
        """Actors running or waiting whose speed is not known yet."""
        return sum(a not in self.speeds for a in (*self.running, *self.waiting))

    def speed_sum(self, actors: Iterable[int]) -> int:
        """The summed speeds of ``actors`` (each measured)."""
        return sum(self.speeds[a] for a in actors)

    @property
    def total_faults(self) -> int:
        """Solver faults of all these actors so far."""
        return sum(self.faults.values())

    @property
    def answering(self) -> list[int]:
        """The actors that still answer requests (not finished, not stuck)."""
        gone = set(self.finished) | self.stuck
        return [a for a in self.actors if a not in gone]

    def checkpoint_state(self) -> StateTree:
        """The sets of the loop tree (``running``, ``waiting``, ``between_episodes``,
        ``actors``, ``finished``)."""
        return {"running": np.array(sorted(self.running), np.int64),
                "waiting": np.array(self.waiting, np.int64),
                "between_episodes": np.array([self.between_episodes[a] for a in self.actors]),
                "actors": np.array(self.actors, np.int64),
                "finished": np.array(self.finished, np.int64)}

    def restore_state(self, tree: StateTree) -> None:
        """Inverse of :meth:`checkpoint_state`, for a learner serving the same actors as the
        one that wrote it (else the book stays as :meth:`of` made it: all actors wait)."""
        self.running = {int(a) for a in tree["running"]}
        self.waiting = [int(a) for a in tree["waiting"]]
        self.between_episodes = dict(zip(self.actors, (bool(b) for b in
                                                       tree["between_episodes"]), strict=True))
        self.finished = [int(a) for a in tree["finished"]]
