"""Declaring and reading one value of the configuration: a table's field with its help
(:func:`option`), a TOML or command-line value converted to the
type its table's field declares (:func:`coerce`), and the ``[env]`` table's keys and values
checked (:func:`env_table`); the standard library only.
"""

from __future__ import annotations

import keyword
import re
import typing
from dataclasses import field
from enum import StrEnum
from typing import Any

from hpc_refer.config.modes import ConfigError


def coerce(cls: type, key: str, raw: Any) -> Any:
    """Convert a TOML or command-line value to the type of field ``key`` of the table
    ``cls``, or raise ConfigError naming ``section.key``."""
    section = cls.section  # type: ignore[attr-defined]
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
            return _integer(raw)
        if kind is float:
            if isinstance(raw, bool) or not isinstance(raw, int | float | str):
                raise ValueError
            return float(raw)
        if kind is str:
            if not isinstance(raw, str):
                raise ValueError
            return raw
        if isinstance(kind, type) and issubclass(kind, StrEnum):
            if not isinstance(raw, str):
                raise ValueError
            return raw
        if kind == tuple[int, ...]:
            items = raw.split(",") if isinstance(raw, str) else list(raw)
            return tuple(_integer(x) for x in items)
        if kind == tuple[str, ...]:
            items = [x.strip() for x in raw.split(",")] if isinstance(raw, str) else list(raw)
            if not all(isinstance(x, str) for x in items):
                raise ValueError
            return tuple(x for x in items if x)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{name} = {raw!r} is not a valid {_type_name(kind)}") from None
    raise AssertionError(f"unhandled field type {kind} of {name}")


def _integer(raw: Any) -> int:
    """An integer field's value: an int, an integral float or a string of either ("1000",
    "1e3"); a bool, a non-integral or non-finite number is refused (ValueError)."""
    if isinstance(raw, bool):
        raise ValueError
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str):
        try:
            return int(raw)
        except ValueError:
            raw = float(raw)
    if isinstance(raw, float) and raw.is_integer():
        return int(raw)
    raise ValueError


def _type_name(kind: Any) -> str:
    if kind == tuple[int, ...]:
        return "list of integers (each integral, e.g. 128 or 1e3)"
    if kind == tuple[str, ...]:
        return "list of strings (comma-separated on the command line)"
    if kind is int:
        return "integer (an integral number such as 1000 or 1e3; not true/false)"
    if kind is float:
        return "float (a number; not true/false)"
    return str(kind.__name__)


ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_table(values: dict[str, Any]) -> dict[str, bool | int | float | str]:
    """The ``[env]`` table checked: identifier keys, scalar values (one-line ConfigError)."""
    for key, value in values.items():
        if not ENV_KEY.fullmatch(key) or keyword.iskeyword(key):
            raise ConfigError(f"env.{key} is invalid: [env] keys are Python identifiers (they "
                              "become keyword arguments of the solver)")
        if not isinstance(value, bool | int | float | str):
            raise ConfigError(f"env.{key} = {value!r} is invalid: allowed values are booleans, "
                              "integers, floats and strings")
    return dict(values)


def option(default: Any, help: str, choices: tuple[str, ...] | None = None) -> Any:
    """A config field: its default and the help text ``--help`` prints (``choices``: the
    allowed strings of an enum field)."""
    return field(default=default, metadata={"help": help, "choices": choices})
