"""Named settings (``--preset NAME``, or ``preset = "NAME"`` in a config file's ``[run]``):
config tables applied over the defaults and under the ``--config`` file and the flags, so
that anything given explicitly wins. The resolved values go to the run's config.toml, which
a restart reads, so a preset's run continues with what it started with even if a preset
changes later.

``paper``
    The paper's settings (Novati & Koumoutsakos 2019 and its code at the time,
    ``shared/specs/refer-vracer.md``), pinned value by value so that a change of a default
    does not move them: ReF-ER with C = 4, D = 0.1, A = 5e-7, beta from 0 with step 1e-4
    for every algorithm, KL(mu || pi) (eq. 11), training from 2^18 stored steps, one
    gradient step per environment step, uniform sampling; 2 x 128 softsign networks,
    gamma = 0.995; V-RACER with Adam 1e-4, B = 256, N = 2^18, forgetting the oldest; DDPG
    with actor rate 1e-5 (critic 10x, L2 1e-4), B = 128, Polyak 0.01, sigma 0.2; NAF with
    1e-4, B = 256, Polyak 0.01, sigma 0.2; DDPG and NAF with N = 2^19, forgetting the
    episodes with the largest far-policy fraction first (the paper code's rule for them).
    For another algorithm (SAC, a plug-in) the ReF-ER and replay settings alone.

Each algorithm's own values of a preset (those above for V-RACER, DDPG, NAF and SAC) are
declared by its table (``presets`` of :class:`~hpc_refer.config.tables.AlgorithmConfig`), with
its other traits; the tables here are every algorithm's.

``expensive``
    For environments whose step costs far more than a gradient step (CFD): what returns the
    most per environment step on the sample-efficiency benchmark
    (``bench/sample_efficiency.py``, BENCHMARKS section 12): SAC with plain experience replay,
    learning from 10,000 stored steps, one gradient step per environment step, ReLU networks
    (1.5x the return of the same SAC with the paper's softsign on HalfCheetah-v5 at 10^5
    steps, 3 seeds), otherwise the SAC table's defaults (2 x 256, Adam 3e-4, B = 256, twin
    critics, tuned temperature). For another algorithm the ReF-ER and replay settings alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple


class Preset(NamedTuple):
    """A preset's tables (``{section: {key: value}}``), for every algorithm; what it adds for
    one algorithm is declared by that algorithm's table (``AlgorithmConfig.presets``)."""

    tables: dict[str, dict[str, Any]]


PAPER_LEARN_START = 2**18

PRESETS: dict[str, Preset] = {
    "paper": Preset(
        tables={"refer": {"mode": "refer", "C": 4.0, "D": 0.1, "A": 5e-7, "beta_init": 0.0,
                          "beta_rate": 1e-4, "kl_direction": "mu_pi"},
                "replay": {"size": 0, "learn_start": PAPER_LEARN_START, "grad_ratio": 1.0,
                           "sampling": "uniform", "forget": "oldest"}}),
    "expensive": Preset(
        tables={"run": {"algorithm": "sac"}, "refer": {"mode": "er"},
                "replay": {"learn_start": 10_000, "grad_ratio": 1.0}}),
}
"""The presets by name (see the module's docstring)."""


def preset_layers(name: str, own: Mapping[str, Mapping[str, Any]]
                  ) -> dict[str, dict[str, Any]]:
    """The tables of preset ``name`` with ``own``, the tables the run's algorithm adds for it
    (its table's ``presets[name]``) over them: one dict per section, new dicts (the caller may
    change them)."""
    out = {section: dict(values) for section, values in PRESETS[name].tables.items()}
    for section, values in own.items():
        out.setdefault(section, {}).update(values)
    return out
