"""The modes of the configuration and its error (plain enums and one exception; the standard
library only): a mode's TOML or flag string is converted once, by :func:`enum_field`, and a
wrong one is refused with the allowed values (:class:`ConfigError`, which names the key).
The tables that use them are :mod:`hpc_refer.config.tables`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key and the allowed values."""


def require(ok: bool, key: str, value: Any, allowed: str) -> None:
    """Raise ConfigError naming ``key``, its ``value`` and the ``allowed`` values unless
    ``ok``."""
    if not ok:
        raise ConfigError(f"{key} = {value!r} is invalid: allowed values are {allowed}")


class ReferMode(StrEnum):
    """Which of ReF-ER's rules act (Sec. 3): both, none (plain ER) or one of them."""

    REFER = "refer"
    ER = "er"
    REFER1 = "refer1"
    REFER2 = "refer2"

    @property
    def rule1(self) -> bool:
        """Far-policy samples give no gradient of the algorithm's objective."""
        return self in (ReferMode.REFER, ReferMode.REFER1)

    @property
    def rule2(self) -> bool:
        """The objective is weighted by beta and the KL penalty by 1 - beta (eq. 10)."""
        return self in (ReferMode.REFER, ReferMode.REFER2)

    @property
    def anneals(self) -> bool:
        """c_max and the learning rate are annealed by eq. 13 (ReF-ER's variants, not ER)."""
        return self is not ReferMode.ER


class KLDirection(StrEnum):
    """The divergence of eq. 11: KL(mu || pi) (the paper) or KL(pi || mu) (reference code)."""

    MU_PI = "mu_pi"
    PI_MU = "pi_mu"


class ActionBounds(StrEnum):
    """How a Gaussian sample meets a bounded action box: clipped (paper) or tanh-squashed."""

    CLIP = "clip"
    TANH = "tanh"


class Warmup(StrEnum):
    """How the actors act before training starts (``replay.learn_start`` stored states):
    with the initial policy's Gaussian (the reference code's), or uniformly at random in the
    action box (Stable-Baselines3's and CrossQ's ``learning_starts``)."""

    POLICY = "policy"
    UNIFORM = "uniform"


class Sampling(StrEnum):
    """Minibatch sampling: uniform, or proportional prioritized replay (Schaul et al. 2016)."""

    UNIFORM = "uniform"
    PER = "per"


class Scaling(StrEnum):
    """What the learner normalises with the replay's statistics (refreshed every
    ``replay.stats_every`` gradient steps): the networks' input states (x = (s - mean) /
    std), the rewards (r / std(r)), both (the reference code's, the default), or none
    (states and rewards as the environment gives them, as Stable-Baselines3 learns)."""

    BOTH = "both"
    STATES = "states"
    REWARDS = "rewards"
    NONE = "none"

    @property
    def states(self) -> bool:
        """The networks' input states are normalised."""
        return self in (Scaling.BOTH, Scaling.STATES)

    @property
    def rewards(self) -> bool:
        """The rewards are divided by their standard deviation."""
        return self in (Scaling.BOTH, Scaling.REWARDS)


class BatchScaling(StrEnum):
    """How the minibatch grows with the number L of learners: ``fixed`` (the global batch B
    is split, B / L rows per learner: the same optimisation as one learner) or
    ``per-learner`` (B rows on every learner, a global batch of L B, and the learning rate
    multiplied by sqrt(L), the square-root scaling rule of adaptive methods: Malladi et al.,
    "On the SDEs and Scaling Rules for Adaptive Gradient Algorithms", NeurIPS 2022)."""

    FIXED = "fixed"
    PER_LEARNER = "per-learner"


class Forget(StrEnum):
    """Which stored steps a full replay shard forgets for new ones: the oldest rows
    (first in, first out: the paper's runs), or whole episodes, those with the largest
    fraction of far-policy transitions first (the reference code's rule for DDPG and NAF)."""

    OLDEST = "oldest"
    FAR_POLICY = "far_policy"


class CompileMode(StrEnum):
    """Whether the learner's gradient step runs as one compiled graph (``torch.compile``):
    ``on``, ``off`` (eager autograd and torch's Adam), or ``auto``: on when the run owes at
    least :data:`COMPILE_AUTO_STEPS` gradient steps (compiling takes 5-20 s, which the
    compiled step repays after roughly that many steps)."""

    AUTO = "auto"
    ON = "on"
    OFF = "off"


COMPILE_AUTO_STEPS = 20_000
"""Gradient steps from which ``run.compile = auto`` compiles the step."""


class Exploration(StrEnum):
    """An algorithm's behaviour noise: the Gaussian mu it stores (needed by ReF-ER), or
    Ornstein-Uhlenbeck noise around its mean (plain ER only: the stored mu is then not the
    behaviour)."""

    GAUSSIAN = "gaussian"
    OU = "ou"


def choices(enum: type[StrEnum]) -> tuple[str, ...]:
    """The values of a string enum (a field's allowed strings)."""
    return tuple(e.value for e in enum)


class Cell(StrEnum):
    """The recurrent cell of an algorithm's networks, for partially observed tasks: none
    (feed-forward), gru or lstm (:mod:`hpc_refer.algorithms.kit.recurrent`)."""

    NONE = "none"
    GRU = "gru"
    LSTM = "lstm"

    def carry_dim(self, width: int) -> int:
        """Values of the state a cell carries from step to step: 0, h (width) or [h, c]."""
        return {Cell.NONE: 0, Cell.GRU: width, Cell.LSTM: 2 * width}[self]


def enum_field(obj: Any, key: str, enum: type[StrEnum]) -> None:
    """Convert the string field ``key`` of a frozen config to ``enum`` (or raise ConfigError)."""
    raw = getattr(obj, key)
    require(raw in choices(enum), f"{getattr(obj, 'section', '')}.{key}", raw,
             ", ".join(choices(enum)))
    object.__setattr__(obj, key, enum(raw))


class Activation(StrEnum):
    """The hidden layers' nonlinearity: ``softsign`` (x / (1 + |x|), the paper's networks)
    or ``relu`` (max(x, 0), Haarnoja et al.'s SAC and most off-policy libraries)."""

    SOFTSIGN = "softsign"
    RELU = "relu"
