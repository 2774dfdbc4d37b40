"""Resolving a configuration: the tables (one frozen dataclass per concern), a TOML file,
command-line overrides, into one :class:`Config`.

Every default of the program is defined once, as a dataclass field of a table
(:mod:`hpc_refer.config.tables`, an algorithm's in :mod:`hpc_refer.algorithms.tables`); its
help text lives in the field's metadata and is what ``--help`` prints. A config is resolved
in layers: dataclass defaults < a named preset (``--preset``,
:mod:`hpc_refer.config.presets`) < TOML file (``--config``) < command-line flags. The
resolved config is written to the run directory as ``config.toml``.

TOML layout (every section and key optional)::

    [run]     env, algorithm, plugins, steps, seed, run_dir, log_every, ...
    [<name>]  the algorithm's table: hidden, lr, batch, gamma, ... and its own keys
              (one table per registered algorithm, named after it; the table of
              run.algorithm is used and written to config.toml, the others are validated)
    [refer]   mode, C, D, A, ...
    [replay]  size, learn_start, grad_ratio, sampling, ...
    [env]     the solver's own parameters (any identifiers; see below)

Algorithm tables are plug-ins: each algorithm's table is a light module of
:mod:`hpc_refer.algorithms.tables` (a subclass of :class:`AlgorithmConfig` whose ``section``
is the algorithm's name) that registers it (:func:`register_table`). This module knows the
run, ReF-ER and replay tables (:mod:`hpc_refer.config.tables`) and finds the algorithms'
tables in that registry; :func:`algorithm_tables` imports the tables' package and the run's
plugins first (``run.plugins``: modules that register algorithms of their own), by name, so
that a config can be resolved anywhere without this module importing the layers above it,
and without torch or numba: the algorithms' own modules are imported where an algorithm is
built (:func:`hpc_refer.algorithms.registry.algorithm_class`).

Modes are enums (:class:`~hpc_refer.config.modes.ReferMode`, ...; defined in
:mod:`hpc_refer.config.modes` with :class:`~hpc_refer.config.modes.ConfigError`): the TOML or
flag string is converted once, by the tables, and a wrong one is refused with the allowed
values.

On the command line the ``[run]`` keys are plain flags (``--env``, ``--steps``, ``--seed``,
``--run-dir``) and the others are ``--<section>.<key>`` (``--refer.mode er``), with the
underscores of TOML keys written as dashes (``--replay.learn-start``).

Values are read by one rule, the same for TOML and flags: an integer key (``run.steps``,
``replay.size``, ...) takes an integer, an integral float or a string of either (``1000``,
``1e3``, ``"1e3"`` all give 1000); a non-integral value (``1.5``) is refused naming the key. A
float key takes any number or numeric string. A boolean (``true``/``false``) is never a
number: ``steps = true`` is refused naming the key and the expected type.

The ``[env]`` table (flags ``--env.KEY VALUE``) holds the environment's own parameters:
keyword arguments of a Python solver's constructor, of ``gymnasium.make`` for a gymnasium id,
or ``key=value`` lines of an external solver's PARAMS message. Its keys are identifiers and its
values booleans, integers, floats or strings; a flag's value is read as a TOML value when it is
one (``100`` an integer, ``0.5`` a float, ``true`` a boolean), else as a string. What the
solver takes is checked where the solver is known, by the kind of ``run.env``
(:meth:`hpc_refer.envs.registry.EnvKind.params`).
"""

from __future__ import annotations

import dataclasses
import importlib
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any

import tomli_w

from hpc_refer.config.modes import (
    COMPILE_AUTO_STEPS,
    ActionBounds,
    BatchScaling,
    CompileMode,
    ConfigError,
    Exploration,
    ReferMode,
    Sampling,
    require,
)
from hpc_refer.config.presets import PRESETS, preset_layers
from hpc_refer.config.tables import AlgorithmConfig, ReferConfig, ReplayConfig, RunConfig
from hpc_refer.config.values import coerce, env_table


@dataclass(frozen=True)
class Config:
    """The whole resolved configuration of a run: the run, ReF-ER and replay tables, the
    chosen algorithm's table (``run.algorithm``) and the environment's parameters."""

    run: RunConfig = field(default_factory=RunConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    """The table of ``run.algorithm`` (:func:`build_config` sets both)."""
    refer: ReferConfig = field(default_factory=ReferConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    env: dict[str, bool | int | float | str] = field(default_factory=dict)
    """The ``[env]`` table: the environment's own parameters."""

    def __post_init__(self) -> None:
        """Resolve ``replay.size = 0`` to the algorithm's N, then check the cross-table rules."""
        name = self.algorithm.section
        require(self.run.algorithm == name, "run.algorithm", self.run.algorithm,
                 f"the name of the table given with it ({name!r})")
        if self.replay.size == 0:
            resolved = dataclasses.replace(self.replay, size=self.algorithm.replay_size)
            object.__setattr__(self, "replay", resolved)
        require(self.replay.learn_start <= self.replay.size, "replay.learn_start",
                self.replay.learn_start, f"-1 or 1..{self.replay.size} (the replay size)")
        per_learner = self.replay.batch_scaling is BatchScaling.PER_LEARNER
        global_batch = self.algorithm.batch * (self.run.learners if per_learner else 1)
        require(
            global_batch <= self.replay.start,
            f"{name}.batch", self.algorithm.batch,
            f"at most the states stored when training starts ({self.replay.start})"
            + (f" over the {self.run.learners} learners of replay.batch_scaling = per-learner"
               if per_learner else ""),
        )
        require(
            self.algorithm.exploration is Exploration.GAUSSIAN
            or self.refer.mode is ReferMode.ER,
            f"{name}.exploration", str(self.algorithm.exploration),
            "gaussian with refer.mode refer, refer1 or refer2 (ReF-ER needs the Gaussian mu "
            "that is stored); ou only with refer.mode er",
        )
        require(self.algorithm.sequence_length == 1
                or self.replay.sampling is Sampling.UNIFORM,
                "replay.sampling", str(self.replay.sampling),
                f"uniform with a recurrent {name}.cell (sequences are sampled uniformly)")

    @property
    def action_bounds(self) -> ActionBounds:
        """How the actors bound their actions: tanh for an algorithm whose policy squashes,
        else ``run.action_bounds``."""
        return ActionBounds.TANH if self.algorithm.squashes else self.run.action_bounds

    @property
    def compiles(self) -> bool:
        """Whether the learners compile their step: ``run.compile`` on, or auto with at
        least COMPILE_AUTO_STEPS gradient steps owed, grad_ratio x (run.steps -
        replay.start)."""
        if self.run.compile is CompileMode.AUTO:
            owed = self.replay.grad_ratio * (self.run.steps - self.replay.start)
            return owed >= COMPILE_AUTO_STEPS
        return self.run.compile is CompileMode.ON

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Nested plain dict (tuples as lists), the TOML layout: ``run``, the algorithm's
        table under its name, ``refer``, ``replay``, ``env``."""
        def plain(v: Any) -> Any:
            return list(v) if isinstance(v, tuple) else str(v) if isinstance(v, StrEnum) else v

        tables = (self.run, self.algorithm, self.refer, self.replay)
        return {**{t.section: {k: plain(v) for k, v in dataclasses.asdict(t).items()}
                   for t in tables}, "env": dict(self.env)}

    def write_toml(self, path: Path) -> None:
        """Write the resolved config as TOML."""
        path.write_text(tomli_w.dumps(self.to_dict()))


FIXED_TABLES: dict[str, type] = {"run": RunConfig, "refer": ReferConfig, "replay": ReplayConfig}
"""The tables every run has; the algorithms' tables come from :func:`algorithm_tables`."""

TABLE_PACKAGE = "hpc_refer.algorithms.tables"
"""The package of the built-in algorithms' tables, light modules (imported by
:func:`load_plugins`; importing it registers them; the algorithms themselves are imported
only when asked for, :func:`hpc_refer.algorithms.registry.algorithm_class`)."""

_TABLES: dict[str, type[AlgorithmConfig]] = {}
_DEFAULT: list[str] = []


def register_table(table: type[AlgorithmConfig], default: bool = False) -> None:
    """Make ``table`` (an algorithm's config dataclass) the TOML table and flags
    ``[table.section]``; ``default``: its algorithm is the one an empty ``run.algorithm``
    names. Called by each module of :data:`TABLE_PACKAGE` and by
    :func:`hpc_refer.algorithms.registry.register`."""
    name = table.section
    if not (dataclasses.is_dataclass(table) and issubclass(table, AlgorithmConfig)):
        raise TypeError(f"algorithm table {table!r} is not a dataclass deriving from "
                        "AlgorithmConfig")
    if not name.isidentifier() or name in (*FIXED_TABLES, "env"):
        raise ValueError(f"algorithm table section {name!r} is invalid: an identifier other "
                         f"than {', '.join([*FIXED_TABLES, 'env'])}")
    unknown = sorted(set(table.presets) - set(PRESETS))
    if unknown:
        raise ValueError(f"algorithm table [{name}] sets presets {unknown}: the presets are "
                         f"{', '.join(PRESETS)}")
    known = _TABLES.get(name)
    if known is not None and known is not table:
        raise ValueError(f"an algorithm table [{name}] is registered already")
    if default and _DEFAULT and _DEFAULT[0] != name:
        raise ValueError(f"[{name}] cannot be the default algorithm: {_DEFAULT[0]!r} is")
    _TABLES[name] = table
    if default and not _DEFAULT:
        _DEFAULT.append(name)


def load_plugins(plugins: Sequence[str] = ()) -> None:
    """Import the built-in algorithms' tables (:data:`TABLE_PACKAGE`: no torch) and the
    modules of ``run.plugins`` (each registers its algorithms, with their tables, on import:
    a plug-in's module loads what it imports); a module that cannot be imported is a
    ConfigError naming it."""
    importlib.import_module(TABLE_PACKAGE)
    for module in plugins:
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise ConfigError(f"run.plugins: module {module!r} cannot be imported ({err})"
                              ) from None


def algorithm_tables(plugins: Sequence[str] = ()) -> Mapping[str, type[AlgorithmConfig]]:
    """Every registered algorithm's table by name, after :func:`load_plugins`."""
    load_plugins(plugins)
    return MappingProxyType(_TABLES)


def table_types(plugins: Sequence[str] = ()) -> dict[str, type]:
    """Every table's dataclass by section: run, refer, replay and the algorithms' tables."""
    return {**FIXED_TABLES, **algorithm_tables(plugins)}


def default_algorithm() -> str:
    """The name of the algorithm an empty ``run.algorithm`` chooses."""
    algorithm_tables()
    if not _DEFAULT:
        raise ConfigError("no default algorithm is registered")
    return _DEFAULT[0]


def _table(cls: type, section: str, values: Any) -> Any:
    """The table ``cls`` from ``values`` over its defaults (unknown keys are errors)."""
    if not isinstance(values, dict):
        raise ConfigError(f"[{section}] must be a table of key = value pairs")
    names = [f.name for f in dataclasses.fields(cls)]
    for key in values:
        if key not in names:
            raise ConfigError(
                f"unknown config key {section}.{key}: allowed keys are {', '.join(names)}")
    return cls(**{k: coerce(cls, k, v) for k, v in values.items()})


def build_config(overrides: Mapping[str, Any]) -> Config:
    """Config from ``{section: {key: value}}`` over the defaults; unknown keys are errors.

    ``run`` is read first and its plugins imported (:func:`load_plugins`); a ``run.preset``
    puts its tables under ``overrides`` (:mod:`hpc_refer.config.presets`); ``run.algorithm`` (empty:
    the default algorithm) chooses the algorithm table. The tables of the other
    registered algorithms, if given, are validated and left out of the result.
    """
    run = _table(RunConfig, "run", overrides.get("run", {}))
    tables = algorithm_tables(run.plugins)
    if run.preset:
        overrides = _with_preset(run, overrides)
        run = _table(RunConfig, "run", overrides["run"])
    name = run.algorithm or default_algorithm()
    require(name in tables, "run.algorithm", name, ", ".join(sorted(tables)))
    run = dataclasses.replace(run, algorithm=name)
    sections: dict[str, Any] = {}
    for section, values in overrides.items():
        if section == "env":
            if not isinstance(values, dict):
                raise ConfigError("[env] must be a table of key = value pairs")
            sections["env"] = env_table(values)
        elif section in FIXED_TABLES or section in tables:
            if section != "run":
                sections[section] = _table(table_types(run.plugins)[section], section,
                                           values)
        else:
            raise ConfigError(
                f"unknown config section [{section}]: allowed are "
                f"{', '.join([*FIXED_TABLES, 'env'])} and the algorithms' tables "
                f"{', '.join(sorted(tables))}")
    return Config(run=run, algorithm=sections.get(name, tables[name]()),
                  refer=sections.get("refer", ReferConfig()),
                  replay=sections.get("replay", ReplayConfig()), env=sections.get("env", {}))


def _with_preset(run: RunConfig, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``overrides`` over the tables of ``run.preset`` (for the algorithm the run resolves
    to: the one given, else the preset's, else the default)."""
    preset_run = PRESETS[run.preset].tables.get("run", {})
    algorithm = run.algorithm or preset_run.get("algorithm") or default_algorithm()
    table = _TABLES.get(algorithm)
    own = {} if table is None else table.presets.get(run.preset, {})
    merged: dict[str, Any] = preset_layers(run.preset, own)
    for section, values in overrides.items():
        merged[section] = ({**merged.get(section, {}), **values} if isinstance(values, dict)
                           else values)
    return merged


def load_toml(path: Path) -> dict[str, dict[str, Any]]:
    """Read a TOML config file into nested dicts (no validation yet)."""
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: no such file") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"--config {path}: not valid TOML ({err})") from None
