"""The checks of a solver's answers and declarations at the interface (no MPI, no torch):
the state, the step answer and the step values validated, naming the field and what was
expected; the metric names and ``state_rank`` declared by a solver class; the one-vector form
of a step result that a team's state rank sends to team rank 0. Used by
:class:`~hpc_refer.envs.driver.TeamDriver` and by the external solvers' wire checks.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from hpc_refer.config import ConfigError
from hpc_refer.envs.interface import SolverFault, Status, Team

METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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


def pack_step(obs: Any, reward: float, status: Status, values: np.ndarray) -> np.ndarray:
    """A step result as one float64 vector [reward, status, m, values[m], state...] (see
    :func:`unpack_step`; ``values``: the solver's step metrics)."""
    return np.concatenate([[float(reward), int(status), values.size], values,
                           np.asarray(obs, np.float64).ravel()])


def unpack_step(packed: np.ndarray) -> tuple[tuple[np.ndarray, float, Status], np.ndarray]:
    """((state, reward, status), step metric values) from a vector of :func:`pack_step`."""
    m = int(packed[2])
    return (packed[3 + m:], float(packed[0]), Status(int(packed[1]))), packed[3:3 + m]


class InterfaceError(SolverFault):
    """An answer of the wrong form (shape, dtype, type, status): at the first reset or step
    the solver is taken to break the interface (:class:`SolverStartError`), later a fault."""


INTERFACE = "interface: "
"""Prefix of an :class:`InterfaceError`'s text when it travels as a string."""

INTERFACE_HINT = ("the solver interface is reset(seed) -> state of shape (obs_dim,) and "
                  "step(action) -> (state, reward as a real scalar, Status)")

def check_state(obs: Any, obs_dim: int) -> np.ndarray:
    """A solver's state as float32 of shape (obs_dim,); SolverFault (naming the field) when
    it has another shape, is not real-valued or not finite in float32."""
    try:
        raw = np.asarray(obs)
    except (ValueError, TypeError) as err:
        raise InterfaceError(f"state is not an array ({err})") from None
    if raw.shape != (obs_dim,):
        raise InterfaceError(f"state has shape {raw.shape}, expected ({obs_dim},)")
    if raw.dtype.kind not in "biuf":
        raise InterfaceError(f"state has dtype {raw.dtype}, expected real numbers")
    with np.errstate(over="ignore"):
        state = raw.astype(np.float32)
    bad = np.flatnonzero(~np.isfinite(state))
    if bad.size:
        raise SolverFault(f"state[{bad[0]}] = {raw[bad[0]]} is not finite in float32 "
                          f"({bad.size} such values)")
    return state


def check_step(answer: Any, obs_dim: int) -> tuple[np.ndarray, float, Status]:
    """A solver's ``step`` answer validated: (state as by :func:`check_state`, the reward as
    a finite float, the Status); SolverFault naming the field otherwise."""
    if not isinstance(answer, tuple | list) or len(answer) != 3:
        raise InterfaceError(f"returned {type(answer).__name__}, expected a tuple (state, "
                             f"reward, status)")
    obs, reward, status = answer
    state = check_state(obs, obs_dim)
    r = np.asarray(reward)
    if r.ndim:
        raise InterfaceError(f"reward has shape {r.shape}, expected a scalar")
    if r.dtype.kind not in "iuf":
        raise InterfaceError(f"reward = {reward!r} is not a real number")
    if not np.isfinite(r):
        raise SolverFault(f"reward = {float(r)} is not finite")
    try:
        return state, float(r), Status(status)
    except (ValueError, TypeError):
        raise InterfaceError(f"status = {status!r} is unknown (0 continue, 1 terminal, "
                             f"2 truncated)") from None


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
