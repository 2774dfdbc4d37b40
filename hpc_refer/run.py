"""Entry point: ``[mpirun -n N] python -m hpc_refer.run [--config FILE] [--env ID] ...``.

Trains V-RACER, DDPG or NAF (``--algorithm``) with ReF-ER (defaults: V-RACER on
HalfCheetah-v5, the paper's hyper-parameters) and writes config, metrics and log to a run
directory. Every flag is a config key (see ``--help``). Under mpirun the ranks split into
learners and environment teams (``--learners``, ``--ranks-per-env``); one rank runs learner
and actor in one process, through the same loop.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import traceback

from hpc_refer.config import Config, ConfigError, add_arguments, config_from_args
from hpc_refer.envs import check_env
from hpc_refer.layout import Layout, LayoutError, compute_layout
from hpc_refer.metrics import RunDirectory, episode_columns, new_run_dir
from hpc_refer.parallel import Fabric, abort_job, app_count, world_rank_size
from hpc_refer.training import run_role, set_threads

DESCRIPTION = """\
Train an off-policy agent (V-RACER, DDPG or NAF: --algorithm) with Remember-and-Forget
Experience Replay (ReF-ER, Novati & Koumoutsakos, ICML 2019), plain or prioritized experience
replay. Values come from the defaults below, then the TOML file given by --config ([run],
[vracer], [ddpg], [naf], [refer], [replay] tables), then these flags.
Under mpirun, the world splits into --learners learner ranks and environment teams of
--ranks-per-env ranks: world size = learners + teams x ranks-per-env."""

EPILOG = """\
examples:
  python -m hpc_refer.run                                   # HalfCheetah-v5, 10^6 steps
  python -m hpc_refer.run --env Hopper-v5 --refer.mode er --seed 3
  python -m hpc_refer.run --algorithm ddpg --replay.sampling per --refer.mode er
  python -m hpc_refer.run --config my.toml --steps 20000 --run-dir runs/try
  mpirun -n 64 python -m hpc_refer.run --learners 8         # 8 learners, 56 actors
  mpirun -n 9 python -m hpc_refer.run --env Diffusion1D --ranks-per-env 4   # 2 teams of 4
  mpirun -n 3 python -m hpc_refer.run --env external : -n 4 ./heat1d  # C solver, 2 groups of 2
  python -m hpc_refer.run --env "external:-n 2 ./heat1d"    # the actor spawns the C solver
  mpirun --ompi-server file:URI -n 2 python -m hpc_refer.run --env "external:--connect DIR"
      # ... and the solver as a separate job: HPC_REFER_PORT=DIR/env-0.port mpirun ... ./heat1d
the run directory holds config.toml, episodes.csv, train.jsonl and log.txt;
plot learning curves with: python -m hpc_refer.plot RUN_DIR [RUN_DIR ...] --out curves.png"""


def parse_args(argv: list[str] | None) -> Config:
    """Parse the command line into a validated Config (raises ConfigError)."""
    parser = argparse.ArgumentParser(
        prog="python -m hpc_refer.run", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return config_from_args(parser.parse_args(argv))


def _parse_quietly(argv: list[str] | None, rank: int) -> Config:
    """Parse on every rank; only rank 0 prints argparse's help or usage errors."""
    if rank == 0:
        return parse_args(argv)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return parse_args(argv)


def _validate(argv: list[str] | None, rank: int, world: int) -> tuple[Config, Layout]:
    config = _parse_quietly(argv, rank)
    layout = compute_layout(world, config.run.learners, config.run.ranks_per_env)
    check_env(config.run.env, config.run.ranks_per_env)
    episode_columns(config.run.env)
    return config, layout


def main(argv: list[str] | None = None) -> int:
    """Validate everything on every rank, then create the run directory (rank 0) and train."""
    rank, world = world_rank_size()
    try:
        config, layout = _validate(argv, rank, world)
        if world == 1:
            path = new_run_dir(config)
            set_threads(config)
            run = RunDirectory(path, config)
            run.log(f"run directory {path} (one process: learner and actor)")
            try:
                run_role(config, layout, None, run)
            finally:
                run.close()
            return 0
    except (ConfigError, LayoutError, FileExistsError) as err:
        return _error(str(err), rank)
    except SystemExit as done:  # argparse's --help or usage error
        if done.code and app_count() > 1:
            abort_job(2)
        raise
    return _main_mpi(config, layout, rank)


def _error(message: str, rank: int) -> int:
    """Report a start-up error on rank 0 and return 2; under MPMD end the solver app too."""
    if rank == 0:
        print(f"hpc_refer.run: error: {message}", file=sys.stderr, flush=True)
        if app_count() > 1:
            abort_job(2)
    return 2


def _main_mpi(config: Config, layout: Layout, rank: int) -> int:
    fabric = Fabric(layout)
    path = None
    error = ""
    if rank == 0:
        try:
            path = new_run_dir(config)
        except FileExistsError as err:
            error = str(err)
    error = fabric.bcast(error)
    if error:
        return _error(error, rank)
    set_threads(config)
    run = RunDirectory(path, config) if rank == 0 and path is not None else None
    try:
        if run is not None:
            run.log(f"run directory {path} ({layout.learners} learners, {layout.envs} "
                    f"environment teams of {layout.ranks_per_env} ranks)")
        run_role(config, layout, fabric, run)
    except Exception:  # any failure on one rank must stop the whole job, not hang it
        role = layout.role(rank).value
        print(f"hpc_refer.run: rank {rank} ({role}) failed:\n{traceback.format_exc()}",
              file=sys.stderr, flush=True)
        fabric.abort(1)
    finally:
        if run is not None:
            run.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
