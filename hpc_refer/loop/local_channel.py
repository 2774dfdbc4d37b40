"""The actor's side of one process (no mpirun, or ``mpirun -n 1``): the in-process channel
between the learner loop and its single actor (:class:`LocalChannel`), and the actor's steps
up to its next message (:func:`next_message`), which MPI actor ranks run too.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from hpc_refer.config.resolve import Config
from hpc_refer.envs.interface import EnvironmentFinished, SolverFailure
from hpc_refer.envs.supervision import STOP
from hpc_refer.loop.actor import Actor
from hpc_refer.loop.actor_checkpoint import write_actor_part
from hpc_refer.report.records import Chunk, ChunkEnd, EpisodeRecord, Incoming, MessageKind


def empty_chunk(actor: Actor) -> Chunk:
    """A chunk without steps: an interrupted actor's answer when it has nothing pending."""
    obs = np.empty((0, actor.row_dim), np.float32)
    act = np.empty((0, actor.env.act_dim), np.float32)
    return Chunk(obs, act, np.empty(0, np.float32), act, act, ChunkEnd.OPEN, actor.source)


def next_message(actor: Actor, interrupted: Callable[[], bool] = lambda: False
                 ) -> tuple[Chunk, EpisodeRecord | None] | None:
    """Step ``actor`` until it has a chunk to send (with the episode it ends); None when its
    environment has finished its work. When ``interrupted()`` turns true between steps, the
    steps collected so far are sent at once (possibly none)."""
    while True:
        try:
            chunk, episode = actor.step()
        except EnvironmentFinished:
            return None
        if chunk is not None:
            return chunk, episode
        if interrupted():
            cut = actor.cut()
            return (cut if cut is not None else empty_chunk(actor)), None


class LocalChannel:
    """The in-process channel of one process: the learner's messages drive the actor.

    ``send_params`` loads the parameters into the actor (a copy, as a message would carry)
    and grants it its step budget; a blocking ``poll`` runs the released actor up to its next
    chunk (or its evaluation round); a non-blocking one returns nothing, since no other
    process could have sent anything. Every message carries the actor's fault count. The
    actor writes its checkpoint part when asked, into ``run_dir``.
    """

    in_process = True

    def __init__(self, actor: Actor, config: Config, rank: int = 0,
                 run_dir: Path | None = None) -> None:
        self.actor = actor
        self.config = config
        self.rank = rank
        self.run_dir = run_dir
        self.released = False
        self.eval_episodes = 0
        self.eval_final = False

    def poll(self, block: bool) -> Incoming | None:
        if not (block and self.released):
            return None
        self.released = False
        try:
            if self.eval_episodes:
                episodes, self.eval_episodes = self.eval_episodes, 0
                message = Incoming(self.rank, MessageKind.EVAL,
                                   evals=tuple(self.actor.evaluate(episodes,
                                                                   final=self.eval_final)))
            else:
                steps = next_message(self.actor, STOP)
                message = (Incoming(self.rank, MessageKind.FINISHED) if steps is None
                           else Incoming(self.rank, MessageKind.CHUNK, *steps,
                                         between=self.actor.between_episodes))
        except SolverFailure as failure:
            message = Incoming(self.rank, MessageKind.FAILED, failure=str(failure))
        return message._replace(faults=self.actor.faults)

    def send_params(self, actor: int, flat: np.ndarray, budget: int) -> None:
        self.actor.load(flat.copy())
        self.actor.grant(budget)
        self.released = True

    def resume(self, budgets: dict[int, int]) -> None:
        """After a restore: the actor released before the checkpoint (a key of ``budgets``,
        with the budget recomputed for it) runs again, with the policy copy it had."""
        self.released = self.rank in budgets
        if self.released:
            self.actor.grant(budgets[self.rank])

    def send_stop(self, actor: int) -> None:
        self.released = False

    def send_cut(self, actor: int) -> None:
        """Nothing to cut: the actor runs only inside a blocking poll."""

    def send_eval(self, actor: int, flat: np.ndarray, episodes: int, final: bool = False) -> None:
        self.actor.load(flat.copy())
        self.released = True
        self.eval_episodes, self.eval_final = episodes, final

    def request_checkpoints(self, actors: list[int], step: int) -> None:
        if actors and self.run_dir is not None:
            write_actor_part(self.run_dir, step, 0, self.actor, self.config)
