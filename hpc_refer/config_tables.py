"""The ReF-ER and replay tables of the configuration (``[refer]``, ``[replay]``), re-exported by
:mod:`hpc_refer.config` with the run and algorithm tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hpc_refer.config_modes import (
    BatchScaling,
    Forget,
    KLDirection,
    ReferMode,
    Sampling,
    choices,
    enum_field,
    require,
)
from hpc_refer.config_values import option


@dataclass(frozen=True)
class ReferConfig:
    """Remember-and-Forget Experience Replay (Sec. 3, eqs. 10-13)."""

    section: ClassVar[str] = "refer"

    mode: ReferMode = option(
        ReferMode.REFER,
        "refer: rules 1 and 2; er: plain experience replay (no annealing either); refer1: "
        "rule 1 only; refer2: rule 2 only",
        choices(ReferMode),
    )
    C: float = option(4.0, "c_max(t) = 1 + C / (1 + A t)  (eq. 13)")
    D: float = option(0.1, "target fraction of far-policy samples in the replay memory (eq. 12)")
    A: float = option(5e-7, "annealing rate of c_max and of the learning rate (eq. 13)")
    beta_init: float = option(0.0, "initial penalty coefficient beta (0 as in the paper's code)")
    beta_rate: float = option(
        0.0, "step size eta of the beta update (eq. 12); 0: the initial learning rate"
    )
    kl_direction: KLDirection = option(
        KLDirection.MU_PI,
        "mu_pi: penalise KL(mu || pi) as in eq. 11; pi_mu: KL(pi || mu) as the reference code",
        choices(KLDirection),
    )

    def __post_init__(self) -> None:
        enum_field(self, "mode", ReferMode)
        enum_field(self, "kl_direction", KLDirection)
        require(self.C > 0, "refer.C", self.C, "C > 0")
        require(0 < self.D < 1, "refer.D", self.D, "0 < D < 1")
        require(self.A >= 0, "refer.A", self.A, "A >= 0")
        require(0 <= self.beta_init <= 1, "refer.beta_init", self.beta_init, "0 <= beta <= 1")
        require(0 <= self.beta_rate < 1, "refer.beta_rate", self.beta_rate, "0 <= eta < 1")


@dataclass(frozen=True)
class ReplayConfig:
    """The replay memory."""

    section: ClassVar[str] = "replay"

    size: int = option(
        0, "replay capacity N in stored states (FIFO forgetting beyond it); 0: the algorithm's "
        "replay_size (vracer 2^18, ddpg and naf 2^19, sac 2^20)"
    )
    learn_start: int = option(-1, "stored states before the first gradient step; -1: N / 2")
    grad_ratio: float = option(1.0, "gradient steps per environment step once training runs")
    stats_every: int = option(
        1000, "gradient steps between refreshes of the state and reward scaling from the RM"
    )
    sampling: Sampling = option(
        Sampling.UNIFORM,
        "uniform, or per: proportional prioritized replay, p = (|delta| + eps)^alpha, with "
        "importance weights (1/(N P))^beta_IS / max applied to the loss",
        choices(Sampling),
    )
    per_alpha: float = option(0.6, "PER priority exponent alpha")
    per_beta: float = option(
        0.4, "PER importance-weight exponent beta_IS at the first gradient step, annealed "
        "linearly to 1 at the run's last one"
    )
    per_eps: float = option(1e-6, "PER priority offset eps (no transition is never sampled)")
    forget: Forget = option(
        Forget.OLDEST,
        "what a full shard forgets: oldest (FIFO over rows) or far_policy (whole episodes, the "
        "largest fraction of far-policy transitions first; ties: the oldest)",
        choices(Forget),
    )
    batch_scaling: BatchScaling = option(
        BatchScaling.FIXED,
        "fixed: the algorithm's batch B is global, B / L rows per learner; per-learner: B rows "
        "on each of the L learners (global batch L B) and the learning rate times sqrt(L)",
        choices(BatchScaling),
    )

    def __post_init__(self) -> None:
        enum_field(self, "sampling", Sampling)
        enum_field(self, "batch_scaling", BatchScaling)
        enum_field(self, "forget", Forget)
        require(self.size == 0 or self.size >= 2, "replay.size", self.size,
                 "0 (the algorithm's N) or integers >= 2")
        require(self.learn_start == -1 or self.learn_start > 0, "replay.learn_start",
                 self.learn_start, "-1 or integers > 0")
        require(self.grad_ratio > 0, "replay.grad_ratio", self.grad_ratio, "values > 0")
        require(self.stats_every > 0, "replay.stats_every", self.stats_every, "integers > 0")
        require(self.per_alpha >= 0, "replay.per_alpha", self.per_alpha, "values >= 0")
        require(0 <= self.per_beta <= 1, "replay.per_beta", self.per_beta, "0 <= beta <= 1")
        require(self.per_eps > 0, "replay.per_eps", self.per_eps, "values > 0")

    @property
    def start(self) -> int:
        """Number of stored states at which training starts."""
        return self.size // 2 if self.learn_start == -1 else self.learn_start
