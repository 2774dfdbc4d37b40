"""HDF5 storage of a sweep.

Layout: root attributes ``format``, ``config`` (JSON of :class:`SweepConfig`), ``ranks``,
``seconds``, ``command``, ``target_corrections`` and ``followon_discount`` (the options of
ambiguities A1 and A5, also in ``config``; files without them used the defaults); one group per
algorithm with attributes ``label``, ``extra`` (name of the third parameter or ""), ``seconds`` and
datasets ``alpha`` (A,), ``extra_values`` (E,) when there is a third parameter, ``auc`` and
``final`` (placement, E, A, run); subgroup ``rerun`` holds ``best`` (placement, 2: extra index,
alpha index), ``auc``, ``final`` (placement, run) and ``curve_mean``, ``curve_se`` (placement,
step), all on seeds ``runs .. 2 runs - 1``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from hpc_refer.prediction.algorithms import Placement, learner_class
from hpc_refer.prediction.sweep import AlgorithmResult, Rerun, SweepConfig, SweepResult

FORMAT = "hpc_refer.prediction/1"
_RERUN_FIELDS = ("best", "auc", "final", "curve_mean", "curve_se")


def config_to_json(config: SweepConfig) -> str:
    """JSON of a config, placements by name."""
    data = dataclasses.asdict(config)
    data["placements"] = [p.name for p in config.placements]
    return json.dumps(data)


def config_from_json(text: str) -> SweepConfig:
    """Inverse of :func:`config_to_json`."""
    data: dict[str, Any] = json.loads(text)
    data["placements"] = [Placement.parse(p) for p in data["placements"]]
    kwargs: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
    return SweepConfig(**kwargs)


def write(result: SweepResult, path: str | Path) -> None:
    """Write ``result`` to ``path`` (overwrites)."""
    config = result.config
    with h5py.File(path, "w") as fh:
        fh.attrs.update(format=FORMAT, config=config_to_json(config), ranks=result.ranks,
                        seconds=result.seconds, command=" ".join(sys.argv),
                        target_corrections=config.target_corrections,
                        followon_discount=config.followon_discount)
        for name, res in result.algorithms.items():
            cls = learner_class(name)
            grp = fh.create_group(name)
            grp.attrs.update(label=cls.label, extra=cls.extra or "", seconds=res.seconds)
            grp["alpha"] = config.alphas()
            extra = config.extra_values(cls)
            if extra is not None:
                grp["extra_values"] = extra
            grp["auc"], grp["final"] = res.auc, res.final
            if res.rerun is not None:
                sub = grp.create_group("rerun")
                for field in _RERUN_FIELDS:
                    sub[field] = getattr(res.rerun, field)


class NotASweepError(ValueError):
    """The file given to :func:`read` is not a sweep result; the message is one line."""

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"{path} is not a sweep result ({' '.join(reason.split())})")


def read(path: str | Path) -> SweepResult:
    """Read a sweep written by :func:`write`; a :class:`NotASweepError` (a ValueError) if the
    file is missing, not HDF5, or lacks the attributes and datasets of the layout."""
    file = Path(path)
    if not file.exists():
        raise NotASweepError(path, "no such file")
    if not file.is_file():
        raise NotASweepError(path, "not a regular file")
    if not h5py.is_hdf5(file):
        raise NotASweepError(path, "not an HDF5 file")
    try:
        with h5py.File(file, "r") as fh:
            return _read(fh, path)
    except NotASweepError:
        raise
    except KeyError as exc:
        raise NotASweepError(path, f"missing entry: {exc.args[0] if exc.args else '?'}") from exc
    except (OSError, TypeError, ValueError) as exc:
        raise NotASweepError(path, f"{type(exc).__name__}: {exc}") from exc


def _read(fh: h5py.File, path: str | Path) -> SweepResult:
    if fh.attrs.get("format") != FORMAT:
        found = fh.attrs.get("format")
        raise NotASweepError(path, f"format attribute is {found!r}, not {FORMAT!r}")
    missing = [key for key in ("config", "ranks", "seconds") if key not in fh.attrs]
    if missing:
        raise NotASweepError(path, f"no attribute {', '.join(missing)}")
    config = config_from_json(str(fh.attrs["config"]))
    algorithms = {}
    for name in config.algorithms:
        if name not in fh:
            raise NotASweepError(path, f"no group for algorithm {name!r}")
        grp = fh[name]
        missing = [key for key in ("auc", "final") if key not in grp]
        if missing or "seconds" not in grp.attrs:
            raise NotASweepError(path, f"group {name!r} lacks {', '.join(missing) or 'seconds'}")
        rerun = (Rerun(*(np.asarray(grp["rerun"][f]) for f in _RERUN_FIELDS))
                 if "rerun" in grp else None)
        algorithms[name] = AlgorithmResult(np.asarray(grp["auc"]), np.asarray(grp["final"]),
                                           float(grp.attrs["seconds"]), rerun)
    return SweepResult(config, algorithms, int(fh.attrs["ranks"]), float(fh.attrs["seconds"]))
