"""Configuration: one frozen dataclass per concern, a TOML file, command-line overrides.

Every default of the program is defined here, once, as a dataclass field; its help text lives
in the field's metadata and is what ``--help`` prints. A config is resolved in three layers:
dataclass defaults < TOML file (``--config``) < command-line flags. The resolved config is
written to the run directory as ``config.toml``.

TOML layout (every section and key optional)::

    [run]     env, steps, seed, run_dir, log_every, ...
    [vracer]  hidden, lr, batch, gamma, ...
    [refer]   mode, C, D, A, ...
    [replay]  size, learn_start, grad_ratio

On the command line the ``[run]`` keys are plain flags (``--env``, ``--steps``, ``--seed``,
``--run-dir``) and the others are ``--<section>.<key>`` (``--refer.mode er``), with the
underscores of TOML keys written as dashes (``--replay.learn-start``).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key and the allowed values."""


def _opt(default: Any, help: str, choices: tuple[str, ...] | None = None) -> Any:
    return field(default=default, metadata={"help": help, "choices": choices})


def _require(ok: bool, key: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ConfigError(f"{key} = {value!r} is invalid: allowed values are {allowed}")


REFER_MODES = ("refer", "er", "refer1", "refer2")
KL_DIRECTIONS = ("mu_pi", "pi_mu")
ACTION_BOUNDS = ("clip", "tanh")


@dataclass(frozen=True)
class RunConfig:
    """What to train, for how long, and where to write."""

    env: str = _opt(
        "HalfCheetah-v5",
        "environment: a continuous-action gymnasium id, a built-in solver (Diffusion1D, KS), "
        "package.module:Class, or an external MPI solver: external, 'external:[-n K] PROGRAM "
        "[ARGS]', 'external:--connect DIR' (solvers/README.md)",
    )
    steps: int = _opt(1_000_000, "total environment steps over all actors")
    seed: int = _opt(0, "random seed (environment, networks, sampling)")
    run_dir: str = _opt("", "run directory; empty: runs/<env>-<algo>-<mode>-seed<seed>[-k]")
    log_every: int = _opt(10_000, "environment steps between metric records and progress lines")
    threads: int = _opt(1, "torch threads per process (1 is fastest for these network sizes)")
    learners: int = _opt(1, "MPI: number L of learner ranks (world = L + E x ranks_per_env)")
    ranks_per_env: int = _opt(1, "MPI: ranks K of each environment team (actor + K-1 solver)")
    chunk_len: int = _opt(
        1000, "steps per message from actor to learner (episodes end a chunk earlier)"
    )
    checksum_every: int = _opt(
        0, "MPI debug: compare the learners' weight checksums every k gradient steps (0: off)"
    )

    def __post_init__(self) -> None:
        _require(self.steps > 0, "run.steps", self.steps, "integers > 0")
        _require(self.log_every > 0, "run.log_every", self.log_every, "integers > 0")
        _require(self.threads > 0, "run.threads", self.threads, "integers > 0")
        _require(self.seed >= 0, "run.seed", self.seed, "integers >= 0")
        _require(self.learners >= 1, "run.learners", self.learners, "integers >= 1")
        _require(self.ranks_per_env >= 1, "run.ranks_per_env", self.ranks_per_env,
                 "integers >= 1")
        _require(self.chunk_len >= 1, "run.chunk_len", self.chunk_len, "integers >= 1")
        _require(self.checksum_every >= 0, "run.checksum_every", self.checksum_every,
                 "integers >= 0")


@dataclass(frozen=True)
class VRacerConfig:
    """V-RACER network and optimiser (paper defaults, Sec. 5 and App. A)."""

    hidden: tuple[int, ...] = _opt((128, 128), "hidden layer widths (softsign activations)")
    lr: float = _opt(1e-4, "initial Adam learning rate eta0 (annealed by eq. 13)")
    batch: int = _opt(256, "minibatch size B (global over all learners)")
    gamma: float = _opt(0.995, "discount factor")
    sigma_init: float = _opt(math.sqrt(0.2), "initial policy standard deviation")
    action_bounds: str = _opt(
        "clip",
        "how bounded action spaces are honoured: clip the Gaussian sample when it is sent to "
        "the environment (paper), or tanh-squash and scale it (reference code [HEAD])",
        ACTION_BOUNDS,
    )

    def __post_init__(self) -> None:
        _require(
            len(self.hidden) > 0 and all(h > 0 for h in self.hidden),
            "vracer.hidden", self.hidden, "a non-empty list of positive integers",
        )
        _require(0 < self.lr < 1, "vracer.lr", self.lr, "0 < lr < 1")
        _require(self.batch > 0, "vracer.batch", self.batch, "integers > 0")
        _require(0 < self.gamma <= 1, "vracer.gamma", self.gamma, "0 < gamma <= 1")
        _require(self.sigma_init > 0, "vracer.sigma_init", self.sigma_init, "values > 0")
        _require(
            self.action_bounds in ACTION_BOUNDS,
            "vracer.action_bounds", self.action_bounds, ", ".join(ACTION_BOUNDS),
        )


@dataclass(frozen=True)
class ReferConfig:
    """Remember-and-Forget Experience Replay (Sec. 3, eqs. 10-13)."""

    mode: str = _opt(
        "refer",
        "refer: rules 1 and 2; er: plain experience replay; refer1: rule 1 only; "
        "refer2: rule 2 only",
        REFER_MODES,
    )
    C: float = _opt(4.0, "c_max(t) = 1 + C / (1 + A t)  (eq. 13)")
    D: float = _opt(0.1, "target fraction of far-policy samples in the replay memory (eq. 12)")
    A: float = _opt(5e-7, "annealing rate of c_max and of the learning rate (eq. 13)")
    beta_init: float = _opt(0.0, "initial penalty coefficient beta (0 as in the paper's code)")
    beta_rate: float = _opt(
        0.0, "step size eta of the beta update (eq. 12); 0: the initial learning rate"
    )
    kl_direction: str = _opt(
        "mu_pi",
        "mu_pi: penalise KL(mu || pi) as in eq. 11; pi_mu: KL(pi || mu) as the reference code",
        KL_DIRECTIONS,
    )

    def __post_init__(self) -> None:
        _require(self.mode in REFER_MODES, "refer.mode", self.mode, ", ".join(REFER_MODES))
        _require(self.C > 0, "refer.C", self.C, "C > 0")
        _require(0 < self.D < 1, "refer.D", self.D, "0 < D < 1")
        _require(self.A >= 0, "refer.A", self.A, "A >= 0")
        _require(0 <= self.beta_init <= 1, "refer.beta_init", self.beta_init, "0 <= beta <= 1")
        _require(0 <= self.beta_rate < 1, "refer.beta_rate", self.beta_rate, "0 <= eta < 1")
        _require(
            self.kl_direction in KL_DIRECTIONS,
            "refer.kl_direction", self.kl_direction, ", ".join(KL_DIRECTIONS),
        )


@dataclass(frozen=True)
class ReplayConfig:
    """The replay memory."""

    size: int = _opt(2**18, "replay capacity N in stored states (FIFO forgetting beyond it)")
    learn_start: int = _opt(-1, "stored states before the first gradient step; -1: N / 2")
    grad_ratio: float = _opt(1.0, "gradient steps per environment step once training runs")
    stats_every: int = _opt(
        1000, "gradient steps between refreshes of the state and reward scaling from the RM"
    )

    def __post_init__(self) -> None:
        _require(self.size >= 2, "replay.size", self.size, "integers >= 2")
        _require(
            self.learn_start == -1 or 0 < self.learn_start <= self.size,
            "replay.learn_start", self.learn_start, f"-1 or 1..{self.size} (replay.size)",
        )
        _require(self.grad_ratio > 0, "replay.grad_ratio", self.grad_ratio, "values > 0")
        _require(self.stats_every > 0, "replay.stats_every", self.stats_every, "integers > 0")

    @property
    def start(self) -> int:
        """Number of stored states at which training starts."""
        return self.size // 2 if self.learn_start == -1 else self.learn_start


@dataclass(frozen=True)
class Config:
    """The whole resolved configuration of a run."""

    run: RunConfig = field(default_factory=RunConfig)
    vracer: VRacerConfig = field(default_factory=VRacerConfig)
    refer: ReferConfig = field(default_factory=ReferConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)

    def __post_init__(self) -> None:
        _require(
            self.vracer.batch <= self.replay.start,
            "vracer.batch", self.vracer.batch,
            f"at most the states stored when training starts ({self.replay.start})",
        )

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Nested plain dict (tuples as lists), the TOML layout."""
        return {
            section.name: {
                k: list(v) if isinstance(v, tuple) else v
                for k, v in dataclasses.asdict(getattr(self, section.name)).items()
            }
            for section in dataclasses.fields(self)
        }

    def write_toml(self, path: Path) -> None:
        """Write the resolved config as TOML."""
        path.write_text(tomli_w.dumps(self.to_dict()))


_SECTION_TYPES = {"run": RunConfig, "vracer": VRacerConfig, "refer": ReferConfig,
                  "replay": ReplayConfig}


def _coerce(section: str, key: str, raw: Any) -> Any:
    """Convert a TOML or command-line value to the field's type, or raise ConfigError."""
    cls = _SECTION_TYPES[section]
    hints = typing.get_type_hints(cls)
    kind = hints[key]
    name = f"{section}.{key}"
    try:
        if kind is bool:
            if isinstance(raw, str):
                if raw.lower() not in ("true", "false"):
                    raise ValueError
                return raw.lower() == "true"
            return bool(raw)
        if kind is int:
            if isinstance(raw, float) and not raw.is_integer():
                raise ValueError
            return int(raw)
        if kind is float:
            return float(raw)
        if kind is str:
            if not isinstance(raw, str):
                raise ValueError
            return raw
        if kind == tuple[int, ...]:
            items = raw.split(",") if isinstance(raw, str) else list(raw)
            return tuple(int(x) for x in items)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} = {raw!r} is not a valid {_type_name(kind)}") from None
    raise AssertionError(f"unhandled field type {kind} of {name}")


def _type_name(kind: Any) -> str:
    return "list of integers" if kind == tuple[int, ...] else kind.__name__


def build_config(overrides: dict[str, dict[str, Any]]) -> Config:
    """Config from ``{section: {key: value}}`` over the defaults; unknown keys are errors."""
    sections = {}
    for section, values in overrides.items():
        if section not in _SECTION_TYPES:
            raise ConfigError(
                f"unknown config section [{section}]: allowed are {', '.join(_SECTION_TYPES)}"
            )
        if not isinstance(values, dict):
            raise ConfigError(f"[{section}] must be a table of key = value pairs")
        names = [f.name for f in dataclasses.fields(_SECTION_TYPES[section])]
        for key in values:
            if key not in names:
                raise ConfigError(
                    f"unknown config key {section}.{key}: allowed keys are {', '.join(names)}"
                )
        sections[section] = _SECTION_TYPES[section](
            **{k: _coerce(section, k, v) for k, v in values.items()}
        )
    return Config(**sections)


def load_toml(path: Path) -> dict[str, dict[str, Any]]:
    """Read a TOML config file into nested dicts (no validation yet)."""
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: no such file") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"--config {path}: not valid TOML ({err})") from None


def _flag(section: str, key: str) -> str:
    """``--key`` for [run] keys, ``--section.key`` for the others; '_' written as '-'."""
    name = key.replace("_", "-")
    return f"--{name}" if section == "run" else f"--{section}.{name}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--config`` and one flag per config field, with the field's help and default."""
    parser.add_argument("--config", type=Path, help="TOML file with [run], [vracer], ... tables")
    for section, cls in _SECTION_TYPES.items():
        group = parser.add_argument_group(f"[{section}]", cls.__doc__)
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else None
            shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
            group.add_argument(
                _flag(section, f.name),
                dest=f"{section}.{f.name}",
                default=argparse.SUPPRESS,
                metavar=f.name.upper(),
                help=f"{f.metadata['help']} (default: {shown})",
                choices=f.metadata.get("choices"),
            )


def config_from_args(args: argparse.Namespace) -> Config:
    """Resolve defaults < TOML file < command-line flags into a validated Config."""
    layers: dict[str, dict[str, Any]] = {}
    if getattr(args, "config", None) is not None:
        layers = dict(load_toml(args.config))
    for dest, value in vars(args).items():
        if "." in dest:
            section, key = dest.split(".", 1)
            layers.setdefault(section, {})[key] = value
    return build_config(layers)
