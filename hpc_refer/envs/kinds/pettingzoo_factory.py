"""A PettingZoo ParallelEnv of homogeneous agents: ``pettingzoo:package.module:factory``
names a callable (a function or a ParallelEnv class) that returns a
:class:`pettingzoo.ParallelEnv`, wrapped by :class:`~hpc_refer.envs.pettingzoo_env.PettingZooEnv`
(imported, with pettingzoo, when one is built) as a solver of several agents.

The run's ``[env]`` table (``--env.KEY VALUE``) is passed to the factory as keyword
arguments, checked against its signature (an unknown or missing keyword is a one-line
ConfigError naming the id and the factory's parameters; a TypeError of a factory taking
``**kwargs`` is one too). The id's form, its module and the factory are checked by
:func:`load_factory` (one-line ConfigErrors), the returned object is checked to be a
ParallelEnv (:func:`make_parallel_env`). The environment is built once at start-up, on every
rank and without a team, to learn the sizes (one agent's), as for gymnasium ids.

On a team. A factory whose signature names ``team`` receives the environment's team (the
protocol :class:`~hpc_refer.envs.interface.Team`; None in a run of one process and when the
sizes are learnt), so that its ParallelEnv may span ``run.ranks_per_env`` ranks: it is built
on every rank of the team, and every call (reset, step, close, a rebuild after a fault)
reaches every rank together, as a Python solver class's do. A factory that names no team
runs on one rank per environment.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from hpc_refer.config.modes import ConfigError
from hpc_refer.envs.interface import Team
from hpc_refer.envs.registry import EnvKind, Factory, SolverSpec, register_kind

PREFIX = "pettingzoo:"
"""How ``run.env`` names a PettingZoo environment: ``pettingzoo:package.module:factory``."""

FORM = "pettingzoo:package.module:factory (a callable returning a pettingzoo ParallelEnv)"

TEAM = "team"
"""The factory's parameter that receives the team, when its signature names it."""


def parse_id(env_id: str) -> tuple[str, str]:
    """(module, factory name) of ``pettingzoo:package.module:factory``; a one-line ConfigError
    for another form."""
    module, sep, name = env_id.removeprefix(PREFIX).partition(":")
    dotted = all(part.isidentifier() for part in module.split("."))
    if not env_id.startswith(PREFIX) or not sep or not dotted or not name.isidentifier():
        raise ConfigError(f"run.env = {env_id!r} is invalid: allowed is {FORM}")
    return module, name


def load_factory(env_id: str) -> Callable[..., Any]:
    """The callable ``env_id`` names: a one-line ConfigError when its module cannot be
    imported, the module has no such attribute or the attribute is not callable."""
    module, name = parse_id(env_id)
    try:
        loaded = importlib.import_module(module)
    except ImportError as err:
        raise ConfigError(f"run.env = {env_id!r}: module {module!r} cannot be imported "
                          f"({type(err).__name__}: {err}); allowed is {FORM}") from None
    factory = getattr(loaded, name, None)
    if factory is None:
        raise ConfigError(f"run.env = {env_id!r}: module {module!r} has no {name!r}; allowed "
                          f"is {FORM}")
    if not callable(factory):
        raise ConfigError(f"run.env = {env_id!r}: {module}.{name} is a "
                          f"{type(factory).__name__}, not callable; allowed is {FORM}")
    return factory


def _signature(factory: Callable[..., Any]) -> inspect.Signature | None:
    """The factory's signature; None where it has none to read (a builtin)."""
    try:
        return inspect.signature(factory)
    except (TypeError, ValueError):
        return None


def takes_team(factory: Callable[..., Any]) -> bool:
    """Whether the factory's signature names :data:`TEAM` (it then receives the team)."""
    signature = _signature(factory)
    return signature is not None and TEAM in signature.parameters


def check_params(env_id: str, factory: Callable[..., Any], params: Mapping[str, Any]) -> None:
    """A one-line ConfigError when ``factory(**params)`` (with ``team`` when it names one)
    does not fit the factory's signature (an unknown keyword, a missing required one),
    naming its parameters; ``env.team`` is hpc_refer's to give a factory that names it."""
    signature = _signature(factory)
    if signature is None:  # no signature to check: the call will tell
        return
    names = ", ".join(p.name for p in signature.parameters.values() if p.name != TEAM and p.kind
                      not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD))
    team = TEAM in signature.parameters
    if team and TEAM in params:
        raise ConfigError(f"env.{TEAM} is reserved: hpc_refer gives the factory of run.env = "
                          f"{env_id!r} its team itself; its parameters are {names or 'none'}")
    try:
        signature.bind(**params, **({TEAM: None} if team else {}))
    except TypeError as err:
        raise ConfigError(f"[env] {dict(params)} is refused by run.env = {env_id!r} ({err}): "
                          f"its parameters are {names or 'none'}") from None


def make_parallel_env(env_id: str, factory: Callable[..., Any], params: Mapping[str, Any],
                      team: Team | None) -> Any:
    """``factory(**params)``, given ``team`` when it names one, checked to be a
    ParallelEnv: a one-line ConfigError for a keyword refused further in (a factory taking
    ``**kwargs``) and for anything else returned (closed first)."""
    from pettingzoo import AECEnv, ParallelEnv  # when one is built

    given = {**params, TEAM: team} if takes_team(factory) else dict(params)
    try:
        env = factory(**given)
    except TypeError as err:  # a keyword refused further in (a factory taking **kwargs)
        if not params:
            raise
        raise ConfigError(f"[env] {dict(params)} is refused by run.env = {env_id!r} "
                          f"({err})") from None
    if not isinstance(env, ParallelEnv):
        hint = (" (pettingzoo.utils.aec_to_parallel converts an AECEnv)"
                if isinstance(env, AECEnv) else "")
        close = getattr(env, "close", None)
        if callable(close):
            close()
        raise ConfigError(f"run.env = {env_id!r}: {parse_id(env_id)[1]}() returned a "
                          f"{type(env).__name__}, expected a pettingzoo ParallelEnv{hint}")
    return env


@register_kind
class PettingZooFactory(EnvKind):
    """``pettingzoo:package.module:factory``: the adapter over ``factory(**params)``."""

    name = "pettingzoo"
    label = "a PettingZoo environment"
    form = (f"a PettingZoo ParallelEnv of homogeneous agents as {PREFIX}package.module:factory "
            f"(a factory that names {TEAM} may span run.ranks_per_env ranks)")
    team = True

    def claims(self, env_id: str) -> bool:
        return env_id.startswith(PREFIX)

    def check_ranks(self, spec: SolverSpec) -> None:
        """One rank, unless the factory names ``team``."""
        if spec.ranks_per_env != 1 and not takes_team(load_factory(spec.env_id)):
            raise ConfigError(
                f"run.env = {spec.env_id!r} is {self.label} whose factory names no {TEAM} "
                f"parameter, and runs on one rank: run.ranks_per_env = {spec.ranks_per_env} "
                f"is invalid, allowed is 1 (a factory that names {TEAM} may span ranks)")

    def factory(self, spec: SolverSpec, index: int = 0) -> Factory:
        """:class:`~hpc_refer.envs.pettingzoo_env.PettingZooEnv` over
        :func:`make_parallel_env`, the factory loaded and ``[env]`` checked here."""
        from hpc_refer.envs.pettingzoo_env import PettingZooEnv  # pettingzoo: when used

        make = load_factory(spec.env_id)
        check_params(spec.env_id, make, spec.params)
        params = dict(spec.params)
        return lambda team: PettingZooEnv(
            spec.env_id, make_parallel_env(spec.env_id, make, params, team), team)

    def solver_dims(self, spec: SolverSpec) -> tuple[int, int]:
        """One agent's sizes, of the environment built once without a team."""
        env = self.factory(spec)(None)
        try:
            return env.obs_dim, env.act_dim
        finally:
            env.close()
