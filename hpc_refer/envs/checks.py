"""The checks of a solver's answers and declarations at the interface (no MPI, no torch):
the state, the step answer and the step values validated, naming the field and what was
expected; the metric names and ``state_rank`` declared by a solver class; the one-vector form
of a step result that a team's state rank sends to team rank 0. Used by
:class:`~hpc_refer.envs.driver.TeamDriver` and by the external solvers' wire checks.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from hpc_refer.config.modes import ConfigError
from hpc_refer.envs.interface import SolverFault, Status, Team

METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
FLOAT32 = np.dtype(np.float32)
"""The dtype of states as stored (a state of another dtype is cast, one of this is copied)."""


def metric_names(source: Any, where: str, attribute: str = "episode_metrics"
                  ) -> tuple[str, ...]:
    """The solver's ``episode_metrics`` (or ``step_metrics``) names, checked."""
    names = tuple(getattr(source, attribute, ()))
    if len(set(names)) != len(names) or not all(
            isinstance(n, str) and METRIC_NAME.fullmatch(n) for n in names):
        raise ConfigError(f"{where}.{attribute} = {names!r} is invalid: allowed is a tuple "
                          f"of distinct identifiers")
    return names


def state_rank_of(env: Any, team: Team | None) -> int:
    """The solver's ``state_rank`` (0 when it has none), checked against the team size."""
    size = team.size if team is not None else 1
    rank = getattr(env, "state_rank", 0)
    if isinstance(rank, bool) or not isinstance(rank, int | np.integer) or not 0 <= rank < size:
        raise ConfigError(f"{type(env).__name__}.state_rank = {rank!r} is invalid: allowed are "
                          f"the team ranks 0..{size - 1}")
    return int(rank)


def agents_of(env: Any, where: str) -> int:
    """The solver's ``n_agents`` (1 when it declares none): agents that share the declared
    spaces and one policy (see :mod:`hpc_refer.envs`), checked to be an integer >= 1."""
    n = getattr(env, "n_agents", 1)
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise ConfigError(f"{where}.n_agents = {n!r} is invalid: allowed are integers >= 1 "
                          f"(the agents of one simulation, sharing obs_dim and act_dim)")
    return int(n)


def pack_step(obs: Any, reward: Any, status: Any, values: np.ndarray) -> np.ndarray:
    """A step result as one float64 vector [n, reward[n], status[n], m, values[m], state...]
    (see :func:`unpack_step`; n: the agents, 1 for a scalar reward; ``values``: the
    solver's step metrics)."""
    rewards = np.asarray(reward, np.float64).ravel()
    n = rewards.size
    return np.concatenate([[n], rewards, np.asarray(status, np.float64).ravel(),
                           [values.size], values, np.asarray(obs, np.float64).ravel()])


def unpack_step(packed: np.ndarray) -> tuple[tuple[np.ndarray, Any, Any], np.ndarray]:
    """((state, reward, status), step metric values) from a vector of :func:`pack_step`: a
    scalar reward and a Status for one agent, else arrays of n with the states as n rows."""
    n = int(packed[0])
    m = int(packed[1 + 2 * n])
    values = packed[2 + 2 * n:2 + 2 * n + m]
    state = packed[2 + 2 * n + m:]
    if n == 1:
        return (state, float(packed[1]), Status(int(packed[2]))), values
    return (state.reshape(n, -1), packed[1:1 + n], packed[1 + n:1 + 2 * n].astype(np.int64)
            ), values


class InterfaceError(SolverFault):
    """An answer of the wrong form (shape, dtype, type, status): at the first reset or step
    the solver is taken to break the interface (:class:`SolverStartError`), later a fault."""


INTERFACE = "interface: "
"""Prefix of an :class:`InterfaceError`'s text when it travels as a string."""

INTERFACE_HINT = ("the solver interface is reset(seed) -> state of shape (obs_dim,) and "
                  "step(action) -> (state, reward as a real scalar, Status); with n_agents "
                  "> 1 states of shape (n_agents, obs_dim), rewards and statuses of shape "
                  "(n_agents,)")


def check_state(obs: Any, obs_dim: int, agents: int = 1) -> np.ndarray:
    """A solver's state as float32 of shape (obs_dim,), or (agents, obs_dim) for a solver of
    several agents (every row checked, those of agents done too); SolverFault (naming the
    field) when it has another shape, is not real-valued or not finite in float32."""
    try:
        raw = np.asarray(obs)
    except (ValueError, TypeError) as err:
        raise InterfaceError(f"state is not an array ({err})") from None
    shape = (obs_dim,) if agents == 1 else (agents, obs_dim)
    if raw.shape != shape:
        raise InterfaceError(f"state has shape {raw.shape}, expected {shape}"
                             + (" (n_agents, obs_dim)" if agents > 1 else ""))
    if raw.dtype.kind not in "biuf":
        raise InterfaceError(f"state has dtype {raw.dtype}, expected real numbers")
    if raw.dtype is FLOAT32:
        state = raw.copy()  # (the solver may reuse its array)
    else:
        with np.errstate(over="ignore"):  # beyond float32's range: inf, refused below
            state = raw.astype(np.float32)
    if not all_finite(state):
        bad = np.flatnonzero(~np.isfinite(state))
        where = np.unravel_index(bad[0], raw.shape)
        index = ", ".join(str(int(i)) for i in where)
        raise SolverFault(f"state[{index}] = {raw[where]} is not finite in float32 "
                          f"({bad.size} such values)")
    return state


_ZEROS: dict[int, np.ndarray] = {}
"""Zero vectors of float32, by size, for :func:`all_finite`."""


def all_finite(state: np.ndarray) -> bool:
    """Whether every value of the float32 array ``state`` is finite, as one dot product with
    zeros: 0 when they all are, nan otherwise (0 inf and 0 nan are nan). On every state of
    every step this costs a third of ``np.isfinite(state).all()`` (two ufunc calls and a
    reduction's wrapper), about 1 us of an actor's step."""
    flat = state.reshape(-1)
    zeros = _ZEROS.get(flat.size)
    if zeros is None:
        zeros = _ZEROS[flat.size] = np.zeros(flat.size, np.float32)
    return math.isfinite(flat.dot(zeros))


def check_step(answer: Any, obs_dim: int) -> tuple[np.ndarray, float, Status]:
    """A solver's ``step`` answer validated: (state as by :func:`check_state`, the reward as
    a finite float, the Status); SolverFault naming the field otherwise."""
    if not isinstance(answer, tuple | list) or len(answer) != 3:
        raise InterfaceError(f"returned {type(answer).__name__}, expected a tuple (state, "
                             f"reward, status)")
    obs, reward, status = answer
    state = check_state(obs, obs_dim)
    if isinstance(reward, float):  # a Python float or numpy float64: the common answer
        if not math.isfinite(reward):
            raise SolverFault(f"reward = {float(reward)} is not finite")
        return state, float(reward), _status(status)
    r = np.asarray(reward)
    if r.ndim:
        raise InterfaceError(f"reward has shape {r.shape}, expected a scalar")
    if r.dtype.kind not in "iuf":
        raise InterfaceError(f"reward = {reward!r} is not a real number")
    if not np.isfinite(r):
        raise SolverFault(f"reward = {float(r)} is not finite")
    return state, float(r), _status(status)


def _status(status: Any) -> Status:
    """A solver's status as :class:`Status`; InterfaceError for another value."""
    if type(status) is Status:  # the common answer, without the enum's lookup
        return status
    try:
        return Status(status)
    except (ValueError, TypeError):
        raise InterfaceError(f"status = {status!r} is unknown (0 continue, 1 terminal, "
                             f"2 truncated)") from None


def check_answer(answer: Any, obs_dim: int, agents: int = 1) -> tuple[np.ndarray, Any, Any]:
    """A ``step`` answer validated: :func:`check_step` for one agent, else
    :func:`check_agents_step`."""
    return (check_step(answer, obs_dim) if agents == 1
            else check_agents_step(answer, obs_dim, agents))


def check_agents_step(answer: Any, obs_dim: int, agents: int
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``step`` answer of a solver of ``agents`` agents validated: (states as by
    :func:`check_state`, rewards as float64 of shape (agents,), finite, statuses as int64 of
    shape (agents,), each a :class:`Status`); SolverFault naming the field and the agent
    otherwise."""
    if not isinstance(answer, tuple | list) or len(answer) != 3:
        raise InterfaceError(f"returned {type(answer).__name__}, expected a tuple (states, "
                             f"rewards, statuses)")
    obs, reward, status = answer
    state = check_state(obs, obs_dim, agents)
    r, s = np.asarray(reward), np.asarray(status)
    for name, a in (("rewards", r), ("statuses", s)):
        if a.shape != (agents,):
            raise InterfaceError(f"{name} have shape {a.shape}, expected ({agents},) "
                                 f"(n_agents,)")
    if r.dtype.kind not in "iuf":
        raise InterfaceError(f"rewards have dtype {r.dtype}, expected real numbers")
    bad = np.flatnonzero(~np.isfinite(r))
    if bad.size:
        raise SolverFault(f"rewards[{bad[0]}] = {float(r[bad[0]])} is not finite")
    known = np.isin(s, [int(v) for v in Status]) if s.dtype.kind in "iuf" else np.zeros(
        agents, bool)
    if not known.all():
        k = int(np.flatnonzero(~known)[0])
        raise InterfaceError(f"statuses[{k}] = {s[k].item()!r} is unknown (0 continue, 1 "
                             f"terminal, 2 truncated)")
    return state, r.astype(np.float64), s.astype(np.int64)


def check_values(values: Any, names: tuple[str, ...]) -> np.ndarray:
    """A solver's ``step_values()`` as float64 of shape (len(names),), finite; SolverFault
    (an :class:`InterfaceError` for the wrong form) naming the metric otherwise."""
    try:
        v = np.asarray(values, np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise InterfaceError(f"step_values() returned {values!r}, expected {len(names)} real "
                             f"numbers ({', '.join(names)})") from None
    if v.size != len(names):
        raise InterfaceError(f"step_values() returned {v.size} values, expected {len(names)} "
                             f"({', '.join(names)})")
    bad = np.flatnonzero(~np.isfinite(v))
    if bad.size:
        raise SolverFault(f"step_values() gave {names[bad[0]]} = {v[bad[0]]}, not finite")
    return v
