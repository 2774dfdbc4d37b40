"""The ten off-policy prediction learners of the study, plus the V-trace variant of ambiguity A3."""

from __future__ import annotations

from hpc_refer.prediction.algorithms.base import (
    Choices,
    Corrections,
    FollowOn,
    Learner,
    Placement,
    Step,
)
from hpc_refer.prediction.algorithms.gradient import GTD, GTD2, HTD, ProximalGTD2
from hpc_refer.prediction.algorithms.td import EmphaticTD, EmphaticTDBeta, OffPolicyTD
from hpc_refer.prediction.algorithms.traces import ABTD, TreeBackup, Vtrace, VtraceClipped

#: The study's ten algorithms, in the order of tables and figures.
STUDY: tuple[type[Learner], ...] = (
    OffPolicyTD, GTD, GTD2, ProximalGTD2, HTD, EmphaticTD, EmphaticTDBeta, Vtrace, TreeBackup, ABTD,
)
_REGISTERED: tuple[type[Learner], ...] = (*STUDY, VtraceClipped)
ALGORITHMS: dict[str, type[Learner]] = {cls.name: cls for cls in _REGISTERED}


def learner_class(name: str) -> type[Learner]:
    """The learner registered as ``name``; a ValueError naming the allowed names otherwise."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(
            f"algorithm: unknown {name!r}; allowed: {', '.join(ALGORITHMS)}") from None


__all__ = [
    "ABTD",
    "ALGORITHMS",
    "GTD",
    "GTD2",
    "HTD",
    "STUDY",
    "Choices",
    "Corrections",
    "EmphaticTD",
    "EmphaticTDBeta",
    "FollowOn",
    "Learner",
    "OffPolicyTD",
    "Placement",
    "ProximalGTD2",
    "Step",
    "TreeBackup",
    "Vtrace",
    "VtraceClipped",
    "learner_class",
]
