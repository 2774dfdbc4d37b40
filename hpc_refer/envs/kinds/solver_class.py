"""The Python solver class: a built-in solver by name (``KS``) or a user's class as
``package.module:Class``, implementing the interface of :mod:`hpc_refer.envs` and
constructed with the team, so that it may span ``run.ranks_per_env`` ranks.

Its module is imported on every rank, learners included (they read the class attributes,
:func:`check_spaces`): the constructor runs on the environment's team alone. The ``[env]``
table is checked against the constructor's signature before anything starts; the
constructor also receives the :data:`CONTEXT_KEYWORDS` it names.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import typing
from collections.abc import Mapping
from typing import Any

import numpy as np

from hpc_refer.config.layout import SeedRole, role_seed
from hpc_refer.config.modes import ConfigError
from hpc_refer.envs.checks import metric_names
from hpc_refer.envs.history import HISTORY_KEYS
from hpc_refer.envs.registry import EnvKind, Factory, SolverSpec, allowed_forms, register_kind

BUILTIN = {
    "Diffusion1D": "hpc_refer.envs.diffusion:Diffusion1D",
    "KS": "hpc_refer.envs.ks:KuramotoSivashinsky",
    "KSAgents": "hpc_refer.envs.ks_agents:KuramotoSivashinskyAgents",
    "CylinderJets": "hpc_refer.envs.cylinder_jets:CylinderJets",
    "CylinderJetsAgents": "hpc_refer.envs.cylinder_jets:CylinderJetsAgents",
}
"""The built-in solvers by name."""

SOLVER_ATTRIBUTES = ("obs_dim", "act_dim", "low", "high")
"""Class attributes of the solver protocol (see :mod:`hpc_refer.envs`)."""
SOLVER_METHODS = ("reset", "step", "close")
"""Methods of the solver protocol (see :mod:`hpc_refer.envs`)."""

CONTEXT_KEYWORDS = ("env_index", "run_dir", "seed")
"""Keywords a solver's constructor receives when it names them: its environment's index
(0..E-1), the run directory (a string; "" without one) and a seed of its own (derived from
``run.seed`` and the index)."""


def load_class(env_id: str) -> Any:
    """The solver class ``env_id`` names (built-in or ``package.module:Class``), checked
    against the solver protocol: a one-line ConfigError naming what cannot be loaded and
    every allowed form, or what the protocol needs and what is missing."""
    spec = BUILTIN.get(env_id, env_id)
    module, _, name = spec.partition(":")
    try:
        loaded = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as err:
        raise ConfigError(f"run.env = {spec!r} cannot be loaded ({err}): "
                          f"{allowed_forms()}") from None
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


@register_kind
class SolverClass(EnvKind):
    """``KS``, ``Diffusion1D``, ... or ``package.module:Class``: ``cls(team, **params)``."""

    name = "solver_class"
    label = "a Python solver class"
    form = (f"a built-in solver ({', '.join(BUILTIN)}) or a Python solver class as "
            "package.module:Class (constructed with its team: it may span "
            "run.ranks_per_env ranks)")
    order = 1
    team = True

    def claims(self, env_id: str) -> bool:
        return env_id in BUILTIN or ":" in env_id

    def solver_params(self, env_id: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` checked against what the constructor takes and converted to its
        annotated types (an int for a float parameter becomes a float): an unknown or
        reserved key, a missing required parameter or a value of the wrong type is a
        one-line ConfigError naming the solver and its parameters."""
        cls = load_class(env_id)
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
            raise ConfigError(f"{cls.__name__} needs env.{missing[0]} (--env.{missing[0]} "
                              f"VALUE): its required parameters are {', '.join(missing)}")
        by_name = {p.name: p for p in named}
        hints = _annotations(cls)
        return {k: _coerce_param(cls, hints, by_name[k], v) if k in by_name else v
                for k, v in params.items()}

    def solver_dims(self, spec: SolverSpec) -> tuple[int, int]:
        """The class's declared spaces (:func:`check_spaces`); nothing is constructed."""
        return check_spaces(load_class(spec.env_id), f"run.env = {spec.env_id!r}")

    def factory(self, spec: SolverSpec, index: int = 0) -> Factory:
        """``cls(team, **params)`` plus the :data:`CONTEXT_KEYWORDS` its constructor names,
        as a :func:`functools.partial` of the class (so that messages can name it)."""
        cls = load_class(spec.env_id)
        params: dict[str, Any] = dict(spec.params)
        named, _ = _parameters(cls)
        context = {"env_index": index, "run_dir": spec.run_dir,
                   "seed": role_seed(spec.seed, SeedRole.SOLVER, index)}
        params.update({p.name: context[p.name] for p in named if p.name in context})
        return functools.partial(cls, **params)

    def metric_names(self, env_id: str) -> tuple[str, ...]:
        """The class's ``episode_metrics``, checked."""
        return metric_names(load_class(env_id), env_id)

    def solver_name(self, env_id: str) -> str:
        return str(load_class(env_id).__name__)
