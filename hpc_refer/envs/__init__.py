"""Environments behind one interface, and the driver that runs them over a team of ranks.

The interface (what the actor calls; a Python solver class provides it)::

    obs_dim, act_dim, low, high                        class attributes (sizes, action box)
    __init__(team, **params)                           team: interface.Team or None
    reset(seed) -> state                               state: float array of shape (obs_dim,)
    step(action) -> (state, reward, Status)            reward: a finite real scalar
    close()
    get_state() -> dict[str, np.ndarray] | None        optional: the solver's whole state
    set_state(state: dict[str, np.ndarray])            optional: continue from such a state
    episode_metrics, episode_values() -> floats        optional: values per episode
    step_metrics, step_values() -> floats              optional: values per step
    episode_field() -> 2-D array, field_label          optional: a picture of the episode
    rebuild_after_fault: bool                          optional class attribute (default True):
                                                       False says reset() after a fault is enough
    n_agents: int                                      optional (default 1): agents of one
                                                       simulation, sharing the spaces and policy

Several agents in one simulation. A solver whose ``n_agents`` (an attribute, read after each
construction: it may come from a constructor parameter, and must never change) is K > 1
declares K agents with the same spaces (``obs_dim``, ``act_dim``, ``low``, ``high`` are one
agent's): ``reset`` returns states of shape (K, obs_dim), ``step`` receives actions of shape
(K, act_dim) and returns (states (K, obs_dim), rewards (K,), statuses (K,)). An agent whose
status is TERMINAL or TRUNCATED has finished its episode; it takes no further part in the
simulation's episode (its rows of later actions are its policy mean, to be ignored; its rows
of later answers are ignored, but checked to be finite: repeat its last state). The
simulation's episode ends when every agent has finished; the next call is ``reset``.
``episode_values()`` and ``episode_field()`` belong to the simulation. One policy is shared by
all agents of all environments; each agent's trajectory is an episode of its own in the
replay (:mod:`hpc_refer.loop.agents_actor`), and ``episodes.csv`` names its ``agent``. The answers
are checked as one agent's are, naming the field and the agent (``statuses[2] = 7 is
unknown``); a count that is not an integer >= 1 is a start-up error, one that changes in a
rebuild fails the environment. A PettingZoo ``ParallelEnv`` of homogeneous agents is such a
solver through :class:`~hpc_refer.envs.pettingzoo_env.PettingZooEnv`.

Parameters. The run's ``[env]`` table (``--env.KEY VALUE``) is given to the constructor as
keyword arguments, checked at start-up against its signature by :func:`solver_params` (an
unknown key, a missing required parameter or a value of the wrong annotated type is one line
naming the solver and its parameters) and stored in ``config.toml`` and every checkpoint. The
constructor also receives, when it names them, the keywords of :data:`CONTEXT_KEYWORDS`:
``env_index`` (0..E-1), ``run_dir`` (a string) and ``seed`` (its own, derived from
``run.seed`` and the index). The solver's module is imported on every rank, learners
included (they read the class attributes): keep its import cheap and free of side effects.
The keys ``history`` and ``history_actions`` are hpc_refer's own (stacked observations,
:mod:`hpc_refer.envs.history`): never passed to the solver, and reserved in its signature.

The declared spaces are checked at start-up (:func:`check_spaces`), and the first reset and
step probe the answers' form: a state of another shape or dtype, a reward that is not a real
scalar, an unknown status or step values of the wrong count is then a
:class:`SolverStartError` naming the field, the solver class and what was expected, before
any training (later the same answer is a fault, see below).

Step metrics. A solver may name values it reports after every step (drag and lift, say) in a
class attribute ``step_metrics`` and return them from ``step_values()``, called on the state
rank right after each ``step`` (not collectively); they travel with the step's answer and the
actor records them (every ``run.series_stride`` steps) to ``RUN_DIR/series/env-<k>.h5``
(:mod:`hpc_refer.report.series`). External solvers declare theirs in their handshake, and a solver
on the Python client (:mod:`hpc_refer.client`) its episode metrics too, whose values come
with the state that ends each episode.

``get_state``/``set_state`` (optional) let a checkpoint continue an episode bit for bit: the
actor saves ``get_state()`` (None: nothing to save at this moment) and, on resume,
``set_state`` gives it to a freshly constructed solver, which must then behave exactly as the
one that was saved (including its random generator). Without them, or for a team of K > 1
ranks (whose state is spread over its ranks), a resumed run ends the interrupted episode as
truncated at its last state and starts a new one. :class:`~hpc_refer.envs.gym_env.GymEnv`
implements them for MuJoCo and classic-control gymnasium environments.

Faults. :class:`TeamDriver` checks every answer of a Python solver (built-in, user's class or
gymnasium) as an external solver's messages are checked: the state has the declared shape
(obs_dim,) and is finite (as float32), the reward is a finite real scalar, the status one of
:class:`~hpc_refer.envs.gym_env.Status`. A failed check, an exception raised by ``reset`` or
``step`` (other than :class:`EnvironmentFinished`) or no answer within ``run.env_step_timeout``
seconds is a :class:`~hpc_refer.envs.external.SolverFault` naming the environment, the solver
class, the call and the field, e.g. ``env 0 (KuramotoSivashinsky).step: state has shape (7,),
expected (8,)``; the actor ends the episode (nothing of the faulty step is stored) and counts
it, and the driver closes the solver and constructs it anew (on every rank of its team) at the
start of the next call, so a solver left in a bad state cannot poison the next episodes.
Timeouts: see :meth:`TeamDriver.step`; a construction is timed apart, by
``run.env_build_timeout`` (at start-up and in every rebuild, never within a call's
``run.env_step_timeout``): a rebuild that raises or takes longer is a fault of the call it
precedes, and is tried again at the next one.

Recovering without a rebuild. A solver whose ``reset`` brings it back to a sound state after
any fault (it re-initialises its whole field, say, and holds nothing a failed step could
leave broken) may declare the class attribute ``rebuild_after_fault = False``: after a fault
the same instance goes on with the next ``reset``, on every rank of its team, and its
constructor runs once per run. The default (True) rebuilds, the safe choice for a solver that
keeps state across episodes (caches, linear-solver setups, open files).

Start-up. A constructor that raises (or does not return within ``run.env_build_timeout``)
and an exception from the first ``reset`` are not faults but a
:class:`~hpc_refer.envs.interface.SolverStartError`: the run stops at once, on every rank,
with one line naming the environment, the solver class and the exception, e.g.
``env 0 (MySolver).reset: raised KeyError: 'inflow_profile' (its first reset: the solver
cannot start)``; the traceback travels with it (its ``details``) for the run's log.

The team is a :class:`~hpc_refer.envs.interface.Team` (a protocol: what a solver may call);
hpc_refer's entry points build its MPI implementation (:class:`hpc_refer.parallel.world.MpiTeam`)
and pass it in, as they pass an external solver's :class:`~hpc_refer.envs.launch.Links`
to :func:`make_driver`: nothing in this package imports :mod:`hpc_refer.parallel`.

``--env`` selects: a built-in solver by name (``Diffusion1D``), a user's class as
``package.module:Class`` (constructed with the team),
an external MPI program (``external``, ``external:[-n K] PROGRAM``, ``external:--connect
DIR``, see :mod:`hpc_refer.envs.external`), any gymnasium id with a continuous action
space (one rank per environment), or a PettingZoo ParallelEnv of homogeneous agents as
``pettingzoo:package.module:factory`` (one rank per environment; the factory is called with
the ``[env]`` table as keyword arguments; the multi-agent interface, arrays of shape
(n_agents, ...), is :mod:`hpc_refer.envs.pettingzoo_env`'s).
A solver spanning K ranks is called collectively: team rank 0 (the actor) drives it through
:class:`TeamDriver`, the other ranks follow in :func:`serve_team`. The state, reward and
status are taken from the return values of team rank ``state_rank``, an optional attribute of
the solver (default 0, the actor): a solver whose state is gathered on another rank sets it,
and that rank's results travel to the actor in one message per call (the other ranks' return
values are ignored). A solver may also report values of its own per episode (a physical
quantity, say): it names them in a class attribute ``episode_metrics`` (a tuple of identifiers)
and returns them, in that order, from ``episode_values()``, which the actor calls on team rank 0
(not collectively) when an episode ends; they become columns of ``episodes.csv``. A flow solver
may also show its field: ``episode_field()`` (team rank 0, not collective) returns a 2-D array
(rows: the control steps of the episode that just ended, columns: grid points), named by an
optional class attribute ``field_label``; the actor saves the last episode's field of each
environment to ``RUN_DIR/fields/env-<index>.npz`` (arrays ``field``, ``label``, ``episode``),
which the run report draws (KS: u(x, t)).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from hpc_refer.config.layout import SeedRole, role_seed
from hpc_refer.config.modes import ConfigError
from hpc_refer.config.resolve import Config
from hpc_refer.envs.calls import start_solver
from hpc_refer.envs.checks import check_step, metric_names
from hpc_refer.envs.driver import TeamDriver, serve_team
from hpc_refer.envs.external import ExternalEnv
from hpc_refer.envs.history import HISTORY_KEYS, PRESENT, History, solver_keys
from hpc_refer.envs.interface import (
    EnvironmentFinished,
    SolverFailure,
    SolverFault,
    SolverStartError,
    Status,
    Team,
)
from hpc_refer.envs.launch import Links, check_apps, check_port_dir, is_external, parse_spec
from hpc_refer.report.schema import EPISODE_FIELDS

__all__ = [
    "BUILTIN",
    "CONTEXT_KEYWORDS",
    "EnvironmentFinished",
    "SolverFailure",
    "SolverFault",
    "SolverSpec",
    "SolverStartError",
    "Status",
    "Team",
    "TeamDriver",
    "check_env",
    "check_step",
    "env_dims",
    "env_factory",
    "episode_columns",
    "episode_metric_names",
    "is_external",
    "is_pettingzoo",
    "make_driver",
    "serve_team",
    "solver_params",
]

BUILTIN = {
    "Diffusion1D": "hpc_refer.envs.diffusion:Diffusion1D",
    "KS": "hpc_refer.envs.ks:KuramotoSivashinsky",
    "KSAgents": "hpc_refer.envs.ks_agents:KuramotoSivashinskyAgents",
    "CylinderJets": "hpc_refer.envs.cylinder_jets:CylinderJets",
    "CylinderJetsAgents": "hpc_refer.envs.cylinder_jets:CylinderJetsAgents",
}


SOLVER_ATTRIBUTES = ("obs_dim", "act_dim", "low", "high")
"""Class attributes of the solver protocol (see the module docstring)."""
SOLVER_METHODS = ("reset", "step", "close")
"""Methods of the solver protocol (see the module docstring)."""


PETTINGZOO_PREFIX = "pettingzoo:"
"""``run.env`` of a PettingZoo ParallelEnv: ``pettingzoo:package.module:factory`` (the
adapter's :data:`~hpc_refer.envs.pettingzoo_env.PREFIX`, repeated here so that recognising the
id imports neither pettingzoo nor the adapter)."""


def is_pettingzoo(env_id: str) -> bool:
    """Whether ``env_id`` names a PettingZoo ParallelEnv (``pettingzoo:...``)."""
    return env_id.startswith(PETTINGZOO_PREFIX)


def _load_class(spec: str) -> Any:
    """The solver class ``package.module:Class``, checked against the solver protocol (one
    line ConfigError naming what the protocol needs and what is missing)."""
    module, _, name = spec.partition(":")
    try:
        loaded = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise ConfigError(
            f"run.env = {spec!r} cannot be loaded ({err}): allowed are gymnasium ids, "
            f"{', '.join(BUILTIN)}, package.module:Class, or "
            f"{PETTINGZOO_PREFIX}package.module:factory"
        ) from None
    needs = (f"a solver class needs class attributes {', '.join(SOLVER_ATTRIBUTES)} and "
             f"methods {', '.join(SOLVER_METHODS)}")
    if not isinstance(loaded, type):
        raise ConfigError(f"run.env = {spec!r} is a {type(loaded).__name__}, not a class: "
                          f"{needs}")
    missing = [a for a in SOLVER_ATTRIBUTES if not hasattr(loaded, a)]
    missing += [f"{m}()" for m in SOLVER_METHODS if not callable(getattr(loaded, m, None))]
    if missing:
        raise ConfigError(f"run.env = {spec!r} is not a solver class: {needs}; missing: "
                          f"{', '.join(missing)}")
    return loaded


def _solver_class(env_id: str) -> Any | None:
    """The Python solver class ``env_id`` names (built-in or package.module:Class); None for
    gymnasium ids, PettingZoo ids and external solvers."""
    if (is_external(env_id) or is_pettingzoo(env_id)
            or not (":" in env_id or env_id in BUILTIN)):
        return None
    return _load_class(BUILTIN.get(env_id, env_id))


CONTEXT_KEYWORDS = ("env_index", "run_dir", "seed")
"""Keywords a solver's constructor receives when it names them: its environment's index
(0..E-1), the run directory (a string; "" without one) and a seed of its own (derived from
``run.seed`` and the index)."""


class SolverSpec(NamedTuple):
    """What builds a run's environments: ``run.env``, ``run.ranks_per_env``, the ``[env]``
    parameters, the run directory and seed offered to solver constructors, and the time a
    constructor may take (``run.env_build_timeout``; 0: no limit)."""

    env_id: str
    ranks_per_env: int = 1
    params: Mapping[str, bool | int | float | str] = MappingProxyType({})
    run_dir: str = ""
    seed: int = 0
    build_timeout: float = 0.0
    history: History = PRESENT
    """The past the policy sees (``env.history``, ``env.history_actions``; not in
    ``params``)."""

    @classmethod
    def of(cls, config: Config, run_dir: Path | None = None) -> SolverSpec:
        return cls(config.run.env, config.run.ranks_per_env,
                   MappingProxyType(solver_keys(config.env)),
                   str(run_dir) if run_dir is not None else "", config.run.seed,
                   config.run.env_build_timeout, History.of(config.env))


def _parameters(cls: type) -> tuple[list[inspect.Parameter], bool]:
    """The constructor's parameters after ``team`` and whether it takes ``**kwargs``."""
    params = list(inspect.signature(cls).parameters.values())[1:]
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    named = [p for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                             inspect.Parameter.KEYWORD_ONLY)]
    return named, var_kw


def _annotations(cls: type) -> dict[str, Any]:
    """The constructor's resolved annotations ({} when they cannot be resolved: the
    defaults' types are used then)."""
    try:
        return typing.get_type_hints(inspect.unwrap(cls).__init__)  # type: ignore[misc]
    except Exception:  # unresolvable annotations: fall back to the default's type
        return {}


def _coerce_param(cls: type, hints: dict[str, Any], p: inspect.Parameter, value: Any) -> Any:
    """``value`` as the type the constructor's annotation (``hints``) or default of ``p``
    says."""
    kind = hints.get(p.name)
    if kind is None and p.default is not inspect.Parameter.empty and p.default is not None:
        kind = type(p.default)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind in (bool, int, float, str) and (
            not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
        raise ConfigError(f"env.{p.name} = {value!r} is invalid for {cls.__name__}: allowed "
                          f"values are of type {kind.__name__}")
    return value


def solver_params(env_id: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The ``[env]`` parameters of ``env_id`` checked against what its solver takes and
    converted to the constructor's annotated types (an int for a float parameter becomes a
    float): an unknown or reserved key, a missing required parameter or a value of the wrong
    type is a one-line ConfigError naming the solver and its parameters. Gymnasium ids are
    checked when the environment is made (``gymnasium.make(env_id, **params)``), PettingZoo
    ids against their factory's signature when it is called; external solvers receive the
    parameters as they are."""
    History.of(params)
    own = {k: params[k] for k in HISTORY_KEYS if k in params}
    params = solver_keys(params)
    cls = _solver_class(env_id)
    if cls is None:
        return {**params, **own}
    named, var_kw = _parameters(cls)
    taken = sorted(set(HISTORY_KEYS) & {p.name for p in named})
    if taken:
        raise ConfigError(f"{cls.__name__} names the parameter {taken[0]!r}, which is "
                          f"reserved: env.{taken[0]} is hpc_refer's stacked observations "
                          f"(hpc_refer.envs.history); rename the solver's parameter")
    accepted = [p.name for p in named if p.name not in CONTEXT_KEYWORDS]
    shown = ", ".join(accepted) or "none"
    for key in params:
        if key in CONTEXT_KEYWORDS:
            raise ConfigError(f"env.{key} is reserved: hpc_refer gives {cls.__name__} its "
                              f"{key} itself; {cls.__name__}'s parameters are {shown}")
        if key not in accepted and not var_kw:
            raise ConfigError(f"env.{key} is not a parameter of {cls.__name__}: its "
                              f"parameters are {shown}")
    missing = [p.name for p in named if p.default is inspect.Parameter.empty
               and p.name not in params and p.name not in CONTEXT_KEYWORDS]
    if missing:
        raise ConfigError(f"{cls.__name__} needs env.{missing[0]} (--env.{missing[0]} VALUE): "
                          f"its required parameters are {', '.join(missing)}")
    by_name = {p.name: p for p in named}
    hints = _annotations(cls)
    return {**{k: _coerce_param(cls, hints, by_name[k], v) if k in by_name else v
               for k, v in params.items()}, **own}


def env_factory(spec: SolverSpec, index: int = 0) -> Callable[[Team | None], Any]:
    """A function team -> environment ``index`` of ``spec`` (not for external solvers); raises
    ConfigError on a bad id. A Python solver class is called as ``cls(team, **params)`` plus
    the :data:`CONTEXT_KEYWORDS` its constructor names (a :func:`functools.partial` of the
    class, so that messages can name it); a gymnasium id as
    ``gymnasium.make(env_id, **params)``; ``pettingzoo:package.module:factory`` as
    :class:`~hpc_refer.envs.pettingzoo_env.PettingZooEnv` (``factory(**params)``), its module
    and factory loaded here (a one-line ConfigError when they cannot be)."""
    cls = _solver_class(spec.env_id)
    params: dict[str, Any] = dict(spec.params)
    if cls is not None:
        named, _ = _parameters(cls)
        context = {"env_index": index, "run_dir": spec.run_dir,
                   "seed": role_seed(spec.seed, SeedRole.SOLVER, index)}
        params.update({p.name: context[p.name] for p in named if p.name in context})
        return functools.partial(cls, **params)
    if is_pettingzoo(spec.env_id):
        from hpc_refer.envs.pettingzoo_env import PettingZooEnv, load_factory  # when used

        load_factory(spec.env_id)
        _one_rank(spec, "a PettingZoo environment")
        return lambda team: PettingZooEnv(spec.env_id, **params)
    from hpc_refer.envs.gym_env import GymEnv, check_env_id  # gymnasium: only when used

    check_env_id(spec.env_id)
    _one_rank(spec, "a gymnasium environment")
    return lambda team: GymEnv(spec.env_id, **params)


def _one_rank(spec: SolverSpec, kind: str) -> None:
    """A ConfigError unless ``spec`` runs on one rank per environment."""
    if spec.ranks_per_env != 1:
        raise ConfigError(
            f"run.env = {spec.env_id!r} is {kind} and runs on one rank: "
            f"run.ranks_per_env = {spec.ranks_per_env} is invalid, allowed is 1"
        )


def make_driver(spec: SolverSpec, team: Team | None, *, index: int = 0, envs: int = 1,
                timeout: float = 0.0, links: Links | None = None,
                field_dir: Path | None = None, series_dir: Path | None = None,
                series_stride: int = 1, snapshot_dir: Path | None = None,
                snapshot_due: Callable[[int], bool] | None = None) -> TeamDriver:
    """Team rank 0's driver of environment ``index`` (of ``envs``): the solver built from
    ``spec`` (a Python one within ``spec.build_timeout``, a :class:`SolverStartError` when
    its constructor raises or takes longer, see
    :func:`~hpc_refer.envs.calls.start_solver`; an external one started or reached as its
    id says through ``links``, which it needs, and sent the parameters), rebuilt by the same
    factory after a fault; ``timeout`` is ``run.env_step_timeout``, the other keywords are
    :class:`TeamDriver`'s."""
    outputs: dict[str, Any] = {
        "field_dir": field_dir, "series_dir": series_dir, "series_stride": series_stride,
        "snapshot_dir": snapshot_dir, "snapshot_due": snapshot_due, "history": spec.history}
    if is_external(spec.env_id):
        if links is None:
            raise TypeError(f"make_driver of run.env = {spec.env_id!r} needs the links to "
                            f"external solvers (hpc_refer.parallel.solver_link.MpiLinks)")
        env = ExternalEnv(spec.env_id, index, envs, timeout, links=links, params=spec.params,
                          run_dir=spec.run_dir, seed=role_seed(spec.seed, SeedRole.SOLVER, index))
        return TeamDriver(env, team, index=index, timeout=timeout, **outputs)
    factory = env_factory(spec, index)
    cls = _solver_class(spec.env_id)
    label = f"env {index} ({cls.__name__ if cls is not None else spec.env_id})"
    return TeamDriver(start_solver(factory, team, label, spec.build_timeout), team,
                      factory=factory, index=index, timeout=timeout,
                      build_timeout=spec.build_timeout, **outputs)


def episode_metric_names(env_id: str) -> tuple[str, ...]:
    """Names of the per-episode values the solver class of ``env_id`` reports (its
    ``episode_metrics``); () for gymnasium ids and external solvers."""
    cls = _solver_class(env_id)
    return () if cls is None else metric_names(cls, env_id)


def episode_columns(env_id: str) -> tuple[str, ...]:
    """The columns of ``episodes.csv`` (and ``eval.csv``): the fixed ones
    (:data:`~hpc_refer.report.schema.EPISODE_FIELDS`), then the solver's episode metrics; a metric
    that takes a fixed column's name is a ConfigError."""
    names = episode_metric_names(env_id)
    clash = sorted(set(names) & set(EPISODE_FIELDS))
    if clash:
        raise ConfigError(f"{env_id}.episode_metrics = {names!r} is invalid: the names "
                          f"{', '.join(EPISODE_FIELDS)} are taken by episodes.csv")
    return EPISODE_FIELDS + names


def check_spaces(cls: type, where: str) -> tuple[int, int]:
    """The declared spaces of a solver class: obs_dim and act_dim positive integers, low and
    high real arrays of shape (act_dim,) with low < high; returns (obs_dim, act_dim) or
    raises a one-line ConfigError naming the class and the attribute."""
    dims = []
    for name in ("obs_dim", "act_dim"):
        value = getattr(cls, name)
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise ConfigError(f"{where}: {cls.__name__}.{name} = {value!r} is invalid: allowed "
                              "are integers >= 1")
        dims.append(int(value))
    bounds = []
    for name in ("low", "high"):
        try:
            value = np.asarray(getattr(cls, name), np.float64)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: {cls.__name__}.{name} is not an array of real "
                              "numbers") from None
        if value.shape != (dims[1],):
            raise ConfigError(f"{where}: {cls.__name__}.{name} has shape {value.shape}, "
                              f"expected ({dims[1]},) (act_dim)")
        bounds.append(value)
    bad = np.flatnonzero(~(bounds[0] < bounds[1]))
    if bad.size:
        raise ConfigError(f"{where}: {cls.__name__}.low[{bad[0]}] = {bounds[0][bad[0]]} is not "
                          f"below high[{bad[0]}] = {bounds[1][bad[0]]}")
    return dims[0], dims[1]


def env_dims(spec: SolverSpec) -> tuple[int, int] | None:
    """(obs_dim, act_dim) of ``spec``'s environment as the policy sees it, without a team
    (learners need only the sizes): obs_dim is the stacked width of ``spec.history``
    (:meth:`~hpc_refer.envs.history.History.dim`). The declared spaces and parameters are
    checked; a gymnasium or PettingZoo id is made once (a PettingZoo environment's sizes are
    one agent's).

    None for an external solver, whose sizes arrive in its HELLO (the id's form is validated
    here, its launch by :func:`check_env`).
    """
    if is_external(spec.env_id):
        parse_spec(spec.env_id, spec.ranks_per_env)
        return None
    obs_dim, act_dim = _solver_dims(spec)
    return spec.history.dim(obs_dim, act_dim), act_dim


def _solver_dims(spec: SolverSpec) -> tuple[int, int]:
    """The solver's own (obs_dim, act_dim) (see :func:`env_dims`)."""
    factory = env_factory(spec)
    cls = _solver_class(spec.env_id)
    if cls is not None:
        return check_spaces(cls, f"run.env = {spec.env_id!r}")
    try:
        env = factory(None)
    except TypeError as err:  # gymnasium.make's unknown keyword
        if is_pettingzoo(spec.env_id):  # its [env] is checked against the factory's signature
            raise
        raise ConfigError(f"[env] {dict(spec.params)} is refused by gymnasium.make("
                          f"{spec.env_id!r}): {err}") from None
    try:
        return env.obs_dim, env.act_dim
    finally:
        env.close()


def check_env(spec: SolverSpec, apps: int) -> None:
    """Start-up validation of ``spec`` on every rank, before any environment exists:
    :func:`env_dims`, and for an external solver the launch in an mpirun of ``apps`` apps
    (:func:`~hpc_refer.envs.launch.check_apps`; the caller counts them,
    :func:`hpc_refer.parallel.world.app_count`) and the port directory of
    ``external:--connect DIR``."""
    env_dims(spec)
    if is_external(spec.env_id):
        check_apps(spec.env_id, apps)
        check_port_dir(spec.env_id)
