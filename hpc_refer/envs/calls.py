"""One rank's part of a solver call, as an answer a team can agree on: the solver's code
(a reset, a step, a construction) run under its deadline (SIGALRM, see
:func:`~hpc_refer.envs.timeouts.call_with_alarm`), its answer checked
(:mod:`hpc_refer.envs.checks`), and every exception of the solver's code turned into an
ERROR answer with its text and traceback; the first construction of a solver
(:func:`start_solver`) and how a faulty one is rebuilt (:func:`rebuild_factory`,
:func:`rebuilds_after_fault`). Used by :class:`~hpc_refer.envs.driver.TeamDriver` and the
team ranks' :func:`~hpc_refer.envs.driver.serve_team`.
"""

from __future__ import annotations

import functools
import logging
import sys
import traceback
from collections.abc import Callable
from enum import IntEnum
from typing import Any, NamedTuple

import numpy as np

from hpc_refer.config.modes import ConfigError
from hpc_refer.envs.checks import (
    INTERFACE,
    InterfaceError,
    check_answer,
    check_state,
    check_values,
)
from hpc_refer.envs.external import ExternalEnv
from hpc_refer.envs.interface import EnvironmentFinished, SolverFault, SolverStartError, Team
from hpc_refer.envs.timeouts import CallTimeout, call_with_alarm, deadline_after

LOG = logging.getLogger(__name__)

TRACE = "\0"
"""Separates an error's text from its traceback in the message of a team rank whose call
failed (:meth:`~hpc_refer.envs.interface.Team.send_error`)."""

STEP_TIMEOUT = "run.env_step_timeout"
"""The limit of a reset or step (named in messages)."""
BUILD_TIMEOUT = "run.env_build_timeout"
"""The limit of a solver's construction, at start-up and in a rebuild (named in messages)."""


class Outcome(IntEnum):
    """How one rank's part of a solver call ended; a team agrees on the largest."""

    OK = 0
    FINISHED = 1
    """``reset`` raised EnvironmentFinished."""
    ERROR = 2


OK = Outcome.OK
"""(A module constant for the answer of every valid step: a member read through its enum
class is a descriptor's lookup.)"""


class Answer(NamedTuple):
    outcome: Outcome
    result: Any = None
    """OK and checked: the validated state (reset), (state, reward, status) (step) or the new
    solver (a construction)."""
    error: str = ""
    """ERROR: what went wrong."""
    trace: str = ""
    """ERROR from an exception of the solver's code: its traceback."""


NO_VALUES = np.zeros(0)
"""The step values of a solver without ``step_metrics`` (one array, not one per step)."""


def guarded(work: Callable[..., Any], deadline: float | None, *args: Any) -> Answer:
    """``work(*args)`` (the solver's code and the checks of its answer) as an answer: OK with
    its result, FINISHED for :class:`EnvironmentFinished`, ERROR for an exception (the text
    of a :class:`SolverFault`, an :class:`InterfaceError`'s prefixed by :data:`INTERFACE`;
    any other exception named with its type and traceback). :class:`CallTimeout` (the
    ``deadline`` passed, see :func:`~hpc_refer.envs.timeouts.call_with_alarm`) propagates."""
    try:
        return Answer(OK, call_with_alarm(work, deadline, *args))
    except EnvironmentFinished:
        return Answer(Outcome.FINISHED)
    except InterfaceError as fault:
        return Answer(Outcome.ERROR, error=INTERFACE + str(fault))
    except SolverFault as fault:
        return Answer(Outcome.ERROR, error=str(fault))
    except Exception as err:  # any failure of the solver's code is its fault
        return Answer(Outcome.ERROR, error=f"raised {type(err).__name__}: {err}",
                       trace=traceback.format_exc())


def attempt(env: Any, call: str, arg: Any, obs_dim: int, check: bool,
             deadline: float | None, step_names: tuple[str, ...] = (), agents: int = 1
             ) -> Answer:
    """One rank's part of ``env.<call>(arg)`` (call: ``reset`` or ``step``) as
    :func:`guarded` answers it; its answer validated when ``check``: the state (reset), or
    ((state, reward, status), the values of ``step_names`` from ``step_values()``) (step),
    in the form of a solver of ``agents`` agents (:func:`~hpc_refer.envs.checks.check_answer`)."""
    return guarded(_checked_call, deadline, env, call, arg, obs_dim, check, step_names, agents)


def _checked_call(env: Any, call: str, arg: Any, obs_dim: int, check: bool,
                  step_names: tuple[str, ...], agents: int) -> Any:
    """The solver's ``env.<call>(arg)`` and the checks of its answer (see :func:`attempt`)."""
    result = getattr(env, call)(arg)
    if not check:
        return None
    if call == "reset":
        return check_state(result, obs_dim, agents)
    values = check_values(env.step_values(), step_names) if step_names else NO_VALUES
    return check_answer(result, obs_dim, agents), values


def construct(factory: Callable[[Any], Any], team: Team | None,
               deadline: float | None) -> Answer:
    """One rank's construction ``factory(team)`` as :func:`guarded` answers it (the solver is
    the result); EnvironmentFinished, which only ``reset`` may raise, is an ERROR here."""
    answer = guarded(factory, deadline, team)
    if answer.outcome is Outcome.FINISHED:
        return Answer(Outcome.ERROR, error="raised EnvironmentFinished (only reset may)")
    return answer


def one_line(text: str) -> str:
    """``text`` with its line breaks replaced by spaces (a start-up error is one line)."""
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def factory_label(factory: Callable[[Any], Any]) -> str:
    """What ``factory`` builds, for messages: the class of a :func:`functools.partial` (as
    :meth:`~hpc_refer.envs.kinds.solver_class.SolverClass.factory` makes) or a class used as
    its own factory; ``solver`` otherwise."""
    target = factory.func if isinstance(factory, functools.partial) else factory
    return target.__name__ if isinstance(target, type) else "solver"


def start_solver(factory: Callable[[Any], Any], team: Team | None, label: str,
                 timeout: float) -> Any:
    """The first construction of a solver: ``factory(team)`` within ``timeout`` seconds
    (``run.env_build_timeout``, 0: no limit; SIGALRM as for calls, see
    :func:`~hpc_refer.envs.timeouts.call_with_alarm`). A constructor that raises or does not return
    in time is a :class:`SolverStartError` naming ``label`` (e.g. ``env 0 (MySolver)``), the
    team rank (in a team of K > 1) and the exception, its traceback as ``details``: a solver
    that cannot be built stops the run at once, from the rank where it failed."""
    where = f" on team rank {team.rank}" if team is not None and team.size > 1 else ""
    try:
        answer = construct(factory, team, deadline_after(timeout))
    except CallTimeout:
        raise SolverStartError(f"{label}.__init__{where}: no answer within {BUILD_TIMEOUT} = "
                               f"{timeout:g} s (the solver cannot start)") from None
    if answer.outcome is not Outcome.OK:
        raise SolverStartError(one_line(f"{label}.__init__{where}: {answer.error} (the "
                                         "solver cannot start)"), answer.trace)
    return answer.result


def close_faulty(env: Any, deadline: float | None) -> None:
    """Close a solver that failed; what its close() raises is reported and ignored."""
    try:
        call_with_alarm(env.close, deadline)
    except (Exception, CallTimeout) as err:
        LOG.warning("closing the faulty %s failed (%s: %s); it is replaced anyway",
                    type(env).__name__, type(err).__name__, err)


def rebuilds_after_fault(env: Any) -> bool:
    """The solver's ``rebuild_after_fault`` (default True: closed and constructed anew after
    each fault; False: a reset is enough, the same instance goes on), checked."""
    rebuild = getattr(env, "rebuild_after_fault", True)
    if not isinstance(rebuild, bool):
        raise ConfigError(f"{type(env).__name__}.rebuild_after_fault = {rebuild!r} is invalid: "
                          "allowed are True (rebuild the solver after a fault, the default) "
                          "and False (a reset after a fault is enough)")
    return rebuild


def rebuild_factory(env: Any) -> Callable[[Team | None], Any] | None:
    """How :class:`TeamDriver` constructs ``env`` anew after a fault when it is given no
    factory: a Python solver's class called with the team (as its kind's factory builds
    it), a GymEnv from its id; None for an external solver (reset over the wire instead)."""
    if isinstance(env, ExternalEnv):
        return None
    gym_env = sys.modules.get("hpc_refer.envs.gym_env")  # imported once a GymEnv exists
    if gym_env is not None and isinstance(env, gym_env.GymEnv):
        env_id, params = env.env_id, env.params
        return lambda team: gym_env.GymEnv(env_id, **params)
    cls = type(env)
    return lambda team: cls(team)
