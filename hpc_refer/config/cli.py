"""The command line of ``python -m hpc_refer.run``: one flag per config key of every table
(``--section.key``, the run table's as ``--key``), ``--env.KEY VALUE`` for the solver's
parameters, the plugins to import before the algorithm tables are known, and the resolution
defaults < preset < ``--config`` TOML file < flags into a
:class:`~hpc_refer.config.resolve.Config` (:func:`config_from_args`). The tables themselves
and their checks are :mod:`hpc_refer.config.tables`, the TOML layout
:mod:`hpc_refer.config.resolve`.
"""

from __future__ import annotations

import argparse
import dataclasses
import tomllib
from pathlib import Path
from typing import Any

from hpc_refer.config.modes import ConfigError
from hpc_refer.config.resolve import (
    Config,
    algorithm_tables,
    build_config,
    default_algorithm,
    load_toml,
    table_types,
)
from hpc_refer.config.tables import RunConfig
from hpc_refer.config.values import coerce


def env_flag_value(text: str) -> bool | int | float | str:
    """A ``--env.KEY`` flag's value: the TOML value it spells (``100``, ``0.5``, ``true``,
    ``"a b"``), else the text itself."""
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text
    return value if isinstance(value, bool | int | float | str) else text


def env_flags(extras: list[str]) -> tuple[dict[str, bool | int | float | str], list[str]]:
    """``--env.KEY VALUE`` and ``--env.KEY=VALUE`` pairs out of argparse's unrecognised
    arguments; returns them and the arguments that are not such flags."""
    params: dict[str, bool | int | float | str] = {}
    rest: list[str] = []
    k = 0
    while k < len(extras):
        arg = extras[k]
        if not arg.startswith("--env."):
            rest.append(arg)
            k += 1
            continue
        name, eq, value = arg[len("--env."):].partition("=")
        if not eq:
            if k + 1 >= len(extras):
                raise ConfigError(f"--env.{name} needs a value: --env.{name} VALUE")
            value = extras[k + 1]
            k += 1
        params[name.replace("-", "_")] = env_flag_value(value)
        k += 1
    return params, rest


def _flag(section: str, key: str) -> str:
    """``--key`` for [run] keys, ``--section.key`` for the others; '_' written as '-'."""
    name = key.replace("_", "-")
    return f"--{name}" if section == "run" else f"--{section}.{name}"


def add_arguments(parser: argparse.ArgumentParser, plugins: tuple[str, ...] = ()) -> None:
    """Add ``--config`` and one flag per field of the run, ReF-ER and replay tables and of
    every registered algorithm's table (after ``plugins`` are imported), with the field's
    help and default; ``--algorithm`` lists the registered algorithms."""
    tables = algorithm_tables(plugins)
    parser.add_argument("--config", type=Path, help="TOML file with [run], [refer], "
                        "[replay], [env] and algorithm tables ([" + "], [".join(tables) + "])")
    names = tuple(sorted(tables))
    for section, cls in table_types(plugins).items():
        group = parser.add_argument_group(f"[{section}]", cls.__doc__)
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else None
            given = f.metadata.get("choices")
            if (section, f.name) == ("run", "algorithm"):
                default, given = default_algorithm(), names
            shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
            group.add_argument(
                _flag(section, f.name),
                dest=f"{section}.{f.name}",
                default=argparse.SUPPRESS,
                metavar=f.name.upper(),
                help=f"{f.metadata['help']} (default: {shown})",
                choices=given,
            )


def plugins_of(argv: list[str] | None) -> tuple[str, ...]:
    """The ``run.plugins`` a command line names (``--plugins``, and the ``[run]`` table of
    its ``--config`` file), before the full parser exists: their algorithms' flags must be
    known to it."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--plugins", default="")
    pre.add_argument("--config", type=Path)
    known, _ = pre.parse_known_args(argv)
    listed: list[str] = []
    if known.config is not None and known.config.is_file():
        run = load_toml(known.config).get("run", {})
        if isinstance(run, dict) and "plugins" in run:
            listed += list(coerce(RunConfig, "plugins", run["plugins"]))
    listed += list(coerce(RunConfig, "plugins", known.plugins))
    return tuple(dict.fromkeys(listed))


ENV_HELP = """\
--env.KEY VALUE: a parameter of the environment itself (the [env] table), given to a Python
solver's constructor as the keyword argument KEY, to gymnasium.make, or to an external solver
in its PARAMS message; VALUE is read as a TOML value (100, 0.5, true) or else as a string. A
Python solver is checked against its constructor's signature before anything starts. Two
keys are hpc_refer's own: --env.history k (the policy sees the last k states, stacked) and
--env.history_actions true (and the last k actions)."""


def parse_command_line(parser: argparse.ArgumentParser,
                       argv: list[str] | None) -> argparse.Namespace:
    """``parser.parse_args`` that also takes the ``--env.KEY VALUE`` flags (into
    ``args.env_params``); any other unknown argument is argparse's usual error."""
    args, extras = parser.parse_known_args(argv)
    try:
        params, rest = env_flags(extras)
    except ConfigError as err:
        parser.error(str(err))
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.env_params = params
    return args


def config_from_args(args: argparse.Namespace) -> Config:
    """Resolve defaults < TOML file < command-line flags into a validated Config."""
    layers: dict[str, dict[str, Any]] = {}
    if getattr(args, "config", None) is not None:
        layers = dict(load_toml(args.config))
    for dest, value in vars(args).items():
        if "." in dest:
            section, key = dest.split(".", 1)
            layers.setdefault(section, {})[key] = value
    env_params = getattr(args, "env_params", {})
    if env_params:
        layers["env"] = {**layers.get("env", {}), **env_params}
    return build_config(layers)
