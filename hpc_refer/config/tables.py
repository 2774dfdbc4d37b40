"""The tables of the configuration: ``[run]``, ``[refer]``, ``[replay]`` and the settings every
algorithm's table starts from (:class:`AlgorithmConfig`, :class:`RecurrentConfig`; each
algorithm's own table is a light module of :mod:`hpc_refer.algorithms.tables`).

One frozen dataclass per table; every default of the program is a field here (or in an
algorithm's table), once, with its help text in the field's metadata (what ``--help`` prints),
and each table checks its own values in ``__post_init__``. The rules that join tables are
:class:`hpc_refer.config.resolve.Config`'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from hpc_refer.config.modes import (
    ActionBounds,
    Activation,
    BatchScaling,
    Cell,
    CompileMode,
    Exploration,
    Forget,
    KLDirection,
    ReferMode,
    Sampling,
    Scaling,
    Warmup,
    choices,
    enum_field,
    require,
)
from hpc_refer.config.presets import PRESETS
from hpc_refer.config.values import option


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
    rule1_critics: bool = option(
        True, "Rule 1 also takes far-policy samples' gradient out of the critics' regression "
        "(DDPG, TD3, SAC, CrossQ: the paper's rule); false: out of the actor's loss only (their "
        "TD targets use no rho)"
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
    warmup: Warmup = option(
        Warmup.POLICY,
        "how the actors act until learn_start states are stored: policy (the initial policy's "
        "Gaussian) or uniform (uniformly in the action box, as Stable-Baselines3; every action "
        "dimension must be bounded); ReF-ER's rho and KL stay exact (docs: loop/actor.py)",
        choices(Warmup),
    )
    grad_ratio: float = option(1.0, "gradient steps per environment step once training runs")
    reset_every: int = option(
        0, "gradient steps between resets of every network and optimizer to a fresh start, "
        "the replay memory and the input scaling kept (SR-SAC's and BRO's stabiliser of high "
        "grad_ratio); 0: never"
    )
    stats_every: int = option(
        1000, "gradient steps between refreshes of the state and reward scaling from the RM"
    )
    scaling: Scaling = option(
        Scaling.BOTH,
        "what the replay's statistics normalise: both (the networks' input states and the "
        "rewards, the reference code's), states, rewards, or none (as Stable-Baselines3)",
        choices(Scaling),
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
        enum_field(self, "scaling", Scaling)
        enum_field(self, "warmup", Warmup)
        require(self.size == 0 or self.size >= 2, "replay.size", self.size,
                 "0 (the algorithm's N) or integers >= 2")
        require(self.learn_start == -1 or self.learn_start > 0, "replay.learn_start",
                 self.learn_start, "-1 or integers > 0")
        require(self.grad_ratio > 0, "replay.grad_ratio", self.grad_ratio, "values > 0")
        require(self.reset_every >= 0, "replay.reset_every", self.reset_every,
                "integers >= 0")
        require(self.stats_every > 0, "replay.stats_every", self.stats_every, "integers > 0")
        require(self.per_alpha >= 0, "replay.per_alpha", self.per_alpha, "values >= 0")
        require(0 <= self.per_beta <= 1, "replay.per_beta", self.per_beta, "0 <= beta <= 1")
        require(self.per_eps > 0, "replay.per_eps", self.per_eps, "values > 0")

    @property
    def start(self) -> int:
        """Number of stored states at which training starts."""
        return self.size // 2 if self.learn_start == -1 else self.learn_start


LOG_RECORDS = 50
"""Interval records of a run whose ``run.log_every`` is left to its default (0)."""
MAX_AUTO_LOG_EVERY = 10_000


def auto_log_every(steps: int) -> int:
    """The default ``run.log_every`` of a run of ``steps`` environment steps:
    steps / LOG_RECORDS, at least 1 and at most MAX_AUTO_LOG_EVERY."""
    return min(MAX_AUTO_LOG_EVERY, max(1, steps // LOG_RECORDS))


@dataclass(frozen=True)
class RunConfig:
    """What to train, for how long, and where to write."""

    section: ClassVar[str] = "run"

    algorithm: str = option(
        "", "off-policy algorithm: a registered one (its table of the same name holds its "
        "settings); empty: the default algorithm"
    )
    preset: str = option(
        "", "named settings applied over the defaults and under --config and the flags: paper "
        "(the paper's, pinned), expensive (the most return per environment step on the "
        "benchmark: SAC with plain ER); empty: none (hpc_refer/config/presets.py)", tuple(PRESETS)
    )
    plugins: tuple[str, ...] = option(
        (), "modules imported before the config is resolved, each registering algorithms or "
        "environment kinds of its own (comma-separated, e.g. my_package.td7); kept in "
        "config.toml, so every rank and a restart import them too"
    )
    env: str = option(
        "HalfCheetah-v5",
        "environment: an id in the form of one of the environment kinds listed at the end "
        "(e.g. HalfCheetah-v5, KS, package.module:Class; solvers/README.md)",
    )
    steps: int = option(1_000_000, "total environment steps over all actors (stored "
                        "transitions: n per simulation step with n agents)")
    seed: int = option(0, "random seed (environment, networks, sampling)")
    run_dir: str = option("", "run directory; empty: runs/<env>-<algo>-<mode>-seed<seed>[-k]")
    log_every: int = option(
        0, "environment steps between metric records and progress lines; 0: steps / 50, at "
        "least 1 and at most 10,000 (a short run logs within seconds and gets a full report)")
    threads: int = option(1, "torch threads per process (1 is fastest for these network sizes)")
    compile: CompileMode = option(
        CompileMode.AUTO,
        "the learner's gradient step (forward, losses, backward, Adam) as one compiled graph: "
        "on, off (eager), or auto (on for runs of at least 20,000 gradient steps); where "
        "compilation fails the step falls back to eager with one log line",
        choices(CompileMode),
    )
    learners: int = option(1, "MPI: number L of learner ranks (world = L + E x ranks_per_env)")
    ranks_per_env: int = option(1, "MPI: ranks K of each environment team (actor + K-1 solver)")
    chunk_len: int = option(
        1000, "steps per message from actor to learner (episodes end a chunk earlier)"
    )
    checksum_every: int = option(
        0, "MPI debug: compare the learners' weight checksums every k gradient steps (0: off)"
    )
    action_bounds: ActionBounds = option(
        ActionBounds.CLIP,
        "how bounded action spaces are honoured: clip the Gaussian sample when it is sent to "
        "the environment (paper), or tanh-squash and scale it (reference code [HEAD])",
        choices(ActionBounds),
    )

    checkpoint_every: int = option(
        100_000, "environment steps between checkpoints (HDF5, in RUN_DIR/checkpoints); one is "
        "always written at the end and on SIGTERM/SIGUSR1 (0: only those)"
    )
    checkpoint_keep: int = option(2, "complete checkpoints kept (older ones are deleted)")
    eval_every: int = option(
        0, "environment steps between evaluation rounds of the mean policy (0: off), each at "
        "the next episode boundary, the one due at the last step with the final policy; the "
        "episodes go to eval.csv"
    )
    eval_episodes: int = option(5, "episodes per evaluation round")
    env_step_timeout: float = option(
        600.0, "seconds a solver may take to answer one reset or step before it counts as a "
        "solver fault (first message: a start-up error); 0: wait forever"
    )
    env_build_timeout: float = option(
        600.0, "seconds a Python solver's constructor may take (meshes, compiled kernels): "
        "at start-up (longer: a start-up error) and when the solver is rebuilt after a fault "
        "(longer: another fault; a team of several ranks fails); timed apart from "
        "env_step_timeout, which never includes a rebuild; 0: no limit"
    )
    max_env_failures: int = option(
        20, "consecutive solver faults of one environment after which the run checkpoints "
        "and stops"
    )
    tensorboard: bool = option(
        False, "also write train.jsonl's scalars and every episode's return and metrics as "
        "TensorBoard events to RUN_DIR/tensorboard (tensorboard --logdir runs)"
    )
    series_stride: int = option(
        1, "record a solver's step_metrics every this many steps of an episode to "
        "RUN_DIR/series/env-<k>.h5"
    )
    snapshot: str = option(
        "", "episodes at whose end a solver with snapshot() (CylinderJets, Flow2D: the "
        "vorticity) writes RUN_DIR/snapshots/env-<k>-episode-<n>.h5 and a .png of it: "
        "comma-separated items, each an episode number n >= 1 of every environment (counted "
        "from 1, evaluation episodes included) or every:K for episodes K, 2K, ...; e.g. "
        "'1,every:200'; empty: none"
    )
    report_every: int = option(
        0, "environment steps between rewrites of RUN_DIR/report.html (python -m "
        "hpc_refer.report; also written when the run ends); 0: no report during the run"
    )

    def __post_init__(self) -> None:
        enum_field(self, "action_bounds", ActionBounds)
        enum_field(self, "compile", CompileMode)
        for module in self.plugins:
            require(all(part.isidentifier() for part in module.split(".")), "run.plugins",
                     self.plugins, "dotted module names (package.module)")
        require(self.preset in ("", *PRESETS), "run.preset", self.preset,
                f"{', '.join(PRESETS)} or empty")
        require(self.steps > 0, "run.steps", self.steps, "integers > 0")
        require(self.log_every >= 0, "run.log_every", self.log_every,
                "integers > 0, or 0 for steps / 50 (at most 10,000)")
        if self.log_every == 0:  # resolved here, so config.toml holds the interval used
            object.__setattr__(self, "log_every", auto_log_every(self.steps))
        require(self.threads > 0, "run.threads", self.threads, "integers > 0")
        require(self.seed >= 0, "run.seed", self.seed, "integers >= 0")
        require(self.learners >= 1, "run.learners", self.learners, "integers >= 1")
        require(self.ranks_per_env >= 1, "run.ranks_per_env", self.ranks_per_env,
                 "integers >= 1")
        require(self.chunk_len >= 1, "run.chunk_len", self.chunk_len, "integers >= 1")
        require(self.checksum_every >= 0, "run.checksum_every", self.checksum_every,
                 "integers >= 0")
        require(self.checkpoint_every >= 0, "run.checkpoint_every", self.checkpoint_every,
                 "integers >= 0")
        require(self.checkpoint_keep >= 1, "run.checkpoint_keep", self.checkpoint_keep,
                 "integers >= 1")
        require(self.eval_every >= 0, "run.eval_every", self.eval_every, "integers >= 0")
        require(self.eval_episodes >= 1, "run.eval_episodes", self.eval_episodes,
                 "integers >= 1")
        require(math.isfinite(self.env_step_timeout) and self.env_step_timeout >= 0,
                 "run.env_step_timeout", self.env_step_timeout, "seconds >= 0 (0: no limit)")
        require(math.isfinite(self.env_build_timeout) and self.env_build_timeout >= 0,
                 "run.env_build_timeout", self.env_build_timeout, "seconds >= 0 (0: no limit)")
        require(self.series_stride >= 1, "run.series_stride", self.series_stride,
                 "integers >= 1")
        require(self.report_every >= 0, "run.report_every", self.report_every,
                 "integers >= 0 (0: no report)")
        require(self.max_env_failures >= 1, "run.max_env_failures", self.max_env_failures,
                 "integers >= 1")
        self.snapshot_rule(self.snapshot)

    @staticmethod
    def snapshot_rule(text: str) -> tuple[frozenset[int], tuple[int, ...]]:
        """``run.snapshot`` parsed: (the listed episode numbers, the K of each every:K);
        ConfigError naming the item otherwise."""
        listed: set[int] = set()
        every: list[int] = []
        for item in filter(None, (x.strip() for x in text.split(","))):
            head, _, tail = item.partition(":")
            number = tail if head == "every" else item
            require(number.isdigit() and int(number) >= 1, "run.snapshot", text,
                     f"comma-separated episode numbers >= 1 or every:K with K >= 1 (not "
                     f"{item!r}), e.g. '1,every:200'; empty: none")
            (every.append if head == "every" else listed.add)(int(number))
        return frozenset(listed), tuple(every)

    def snapshot_due(self, episode: int) -> bool:
        """Whether ``run.snapshot`` chooses an environment's ``episode``-th episode (from 1)."""
        listed, every = self.snapshot_rule(self.snapshot)
        return episode in listed or any(episode % k == 0 for k in every)


class NetworkShape(NamedTuple):
    """The shape of an algorithm's networks as its table declares it (``config.network``):
    what :func:`hpc_refer.algorithms.kit.bodies.make_body` builds a network body from,
    feed-forward (``cell`` none) or recurrent."""

    hidden: tuple[int, ...]
    """Widths of the trunk's hidden layers."""
    activation: Activation = Activation.SOFTSIGN
    """Their nonlinearity."""
    cell: Cell = Cell.NONE
    """The recurrent cell before the trunk (none: feed-forward)."""
    cell_width: int = 0
    """The width H of the cell's state h."""

    @property
    def carry_dim(self) -> int:
        """Values of the cell's state stored with each state: 0, H (GRU) or 2 H (LSTM)."""
        return self.cell.carry_dim(self.cell_width)


@dataclass(frozen=True)
class AlgorithmConfig:
    """Settings every algorithm has; each algorithm's table adds its own."""

    section: ClassVar[str] = ""
    implementation: ClassVar[str] = ""
    """The module that registers the algorithm of this table (imported when the algorithm is
    first asked for, :func:`hpc_refer.algorithms.registry.algorithm_class`), declared by the
    table itself (a table derived from another's does not inherit it); empty for a table
    registered together with its algorithm (a plug-in's
    :func:`~hpc_refer.algorithms.registry.register`)."""
    hidden: tuple[int, ...] = option((128, 128), "hidden layer widths (softsign activations)")
    lr: float = option(1e-4, "initial Adam learning rate eta0 (annealed by eq. 13 under ReF-ER)")
    batch: int = option(256, "minibatch size B (global over all learners)")
    gamma: float = option(0.995, "discount factor")
    replay_size: int = option(2**18, "the algorithm's replay capacity N (replay.size 0 uses it)")

    def __post_init__(self) -> None:
        name = self.section
        require(
            len(self.hidden) > 0 and all(h > 0 for h in self.hidden),
            f"{name}.hidden", self.hidden, "a non-empty list of positive integers",
        )
        require(0 < self.lr < 1, f"{name}.lr", self.lr, "0 < lr < 1")
        require(self.batch > 0, f"{name}.batch", self.batch, "integers > 0")
        require(0 < self.gamma <= 1, f"{name}.gamma", self.gamma, "0 < gamma <= 1")
        require(self.replay_size >= 2, f"{name}.replay_size", self.replay_size,
                 "integers >= 2")

    squashes: ClassVar[bool] = False
    """Whether the algorithm's policy is tanh-squashed by definition (SAC's): its actors then
    always map a sample u to the action box by tanh, whatever ``run.action_bounds`` says."""
    retrace: ClassVar[bool] = False
    """Whether the learner keeps V-tbc and Q-ret (eq. 8) for this algorithm (V-RACER's)."""
    presets: ClassVar[Mapping[str, Mapping[str, Mapping[str, Any]]]] = {}
    """What each preset (:data:`~hpc_refer.config.presets.PRESETS`) sets for this algorithm,
    over the preset's own tables: ``{preset: {section: {key: value}}}``."""

    @property
    def activation(self) -> Activation:
        """The hidden layers' nonlinearity: softsign, the paper's networks (tables may offer
        others as a field of the same name, e.g. SAC's and TD3's ``relu``)."""
        return Activation.SOFTSIGN

    @property
    def network(self) -> NetworkShape:
        """The shape of the algorithm's networks: feed-forward here (a table offers recurrent
        networks by deriving from :class:`RecurrentConfig`)."""
        return NetworkShape(self.hidden, self.activation)

    @property
    def carry_dim(self) -> int:
        """Values of the recurrent state an actor stores with each state (0: feed-forward)."""
        return self.network.carry_dim

    @property
    def sequence_length(self) -> int:
        """Steps of each sequence the learner samples (1: single transitions)."""
        return 1

    @property
    def burn_in_length(self) -> int:
        """Steps before each sampled sequence replayed without gradient to start its unroll
        (0: from the stored carry; feed-forward networks have none)."""
        return 0

    @property
    def minibatch_sequences(self) -> int:
        """Sequences per minibatch over all learners (0: ``batch`` / W; only recurrent
        learners sample sequences)."""
        return 0

    @property
    def exploration(self) -> Exploration:
        """The behaviour noise of the algorithm's actors: the stored Gaussian (tables may
        offer others as a field of the same name, e.g. Ornstein-Uhlenbeck noise)."""
        return Exploration.GAUSSIAN


@dataclass(frozen=True)
class RecurrentConfig(AlgorithmConfig):
    """The settings of an algorithm that offers recurrent networks
    (:mod:`hpc_refer.algorithms.kit.recurrent`): a table declares that it does by deriving
    from this one, and nowhere else."""

    cell: Cell = option(Cell.NONE, "recurrent cell for partially observed tasks: none "
                        "(feed-forward), gru or lstm", choices(Cell))
    cell_width: int = option(32, "width of the recurrent cell's state h")
    bptt: int = option(16, "window W of truncated backpropagation through time: a recurrent "
                       "learner samples sequences of W steps")
    burn_in: int = option(0, "burn-in b (R2D2): the b steps before each sampled sequence are "
                          "replayed through the current cell from their stored carry, without "
                          "gradient and outside the losses, to start the sequence's unroll "
                          "(0: the unroll starts from the sequence's stored carry)")
    sequences: int = option(0, "sequences of W steps per minibatch over all learners (0: "
                            "batch / bptt, so that a minibatch holds about batch rows; R2D2 "
                            "sampled 64)")

    def __post_init__(self) -> None:
        super().__post_init__()
        name = self.section
        enum_field(self, "cell", Cell)
        require(self.cell_width > 0, f"{name}.cell_width", self.cell_width, "integers > 0")
        require(self.bptt > 0, f"{name}.bptt", self.bptt, "integers > 0")
        require(self.burn_in >= 0, f"{name}.burn_in", self.burn_in, "integers >= 0")
        require(self.sequences >= 0, f"{name}.sequences", self.sequences,
                "integers >= 0 (0: batch / bptt)")

    @property
    def network(self) -> NetworkShape:
        """Feed-forward (``cell = none``) or with the cell of ``cell`` and ``cell_width``."""
        return NetworkShape(self.hidden, self.activation, self.cell, self.cell_width)

    @property
    def sequence_length(self) -> int:
        """W with a cell, 1 without."""
        return 1 if self.cell is Cell.NONE else self.bptt

    @property
    def burn_in_length(self) -> int:
        """b with a cell, 0 without."""
        return 0 if self.cell is Cell.NONE else self.burn_in

    @property
    def minibatch_sequences(self) -> int:
        """``sequences`` with a cell, 0 without."""
        return 0 if self.cell is Cell.NONE else self.sequences
