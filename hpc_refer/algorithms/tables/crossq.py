"""CrossQ's table ``[crossq]``: light (the configuration's modules only, no torch), so that a
config is resolved without loading the algorithm; the algorithm is
:mod:`hpc_refer.algorithms.crossq`, which this table names (``implementation``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hpc_refer.config.modes import Activation, require
from hpc_refer.config.resolve import register_table
from hpc_refer.config.tables import AlgorithmConfig
from hpc_refer.config.values import option


@dataclass(frozen=True)
class CrossQConfig(AlgorithmConfig):
    """CrossQ (Bhatt et al. 2024) with ReF-ER, the authors' and sb3-contrib's settings: ReLU
    networks with batch renormalisation, the actor 256 x 256, the critics 1024 x 1024, Adam
    1e-3 with beta1 = 0.5 (actor and critics), B = 256, gamma 0.99, the actor and the
    temperature every 3 steps, no target networks. Feed-forward only."""

    section: ClassVar[str] = "crossq"
    implementation: ClassVar[str] = "hpc_refer.algorithms.crossq"
    squashes: ClassVar[bool] = True
    hidden: tuple[int, ...] = option((256, 256), "hidden layer widths of the actor")
    critic_hidden: tuple[int, ...] = option(
        (1024, 1024), "hidden layer widths of the critics (the paper's 2048 and sb3-contrib's "
        "1024; 256 runs about 7x faster on one core)")
    lr: float = option(1e-3, "Adam learning rate of the actor, the critics and the temperature")
    adam_beta1: float = option(0.5, "Adam's beta1 of the actor and the critics (the "
                               "temperature keeps 0.9)")
    batch: int = option(256, "minibatch size B (global over all learners)")
    gamma: float = option(0.99, "discount factor")
    replay_size: int = option(2**20, "the algorithm's replay capacity N (replay.size 0 uses it)")
    policy_delay: int = option(3, "the actor and the temperature step every this many gradient "
                               "steps (the critics every step)")
    alpha_init: float = option(1.0, "initial temperature alpha")
    target_entropy: float = option(
        -1.0, "target entropy H of the temperature's update, per action dimension (H = this x "
        "act_dim)")
    renorm_momentum: float = option(0.01, "rate m of the batch renormalisation's running "
                                    "statistics")
    renorm_eps: float = option(1e-3, "eps added to the variances of the batch renormalisation")
    renorm_warmup: int = option(100_000, "training batches of each network normalised by "
                                "their own statistics before the running ones correct them")

    @property
    def activation(self) -> Activation:
        """ReLU (CrossQ's networks)."""
        return Activation.RELU

    def __post_init__(self) -> None:
        super().__post_init__()
        require(len(self.critic_hidden) > 0 and all(h > 0 for h in self.critic_hidden),
                "crossq.critic_hidden", self.critic_hidden, "a non-empty list of positive "
                "integers")
        require(0 <= self.adam_beta1 < 1, "crossq.adam_beta1", self.adam_beta1,
                "0 <= beta1 < 1")
        require(self.policy_delay >= 1, "crossq.policy_delay", self.policy_delay,
                "integers >= 1")
        require(self.alpha_init > 0, "crossq.alpha_init", self.alpha_init, "values > 0")
        require(0 < self.renorm_momentum <= 1, "crossq.renorm_momentum", self.renorm_momentum,
                "0 < m <= 1")
        require(self.renorm_eps > 0, "crossq.renorm_eps", self.renorm_eps, "values > 0")
        require(self.renorm_warmup >= 0, "crossq.renorm_warmup", self.renorm_warmup,
                "integers >= 0")


register_table(CrossQConfig)
