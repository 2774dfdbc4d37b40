"""NAF's table ``[naf]``: light (the configuration's modules only, no torch), so that a
config is resolved without loading the algorithm; the algorithm is
:mod:`hpc_refer.algorithms.naf`, which this table names (``implementation``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from hpc_refer.config.modes import require
from hpc_refer.config.resolve import register_table
from hpc_refer.config.tables import AlgorithmConfig
from hpc_refer.config.values import option


@dataclass(frozen=True)
class NAFConfig(AlgorithmConfig):
    """NAF (Gu et al. 2016) with ReF-ER: the paper-era settings (spec, section NAF)."""

    section: ClassVar[str] = "naf"
    implementation: ClassVar[str] = "hpc_refer.algorithms.naf"
    presets: ClassVar[Mapping[str, Mapping[str, Mapping[str, Any]]]] = {
        "paper": {"naf": {"hidden": [128, 128], "lr": 1e-4, "batch": 256, "gamma": 0.995,
                          "replay_size": 2**19, "tau": 0.01, "sigma": 0.2},
                  "replay": {"forget": "far_policy"}}}
    replay_size: int = option(2**19, "the algorithm's replay capacity N (replay.size 0 uses it)")
    tau: float = option(0.01, "Polyak rate of the target network: w' <- (1 - tau) w' + tau w")
    sigma: float = option(0.2, "std of the Gaussian behaviour policy N(m(s), sigma^2)")

    def __post_init__(self) -> None:
        super().__post_init__()
        require(0 < self.tau <= 1, "naf.tau", self.tau, "0 < tau <= 1")
        require(self.sigma > 0, "naf.sigma", self.sigma, "values > 0")


register_table(NAFConfig)
