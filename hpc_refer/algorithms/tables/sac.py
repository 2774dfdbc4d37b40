"""SAC's table ``[sac]``: light (the configuration's modules only, no torch), so that a
config is resolved without loading the algorithm; the algorithm is
:mod:`hpc_refer.algorithms.sac`, which this table names (``implementation``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from hpc_refer.config.modes import Activation, choices, enum_field, require
from hpc_refer.config.resolve import register_table
from hpc_refer.config.tables import RecurrentConfig
from hpc_refer.config.values import option


@dataclass(frozen=True)
class SACConfig(RecurrentConfig):
    """SAC with ReF-ER (Haarnoja et al. 2018b's settings: 256 x 256, Adam 3e-4, B = 256,
    gamma 0.99, tau 0.005, the temperature tuned toward -dim A)."""

    section: ClassVar[str] = "sac"
    implementation: ClassVar[str] = "hpc_refer.algorithms.sac"
    squashes: ClassVar[bool] = True
    presets: ClassVar[Mapping[str, Mapping[str, Mapping[str, Any]]]] = {
        "expensive": {"sac": {"activation": "relu"}}}
    hidden: tuple[int, ...] = option((256, 256), "hidden layer widths")
    activation: Activation = option(
        Activation.SOFTSIGN, "hidden layers' nonlinearity of the actor and the critics: "
        "softsign (the paper's networks) or relu (Haarnoja et al.'s)", choices(Activation))
    critic_layer_norm: bool = option(
        False, "layer normalisation after each hidden layer of the critics (BRO's and "
        "SimbaV2's stabiliser of high replay.grad_ratio)")
    lr: float = option(3e-4, "Adam learning rate of the actor, the critics and the temperature")
    batch: int = option(256, "minibatch size B (global over all learners)")
    gamma: float = option(0.99, "discount factor")
    replay_size: int = option(2**20, "the algorithm's replay capacity N (replay.size 0 uses it)")
    tau: float = option(0.005, "Polyak rate of the target critics: w' <- (1 - tau) w' + tau w")
    alpha_init: float = option(1.0, "initial temperature alpha")
    target_entropy: float = option(
        -1.0, "target entropy H of the temperature's update, per action dimension (H = this x "
        "act_dim; -1: Haarnoja et al.'s -dim A)")

    def __post_init__(self) -> None:
        super().__post_init__()
        enum_field(self, "activation", Activation)
        require(0 < self.tau <= 1, "sac.tau", self.tau, "0 < tau <= 1")
        require(self.alpha_init > 0, "sac.alpha_init", self.alpha_init, "values > 0")


register_table(SACConfig)
