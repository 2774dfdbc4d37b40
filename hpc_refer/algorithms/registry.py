"""The algorithm registry: every algorithm is a plug-in that registers itself.

An algorithm module defines its :class:`~hpc_refer.algorithms.base.Algorithm` subclass and
its config table (a frozen dataclass deriving from
:class:`~hpc_refer.config.AlgorithmConfig`, attribute ``Config`` of the class, whose
``section`` is the algorithm's name) and decorates the class with :func:`register`. Nothing
else names it: the config finds its table here (``[name]`` in TOML, ``--name.key`` flags),
``run.algorithm`` chooses it, and benches and tests iterate :data:`ALGORITHMS`.

Where algorithms come from: every module of the package :mod:`hpc_refer.algorithms` is
imported with the package (so a new file there is a new algorithm), and the modules of
``run.plugins`` are imported before a config is resolved (:func:`hpc_refer.config.load_plugins`):
a module of the user's (or of a test) that registers an algorithm from outside the package,
on every MPI rank and again on a restart, since the resolved config keeps the list.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, TypeVar, overload

from hpc_refer.config import register_table

if TYPE_CHECKING:
    from hpc_refer.algorithms.base import Algorithm

_ALGORITHMS: dict[str, type[Algorithm]] = {}

ALGORITHMS: Mapping[str, type[Algorithm]] = MappingProxyType(_ALGORITHMS)
"""Registry: algorithm name -> class (read-only view; :func:`register` adds to it)."""

A = TypeVar("A", bound="type[Algorithm]")


@overload
def register(cls: A, *, default: bool = False) -> A: ...


@overload
def register(cls: None = None, *, default: bool = False) -> Callable[[A], A]: ...


def register(cls: A | None = None, *, default: bool = False) -> A | Callable[[A], A]:
    """Class decorator: register an algorithm under ``cls.name`` with its table
    ``cls.Config`` (``default``: the algorithm ``run.algorithm`` names when it is empty; one
    algorithm is the default). Registering another class under a taken name is a
    ValueError; registering the same class again (a module imported twice) changes
    nothing."""
    def add(algo: A) -> A:
        name = algo.name
        table = algo.Config
        if table.section != name:
            raise ValueError(f"algorithm {name!r}: its Config table's section is "
                             f"{table.section!r}; it must be the algorithm's name")
        known = _ALGORITHMS.get(name)
        if known is not None and known is not algo:
            raise ValueError(f"algorithm {name!r} is registered already (by "
                             f"{known.__module__}.{known.__qualname__})")
        register_table(table, default=default)
        _ALGORITHMS[name] = algo
        return algo

    return add if cls is None else add(cls)


def algorithm_class(name: str) -> type[Algorithm]:
    """The class registered as ``name`` (a KeyError naming the registered ones else)."""
    try:
        return _ALGORITHMS[name]
    except KeyError:
        raise KeyError(f"no algorithm {name!r} is registered: registered are "
                       f"{', '.join(sorted(_ALGORITHMS))}") from None
