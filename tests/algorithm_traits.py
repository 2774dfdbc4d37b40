"""The package's algorithms, grouped by what their tables declare: the tests iterate these
instead of lists of names, so that an algorithm that joins (or offers recurrent networks) is
tested without an edit here."""

from __future__ import annotations

import dataclasses

from hpc_refer.algorithms.kit.base import Algorithm
from hpc_refer.algorithms.registry import ALGORITHMS
from hpc_refer.config.tables import RecurrentConfig

BUILT_IN: dict[str, type[Algorithm]] = {
    name: cls for name, cls in ALGORITHMS.items()
    if cls.__module__.startswith("hpc_refer.algorithms.")}
"""The algorithms the package itself defines (not a test's plug-ins), their modules imported
before any test patches the registries."""

RECURRENT: tuple[str, ...] = tuple(sorted(
    name for name, cls in BUILT_IN.items() if issubclass(cls.Config, RecurrentConfig)))
"""The built-in algorithms that offer recurrent networks: their tables derive from
:class:`~hpc_refer.config.tables.RecurrentConfig`."""


def has_field(name: str, field: str) -> bool:
    """Whether the table of algorithm ``name`` has the setting ``field`` (a TOML key)."""
    return field in {f.name for f in dataclasses.fields(BUILT_IN[name].Config)}
