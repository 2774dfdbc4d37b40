"""Command line: ``python -m hpc_refer.prediction {sweep,report}`` (see ``--help``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from hpc_refer.prediction.algorithms import STUDY, Corrections, FollowOn, Placement
from hpc_refer.prediction.sweep import BETAS, ZETAS, SweepConfig

DESCRIPTION = """\
Off-policy prediction on the Collision task: ten TD algorithms, each with the importance-sampling
ratio on the whole TD error (WHOLE) or on the target only (TARGET).

  sweep   run the grid (all runs x all settings, vectorised; split over MPI ranks when started
          with mpirun), re-run the best setting of each algorithm and placement on fresh seeds,
          write HDF5.  Full protocol: mpirun -n N python -m hpc_refer.prediction sweep --out r.h5
  report  draw the learning curves and step-size sensitivity figures and the Markdown table
          from a sweep file.
"""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def int_grid(field: str, text: str) -> tuple[int, ...]:
    """'a:b' (inclusive) or 'a,b,c' -> integers; a ValueError naming ``field`` otherwise."""
    try:
        if ":" in text:
            low, high = (int(part) for part in text.split(":"))
            if high < low:
                raise ValueError
            return tuple(range(low, high + 1))
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(
            f"{field}: {text!r} is not 'LOW:HIGH' or a comma list of integers") from None


def float_grid(field: str, text: str) -> tuple[float, ...]:
    """'a,b,c' -> floats; a ValueError naming ``field`` otherwise."""
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"{field}: {text!r} is not a comma list of numbers") from None


def _names(text: str) -> tuple[str, ...]:
    return tuple(cls.name for cls in STUDY) if text == "all" else tuple(text.split(","))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m hpc_refer.prediction", description=DESCRIPTION,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sweep = sub.add_parser("sweep", help="run the parameter sweep, write HDF5",
                           formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                           description="Run the sweep; defaults are the study's full protocol. "
                           "Negative exponents need '=': --eta-exponents=-6:8.")
    sweep.add_argument("--out", required=True, type=Path,
                       help="HDF5 file to write; its directory must exist and be writable")
    sweep.add_argument("--force", action="store_true",
                       help="overwrite --out if it exists (refused otherwise, before any work)")
    sweep.add_argument("--algorithms", default="all",
                       help="comma list or 'all' (the ten of the study); known: td, gtd, gtd2, "
                       "pgtd2, htd, etd, etdlb, vtrace, tb, abtd, vtrace-clipped (ambiguity A3)")
    sweep.add_argument("--placements", default="whole,target", help="WHOLE and/or TARGET")
    sweep.add_argument("--alpha-exponents", default="0:18", help="x of alpha = 2^-x")
    sweep.add_argument("--eta-exponents", default="-6:8",
                       help="x of eta = 2^x, alpha_h = eta alpha (GTD, GTD2, PGTD2, HTD)")
    sweep.add_argument("--betas", default=",".join(f"{b:g}" for b in BETAS),
                       help="beta grid of Emphatic TD(lambda, beta)")
    sweep.add_argument("--zetas", default=",".join(f"{z:g}" for z in ZETAS),
                       help="zeta grid of ABTD(zeta)")
    sweep.add_argument("--lam", type=float, default=0.0, help="bootstrapping parameter lambda")
    sweep.add_argument("--runs", type=int, default=50, help="runs (seed r, feature set r)")
    sweep.add_argument("--steps", type=int, default=20_000, help="transitions per run")
    sweep.add_argument("--no-rerun", action="store_true",
                       help="skip the re-run of the best settings on seeds runs..2 runs-1")
    sweep.add_argument("--d-mu", choices=("stored", "exact"), default="stored",
                       help="RMSVE state weighting: the stored estimate or (2,4,6,8,8,4,2,1)/35")
    sweep.add_argument("--target-corrections", default=Corrections.KEEP_RHO.option,
                       help="ambiguity A1, TARGET only: the ratio in the gradient-correction terms "
                       "of GTD, GTD2, HTD, PGTD2: keep-rho (as in WHOLE, spec table 2.3), "
                       "target-only (moved onto x' as in the TD error; changes HTD only) or no-rho "
                       "(dropped)")
    sweep.add_argument("--followon-discount", default=FollowOn.BETA.option,
                       help="ambiguity A5: Emphatic TD(lambda, beta)'s follow-on trace decays by "
                       "beta ([R]) or beta-gamma (beta * gamma_t)")
    sweep.add_argument("--quiet", action="store_true", help="no progress lines")
    report = sub.add_parser("report", help="figures and table from a sweep file",
                            formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    report.add_argument("results", type=Path, help="HDF5 file written by 'sweep'")
    report.add_argument("--out-dir", type=Path, default=None,
                        help="where to write learning_curves.png, sensitivity.png, table.md "
                        "(default: <results stem>-report next to the file)")
    return parser


def config_from_args(args: argparse.Namespace) -> SweepConfig:
    """A validated :class:`SweepConfig`; ValueError naming the bad field."""
    return SweepConfig(
        algorithms=_names(args.algorithms),
        placements=tuple(Placement.parse(p) for p in args.placements.split(",")),
        alpha_exponents=int_grid("alpha-exponents", args.alpha_exponents),
        eta_exponents=int_grid("eta-exponents", args.eta_exponents),
        betas=float_grid("betas", args.betas), zetas=float_grid("zetas", args.zetas),
        lam=args.lam, runs=args.runs, steps=args.steps, rerun=not args.no_rerun, d_mu=args.d_mu,
        target_corrections=args.target_corrections, followon_discount=args.followon_discount,
    )


def check_out(out: Path, force: bool) -> None:
    """A ValueError naming --out (and --force) unless ``out`` can be written; before any work."""
    parent = out.parent
    if not parent.is_dir():
        raise ValueError(f"--out: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"--out: directory {parent} is not writable")
    if out.is_dir():
        raise ValueError(f"--out: {out} is a directory")
    if out.exists() and not force:
        raise ValueError(f"--out: {out} exists; pass --force to overwrite it")


def _sweep(args: argparse.Namespace) -> None:
    from hpc_refer.prediction import results
    from hpc_refer.prediction.sweep import Collective, run_sweep

    check_out(args.out, args.force)
    config = config_from_args(args)
    result = run_sweep(config, Collective.world(), log=None if args.quiet else print_err)
    if result is not None:
        results.write(result, args.out)
        print_err(f"[prediction] wrote {args.out}: {result.ranks} ranks, {result.seconds:.1f} s")


def _report(args: argparse.Namespace) -> None:
    from hpc_refer.prediction.report import write_report

    out_dir = args.out_dir or args.results.with_name(f"{args.results.stem}-report")
    for path in write_report(args.results, out_dir):
        print(path)


def print_err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (2 with a one-line message on bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        {"sweep": _sweep, "report": _report}[args.command](args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"{parser.prog} {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
