"""The names a Python solver uses, importable without gymnasium or MPI::

    from hpc_refer.envs import EnvironmentFinished, SolverFault, Status

``Status`` is what ``step`` returns with the state and reward. A solver may raise
:class:`SolverFault` from ``reset`` or ``step`` for a step it cannot make (a diverged field, a
failed sub-iteration): like any exception or invalid answer it ends the episode as a fault,
nothing of the step is stored, and the solver is built anew; :class:`EnvironmentFinished` from
``reset`` says it has no more episodes. :class:`SolverFailure` and :class:`SolverStartError`
are what hpc_refer raises when an environment cannot go on or cannot start.
"""

from __future__ import annotations

from enum import IntEnum


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
    """A solver cannot start: it never answered its first message (an external solver's
    HELLO, a Python solver's first reset) within ``run.env_step_timeout``, its start-up
    messages are unusable, or its first answers break the interface. The run stops at
    start-up with this one-line message."""
