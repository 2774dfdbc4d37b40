"""TD3's table ``[td3]``: light (the configuration's modules only, no torch), so that a
config is resolved without loading the algorithm; the algorithm is
:mod:`hpc_refer.algorithms.td3`, which this table names (``implementation``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hpc_refer.config.modes import Activation, choices, enum_field, require
from hpc_refer.config.resolve import register_table
from hpc_refer.config.tables import RecurrentConfig
from hpc_refer.config.values import option


@dataclass(frozen=True)
class TD3Config(RecurrentConfig):
    """TD3 (Fujimoto et al. 2018) with ReF-ER, the authors' published settings (their code's:
    256 x 256 ReLU, Adam 3e-4, B = 256, gamma 0.99, tau 0.005, exploration noise 0.1, target
    noise 0.2 clipped at 0.5, the actor and the targets every 2 steps)."""

    section: ClassVar[str] = "td3"
    implementation: ClassVar[str] = "hpc_refer.algorithms.td3"
    hidden: tuple[int, ...] = option((256, 256), "hidden layer widths")
    activation: Activation = option(
        Activation.RELU, "hidden layers' nonlinearity of the actor and the critics: relu "
        "(Fujimoto et al.'s) or softsign (the ReF-ER paper's networks)", choices(Activation))
    critic_layer_norm: bool = option(
        False, "layer normalisation after each hidden layer of the critics (BRO's and "
        "SimbaV2's stabiliser of high replay.grad_ratio)")
    lr: float = option(3e-4, "Adam learning rate of the actor and of the critics")
    batch: int = option(256, "minibatch size B (global over all learners)")
    gamma: float = option(0.99, "discount factor")
    replay_size: int = option(2**20, "the algorithm's replay capacity N (replay.size 0 uses it)")
    tau: float = option(0.005, "Polyak rate of the targets: w' <- (1 - tau) w' + tau w")
    sigma: float = option(0.1, "std of the Gaussian behaviour policy N(m(s), sigma^2)")
    target_noise: float = option(0.2, "std of the target policy smoothing noise")
    noise_clip: float = option(0.5, "the smoothing noise is clipped to [-noise_clip, "
                               "noise_clip]")
    policy_delay: int = option(2, "the actor and the targets step every this many gradient "
                               "steps (the critics every step)")

    def __post_init__(self) -> None:
        super().__post_init__()
        enum_field(self, "activation", Activation)
        require(0 < self.tau <= 1, "td3.tau", self.tau, "0 < tau <= 1")
        require(self.sigma > 0, "td3.sigma", self.sigma, "values > 0")
        require(self.target_noise >= 0, "td3.target_noise", self.target_noise, "values >= 0")
        require(self.noise_clip >= 0, "td3.noise_clip", self.noise_clip, "values >= 0")
        require(self.policy_delay >= 1, "td3.policy_delay", self.policy_delay, "integers >= 1")


register_table(TD3Config)
