"""Entry point: ``python -m hpc_refer.run [--config FILE] [--env ID] [--steps N] ...``.

Trains V-RACER with ReF-ER (defaults: HalfCheetah-v5, the paper's hyper-parameters) and writes
config, metrics and log to a run directory. Every flag is a config key (see ``--help``).
"""

from __future__ import annotations

import argparse
import sys

import torch

from hpc_refer.config import Config, ConfigError, add_arguments, config_from_args
from hpc_refer.envs.gym_env import GymEnv
from hpc_refer.metrics import RunDirectory, new_run_dir
from hpc_refer.training import train_in_one_process

DESCRIPTION = """\
Train an off-policy agent (V-RACER) with Remember-and-Forget Experience Replay (ReF-ER,
Novati & Koumoutsakos, ICML 2019). Values come from the defaults below, then the TOML file
given by --config ([run], [vracer], [refer], [replay] tables), then these flags."""

EPILOG = """\
examples:
  python -m hpc_refer.run                                   # HalfCheetah-v5, 10^6 steps
  python -m hpc_refer.run --env Hopper-v5 --refer.mode er --seed 3
  python -m hpc_refer.run --config my.toml --steps 20000 --run-dir runs/try
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


def main(argv: list[str] | None = None) -> int:
    """Validate everything, then create the run directory and train."""
    try:
        config = parse_args(argv)
        env = GymEnv(config.run.env)
        path = new_run_dir(config)
    except (ConfigError, FileExistsError) as err:
        print(f"hpc_refer.run: error: {err}", file=sys.stderr)
        return 2
    torch.set_num_threads(config.run.threads)
    run = RunDirectory(path, config)
    run.log(f"run directory {path}")
    try:
        train_in_one_process(config, env, run)
    finally:
        env.close()
        run.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
