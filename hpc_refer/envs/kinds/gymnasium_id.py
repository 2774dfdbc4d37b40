"""A gymnasium id (``HalfCheetah-v5``, ``Pendulum-v1``, ...): any id no other kind claims,
made by ``gymnasium.make(env_id, **params)`` through the adapter
:class:`~hpc_refer.envs.gym_env.GymEnv` (imported, with gymnasium and MuJoCo, when one is
built).

One rank per environment: a gymnasium id names an environment of gymnasium's registry,
constructed by ``gymnasium.make`` from its registered entry point, which no team reaches;
and the environments it registers (MuJoCo, classic control, Box2D) step in one process. A
solver that spans ranks is a Python solver class (``package.module:Class``) or a PettingZoo
factory that names ``team``.
"""

from __future__ import annotations

from hpc_refer.config.modes import ConfigError
from hpc_refer.envs.registry import EnvKind, Factory, SolverSpec, allowed_forms, register_kind


@register_kind
class GymnasiumId(EnvKind):
    """Every id no other kind claims: ``gymnasium.make(env_id, **params)``."""

    name = "gymnasium"
    label = "a gymnasium environment"
    form = ("a continuous-action gymnasium id (HalfCheetah-v5, Hopper-v5, Pendulum-v1, ...; one "
            "rank per environment)")
    order = 2

    def claims(self, env_id: str) -> bool:
        return True

    def factory(self, spec: SolverSpec, index: int = 0) -> Factory:
        from hpc_refer.envs.gym_env import GymEnv  # gymnasium and MuJoCo: when one is built

        self.check_registered(spec.env_id)
        params = dict(spec.params)
        return lambda team: GymEnv(spec.env_id, **params)

    def solver_dims(self, spec: SolverSpec) -> tuple[int, int]:
        """The sizes of the environment made once (``[env]`` is checked by
        ``gymnasium.make``: a keyword it refuses is a one-line ConfigError)."""
        factory = self.factory(spec)
        try:
            env = factory(None)
        except TypeError as err:  # gymnasium.make's unknown keyword
            raise ConfigError(f"[env] {dict(spec.params)} is refused by gymnasium.make("
                              f"{spec.env_id!r}): {err}") from None
        try:
            return env.obs_dim, env.act_dim
        finally:
            env.close()

    @staticmethod
    def check_registered(env_id: str) -> None:
        """A one-line ConfigError naming the nearest registered ids and every allowed form
        unless ``env_id`` is a registered gymnasium id."""
        from hpc_refer.envs.gym_env import unregistered

        why = unregistered(env_id)
        if why:
            raise ConfigError(f"{why}: {allowed_forms()}")
