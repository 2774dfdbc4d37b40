"""Configuration: one frozen dataclass per concern, a TOML file, command-line overrides.

Every default of the program is defined here, once, as a dataclass field; its help text lives
in the field's metadata and is what ``--help`` prints. A config is resolved in layers:
dataclass defaults < a named preset (``--preset``, :mod:`hpc_refer.presets`) < TOML file
(``--config``) < command-line flags. The resolved config is written to the run directory as
``config.toml``.

TOML layout (every section and key optional)::

    [run]     env, algorithm, plugins, steps, seed, run_dir, log_every, ...
    [<name>]  the algorithm's table: hidden, lr, batch, gamma, ... and its own keys
              (one table per registered algorithm, named after it; the table of
              run.algorithm is used and written to config.toml, the others are validated)
    [refer]   mode, C, D, A, ...
    [replay]  size, learn_start, grad_ratio, sampling, ...
    [env]     the solver's own parameters (any identifiers; see below)

Algorithm tables are plug-ins: each algorithm module defines its table (a subclass of
:class:`AlgorithmConfig` whose ``section`` is the algorithm's name) and registers it
(:func:`hpc_refer.algorithms.registry.register`, which calls :func:`register_table`). This
module knows the run, ReF-ER and replay tables and finds the algorithms' tables in that
registry; :func:`algorithm_tables` imports the algorithm package and the run's plugins first
(``run.plugins``: modules that register algorithms of their own), by name, so that a config
can be resolved anywhere without this module importing the layers above it.

Modes are enums (:class:`ReferMode`, :class:`KLDirection`, :class:`ActionBounds`,
:class:`Sampling`, :class:`Exploration`, ...; defined in :mod:`hpc_refer.config_modes` with
:class:`ConfigError`, and importable from here): the TOML or flag string is converted once, by
the tables here, and a wrong one is refused with the allowed values.

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
solver takes is checked where the solver is known (:func:`hpc_refer.envs.solver_params`).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import tomli_w

from hpc_refer.config_modes import (
    COMPILE_AUTO_STEPS,
    ActionBounds,
    BatchScaling,
    Cell,
    CompileMode,
    ConfigError,
    Exploration,
    ReferMode,
    Sampling,
    choices,
    enum_field,
    require,
)
from hpc_refer.config_modes import Forget as Forget  # re-exported: part of config's API
from hpc_refer.config_modes import KLDirection as KLDirection  # re-exported
from hpc_refer.config_tables import ReferConfig, ReplayConfig
from hpc_refer.config_values import coerce, env_table, option
from hpc_refer.presets import PRESETS, preset_layers

LOG_RECORDS = 50
"""Interval records of a run whose ``run.log_every`` is left to its default (0)."""
MAX_AUTO_LOG_EVERY = 10_000


def auto_log_every(steps: int) -> int:
    """The default ``run.log_every`` of a run of ``steps`` environment steps:
    steps / LOG_RECORDS, at least 1 and at most MAX_AUTO_LOG_EVERY."""
    return min(MAX_AUTO_LOG_EVERY, max(1, steps // LOG_RECORDS))


@dataclass(frozen=True)
class RunConfig:
    """What to train, for how long, and where to write."""

    section: ClassVar[str] = "run"

    algorithm: str = option(
        "", "off-policy algorithm: a registered one (its table of the same name holds its "
        "settings); empty: the default algorithm"
    )
    preset: str = option(
        "", "named settings applied over the defaults and under --config and the flags: paper "
        "(the paper's, pinned), expensive (the most return per environment step on the "
        "benchmark: SAC with plain ER); empty: none (hpc_refer/presets.py)", tuple(PRESETS)
    )
    plugins: tuple[str, ...] = option(
        (), "modules imported before the config is resolved, each registering algorithms of "
        "its own (comma-separated, e.g. my_package.td7); kept in config.toml, so every rank "
        "and a restart import them too"
    )
    env: str = option(
        "HalfCheetah-v5",
        "environment: a continuous-action gymnasium id, a built-in solver (Diffusion1D, KS, "
        "KSAgents, CylinderJets, CylinderJetsAgents), package.module:Class, a PettingZoo "
        "ParallelEnv as pettingzoo:package.module:factory, or an external MPI solver: "
        "external, 'external:[-n K] PROGRAM [ARGS]', 'external:--connect DIR' "
        "(solvers/README.md)",
    )
    steps: int = option(1_000_000, "total environment steps over all actors (stored "
                        "transitions: n per simulation step with n agents)")
    seed: int = option(0, "random seed (environment, networks, sampling)")
    run_dir: str = option("", "run directory; empty: runs/<env>-<algo>-<mode>-seed<seed>[-k]")
    log_every: int = option(
        0, "environment steps between metric records and progress lines; 0: steps / 50, at "
        "least 1 and at most 10,000 (a short run logs within seconds and gets a full report)")
    threads: int = option(1, "torch threads per process (1 is fastest for these network sizes)")
    compile: CompileMode = option(
        CompileMode.AUTO,
        "the learner's gradient step (forward, losses, backward, Adam) as one compiled graph: "
        "on, off (eager), or auto (on for runs of at least 20,000 gradient steps); where "
        "compilation fails the step falls back to eager with one log line",
        choices(CompileMode),
    )
    learners: int = option(1, "MPI: number L of learner ranks (world = L + E x ranks_per_env)")
    ranks_per_env: int = option(1, "MPI: ranks K of each environment team (actor + K-1 solver)")
    chunk_len: int = option(
        1000, "steps per message from actor to learner (episodes end a chunk earlier)"
    )
    checksum_every: int = option(
        0, "MPI debug: compare the learners' weight checksums every k gradient steps (0: off)"
    )
    action_bounds: ActionBounds = option(
        ActionBounds.CLIP,
        "how bounded action spaces are honoured: clip the Gaussian sample when it is sent to "
        "the environment (paper), or tanh-squash and scale it (reference code [HEAD])",
        choices(ActionBounds),
    )

    checkpoint_every: int = option(
        100_000, "environment steps between checkpoints (HDF5, in RUN_DIR/checkpoints); one is "
        "always written at the end and on SIGTERM/SIGUSR1 (0: only those)"
    )
    checkpoint_keep: int = option(2, "complete checkpoints kept (older ones are deleted)")
    eval_every: int = option(
        0, "environment steps between evaluation rounds of the mean policy (0: off); the "
        "episodes go to eval.csv"
    )
    eval_episodes: int = option(5, "episodes per evaluation round")
    env_step_timeout: float = option(
        600.0, "seconds a solver may take to answer one reset or step before it counts as a "
        "solver fault (first message: a start-up error); 0: wait forever"
    )
    env_build_timeout: float = option(
        600.0, "seconds a Python solver's constructor may take (meshes, compiled kernels): "
        "at start-up (longer: a start-up error) and when the solver is rebuilt after a fault "
        "(longer: another fault; a team of several ranks fails); timed apart from "
        "env_step_timeout, which never includes a rebuild; 0: no limit"
    )
    max_env_failures: int = option(
        20, "consecutive solver faults of one environment after which the run checkpoints "
        "and stops"
    )
    tensorboard: bool = option(
        False, "also write train.jsonl's scalars and every episode's return and metrics as "
        "TensorBoard events to RUN_DIR/tensorboard (tensorboard --logdir runs)"
    )
    series_stride: int = option(
        1, "record a solver's step_metrics every this many steps of an episode to "
        "RUN_DIR/series/env-<k>.h5"
    )
    snapshot: str = option(
        "", "episodes at whose end a solver with snapshot() (CylinderJets, Flow2D: the "
        "vorticity) writes RUN_DIR/snapshots/env-<k>-episode-<n>.h5 and a .png of it: "
        "comma-separated items, each an episode number n >= 1 of every environment (counted "
        "from 1, evaluation episodes included) or every:K for episodes K, 2K, ...; e.g. "
        "'1,every:200'; empty: none"
    )
    report_every: int = option(
        0, "environment steps between rewrites of RUN_DIR/report.html (python -m "
        "hpc_refer.report; also written when the run ends); 0: no report during the run"
    )

    def __post_init__(self) -> None:
        enum_field(self, "action_bounds", ActionBounds)
        enum_field(self, "compile", CompileMode)
        for module in self.plugins:
            require(all(part.isidentifier() for part in module.split(".")), "run.plugins",
                     self.plugins, "dotted module names (package.module)")
        require(self.preset in ("", *PRESETS), "run.preset", self.preset,
                f"{', '.join(PRESETS)} or empty")
        require(self.steps > 0, "run.steps", self.steps, "integers > 0")
        require(self.log_every >= 0, "run.log_every", self.log_every,
                "integers > 0, or 0 for steps / 50 (at most 10,000)")
        if self.log_every == 0:  # resolved here, so config.toml holds the interval used
            object.__setattr__(self, "log_every", auto_log_every(self.steps))
        require(self.threads > 0, "run.threads", self.threads, "integers > 0")
        require(self.seed >= 0, "run.seed", self.seed, "integers >= 0")
        require(self.learners >= 1, "run.learners", self.learners, "integers >= 1")
        require(self.ranks_per_env >= 1, "run.ranks_per_env", self.ranks_per_env,
                 "integers >= 1")
        require(self.chunk_len >= 1, "run.chunk_len", self.chunk_len, "integers >= 1")
        require(self.checksum_every >= 0, "run.checksum_every", self.checksum_every,
                 "integers >= 0")
        require(self.checkpoint_every >= 0, "run.checkpoint_every", self.checkpoint_every,
                 "integers >= 0")
        require(self.checkpoint_keep >= 1, "run.checkpoint_keep", self.checkpoint_keep,
                 "integers >= 1")
        require(self.eval_every >= 0, "run.eval_every", self.eval_every, "integers >= 0")
        require(self.eval_episodes >= 1, "run.eval_episodes", self.eval_episodes,
                 "integers >= 1")
        require(math.isfinite(self.env_step_timeout) and self.env_step_timeout >= 0,
                 "run.env_step_timeout", self.env_step_timeout, "seconds >= 0 (0: no limit)")
        require(math.isfinite(self.env_build_timeout) and self.env_build_timeout >= 0,
                 "run.env_build_timeout", self.env_build_timeout, "seconds >= 0 (0: no limit)")
        require(self.series_stride >= 1, "run.series_stride", self.series_stride,
                 "integers >= 1")
        require(self.report_every >= 0, "run.report_every", self.report_every,
                 "integers >= 0 (0: no report)")
        require(self.max_env_failures >= 1, "run.max_env_failures", self.max_env_failures,
                 "integers >= 1")
        self.snapshot_rule(self.snapshot)

    @staticmethod
    def snapshot_rule(text: str) -> tuple[frozenset[int], tuple[int, ...]]:
        """``run.snapshot`` parsed: (the listed episode numbers, the K of each every:K);
        ConfigError naming the item otherwise."""
        listed: set[int] = set()
        every: list[int] = []
        for item in filter(None, (x.strip() for x in text.split(","))):
            head, _, tail = item.partition(":")
            number = tail if head == "every" else item
            require(number.isdigit() and int(number) >= 1, "run.snapshot", text,
                     f"comma-separated episode numbers >= 1 or every:K with K >= 1 (not "
                     f"{item!r}), e.g. '1,every:200'; empty: none")
            (every.append if head == "every" else listed.add)(int(number))
        return frozenset(listed), tuple(every)

    def snapshot_due(self, episode: int) -> bool:
        """Whether ``run.snapshot`` chooses an environment's ``episode``-th episode (from 1)."""
        listed, every = self.snapshot_rule(self.snapshot)
        return episode in listed or any(episode % k == 0 for k in every)


@dataclass(frozen=True)
class AlgorithmConfig:
    """Settings every algorithm has; each algorithm's table adds its own."""

    section: ClassVar[str] = ""
    hidden: tuple[int, ...] = option((128, 128), "hidden layer widths (softsign activations)")
    lr: float = option(1e-4, "initial Adam learning rate eta0 (annealed by eq. 13 under ReF-ER)")
    batch: int = option(256, "minibatch size B (global over all learners)")
    gamma: float = option(0.995, "discount factor")
    replay_size: int = option(2**18, "the algorithm's replay capacity N (replay.size 0 uses it)")

    def __post_init__(self) -> None:
        name = self.section
        require(
            len(self.hidden) > 0 and all(h > 0 for h in self.hidden),
            f"{name}.hidden", self.hidden, "a non-empty list of positive integers",
        )
        require(0 < self.lr < 1, f"{name}.lr", self.lr, "0 < lr < 1")
        require(self.batch > 0, f"{name}.batch", self.batch, "integers > 0")
        require(0 < self.gamma <= 1, f"{name}.gamma", self.gamma, "0 < gamma <= 1")
        require(self.replay_size >= 2, f"{name}.replay_size", self.replay_size,
                 "integers >= 2")

    squashes: ClassVar[bool] = False
    """Whether the algorithm's policy is tanh-squashed by definition (SAC's): its actors then
    always map a sample u to the action box by tanh, whatever ``run.action_bounds`` says."""

    @property
    def carry_dim(self) -> int:
        """Values of the recurrent state an actor stores with each state (0: feed-forward;
        see :class:`RecurrentConfig`)."""
        return 0

    @property
    def sequence_length(self) -> int:
        """Steps of each sequence the learner samples (1: single transitions)."""
        return 1

    @property
    def exploration(self) -> Exploration:
        """The behaviour noise of the algorithm's actors: the stored Gaussian (tables may
        offer others as a field of the same name, e.g. Ornstein-Uhlenbeck noise)."""
        return Exploration.GAUSSIAN


@dataclass(frozen=True)
class RecurrentConfig(AlgorithmConfig):
    """The settings of an algorithm that offers recurrent networks
    (:mod:`hpc_refer.algorithms.recurrent`); its table derives from this one."""

    cell: Cell = option(Cell.NONE, "recurrent cell for partially observed tasks: none "
                        "(feed-forward), gru or lstm", choices(Cell))
    cell_width: int = option(32, "width of the recurrent cell's state h")
    bptt: int = option(16, "window W of truncated backpropagation through time: a recurrent "
                       "learner samples sequences of W steps")

    def __post_init__(self) -> None:
        super().__post_init__()
        name = self.section
        enum_field(self, "cell", Cell)
        require(self.cell_width > 0, f"{name}.cell_width", self.cell_width, "integers > 0")
        require(self.bptt > 0, f"{name}.bptt", self.bptt, "integers > 0")

    @property
    def carry_dim(self) -> int:
        return self.cell.carry_dim(self.cell_width)

    @property
    def memory_width(self) -> int:
        """Values of the cell's output h_t that critics read beside the state (H with a
        cell, 0 without)."""
        return 0 if self.cell is Cell.NONE else self.cell_width

    @property
    def sequence_length(self) -> int:
        """W with a cell, 1 without."""
        return 1 if self.cell is Cell.NONE else self.bptt


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

ALGORITHM_PACKAGE = "hpc_refer.algorithms"
"""The package whose modules are the built-in algorithms (imported by
:func:`algorithm_tables`; importing it registers them)."""

_TABLES: dict[str, type[AlgorithmConfig]] = {}
_DEFAULT: list[str] = []


def register_table(table: type[AlgorithmConfig], default: bool = False) -> None:
    """Make ``table`` (an algorithm's config dataclass) the TOML table and flags
    ``[table.section]``; ``default``: its algorithm is the one an empty ``run.algorithm``
    names. Called by :func:`hpc_refer.algorithms.registry.register`."""
    name = table.section
    if not (dataclasses.is_dataclass(table) and issubclass(table, AlgorithmConfig)):
        raise TypeError(f"algorithm table {table!r} is not a dataclass deriving from "
                        "AlgorithmConfig")
    if not name.isidentifier() or name in (*FIXED_TABLES, "env"):
        raise ValueError(f"algorithm table section {name!r} is invalid: an identifier other "
                         f"than {', '.join([*FIXED_TABLES, 'env'])}")
    known = _TABLES.get(name)
    if known is not None and known is not table:
        raise ValueError(f"an algorithm table [{name}] is registered already")
    if default and _DEFAULT and _DEFAULT[0] != name:
        raise ValueError(f"[{name}] cannot be the default algorithm: {_DEFAULT[0]!r} is")
    _TABLES[name] = table
    if default and not _DEFAULT:
        _DEFAULT.append(name)


def load_plugins(plugins: Sequence[str] = ()) -> None:
    """Import the built-in algorithm package and the modules of ``run.plugins`` (each
    registers its algorithms on import); a module that cannot be imported is a ConfigError
    naming it."""
    importlib.import_module(ALGORITHM_PACKAGE)
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
    puts its tables under ``overrides`` (:mod:`hpc_refer.presets`); ``run.algorithm`` (empty:
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
    merged: dict[str, Any] = preset_layers(run.preset, algorithm)
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
