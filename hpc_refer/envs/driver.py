"""Team rank 0's driver of an environment and the other team ranks' loop (:class:`TeamDriver`,
:func:`serve_team`): every call broadcast to the team, every answer validated (the checks of
the solver interface in :mod:`hpc_refer.envs.checks`), faults and timeouts turned into
:class:`~hpc_refer.envs.interface.SolverFault`, :class:`~hpc_refer.envs.interface.SolverFailure`
or :class:`~hpc_refer.envs.interface.SolverStartError`, the interface probed by the first reset
and step, a faulty solver rebuilt (within ``run.env_build_timeout``, apart from the calls'
``run.env_step_timeout``) unless it declares that a reset is enough, the step metrics recorded,
the episode fields and the chosen episodes' snapshots saved; and the first construction of a
solver (:func:`start_solver`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

import h5py
import numpy as np

from hpc_refer.envs.calls import (
    BUILD_TIMEOUT,
    NO_VALUES,
    OK,
    STEP_TIMEOUT,
    TRACE,
    Answer,
    Outcome,
    attempt,
    close_faulty,
    construct,
    factory_label,
    one_line,
    rebuild_factory,
    rebuilds_after_fault,
    start_solver,
)
from hpc_refer.envs.checks import (
    INTERFACE,
    INTERFACE_HINT,
    InterfaceError,
    agents_of,
    check_answer,
    check_state,
    check_values,
    metric_names,
    pack_step,
    state_rank_of,
    unpack_step,
)
from hpc_refer.envs.external import ExternalEnv
from hpc_refer.envs.history import PRESENT, History, ObservationStack
from hpc_refer.envs.interface import (
    EnvironmentFinished,
    SolverFailure,
    SolverFault,
    SolverStartError,
    Status,
    Team,
    TeamCommand,
)
from hpc_refer.envs.timeouts import CallTimeout, deadline_after
from hpc_refer.report.records import StateTree
from hpc_refer.report.series import StepSeries

LOG = logging.getLogger(__name__)

class Busy(NamedTuple):
    """The solver call that a :class:`TeamDriver` is in (read by the watchdog thread,
    :class:`~hpc_refer.envs.supervision.Watchdog`)."""

    call: str
    """``reset``, ``step`` or ``rebuild`` (closing a faulty solver and constructing it anew:
    limited by ``run.env_build_timeout``, the others by ``run.env_step_timeout``)."""
    since: float
    """``time.monotonic()`` when it began."""


class TeamDriver:
    """Team rank 0's view of an environment: each call is broadcast to the team first, every
    answer is validated, the result comes from the solver's ``state_rank``, and faults and
    timeouts are turned into :class:`SolverFault`, :class:`SolverFailure` or
    :class:`SolverStartError`.

    ``factory`` builds the solver anew after a fault (default :func:`rebuild_factory`; the
    solver ranks of a team use theirs in :func:`serve_team`), ``index`` is the environment's
    index (named in messages), ``timeout`` is ``run.env_step_timeout`` and ``build_timeout``
    ``run.env_build_timeout`` (0: no limit), ``field_dir`` where :meth:`end_episode` saves the
    solver's ``episode_field()`` (None: not saved), ``series_dir`` where the values of the
    solver's ``step_metrics`` are recorded every ``series_stride`` steps
    (:class:`~hpc_refer.report.series.StepSeries`; None: not recorded), ``snapshot_dir`` where
    :meth:`end_episode` writes the solver's ``snapshot()`` at the end of the episodes n
    (counted from 1) for which ``snapshot_due(n)`` is true (``run.snapshot``; None: never).
    ``history`` (``env.history``, :mod:`hpc_refer.envs.history`): the states returned are
    the solver's last k states (and actions) stacked, of width :attr:`obs_dim`; the solver's
    own width is :attr:`state_dim`.

    Faults and rebuilds: after a fault the solver is closed and constructed anew on every
    rank of its team at the start of the next call (the ``rebuild`` of :attr:`busy`), so the
    fault reaches the actor, and its episode the learner, before a slow constructor runs, and
    the rebuild is timed by ``build_timeout``, never by the ``timeout`` of the call that
    follows it. A construction that raises or exceeds ``build_timeout`` is a fault of that
    call (the rebuild is tried again at the next one); on a team, a rank that does not finish
    it in time leaves the team out of step (:class:`SolverFailure`). A solver whose class
    declares ``rebuild_after_fault = False`` is never rebuilt: the next reset follows the
    fault.

    Start-up: the first reset probes the solver. An exception from it (on any rank of the
    team) is a :class:`SolverStartError` naming the environment, the call and the exception
    (its traceback as ``details``), not a fault: a solver that cannot start is not retried.

    Snapshots: a solver's optional ``snapshot()`` returns named 2-D arrays on team rank 0
    (None on the other ranks: collective, every team rank calls it through the command
    above), optionally with ``snapshot_extent`` (x_min, x_max, y_min, y_max) and
    ``snapshot_circles`` ((x, y, radius), ...) for the picture. They are written to
    ``snapshot_dir/env-<index>-episode-<n>.h5`` (one float64 dataset per name; attributes
    ``episode``, ``env``, ``solver``, ``image`` (the first array's name, the one drawn), and
    ``extent``, ``circles`` when the solver gives them) and the first array as a PNG of the
    same stem (:func:`~hpc_refer.report.snapshots.snapshot_png`).

    The first reset and step probe the interface: an answer of the wrong form then (a state
    of another shape or dtype, a reward that is not a real scalar, an unknown status, step
    values of the wrong count) is a :class:`SolverStartError` naming the field, the solver
    class and what was expected, before any training; later it is a fault like any other.
    """

    def __init__(self, env: Any, team: Team | None, *,
                 factory: Callable[[Team | None], Any] | None = None, index: int = 0,
                 timeout: float = 0.0, build_timeout: float = 0.0,
                 field_dir: Path | None = None, series_dir: Path | None = None,
                 series_stride: int = 1, snapshot_dir: Path | None = None,
                 snapshot_due: Callable[[int], bool] | None = None,
                 history: History = PRESENT) -> None:
        self.env = env
        """The solver (None only between a rebuild that failed and the next attempt)."""
        self.team = team if team is not None and team.size > 1 else None
        self._solver_team = team
        """What the factory is called with (a team of one rank stays a Team)."""
        self.factory = factory if factory is not None else rebuild_factory(env)
        self.index = index
        self.timeout = timeout
        self.build_timeout = build_timeout
        self.external = isinstance(env, ExternalEnv)
        self.name = env.name if self.external else f"env {index} ({type(env).__name__})"
        self.state_rank = state_rank_of(env, team)
        self.rebuilds = self.factory is not None and rebuilds_after_fault(env)
        """Whether a fault is followed by a rebuild (else by the next reset alone)."""
        self.metric_names = metric_names(env, type(env).__name__)
        self.state_dim, self.act_dim = int(env.obs_dim), int(env.act_dim)
        """The width of the solver's states, and of its actions."""
        self.n_agents = agents_of(env, type(env).__name__)
        """The agents of the simulation (1: the single-agent interface); never changes."""
        self.obs_dim = history.dim(self.state_dim, self.act_dim)
        """The width of the states this driver returns (the policy's input)."""
        self.stack = (ObservationStack(history, self.state_dim, self.act_dim, self.n_agents)
                      if history.active else None)
        """The past states and actions (None without ``env.history``)."""
        self.low = np.asarray(env.low, np.float64).reshape(-1)
        self.high = np.asarray(env.high, np.float64).reshape(-1)
        self.busy: Busy | None = None
        """The call in progress (None between calls): a watchdog thread reads it."""
        self._started = False
        """Whether the solver answered a call yet, if only with a fault (an exception from
        the first reset, or a timeout, before that is a start-up error)."""
        self._faulty = False
        """Whether the last call was a fault: the solver is rebuilt before the next one (when
        it :attr:`rebuilds`), closed with care, and has no state to checkpoint."""
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
        state: np.ndarray = self._call("reset", seed)
        if self.external and not self.step_names:
            self.step_names = tuple(self.env.step_metric_names)  # known after the handshake
            self._open_series()
        if self.series is not None:
            self.series.reset()
        return state if self.stack is None else self.stack.reset(state)

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
        seconds, which SIGALRM interrupts (see :func:`~hpc_refer.envs.timeouts.call_with_alarm`:
        code stuck in compiled code without returning to Python cannot be interrupted). A
        team of K > 1 ranks whose rank does not answer in time (team rank 0's own part is
        interrupted the same way; the others are awaited by polling) is out of step and
        cannot be recovered: :class:`SolverFailure`, and every later call raises it too. A
        timeout before the solver ever answered is :class:`SolverStartError`. An external
        solver times out in :class:`~hpc_refer.envs.external.ExternalEnv`. A rebuild due
        after a fault runs first, timed apart (see the class docstring).
        """
        result, values = self._call("step", action)
        self._probed = True
        self.step_values = values
        if self.series is not None:
            self.series.add(values)
        if self.stack is None:
            return result  # type: ignore[no-any-return]
        state, reward, status = result
        return self.stack.push(state, action), reward, status

    def step_agents(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`step` of a solver of :attr:`n_agents` > 1 agents: ``actions`` of shape
        (n_agents, act_dim); returns (states (n_agents, obs_dim) float32, rewards
        (n_agents,) float64, statuses (n_agents,) int64 of :class:`Status` values)."""
        return self.step(actions)  # type: ignore[return-value]

    def _call(self, call: str, arg: Any) -> Any:
        """``call`` made by the whole team, after the rebuild a fault left due, shown to the
        watchdog as :attr:`busy` while it runs; its result, or the fault it was (see
        :meth:`_settle`)."""
        if self.external:
            return self._busy(call, self._external, call, arg)
        if self._lost:
            raise SolverFailure(f"{self.name}: {self._lost}")
        if self._faulty and self.rebuilds:
            self._busy("rebuild", self._rebuild)
        deadline = deadline_after(self.timeout)
        self.busy = Busy(call, time.monotonic())
        try:
            if self.team is None:
                answer, where = attempt(self.env, call, arg, self.state_dim, True, deadline,
                                        self.step_names, self.n_agents), ""
            else:
                answer, where = self._team_call(call, arg, deadline)
        except CallTimeout:  # in this process (a team's part is awaited in _team_call)
            self._check_started(call)
            answer, where = Answer(Outcome.ERROR, error=self._late(STEP_TIMEOUT, self.timeout)), ""
        finally:
            self.busy = None
        if answer.outcome is OK:
            self._faulty = False
            self._started = True
            return answer.result
        self._settle(call, answer, where)

    def _busy(self, call: str, work: Callable[..., Any], *args: Any) -> Any:
        """``work(*args)``, shown to the watchdog as ``call`` (:attr:`busy`) while it runs."""
        self.busy = Busy(call, time.monotonic())
        try:
            return work(*args)
        finally:
            self.busy = None

    def _settle(self, call: str, answer: Answer, where: str) -> NoReturn:
        """A call that did not answer OK: raises :class:`SolverStartError` for a reset
        before the solver ever answered or an interface error before the probe passed,
        :class:`SolverFault` for an error, :class:`EnvironmentFinished` for a reset that
        says so (``where``: the team rank of an error)."""
        self._faulty = answer.outcome is Outcome.ERROR
        error = answer.error.removeprefix(INTERFACE)
        if self._faulty and answer.error.startswith(INTERFACE):
            self._probe_failed(f"{self.name}.{call}{where}: {error}")
        if self._faulty and call == "reset" and not self._started:
            raise SolverStartError(one_line(
                f"{self.name}.reset{where}: {error} (its first reset: the solver cannot "
                "start)"), answer.trace)
        self._started = True
        if self._faulty:
            raise SolverFault(f"{self.name}.{call}{where}: {error}")
        raise EnvironmentFinished

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
                return check_state(answer, self.state_dim, self.n_agents)
            return check_answer(answer, self.state_dim, self.n_agents), check_values(
                self.env.step_values, tuple(self.env.step_metric_names))
        except InterfaceError as fault:
            self._probe_failed(f"{self.name}: {fault}")
            raise SolverFault(f"{self.name}: {fault}") from None
        except SolverFault as fault:
            raise SolverFault(f"{self.name}: {fault}") from None

    def _team_call(self, call: str, arg: Any, deadline: float | None) -> tuple[Answer, str]:
        """The call made by every rank of the team: broadcast it (a reset's seed, -1 for
        None, or the step's action, as float64), make this rank's part, agree on the
        outcome, then take the state rank's result (or the failed rank's error). Returns the
        answer and, for an error, which rank it was on."""
        team = self.team
        assert team is not None
        if call == "reset":
            team.send_command(TeamCommand.RESET, np.array([-1 if arg is None else arg],
                                                          np.float64))
        else:
            team.send_command(TeamCommand.STEP, np.asarray(arg, np.float64))
        try:
            answer, where = self._agree(
                attempt(self.env, call, arg, self.state_dim, self.state_rank == 0, deadline,
                         self.step_names, self.n_agents), deadline)
            if answer.outcome is not Outcome.OK or self.state_rank == 0:
                return answer, where
            packed = team.receive_result(self.state_rank, deadline)
        except (CallTimeout, TimeoutError):
            failure = self._out_of_step(call, STEP_TIMEOUT, self.timeout)
            self._check_started(call)
            raise failure from None
        try:
            if call == "reset":
                result: Any = check_state(packed if self.n_agents == 1 else packed.reshape(
                    self.n_agents, -1), self.state_dim, self.n_agents)
            else:
                triple, values = unpack_step(packed)
                result = (check_answer(triple, self.state_dim, self.n_agents),
                          check_values(values, self.step_names))
        except InterfaceError as fault:
            return (Answer(Outcome.ERROR, error=INTERFACE + str(fault)),
                    f" on team rank {self.state_rank}")
        except SolverFault as fault:
            return Answer(Outcome.ERROR, error=str(fault)), f" on team rank {self.state_rank}"
        return Answer(Outcome.OK, result), ""

    def _agree(self, mine: Answer, deadline: float | None) -> tuple[Answer, str]:
        """The team's outcome of a call or rebuild whose part on this rank is ``mine``: the
        largest outcome over the ranks, an error's text and traceback from the highest rank
        that had it (see :func:`serve_team`). Returns the answer (with this rank's result)
        and, for an error, which rank it was on; TimeoutError at the ``deadline``."""
        team = self.team
        assert team is not None
        outcome, rank = divmod(team.agree(int(mine.outcome) * team.size, deadline), team.size)
        if outcome != Outcome.ERROR:
            return Answer(Outcome(outcome), mine.result), ""
        if rank == 0:
            return mine, " on team rank 0"
        error, _, trace = team.receive_error(rank, deadline).partition(TRACE)
        return Answer(Outcome.ERROR, error=error, trace=trace), f" on team rank {rank}"

    def _out_of_step(self, call: str, option: str, limit: float) -> SolverFailure:
        """A rank of the team did not finish ``call`` within ``limit`` (``option``): the team
        is not driven further; the failure to raise."""
        self._lost = (f"a rank of the team did not answer {call} within {option} = "
                      f"{limit:g} s; the team is out of step and no longer driven")
        return SolverFailure(f"{self.name}: {self._lost}")

    @staticmethod
    def _late(option: str, limit: float) -> str:
        return f"no answer within {option} = {limit:g} s"

    def _check_started(self, call: str) -> None:
        """A timeout before the solver's first answer: raise :class:`SolverStartError`."""
        if self._started:
            return
        self._faulty = True  # interrupted in its call: closed with care
        launch = (f"a team of {self.team.size} ranks" if self.team is not None
                  else "an in-process solver")
        raise SolverStartError(f"{self.name}, {launch}: no answer to its first {call} within "
                               f"{STEP_TIMEOUT} = {self.timeout:g} s")

    def _rebuild(self) -> None:
        """Close the faulty solver and construct it anew on every rank of the team, within
        ``build_timeout`` (see the class docstring): :class:`SolverFault` when the
        construction fails or takes longer here, :class:`SolverFailure` when a rank of a
        team does not finish it in time."""
        assert self.factory is not None
        deadline = deadline_after(self.build_timeout)
        if self.team is not None:
            self.team.send_command(TeamCommand.REBUILD, NO_VALUES)
        if self.env is not None:  # closed once, however many constructions fail after it
            faulty, self.env = self.env, None
            close_faulty(faulty, deadline if self.team is None else None)
        where = ""
        if self.team is None:
            try:
                answer = construct(self.factory, self._solver_team, deadline)
            except CallTimeout:
                answer = Answer(Outcome.ERROR,
                                 error=self._late(BUILD_TIMEOUT, self.build_timeout))
        else:
            try:
                answer, where = self._agree(construct(self.factory, self._solver_team,
                                                       deadline), deadline)
            except (CallTimeout, TimeoutError):
                raise self._out_of_step("the rebuild", BUILD_TIMEOUT,
                                        self.build_timeout) from None
        if answer.outcome is not Outcome.OK:
            raise SolverFault(f"{self.name}: rebuilding it after a fault{where}: "
                              f"{answer.error}")
        agents = agents_of(answer.result, type(answer.result).__name__)
        if agents != self.n_agents:
            self._lost = (f"rebuilt after a fault with n_agents = {agents}, but it started "
                          f"with {self.n_agents}: the agent count of a solver never changes")
        self.env = answer.result
        if self._lost:
            raise SolverFailure(f"{self.name}: {self._lost}")
        self._faulty = False

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
            from hpc_refer.report.snapshots import (
                snapshot_png,  # matplotlib only where one is drawn
            )

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
        such method, returns None, spans a team of K > 1 ranks, or its last call was a fault
        (a state to be discarded)."""
        get_state = getattr(self.env, "get_state", None)
        if self.team is not None or get_state is None or self._faulty:
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
        its ranks may be stuck in the solver's collectives; a faulty solver's close may fail,
        which is reported, so that it hides no error of the run)."""
        if self.series is not None:
            self.series.flush()
        if self.team is not None:
            self.team.send_command(TeamCommand.STOP, np.zeros(0))
        if self._lost or self.env is None:
            return
        if self._faulty:
            close_faulty(self.env, None)
        else:
            self.env.close()


def _report(team: Team, answer: Answer) -> bool:
    """A solver rank's part of the team's agreement on a call or rebuild (the other side of
    :meth:`TeamDriver._agree`): its outcome and rank; when the team's outcome is an error and
    this is the highest rank that had it, its error text and traceback go to team rank 0.
    Returns whether the team's outcome is OK."""
    outcome, rank = divmod(team.agree(int(answer.outcome) * team.size + team.rank),
                           team.size)
    if outcome == Outcome.ERROR and rank == team.rank:
        team.send_error(answer.error + TRACE + answer.trace)
    return outcome == Outcome.OK


def serve_team(factory: Callable[[Team], Any], team: Team) -> None:
    """Solver ranks 1..K-1: build the solver with ``factory(team)`` (a constructor that
    raises is a :class:`SolverStartError` on this rank, see :func:`start_solver`) and follow
    team rank 0's calls until it says stop (see :class:`TeamDriver`): make this rank's part of
    each call, agree with the team on its outcome, then the solver's ``state_rank`` sends the
    result to team rank 0 (after a failed call, the failed rank with the highest rank sends
    its error instead); REBUILD closes the solver and constructs it anew, and the team agrees
    on that outcome too (a construction that failed leaves no solver until the next
    REBUILD)."""
    env = start_solver(factory, team, factory_label(factory), 0.0)
    sends = team.rank == state_rank_of(env, team)
    obs_dim, act_dim = int(env.obs_dim), int(env.act_dim)
    agents = agents_of(env, type(env).__name__)
    step_names = metric_names(env, type(env).__name__, "step_metrics")
    arg: Any
    while True:
        command, payload = team.receive_command()
        if command is TeamCommand.STOP:
            if env is not None:
                env.close()
            return
        if command is TeamCommand.REBUILD:
            if env is not None:
                close_faulty(env, None)
            built = construct(factory, team, None)
            env = built.result if built.outcome is Outcome.OK else None
            _report(team, built)
            continue
        if command is TeamCommand.SNAPSHOT:
            env.snapshot()
            continue
        call = "step"
        if command is TeamCommand.RESET:
            call, arg = "reset", None if payload[0] < 0 else int(payload[0])
        else:
            arg = payload if agents == 1 else payload.reshape(agents, act_dim)
        answer = attempt(env, call, arg, obs_dim, sends, None, step_names, agents)
        if not (_report(team, answer) and sends):
            continue
        if call == "reset":
            team.send_result(np.asarray(answer.result, np.float64))
        else:
            (obs, reward, status), values = answer.result
            team.send_result(pack_step(obs, reward, status, values))
