"""The registry of environment kinds: what ``run.env`` names and how it is built.

An environment kind is one module: a subclass of :class:`EnvKind` decorated with
:func:`register_kind`. It brings its id form (:meth:`EnvKind.claims`: does this ``run.env``
belong to it; :attr:`EnvKind.form`, the form's text for ``--help`` and for the messages that
name every allowed form), its factory (:meth:`EnvKind.factory`: team -> solver; or its own
:meth:`EnvKind.start`, the external launch), its dimensions without a team
(:meth:`EnvKind.solver_dims`), its start-up checks (:meth:`EnvKind.solver_params`,
:meth:`EnvKind.check_launch`), its launch needs (:attr:`EnvKind.team`: one rank or a team;
:attr:`EnvKind.declares_sizes`, :attr:`EnvKind.outside_ranks`), its episode metric names
(:meth:`EnvKind.metric_names`) and its label for messages (:attr:`EnvKind.label`,
:meth:`EnvKind.solver_name`). The rest of hpc_refer asks :func:`env_kind` for the kind of
``run.env`` and calls it; no id is told apart anywhere else.

The built-in kinds are the modules of :mod:`hpc_refer.envs.kinds` (a Python solver class,
a gymnasium id, a PettingZoo ParallelEnv, an external MPI solver), imported by name the first
time a kind is asked for: they are light, and import what they build (gymnasium, PettingZoo,
the wire protocol) only when they build it. A kind of one's own is a module of
``run.plugins`` (imported with the configuration on every rank and again on a restart, as
for algorithms, :func:`hpc_refer.config.resolve.load_plugins`) that registers its class.

Which kind: the kinds are asked in ascending :attr:`EnvKind.order` (the order of
registration among equals), and the first whose :meth:`EnvKind.claims` says yes is the
id's. A kind whose form starts with a prefix of its own (``external``, ``pettingzoo:``)
keeps order 0; the two general forms come last: ``package.module:Class`` (order 1: any id
with a colon, and the built-in solvers' names) and the gymnasium id (order 2: any other id).
"""

from __future__ import annotations

import importlib
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, TypeVar

from hpc_refer.config.modes import ConfigError
from hpc_refer.envs.calls import start_solver
from hpc_refer.envs.driver import TeamDriver
from hpc_refer.envs.history import HISTORY_KEYS, PRESENT, History, solver_keys
from hpc_refer.envs.interface import Team
from hpc_refer.envs.launch import Links
from hpc_refer.report.schema import EPISODE_FIELDS

if TYPE_CHECKING:
    from hpc_refer.config.resolve import Config

KIND_PACKAGE = "hpc_refer.envs.kinds"
"""The package of the built-in kinds, one light module each (importing it registers them)."""


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


Factory = Callable[[Team | None], Any]
"""team -> solver: how a kind's solver is built on each rank of its team (None: one
process), and built anew after a fault."""


class EnvKind:
    """One kind of environment (see the module docstring). A subclass sets the class
    attributes and answers :meth:`claims`, :meth:`solver_dims` and either :meth:`factory`
    or :meth:`start`; the rest has defaults. Its methods are the kind's: what all kinds
    share (the history's width, the one-rank check, the columns of episodes.csv) is done
    here, once."""

    name: ClassVar[str]
    """The registry's key (``gymnasium``, ``pettingzoo``, ...)."""
    label: ClassVar[str]
    """What an id of this kind is, in messages: ``a gymnasium environment``."""
    form: ClassVar[str]
    """The id form(s), for ``--help`` and the messages that name every allowed form."""
    order: ClassVar[int] = 0
    """Kinds are asked in ascending order (see the module docstring)."""
    team: ClassVar[bool] = False
    """Whether its solver may span a team of ``run.ranks_per_env`` ranks: built on every
    rank of the team with the team, the other ranks following the actor's calls
    (:func:`~hpc_refer.envs.driver.serve_team`). False: one rank per environment."""
    one_rank: ClassVar[str] = "runs on one rank"
    """Why ``run.ranks_per_env`` must be 1 for a kind that spans no team (messages)."""
    declares_sizes: ClassVar[bool] = False
    """Whether its solver declares its sizes and episode metrics when it starts (an
    external solver's handshake): :meth:`solver_dims` is None, and the learners take them
    from the actors."""
    outside_ranks: ClassVar[bool] = False
    """Whether its solvers are MPI processes of their own (beside hpc_refer's in the
    mpirun, spawned or connected), which only an abort of the job ends when a run fails,
    even a run of one process."""

    def claims(self, env_id: str) -> bool:
        """Whether ``env_id`` has this kind's form (a test of the id's text alone: no
        import, no check of what it names)."""
        raise NotImplementedError

    def solver_dims(self, spec: SolverSpec) -> tuple[int, int] | None:
        """The solver's own (obs_dim, act_dim) without a team (learners need only the
        sizes), its declaration and ``spec.params`` checked; None when the solver declares
        them when it starts (:attr:`declares_sizes`). A one-line ConfigError for an id that
        names nothing usable."""
        raise NotImplementedError

    def factory(self, spec: SolverSpec, index: int = 0) -> Factory:
        """team -> environment ``index`` of ``spec`` (a ConfigError for a bad id)."""
        raise TypeError(f"run.env = {spec.env_id!r} is {self.label}: it has no factory, its "
                        f"solver is started by {type(self).__name__}.start")

    def start(self, spec: SolverSpec, team: Team | None, *, index: int, envs: int,
              timeout: float, links: Links | None) -> tuple[Any, Factory | None]:
        """Team rank 0's solver of environment ``index`` (of ``envs``) and the factory that
        builds it anew after a fault (None: the solver is reset instead). By default
        :meth:`factory` called within ``spec.build_timeout``
        (:func:`~hpc_refer.envs.calls.start_solver`: a :class:`SolverStartError` when the
        constructor raises or takes longer); ``timeout`` (``run.env_step_timeout``) and
        ``links`` serve a kind that starts its solver otherwise."""
        factory = self.factory(spec, index)
        label = f"env {index} ({self.solver_name(spec.env_id)})"
        return start_solver(factory, team, label, spec.build_timeout), factory

    def solver_params(self, env_id: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """The solver's ``[env]`` parameters checked (and converted) where the kind can
        check them before anything is built; by default as they are."""
        return dict(params)

    def check_launch(self, spec: SolverSpec, apps: int) -> None:
        """Start-up checks of how the solver is reached, in an mpirun of ``apps`` apps
        (:func:`hpc_refer.parallel.world.app_count`); by default none."""

    def metric_names(self, env_id: str) -> tuple[str, ...]:
        """The names of the per-episode values its solver reports, known at start-up (the
        extra columns of episodes.csv); by default none."""
        return ()

    def solver_name(self, env_id: str) -> str:
        """What the solver is called in messages (``env 0 (NAME)``); by default the id."""
        return env_id

    def check_ranks(self, spec: SolverSpec) -> None:
        """A ConfigError unless ``spec.ranks_per_env`` suits the kind (:attr:`team`)."""
        if not self.team and spec.ranks_per_env != 1:
            raise ConfigError(f"run.env = {spec.env_id!r} is {self.label} and {self.one_rank}: "
                              f"run.ranks_per_env = {spec.ranks_per_env} is invalid, allowed "
                              "is 1")

    def params(self, env_id: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """The run's ``[env]`` table checked: hpc_refer's own keys (``env.history``,
        ``env.history_actions``, :mod:`hpc_refer.envs.history`) and the solver's
        (:meth:`solver_params`)."""
        History.of(params)
        own = {k: params[k] for k in HISTORY_KEYS if k in params}
        return {**self.solver_params(env_id, solver_keys(params)), **own}

    def dims(self, spec: SolverSpec) -> tuple[int, int] | None:
        """(obs_dim, act_dim) of ``spec``'s environment as the policy sees it, without a
        team: obs_dim is the stacked width of ``spec.history``
        (:meth:`~hpc_refer.envs.history.History.dim`); the rank count
        (:meth:`check_ranks`), the declared spaces and the parameters are checked. None when
        the solver declares its sizes when it starts."""
        self.check_ranks(spec)
        own = self.solver_dims(spec)
        if own is None:
            return None
        return spec.history.dim(*own), own[1]

    def check(self, spec: SolverSpec, apps: int) -> tuple[int, int] | None:
        """Start-up validation of ``spec`` on every rank, before any environment exists:
        :meth:`dims` (returned) and :meth:`check_launch` in an mpirun of ``apps`` apps."""
        dims = self.dims(spec)
        self.check_launch(spec, apps)
        return dims

    def episode_columns(self, env_id: str) -> tuple[str, ...]:
        """The columns of ``episodes.csv`` (and ``eval.csv``): the fixed ones
        (:data:`~hpc_refer.report.schema.EPISODE_FIELDS`), then the solver's episode
        metrics; a metric that takes a fixed column's name is a ConfigError."""
        names = self.metric_names(env_id)
        clash = sorted(set(names) & set(EPISODE_FIELDS))
        if clash:
            raise ConfigError(f"{env_id}.episode_metrics = {names!r} is invalid: the names "
                              f"{', '.join(EPISODE_FIELDS)} are taken by episodes.csv")
        return EPISODE_FIELDS + names


_KINDS: dict[str, EnvKind] = {}

K = TypeVar("K", bound=type[EnvKind])


def register_kind(cls: K) -> K:
    """Class decorator: register the kind ``cls`` under ``cls.name`` (one instance).
    Registering another class under a taken name is a ValueError; registering the same class
    again (a module imported twice) changes nothing."""
    known = _KINDS.get(cls.name)
    if known is not None and type(known) is not cls:
        raise ValueError(f"environment kind {cls.name!r} is registered already (by "
                         f"{type(known).__module__}.{type(known).__qualname__})")
    if known is None:
        _KINDS[cls.name] = cls()
    return cls


def env_kinds() -> tuple[EnvKind, ...]:
    """Every registered kind, in the order they are asked (the built-in ones imported)."""
    importlib.import_module(KIND_PACKAGE)
    ranked = sorted(enumerate(_KINDS.values()), key=lambda pair: (pair[1].order, pair[0]))
    return tuple(kind for _, kind in ranked)


def env_kind(env_id: str) -> EnvKind:
    """The kind of ``env_id``: the first kind that claims it (see the module docstring; the
    gymnasium id claims every id no other kind does). Two kinds of one order that claim it
    are a ValueError naming both (kinds of one's own must not share a form)."""
    claimed = [kind for kind in env_kinds() if kind.claims(env_id)]
    first = [kind for kind in claimed if kind.order == claimed[0].order]
    if len(first) > 1:
        raise ValueError(f"run.env = {env_id!r} is claimed by the environment kinds "
                         f"{', '.join(kind.name for kind in first)}: their forms overlap")
    return claimed[0]


def allowed_forms() -> str:
    """Every registered kind's form, for a message about an id that names nothing:
    ``allowed are ...``, the most general form first."""
    return "allowed are " + "; ".join(kind.form for kind in reversed(env_kinds()))


def kinds_help() -> str:
    """The ``--help`` section of the environment ids: every registered kind's form, one per
    line, the most general first."""
    return "environments (--env, run.env), one form per kind:\n" + "\n".join(
        textwrap.fill(kind.form, 92, initial_indent="  - ", subsequent_indent="    ",
                      break_on_hyphens=False)
        for kind in reversed(env_kinds()))


def make_driver(spec: SolverSpec, team: Team | None, *, index: int = 0, envs: int = 1,
                timeout: float = 0.0, links: Links | None = None,
                field_dir: Path | None = None, series_dir: Path | None = None,
                series_stride: int = 1, snapshot_dir: Path | None = None,
                snapshot_due: Callable[[int], bool] | None = None) -> TeamDriver:
    """Team rank 0's driver of environment ``index`` (of ``envs``): the solver its kind
    starts (:meth:`EnvKind.start`; an external one through ``links``, which it needs),
    rebuilt by the kind's factory after a fault; ``timeout`` is ``run.env_step_timeout``,
    the other keywords are :class:`~hpc_refer.envs.driver.TeamDriver`'s."""
    solver, factory = env_kind(spec.env_id).start(spec, team, index=index, envs=envs,
                                                  timeout=timeout, links=links)
    return TeamDriver(solver, team, factory=factory, index=index, timeout=timeout,
                      build_timeout=spec.build_timeout, field_dir=field_dir,
                      series_dir=series_dir, series_stride=series_stride,
                      snapshot_dir=snapshot_dir, snapshot_due=snapshot_due,
                      history=spec.history)
