"""The algorithm registry: every algorithm is a plug-in that registers itself.

A built-in algorithm is two modules: its table in :mod:`hpc_refer.algorithms.tables` (a
frozen dataclass deriving from :class:`~hpc_refer.config.tables.AlgorithmConfig`, whose
``section`` is the algorithm's name and whose ``implementation`` names the second module;
light, registered with the configuration when a config is resolved) and the module of its
:class:`~hpc_refer.algorithms.kit.base.Algorithm` subclass (attribute ``Config``: the table),
decorated with :func:`register`. Nothing else names it: the config finds its table
(``[name]`` in TOML, ``--name.key`` flags), ``run.algorithm`` chooses it, and benches and
tests iterate :data:`ALGORITHMS`. The algorithm's module, which loads torch, is imported the
first time its class is asked for (:func:`algorithm_class`): resolving a config, writing the
report or reading a run's files never loads it.

A plug-in from outside the package (a module of ``run.plugins``, imported when a config is
resolved, :func:`hpc_refer.config.resolve.load_plugins`) registers its algorithm and its
table at once with :func:`register`, on every MPI rank and again on a restart, since the
resolved config keeps the list.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, TypeVar, overload

from hpc_refer.config.resolve import algorithm_tables, register_table

if TYPE_CHECKING:
    from hpc_refer.algorithms.kit.base import Algorithm
    from hpc_refer.config.resolve import Config
    from hpc_refer.config.tables import AlgorithmConfig

_ALGORITHMS: dict[str, type[Algorithm]] = {}

A = TypeVar("A", bound="type[Algorithm]")


class _Registered(Mapping[str, "type[Algorithm]"]):
    """Read-only view name -> class of every registered algorithm: the algorithms registered
    with their class (:func:`register`) and those whose table names the module that registers
    them (``implementation``), that module imported when the class is first read
    (:func:`algorithm_class`). A table alone (no class, no implementation) is no algorithm."""

    def __getitem__(self, name: str) -> type[Algorithm]:
        if name not in self._names():
            raise KeyError(name)
        return algorithm_class(name)

    def __contains__(self, name: object) -> bool:
        return name in self._names()  # (no import: Mapping's would read the class)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    @staticmethod
    def _names() -> list[str]:
        return [name for name, table in algorithm_tables().items()
                if name in _ALGORITHMS or implementation(table)]


ALGORITHMS: Mapping[str, type[Algorithm]] = _Registered()
"""Registry: algorithm name -> class (read-only view; :func:`register` adds to it)."""


@overload
def register(cls: A, *, default: bool = False) -> A: ...


@overload
def register(cls: None = None, *, default: bool = False) -> Callable[[A], A]: ...


def register(cls: A | None = None, *, default: bool = False) -> A | Callable[[A], A]:
    """Class decorator: register an algorithm under ``cls.name`` with its table
    ``cls.Config`` (``default``: the algorithm ``run.algorithm`` names when it is empty; one
    algorithm is the default, a built-in one declares it with its table). Registering another
    class under a taken name is a ValueError; registering the same class again (a module
    imported twice) changes nothing."""
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
    """The class registered as ``name``, importing the module its table names
    (``implementation``) the first time; a KeyError naming the registered ones else."""
    if name not in _ALGORITHMS:
        _import_implementation(name)
    try:
        return _ALGORITHMS[name]
    except KeyError:
        for table in list(algorithm_tables()):
            _import_implementation(table)
        raise KeyError(f"no algorithm {name!r} is registered: registered are "
                       f"{', '.join(sorted(_ALGORITHMS))}") from None


def implementation(table: type[AlgorithmConfig]) -> str:
    """The module that registers the algorithm of ``table``: its own ``implementation``, not
    one it inherits (a table derived from another algorithm's is another algorithm's)."""
    return str(vars(table).get("implementation", ""))


def _import_implementation(name: str) -> None:
    """Import the module that the table ``[name]`` names (nothing for an unknown name, a
    registered class or a table without one)."""
    table = algorithm_tables().get(name)
    if name not in _ALGORITHMS and table is not None and implementation(table):
        importlib.import_module(implementation(table))


def make_algorithm(config: Config, obs_dim: int, act_dim: int, seed: int) -> Algorithm:
    """The algorithm ``config.run.algorithm`` with its table, networks seeded by ``seed``."""
    cls = algorithm_class(config.run.algorithm)
    return cls(obs_dim, act_dim, config.algorithm, config.refer, seed)
