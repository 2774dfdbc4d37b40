"""The names a Python solver uses, importable without gymnasium, torch, numba or MPI::

    from hpc_refer.envs import EnvironmentFinished, SolverFault, Status
    from hpc_refer.envs.interface import Team          # for type hints

:class:`Team` is what a solver's constructor receives (None in a run of one process): a
protocol, the calls a solver and the team driver may make. Its MPI implementation is
:class:`hpc_refer.parallel.world.MpiTeam`, built by hpc_refer's entry points and passed in, so a
solver never imports :mod:`hpc_refer.parallel` (nor, through it, mpi4py).

``Status`` is what ``step`` returns with the state and reward (one per agent, as an integer
array of shape (n_agents,), for a solver of several agents: see :mod:`hpc_refer.envs`). A
solver may raise :class:`SolverFault` from ``reset`` or ``step`` for a step it cannot make
(a diverged field, a failed sub-iteration): like any exception or invalid answer it ends the
episode as a fault, nothing of the step is stored, and the solver is built anew (unless its
class declares ``rebuild_after_fault = False``: then the next ``reset`` is all that follows);
:class:`EnvironmentFinished` from ``reset`` says it has no more episodes.
:class:`SolverFailure` and :class:`SolverStartError` are what hpc_refer raises when an
environment cannot go on or cannot start.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, Protocol

import numpy as np


class Status(IntEnum):
    """How an environment step ended: the episode goes on, reached a terminal state, or was
    cut by a time limit (the value of the last state is then bootstrapped, never zeroed)."""

    CONTINUE = 0
    TERMINAL = 1
    TRUNCATED = 2


class EnvironmentFinished(Exception):  # noqa: N818 (a signal, not an error)
    """Raised by a solver's ``reset`` when it has no further episodes to run: its actor tells
    its learner and stops; training goes on with the other actors."""


class SolverFault(ValueError):  # noqa: N818 (a recoverable fault, not a fatal error)
    """A solver's answer failed validation, its call raised, or (in-process solvers) it did
    not answer in time: the episode is ended as a fault and the run goes on."""


class SolverFailure(RuntimeError):  # noqa: N818 (the name the training loop catches)
    """An environment cannot go on: ``run.max_env_failures`` faults in a row, or a solver
    that stopped answering and cannot be recovered (a team or an external solver). The
    training loop checkpoints and stops; the message names the environment and the cause."""


class SolverStartError(RuntimeError):
    """A solver cannot start: its constructor raised or did not return within
    ``run.env_build_timeout``, its first reset raised, it never answered its first message
    (an external solver's HELLO, a Python solver's first reset) within
    ``run.env_step_timeout``, its start-up messages are unusable, or its first answers break
    the interface. The run stops at start-up with this one-line message, on every rank and
    without counting a fault.

    ``details``: the traceback of the solver's exception (from whichever team rank raised
    it), for the run's log; empty when there is none (a timeout, a refused answer)."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


class TeamCommand(IntEnum):
    """What team rank 0 (the actor) asks the solver ranks of its team to do."""

    RESET = 0
    STEP = 1
    STOP = 2
    REBUILD = 3
    """Close the solver and construct it anew (after a solver fault, unless the solver
    declares ``rebuild_after_fault = False``); the team then agrees on how it went, as after
    a reset or step."""
    SNAPSHOT = 4
    """Take the solver's ``snapshot()`` (collective; team rank 0 writes it)."""


class Team(Protocol):
    """An environment team as a solver receives it: the K ranks that make every call of the
    solver together (:class:`hpc_refer.parallel.world.MpiTeam` over an MPI communicator).

    Rank 0 of the team is the actor. A solver uses ``rank``, ``size``, the collective
    helpers (:meth:`sum`, :meth:`sum_array`, :meth:`gather_rows`, :meth:`halo`,
    :meth:`exchange_slabs`) or ``comm`` itself, to do its own MPI. The team driver
    (:mod:`hpc_refer.envs.driver`) uses the messages below them: team rank 0 broadcasts each
    call (:meth:`send_command`), the other ranks follow (:meth:`receive_command`); after each
    call the team agrees on how it went (:meth:`agree`); the solver's ``state_rank``, when it
    is not rank 0, sends its results (:meth:`send_result`), and a rank whose call failed its
    error text (:meth:`send_error`). Team rank 0 waits for these with a deadline (polling,
    never blocking), so a rank that stops answering is a TimeoutError, not a hang.
    """

    @property
    def rank(self) -> int:
        """This rank's index in the team, 0..size-1 (0: the actor)."""
        ...

    @property
    def size(self) -> int:
        """The number of ranks K of the team."""
        ...

    @property
    def comm(self) -> Any:
        """The team's communicator itself (an mpi4py ``Comm`` over exactly the team's
        ranks), for a solver that does its own MPI."""
        ...

    def sum(self, value: float) -> float:
        """Sum of a scalar over the team, on every rank (collective)."""
        ...

    def sum_array(self, local: np.ndarray) -> np.ndarray:
        """Element-wise sum of a float64 array over the team, on every rank (collective)."""
        ...

    def gather_rows(self, local: np.ndarray, root: int = 0) -> np.ndarray | None:
        """Every rank's float64 vector concatenated in rank order on team rank ``root``,
        None elsewhere (collective; the vectors may differ in length)."""
        ...

    def halo(self, left_edge: float, right_edge: float) -> tuple[float, float]:
        """Periodic neighbour exchange of one value each way (a ring of ranks): returns (the
        right edge of the left rank, the left edge of the right rank); collective."""
        ...

    def exchange_slabs(self, to_left: np.ndarray, to_right: np.ndarray
                       ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Non-periodic halo exchange of float64 arrays along the team's ranks (a domain cut
        into slabs, rank r between r - 1 and r + 1): sends ``to_left`` to rank - 1 and
        ``to_right`` to rank + 1, returns (what rank - 1 sent right, what rank + 1 sent left),
        None on a side without a neighbour. Both arrays have the same shape on every rank;
        collective."""
        ...

    def send_result(self, values: np.ndarray) -> None:
        """The solver's state rank: send its reset/step result (float64) to team rank 0."""
        ...

    def send_command(self, command: TeamCommand, payload: np.ndarray) -> None:
        """Team rank 0: broadcast a command and its float64 payload to the solver ranks."""
        ...

    def receive_command(self) -> tuple[TeamCommand, np.ndarray]:
        """Solver ranks: the next command of team rank 0 and its payload."""
        ...

    def agree(self, value: int, deadline: float | None = None) -> int:
        """The maximum of ``value`` over the team's ranks, on every rank; TimeoutError when
        some rank has not joined by the :func:`time.monotonic` ``deadline`` (None: no
        limit)."""
        ...

    def receive_result(self, source: int, deadline: float | None = None) -> np.ndarray:
        """Team rank 0: the result that team rank ``source`` sent, whatever its length;
        TimeoutError when none came by the ``deadline`` (None: no limit)."""
        ...

    def send_error(self, text: str) -> None:
        """A solver rank whose call failed: its error text (with the traceback, if any, after
        :data:`hpc_refer.envs.calls.TRACE`) to team rank 0."""
        ...

    def receive_error(self, source: int, deadline: float | None = None) -> str:
        """Team rank 0: the error text of team rank ``source`` (TimeoutError at the
        ``deadline``)."""
        ...
