"""The Python API's functions (``hpc_refer.load_policy``, ``hpc_refer.train``; the package
hands them on, see its docstring)."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomli_w

from hpc_refer.config.resolve import build_config, load_toml
from hpc_refer.export.controller import Controller
from hpc_refer.report.metrics import new_run_dir
from hpc_refer.run.main import main


def load_policy(path: str | Path) -> Controller:
    """The trained mean policy of a run directory (its ``policy.h5``) or of a policy file,
    as the solver sees it: :meth:`~hpc_refer.export.controller.Controller.act` maps a raw
    state to an action in the solver's units, keeping the history and a recurrent policy's
    carry between calls."""
    return Controller.load(Path(path))


def train(config: Mapping[str, Any] | str | Path, run_dir: str | Path | None = None,
          *flags: str) -> Path:
    """Train as ``python -m hpc_refer.run --config FILE [--run-dir RUN_DIR] [flags]`` does,
    in this process, and return the run directory. ``config``: the tables of a config file
    as a mapping (``{"run": {"env": ..., "steps": ...}, "sac": {...}}``) or a TOML file's
    path; ``run_dir`` None: ``run.run_dir`` of the config, else a new
    ``runs/<env>-<algorithm>-<mode>-seed<seed>[-k]``. ``flags``: further command-line flags
    (``"--steps", "2000"``; not ``--run-dir``), which win over the config. A run that does
    not finish raises RuntimeError (its reason is printed, and kept in RUN_DIR/log.txt)."""
    if "--run-dir" in flags or "--restart" in flags:
        raise ValueError("hpc_refer.train: give the run directory as run_dir=, not as a flag "
                         "(a restart: python -m hpc_refer.run --restart RUN_DIR)")
    with tempfile.TemporaryDirectory() as tmp:
        if isinstance(config, Mapping):
            path = Path(tmp) / "config.toml"
            path.write_text(tomli_w.dumps(dict(config)))
        else:
            path = Path(config)
        if run_dir is None:
            run_dir = new_run_dir(build_config(load_toml(path)))
        code = main(["--config", str(path), "--run-dir", str(run_dir), *flags])
    if code != 0:
        raise RuntimeError(f"hpc_refer.train: the run in {run_dir} did not finish (exit "
                           f"{code}); see the message above and {run_dir}/log.txt")
    return Path(run_dir)
