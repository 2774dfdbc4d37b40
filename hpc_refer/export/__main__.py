"""``python -m hpc_refer.export RUN_DIR [--policy FILE] --out DIR``: the trained mean policy for
the solver's own code, outside Python and without hpc_refer.

Writes into DIR:

- ``policy.onnx``: one self-contained ONNX file (:mod:`~hpc_refer.export.onnx_model`; needs the
  ``export`` extra: onnx and onnxruntime; ``--no-onnx`` leaves it out);
- ``policy.bin`` and ``policy.json``: the weights and their header
  (:mod:`~hpc_refer.export.weights`);
- ``hpc_refer_policy.h``, ``hpc_refer_policy.c`` (C99, libm only) and ``hpc_refer_policy.f90``
  (a Fortran 2008 module over the C routine): ``load``, ``act``, ``reset``, ``free``, reading
  policy.json and policy.bin at run time (solvers/README.md, "Running a trained controller in
  your code").

Each form takes raw solver states and returns actions in the solver's units: the state
normalisation, the history stack, a recurrent carry, the squashing or clipping and the action
box are inside. Each is checked against :class:`~hpc_refer.export.controller.Controller` (the
numpy policy of ``python -m hpc_refer.evaluate``) to float32 round-off in tests/test_export.py.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from importlib import resources
from pathlib import Path

from hpc_refer.export.weights import export_policy, write_exported
from hpc_refer.loop.checkpoint import CheckpointError
from hpc_refer.loop.policy_file import load_policy
from hpc_refer.report.schema import POLICY_FILE

SOURCES = ("hpc_refer_policy.h", "hpc_refer_policy.c", "hpc_refer_policy.f90")
"""The C and Fortran files copied beside the weights (hpc_refer/export/c/)."""


def export(run_dir: Path, out: Path, policy: Path | None = None, onnx: bool = True) -> list[Path]:
    """Write the exported forms of ``policy`` (default ``RUN_DIR/policy.h5``) into ``out``;
    the paths written. CheckpointError or OSError for a policy file that cannot be read,
    ValueError for a policy that does not describe its mean (a plug-in without
    ``mean_ops``), ImportError when ``onnx`` is asked for and the extra is missing."""
    source = policy or run_dir / POLICY_FILE
    saved = load_policy(source)
    exported = export_policy(saved, source)
    if onnx:
        from hpc_refer.export.onnx_model import write_onnx
    write_exported(exported, out)
    written = [out / "policy.bin", out / "policy.json"]
    for name in SOURCES:
        with resources.as_file(resources.files("hpc_refer.export") / "c" / name) as path:
            shutil.copyfile(path, out / name)
        written.append(out / name)
    if onnx:
        written.append(write_onnx(exported, out))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hpc_refer.export",
        description="Write a run's trained mean policy as policy.onnx, as policy.bin + "
        "policy.json with a dependency-free C99 routine and a Fortran 2008 module "
        "(hpc_refer_policy.{h,c,f90}), for the solver's own code. Each takes raw solver "
        "states and returns actions in the solver's units.")
    parser.add_argument("run_dir", type=Path, help="a run directory of python -m hpc_refer.run")
    parser.add_argument("--policy", type=Path,
                        help=f"policy file to export (default RUN_DIR/{POLICY_FILE})")
    parser.add_argument("--out", type=Path, required=True,
                        help="directory to write into (made if missing; files there of the "
                        "same names are replaced)")
    parser.add_argument("--no-onnx", action="store_true",
                        help="leave out policy.onnx (the C/Fortran route needs neither onnx "
                        "nor onnxruntime)")
    args = parser.parse_args(argv)
    try:
        written = export(args.run_dir, args.out, args.policy, onnx=not args.no_onnx)
    except ImportError as err:
        print(f"hpc_refer.export: error: policy.onnx needs the export extra (pip install "
              f"'hpc_refer[export]'), or pass --no-onnx ({err})", file=sys.stderr)
        return 2
    except (CheckpointError, OSError, ValueError, NotImplementedError) as err:
        print(f"hpc_refer.export: error: {err}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
