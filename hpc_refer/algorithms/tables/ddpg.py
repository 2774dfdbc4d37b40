"""DDPG's table ``[ddpg]``: light (the configuration's modules only, no torch), so that a
config is resolved without loading the algorithm; the algorithm is
:mod:`hpc_refer.algorithms.ddpg`, which this table names (``implementation``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from hpc_refer.config.modes import Exploration, choices, enum_field, require
from hpc_refer.config.resolve import register_table
from hpc_refer.config.tables import RecurrentConfig
from hpc_refer.config.values import option


@dataclass(frozen=True)
class DDPGConfig(RecurrentConfig):
    """DDPG (Lillicrap et al. 2016) with ReF-ER: the paper-era settings (spec, section DDPG)."""

    section: ClassVar[str] = "ddpg"
    implementation: ClassVar[str] = "hpc_refer.algorithms.ddpg"
    presets: ClassVar[Mapping[str, Mapping[str, Mapping[str, Any]]]] = {
        "paper": {"ddpg": {"hidden": [128, 128], "lr": 1e-5, "batch": 128, "gamma": 0.995,
                           "replay_size": 2**19, "critic_lr_factor": 10.0, "critic_l2": 1e-4,
                           "tau": 0.01, "sigma": 0.2},
                  "replay": {"forget": "far_policy"}}}
    lr: float = option(1e-5, "actor Adam learning rate (the critic's is critic_lr_factor x it)")
    batch: int = option(128, "minibatch size B (global over all learners)")
    replay_size: int = option(2**19, "the algorithm's replay capacity N (replay.size 0 uses it)")
    critic_lr_factor: float = option(10.0, "critic learning rate / actor learning rate")
    critic_l2: float = option(1e-4, "L2 weight decay of the critic")
    tau: float = option(0.01, "Polyak rate of the target networks: w' <- (1 - tau) w' + tau w")
    sigma: float = option(0.2, "std of the Gaussian behaviour policy N(m(s), sigma^2)")
    exploration: Exploration = option(
        Exploration.GAUSSIAN,
        "behaviour noise: gaussian (stored as mu, needed by ReF-ER) or ou (Ornstein-Uhlenbeck, "
        "theta 0.15, plain ER only)",
        choices(Exploration),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        enum_field(self, "exploration", Exploration)
        require(self.critic_lr_factor > 0, "ddpg.critic_lr_factor", self.critic_lr_factor,
                 "values > 0")
        require(self.critic_l2 >= 0, "ddpg.critic_l2", self.critic_l2, "values >= 0")
        require(0 < self.tau <= 1, "ddpg.tau", self.tau, "0 < tau <= 1")
        require(self.sigma > 0, "ddpg.sigma", self.sigma, "values > 0")


register_table(DDPGConfig)
