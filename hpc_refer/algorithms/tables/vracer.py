"""V-RACER's table ``[vracer]``: light (the configuration's modules only, no torch), so that a
config is resolved without loading the algorithm; the algorithm is
:mod:`hpc_refer.algorithms.vracer`, which this table names (``implementation``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from hpc_refer.config.modes import require
from hpc_refer.config.resolve import register_table
from hpc_refer.config.tables import RecurrentConfig
from hpc_refer.config.values import option


@dataclass(frozen=True)
class VRacerConfig(RecurrentConfig):
    """V-RACER network and optimiser (paper defaults, Sec. 5 and App. A)."""

    section: ClassVar[str] = "vracer"
    implementation: ClassVar[str] = "hpc_refer.algorithms.vracer"
    retrace: ClassVar[bool] = True
    presets: ClassVar[Mapping[str, Mapping[str, Mapping[str, Any]]]] = {
        "paper": {"vracer": {"hidden": [128, 128], "lr": 1e-4, "batch": 256, "gamma": 0.995,
                             "replay_size": 2**18}}}
    sigma_init: float = option(math.sqrt(0.2), "initial policy standard deviation")

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.sigma_init > 0, "vracer.sigma_init", self.sigma_init, "values > 0")


register_table(VRacerConfig, default=True)
