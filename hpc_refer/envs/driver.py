"""Team rank 0's driver of an environment and the other team ranks' loop (:class:`TeamDriver`,
:func:`serve_team`): every call broadcast to the team, every answer validated (the checks of
the solver interface in :mod:`hpc_refer.envs`), faults and timeouts turned into
:class:`~hpc_refer.envs.interface.SolverFault`, :class:`~hpc_refer.envs.interface.SolverFailure`
or :class:`~hpc_refer.envs.interface.SolverStartError`, the interface probed by the first reset
and step, the step metrics recorded, the episode fields and the chosen episodes' snapshots
saved.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Callable
from enum import IntEnum
from pathlib import Path
from typing import Any, NamedTuple

import h5py
import numpy as np

from hpc_refer.config import ConfigError
from hpc_refer.envs.external import ExternalEnv
from hpc_refer.envs.interface import (
    EnvironmentFinished,
    SolverFailure,
    SolverFault,
    SolverStartError,
    Status,
    Team,
    TeamCommand,
)
from hpc_refer.records import StateTree
from hpc_refer.series import StepSeries
from hpc_refer.timeouts import CallTimeout, call_with_alarm, deadline_after

LOG = logging.getLogger(__name__)

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


class _Outcome(IntEnum):
    """How one rank's part of a solver call ended; a team agrees on the largest."""

    OK = 0
    FINISHED = 1
    """``reset`` raised EnvironmentFinished."""
    ERROR = 2


class _Answer(NamedTuple):
    outcome: _Outcome
    result: Any = None
    """OK and checked: the validated state (reset) or (state, reward, status) (step)."""
    error: str = ""
    """ERROR: what went wrong."""


NO_VALUES = np.zeros(0)
"""The step values of a solver without ``step_metrics`` (one array, not one per step)."""


def _attempt(env: Any, call: str, arg: Any, obs_dim: int, check: bool,
             deadline: float | None, step_names: tuple[str, ...] = ()) -> _Answer:
    """One rank's part of ``env.<call>(arg)`` (call: ``reset`` or ``step``), its answer
    validated when ``check``: the state (reset), or ((state, reward, status), the values of
    ``step_names`` from ``step_values()``) (step). Exceptions become an ERROR answer (the
    text of an :class:`InterfaceError` prefixed by :data:`INTERFACE`); :class:`CallTimeout`
    (the ``deadline`` passed, see :func:`~hpc_refer.timeouts.call_with_alarm`)
    propagates."""
    try:
        answer = call_with_alarm(lambda: getattr(env, call)(arg), deadline)
        if not check:
            return _Answer(_Outcome.OK)
        if call == "reset":
            return _Answer(_Outcome.OK, check_state(answer, obs_dim))
        values = check_values(env.step_values(), step_names) if step_names else NO_VALUES
        return _Answer(_Outcome.OK, (check_step(answer, obs_dim), values))
    except EnvironmentFinished:
        return _Answer(_Outcome.FINISHED)
    except InterfaceError as fault:
        return _Answer(_Outcome.ERROR, error=INTERFACE + str(fault))
    except SolverFault as fault:
        return _Answer(_Outcome.ERROR, error=str(fault))
    except Exception as err:  # any failure of the solver's code is its fault
        return _Answer(_Outcome.ERROR, error=f"raised {type(err).__name__}: {err}")


def _close_faulty(env: Any, deadline: float | None) -> None:
    """Close a solver that failed; what its close() raises is reported and ignored."""
    try:
        call_with_alarm(env.close, deadline)
    except (Exception, CallTimeout) as err:
        LOG.warning("closing the faulty %s failed (%s: %s); it is replaced anyway",
                    type(env).__name__, type(err).__name__, err)


def rebuild_factory(env: Any) -> Callable[[Team | None], Any] | None:
    """How :class:`TeamDriver` constructs ``env`` anew after a fault when it is given no
    factory: a Python solver's class called with the team (as :func:`env_factory` builds
    it), a GymEnv from its id; None for an external solver (reset over the wire instead)."""
    if isinstance(env, ExternalEnv):
        return None
    gym_env = sys.modules.get("hpc_refer.envs.gym_env")  # imported once a GymEnv exists
    if gym_env is not None and isinstance(env, gym_env.GymEnv):
        env_id, params = env.env_id, env.params
        return lambda team: gym_env.GymEnv(env_id, **params)
    cls = type(env)
    return lambda team: cls(team)


class TeamDriver:
    """Team rank 0's view of an environment: each call is broadcast to the team first, every
    answer is validated, the result comes from the solver's ``state_rank``, and faults and
    timeouts are turned into :class:`SolverFault`, :class:`SolverFailure` or
    :class:`SolverStartError`.

    ``factory`` builds the solver anew after a fault (default :func:`rebuild_factory`; the
    solver ranks of a team use theirs in :func:`serve_team`), ``index`` is the environment's
    index (named in messages), ``timeout`` is ``run.env_step_timeout`` (0: no limit),
    ``field_dir`` where :meth:`end_episode` saves the solver's ``episode_field()`` (None: not
    saved), ``series_dir`` where the values of the solver's ``step_metrics`` are recorded
    every ``series_stride`` steps (:class:`~hpc_refer.series.StepSeries`; None: not
    recorded), ``snapshot_dir`` where :meth:`end_episode` writes the solver's ``snapshot()``
    at the end of the episodes n (counted from 1) for which ``snapshot_due(n)`` is true
    (``run.snapshot``; None: never).

    Snapshots: a solver's optional ``snapshot()`` returns named 2-D arrays on team rank 0
    (None on the other ranks: collective, every team rank calls it through the command
    above), optionally with ``snapshot_extent`` (x_min, x_max, y_min, y_max) and
    ``snapshot_circles`` ((x, y, radius), ...) for the picture. They are written to
    ``snapshot_dir/env-<index>-episode-<n>.h5`` (one float64 dataset per name; attributes
    ``episode``, ``env``, ``solver``, ``image`` (the first array's name, the one drawn), and
    ``extent``, ``circles`` when the solver gives them) and the first array as a PNG of the
    same stem (:func:`~hpc_refer.snapshot_plot.snapshot_png`).

    The first reset and step probe the interface: an answer of the wrong form then (a state
    of another shape or dtype, a reward that is not a real scalar, an unknown status, step
    values of the wrong count) is a :class:`SolverStartError` naming the field, the solver
    class and what was expected, before any training; later it is a fault like any other.
    """

    def __init__(self, env: Any, team: Team | None, *,
                 factory: Callable[[Team | None], Any] | None = None, index: int = 0,
                 timeout: float = 0.0, field_dir: Path | None = None,
                 series_dir: Path | None = None, series_stride: int = 1,
                 snapshot_dir: Path | None = None,
                 snapshot_due: Callable[[int], bool] | None = None) -> None:
        self.env = env
        self.team = team if team is not None and team.size > 1 else None
        self._solver_team = team
        """What the factory is called with (a team of one rank stays a Team)."""
        self.factory = factory if factory is not None else rebuild_factory(env)
        self.index = index
        self.timeout = timeout
        self.external = isinstance(env, ExternalEnv)
        self.name = env.name if self.external else f"env {index} ({type(env).__name__})"
        self.state_rank = state_rank_of(env, team)
        self.metric_names = metric_names(env, type(env).__name__)
        self.obs_dim, self.act_dim = int(env.obs_dim), int(env.act_dim)
        self.low = np.asarray(env.low, np.float64).reshape(-1)
        self.high = np.asarray(env.high, np.float64).reshape(-1)
        self.busy_since: float | None = None
        """``time.monotonic()`` when the call in progress began (None between calls): a
        watchdog thread reads it (:class:`~hpc_refer.supervision.Watchdog`)."""
        self._answered = False
        """Whether the solver answered a call yet (a timeout before that is a start-up
        error)."""
        self._lost = ""
        """Why a team is out of step (a rank did not answer in time): it is not driven
        further."""
        self.field_dir = field_dir
        self.snapshot_dir = snapshot_dir if snapshot_due is not None else None
        self.snapshot_due = snapshot_due
        self.episodes_ended = 0
        self._probed = False
        """Whether a step was answered correctly (the interface probe passed)."""
        self.step_names: tuple[str, ...] = () if self.external else metric_names(
            env, type(env).__name__, "step_metrics")
        self.step_values = np.zeros(len(self.step_names))
        """The step metrics of the last step."""
        self._series_dir, self._series_stride = series_dir, series_stride
        self.series: StepSeries | None = None
        self._series_resume: StateTree | None = None
        self._open_series()

    def reset(self, seed: int | None = None) -> np.ndarray:
        """A new episode's first state (float32, validated)."""
        state: np.ndarray = self._call("reset", seed, TeamCommand.RESET,
                                       np.array([-1 if seed is None else seed], np.float64))
        if self.external and not self.step_names:
            self.step_names = tuple(self.env.step_metric_names)  # known after the handshake
            self._open_series()
        if self.series is not None:
            self.series.reset()
        return state

    def _open_series(self) -> None:
        """Start recording the step metrics once their names are known."""
        if self.series is None and self.step_names and self._series_dir is not None:
            self.series = StepSeries(self._series_dir / f"env-{self.index}.h5",
                                     self.step_names, self._series_stride)
            if self._series_resume is not None:
                self.series.restore_state(self._series_resume)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, Status]:
        """One step: (state as float32, reward, status), validated.

        Raises :class:`SolverFault` on an invalid answer, an exception of the solver, or
        (an in-process solver: one rank, or a gymnasium env) no answer within ``timeout``
        seconds, which SIGALRM interrupts (see :func:`~hpc_refer.timeouts.call_with_alarm`:
        code stuck in compiled code without returning to Python cannot be interrupted). A
        team of K > 1 ranks whose rank does not answer in time (team rank 0's own part is
        interrupted the same way; the others are awaited by polling) is out of step and
        cannot be recovered: :class:`SolverFailure`, and every later call raises it too. A
        timeout before the solver ever answered is :class:`SolverStartError`. An external
        solver times out in :class:`~hpc_refer.envs.external.ExternalEnv`.
        """
        result, values = self._call("step", action, TeamCommand.STEP,
                                    np.asarray(action, np.float64))
        self._probed = True
        self.step_values = values
        if self.series is not None:
            self.series.add(values)
        return result  # type: ignore[no-any-return]

    def _call(self, call: str, arg: Any, command: TeamCommand, payload: np.ndarray) -> Any:
        self.busy_since = time.monotonic()
        try:
            return self._answer(call, arg, command, payload)
        finally:
            self.busy_since = None

    def _answer(self, call: str, arg: Any, command: TeamCommand, payload: np.ndarray) -> Any:
        if self.external:
            return self._external(call, arg)
        if self._lost:
            raise SolverFailure(f"{self.name}: {self._lost}")
        deadline = deadline_after(self.timeout)
        if self.team is None:
            try:
                answer = _attempt(self.env, call, arg, self.obs_dim, True, deadline,
                                  self.step_names)
            except CallTimeout:
                self._check_started(call)
                answer = _Answer(_Outcome.ERROR, error=self._late())
            where = ""
        else:
            answer, where = self._team_call(call, arg, command, payload, deadline)
        self._answered = True
        if answer.outcome is _Outcome.FINISHED:
            raise EnvironmentFinished
        if answer.outcome is _Outcome.ERROR:
            error = answer.error
            if error.startswith(INTERFACE):
                error = error[len(INTERFACE):]
                self._probe_failed(f"{self.name}.{call}{where}: {error}")
            fault = SolverFault(f"{self.name}.{call}{where}: {error}")
            self._rebuild(deadline_after(self.timeout))
            raise fault
        return answer.result

    def _probe_failed(self, what: str) -> None:
        """An interface error before the first step was answered: a start-up error."""
        if not self._probed:
            raise SolverStartError(f"{what} ({INTERFACE_HINT}; the first reset and step "
                                   "probe it)")

    def _external(self, call: str, arg: Any) -> Any:
        """An external solver's call: its own validation and timeouts, then the shared
        checks (its SolverFault, SolverFailure and SolverStartError pass unchanged)."""
        answer = getattr(self.env, call)(arg)
        try:
            if call == "reset":
                return check_state(answer, self.obs_dim)
            return check_step(answer, self.obs_dim), check_values(
                self.env.step_values, tuple(self.env.step_metric_names))
        except InterfaceError as fault:
            self._probe_failed(f"{self.name}: {fault}")
            raise SolverFault(f"{self.name}: {fault}") from None
        except SolverFault as fault:
            raise SolverFault(f"{self.name}: {fault}") from None

    def _team_call(self, call: str, arg: Any, command: TeamCommand, payload: np.ndarray,
                   deadline: float | None) -> tuple[_Answer, str]:
        """The call made by every rank of the team: broadcast it, make this rank's part,
        agree on the outcome, then take the state rank's result (or the failed rank's
        error). Returns the answer and, for an error, which rank it was on."""
        team = self.team
        assert team is not None
        team.send_command(command, payload)
        try:
            mine = _attempt(self.env, call, arg, self.obs_dim, self.state_rank == 0, deadline,
                            self.step_names)
            outcome, rank = divmod(team.agree(int(mine.outcome) * team.size, deadline),
                                   team.size)
            if outcome == _Outcome.ERROR:
                error = mine.error if rank == 0 else team.receive_error(rank, deadline)
                return _Answer(_Outcome.ERROR, error=error), f" on team rank {rank}"
            if outcome == _Outcome.FINISHED or self.state_rank == 0:
                return (_Answer(_Outcome(outcome), mine.result), "")
            packed = team.receive_result(self.state_rank, deadline)
        except (CallTimeout, TimeoutError):
            self._lost = (f"a rank of the team did not answer {call} within "
                          f"run.env_step_timeout = {self.timeout:g} s; the team is out of "
                          f"step and no longer driven")
            self._check_started(call)
            raise SolverFailure(f"{self.name}: {self._lost}") from None
        try:
            if call == "reset":
                answer: Any = check_state(packed, self.obs_dim)
            else:
                triple, values = unpack_step(packed)
                answer = (check_step(triple, self.obs_dim), check_values(values,
                                                                         self.step_names))
        except InterfaceError as fault:
            return (_Answer(_Outcome.ERROR, error=INTERFACE + str(fault)),
                    f" on team rank {self.state_rank}")
        except SolverFault as fault:
            return _Answer(_Outcome.ERROR, error=str(fault)), f" on team rank {self.state_rank}"
        return _Answer(_Outcome.OK, answer), ""

    def _late(self) -> str:
        return f"no answer within run.env_step_timeout = {self.timeout:g} s"

    def _check_started(self, call: str) -> None:
        """A timeout before the solver's first answer: raise :class:`SolverStartError`."""
        if self._answered:
            return
        launch = (f"a team of {self.team.size} ranks" if self.team is not None
                  else "an in-process solver")
        raise SolverStartError(f"{self.name}, {launch}: no answer to its first {call} within "
                               f"run.env_step_timeout = {self.timeout:g} s")

    def _rebuild(self, deadline: float | None) -> None:
        """Close the faulty solver and construct it anew, on every rank of the team."""
        if self.factory is None:
            return
        if self.team is not None:
            self.team.send_command(TeamCommand.REBUILD, np.zeros(0))
        _close_faulty(self.env, deadline if self.team is None else None)
        self.env = self.factory(self._solver_team)

    def end_episode(self) -> tuple[float, ...]:
        """What follows the end of an episode: its field saved when the solver has
        ``episode_field()`` and a ``field_dir`` was given, its snapshot when it is a chosen
        episode (collective over the team), then the solver's ``episode_values()``, one per
        name of its ``episode_metrics``."""
        self.episodes_ended += 1
        if self.field_dir is not None and hasattr(self.env, "episode_field"):
            self._save_field(self.field_dir)
        if (self.snapshot_dir is not None and self.snapshot_due is not None
                and hasattr(self.env, "snapshot") and not self._lost
                and self.snapshot_due(self.episodes_ended)):
            self._save_snapshot(self.snapshot_dir)
        if self.series is not None:
            self.series.flush()
        if not self.metric_names:
            return ()
        values = tuple(float(v) for v in self.env.episode_values())
        if len(values) != len(self.metric_names):
            raise ValueError(f"{type(self.env).__name__}.episode_values() returned "
                             f"{len(values)} values for episode_metrics {self.metric_names}")
        return values

    def _save_field(self, directory: Path) -> None:
        """``episode_field()`` to ``directory/env-<index>.npz``, replaced atomically."""
        field = np.asarray(self.env.episode_field(), np.float32)
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f"env-{self.index}.tmp.npz"
        np.savez(tmp, field=field, label=str(getattr(self.env, "field_label", "field")),
                 episode=self.episodes_ended)
        tmp.replace(directory / f"env-{self.index}.npz")

    def _save_snapshot(self, directory: Path) -> None:
        """The solver's ``snapshot()``, taken by every team rank, written by this one (see
        the class docstring); a file that cannot be written is reported, not raised."""
        if self.team is not None:
            self.team.send_command(TeamCommand.SNAPSHOT, NO_VALUES)
        arrays = self.env.snapshot()
        if not arrays:
            return
        episode, solver = self.episodes_ended, type(self.env).__name__
        stem = directory / f"env-{self.index}-episode-{episode}"
        extent = getattr(self.env, "snapshot_extent", None)
        circles = tuple(getattr(self.env, "snapshot_circles", ()))
        name, first = next(iter(arrays.items()))
        try:
            directory.mkdir(parents=True, exist_ok=True)
            tmp = stem.with_suffix(".tmp.h5")
            with h5py.File(tmp, "w") as h5:
                for key, array in arrays.items():
                    h5[key] = np.asarray(array, np.float64)
                h5.attrs.update(episode=episode, env=self.index, solver=solver, image=name)
                if extent is not None:
                    h5.attrs["extent"] = np.asarray(extent, np.float64)
                if circles:
                    h5.attrs["circles"] = np.asarray(circles, np.float64).reshape(-1, 3)
            tmp.replace(stem.with_suffix(".h5"))
            from hpc_refer.snapshot_plot import snapshot_png  # matplotlib only where one is drawn

            snapshot_png(stem.with_suffix(".png"), name, np.asarray(first, np.float64),
                         f"{solver}, env {self.index}, end of episode {episode}", extent,
                         circles)
        except OSError as err:
            LOG.warning("%s: snapshot of episode %d not written: %s", self.name, episode, err)

    def series_state(self) -> StateTree | None:
        """The step series' rows written and counters (flushed first); None without one."""
        return None if self.series is None else dict(self.series.checkpoint_state())

    def restore_series(self, tree: StateTree) -> None:
        """Continue the step series of :meth:`series_state` (a solver whose names come with
        its handshake: once they are known)."""
        self._series_resume = tree
        if self.series is not None:
            self.series.restore_state(tree)

    def checkpoint_state(self) -> StateTree | None:
        """The solver's state for a checkpoint (its ``get_state()``); None when it has no
        such method, returns None, or spans a team of K > 1 ranks."""
        get_state = getattr(self.env, "get_state", None)
        if self.team is not None or get_state is None:
            return None
        state = get_state()
        return None if state is None else {str(k): np.array(v) for k, v in state.items()}

    def restore_state(self, tree: StateTree) -> bool:
        """Give the solver a state of :meth:`checkpoint_state` (its ``set_state``); False
        when it cannot take one (no such method, or a team of K > 1 ranks)."""
        set_state = getattr(self.env, "set_state", None)
        if self.team is not None or set_state is None:
            return False
        set_state({k: np.asarray(v) for k, v in tree.items()})
        return True

    def close(self) -> None:
        """Stop the team's solver ranks and close the solver (not a team that is out of step:
        its ranks may be stuck in the solver's collectives)."""
        if self.series is not None:
            self.series.flush()
        if self.team is not None:
            self.team.send_command(TeamCommand.STOP, np.zeros(0))
        if not self._lost:
            self.env.close()


def serve_team(factory: Callable[[Team], Any], team: Team) -> None:
    """Solver ranks 1..K-1: build the solver with ``factory(team)`` and follow team rank 0's
    calls until it says stop (see :class:`TeamDriver`): make this rank's part of each call,
    agree with the team on its outcome, then the solver's ``state_rank`` sends the result
    to team rank 0 (after a failed call, the failed rank with the highest rank sends its
    error instead); REBUILD closes the solver and constructs it anew."""
    env = factory(team)
    sends = team.rank == state_rank_of(env, team)
    obs_dim = int(env.obs_dim)
    step_names = metric_names(env, type(env).__name__, "step_metrics")
    while True:
        command, payload = team.receive_command()
        if command is TeamCommand.STOP:
            env.close()
            return
        if command is TeamCommand.REBUILD:
            _close_faulty(env, None)
            env = factory(team)
            continue
        if command is TeamCommand.SNAPSHOT:
            env.snapshot()
            continue
        arg: Any = payload
        call = "step"
        if command is TeamCommand.RESET:
            call, arg = "reset", None if payload[0] < 0 else int(payload[0])
        answer = _attempt(env, call, arg, obs_dim, sends, None, step_names)
        outcome, rank = divmod(team.agree(int(answer.outcome) * team.size + team.rank),
                               team.size)
        if outcome == _Outcome.ERROR and rank == team.rank:
            team.send_error(answer.error)
        elif outcome == _Outcome.OK and sends and call == "reset":
            team.send_result(np.asarray(answer.result, np.float64))
        elif outcome == _Outcome.OK and sends:
            (obs, reward, status), values = answer.result
            team.send_result(pack_step(obs, reward, status, values))
