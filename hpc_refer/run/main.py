"""Entry point: ``[mpirun -n N] python -m hpc_refer.run [--config FILE] [--env ID] ...``.

Trains an off-policy algorithm (``--algorithm``: the registered ones, V-RACER by default)
with ReF-ER (defaults: HalfCheetah-v5, the paper's hyper-parameters) and writes config,
metrics and log to a run directory. Every flag is a config key (see ``--help``). Under mpirun
the ranks split into learners and environment teams (``--learners``, ``--ranks-per-env``);
one rank runs learner and actor in one process, through the same loop.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import logging
import os
import shlex
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from hpc_refer.config.cli import (
    ENV_HELP,
    add_arguments,
    config_from_args,
    parse_command_line,
    plugins_of,
)
from hpc_refer.config.layout import Layout, LayoutError, Role, compute_layout
from hpc_refer.config.modes import ConfigError, Sampling
from hpc_refer.config.resolve import Config, build_config, load_toml, table_types
from hpc_refer.config.values import coerce
from hpc_refer.envs.interface import SolverStartError
from hpc_refer.envs.registry import SolverSpec, env_kind, kinds_help
from hpc_refer.envs.supervision import STOP
from hpc_refer.loop import checkpoint
from hpc_refer.loop.checkpoint import CheckpointError, Resume
from hpc_refer.parallel.channels import Fabric
from hpc_refer.parallel.world import (
    abort_job,
    app_count,
    barrier,
    mpi_library,
    singleton_error,
    world_rank_size,
)
from hpc_refer.report import logs
from hpc_refer.report.clock import CLOCK
from hpc_refer.report.lock import RunLock, died_message
from hpc_refer.report.metrics import RunDirectory, machine_info, new_run_dir, record_stop
from hpc_refer.report.schema import STATE_FILE, read_state
from hpc_refer.run.roles import ActorResult, actor_main, solver_main

if TYPE_CHECKING:
    from hpc_refer.loop.learner_loop import LearnerResult

LOG = logging.getLogger("hpc_refer.run")  # not __name__: "__main__" under python -m

DESCRIPTION = """\
Train an off-policy agent (--algorithm: one of those listed below, each with its table of
settings; --plugins adds algorithms of your own) with Remember-and-Forget Experience Replay
(ReF-ER, Novati & Koumoutsakos, ICML 2019), plain or prioritized experience replay. Values come
from the defaults below, then the TOML file given by --config ([run], [refer], [replay], [env]
and the algorithms' tables), then these flags.
Under mpirun, the world splits into --learners learner ranks and environment teams of
--ranks-per-env ranks: world size = learners + teams x ranks-per-env."""

EPILOG = f"""\
{ENV_HELP}

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
  python -m hpc_refer.run --env mysolver:Channel --env.re 100 --env.nx 256   # [env] table
  python -m hpc_refer.run --restart runs/try --steps 40000  # resume, train further
the run directory holds config.toml, episodes.csv, train.jsonl, log.txt, state.txt, policy.h5
and checkpoints/ (every --checkpoint-every steps, at the end, and on SIGTERM or SIGUSR1, after
which the run stops and exits 0 with state.txt = preempted);
plot learning curves with: python -m hpc_refer.plot RUN_DIR [RUN_DIR ...] --out curves.png
a self-contained HTML report with: python -m hpc_refer.report RUN_DIR [RUN_DIR ...]
evaluate the saved policy with: python -m hpc_refer.evaluate RUN_DIR --episodes 10"""


RESTART_MAY_CHANGE = frozenset({
    "run.steps", "run.log_every", "run.threads", "run.learners", "run.checkpoint_every",
    "run.checkpoint_keep", "run.eval_every", "run.eval_episodes", "run.env_step_timeout",
    "run.env_build_timeout",
    "run.max_env_failures", "run.checksum_every", "run.tensorboard", "run.report_every",
    "run.series_stride", "run.snapshot",
})
"""What a resumed run may set differently from the run it continues (the learner count:
the stored episodes are redistributed over the new learners; the snapshots only read the
solver's fields)."""


class Start(NamedTuple):
    """A validated start: the config, the layout, and the run directory to resume."""

    config: Config
    layout: Layout
    restart: Path | None
    dims: tuple[int, int] | None = None
    """(obs_dim, act_dim) of the environment; None for an external solver."""
    flags: tuple[str, ...] = ()
    """The flags of the command line that a restart takes too (:func:`restart_flags`)."""


def _restart_flag(dest: str) -> str:
    """The flag of a key of :data:`RESTART_MAY_CHANGE` (all of ``[run]``): ``--key-name``."""
    return "--" + dest.split(".", 1)[1].replace("_", "-")


def _parser(argv: list[str] | None) -> argparse.ArgumentParser:
    """The command line's parser, with the flags of the algorithms of its plugins."""
    parser = argparse.ArgumentParser(
        prog="python -m hpc_refer.run", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--restart", type=Path, metavar="RUN_DIR",
        help="resume RUN_DIR from its newest complete checkpoint with its config.toml; only "
             "--steps (to go further) and " + ", ".join(sorted(
                 _restart_flag(k) for k in RESTART_MAY_CHANGE if k != "run.steps"))
             + " may be given")
    add_arguments(parser, plugins_of(argv))
    parser.epilog = f"{kinds_help()}\n\n{EPILOG}"  # the kinds of the plugins too
    return parser


def restart_flags(args: argparse.Namespace) -> tuple[str, ...]:
    """The flags of a parsed command line that a restart takes too (those of
    :data:`RESTART_MAY_CHANGE`), in the order given, each with its value as written."""
    return tuple(part for dest, raw in vars(args).items() if dest in RESTART_MAY_CHANGE
                 for part in (_restart_flag(dest), str(raw)))


def resume_command(run_dir: Path, world: int, flags: tuple[str, ...], apps: int = 1) -> str:
    """The command that resumes ``run_dir`` as its run was launched: the same number of
    ranks (``mpirun -n <world>``, none for one process), ``--restart`` and the ``flags`` of
    the launch line that a restart takes (:func:`restart_flags`; everything else is in
    RUN_DIR/config.toml); under MPMD (``apps`` > 1) the solver's part follows the ``:``."""
    launch = ["mpirun", "-n", str(world)] if world > 1 else []
    line = shlex.join([*launch, "python", "-m", "hpc_refer.run", "--restart", str(run_dir),
                       *flags])
    return line + (" : <the solver's part of the launch line>" if apps > 1 else "")


def parse_args(argv: list[str] | None) -> Config:
    """Parse the command line into a validated Config (raises ConfigError)."""
    return config_from_args(parse_command_line(_parser(argv), argv))


def restart_config(run_dir: Path, args: argparse.Namespace) -> Config:
    """The config of a resumed run: RUN_DIR/config.toml with the flags that may change.

    A flag that would change anything else is refused, naming the key and both values.
    """
    if getattr(args, "config", None) is not None:
        raise ConfigError("--restart takes its config from RUN_DIR/config.toml: --config is "
                          "not allowed with it")
    if not (run_dir / "config.toml").is_file():
        raise ConfigError(f"--restart {run_dir}: no config.toml there (not a run directory)")
    saved = load_toml(run_dir / "config.toml")
    old = build_config(saved).to_dict()
    layers = {section: dict(values) for section, values in old.items()}
    types = table_types(old["run"]["plugins"])
    for dest, raw in vars(args).items():
        if "." not in dest:
            continue
        section, key = dest.split(".", 1)
        name = f"{section}.{key}"
        if name == "run.run_dir":
            continue
        if section not in old:
            raise ConfigError(f"--restart: {name} is not a setting of this run (its "
                              f"algorithm is {old['run']['algorithm']})")
        value = coerce(types[section], key, raw)
        shown = list(value) if isinstance(value, tuple) else value
        if name not in RESTART_MAY_CHANGE and shown != old[section][key]:
            raise ConfigError(
                f"--restart: {name} cannot change when a run resumes (checkpoint: "
                f"{old[section][key]!r}, given: {shown!r}); allowed to change "
                f"are {', '.join(sorted(RESTART_MAY_CHANGE))}")
        layers[section][key] = value
    for key, value in getattr(args, "env_params", {}).items():
        if saved.get("env", {}).get(key) != value:
            raise ConfigError(
                f"--restart: env.{key} cannot change when a run resumes (checkpoint: "
                f"{saved.get('env', {}).get(key)!r}, given: {value!r}); the solver's "
                f"parameters stay those of the run")
    layers["run"]["run_dir"] = str(run_dir)
    return build_config(layers)


def _parse_quietly(argv: list[str] | None, rank: int
                   ) -> tuple[Config, Path | None, tuple[str, ...]]:
    """Parse on every rank; only rank 0 prints argparse's help or usage errors. Returns the
    config, the run directory to resume and the flags a restart takes too."""
    def parse() -> tuple[Config, Path | None, tuple[str, ...]]:
        args = parse_command_line(_parser(argv), argv)
        flags = restart_flags(args)
        if args.restart is not None:
            return restart_config(args.restart, args), args.restart, flags
        return config_from_args(args), None, flags

    if rank == 0:
        return parse()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return parse()


def _validate(argv: list[str] | None, rank: int, world: int) -> Start:
    config, restart, flags = _parse_quietly(argv, rank)
    layout = compute_layout(world, config.run.learners, config.run.ranks_per_env)
    kind = env_kind(config.run.env)
    config = dataclasses.replace(config, env=kind.params(config.run.env, config.env))
    dims = kind.check(SolverSpec.of(config), app_count())
    kind.episode_columns(config.run.env)
    return Start(config, layout, restart, dims, flags)


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation on this node (MemAvailable of
    /proc/meminfo, else the free physical pages); None where neither is known."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def replay_bytes(config: Config, dims: tuple[int, int], learners: int) -> int:
    """Bytes of one learner's replay shard (its N / L states: every column of
    :class:`~hpc_refer.replay.shard.ReplayShard`, and the sum tree under prioritized replay).
    Asked on rank 0, a learner: the replay's modules are imported here, so that actor ranks
    never load its compiled kernels (:mod:`hpc_refer.run.roles`)."""
    from hpc_refer.loop.learner import shard_capacity
    from hpc_refer.replay.shard import ReplayShard

    capacity = shard_capacity(config.replay.size, learners)
    total = capacity * ReplayShard(1, dims[0], dims[1], 1.0).column_bytes
    if config.replay.sampling is Sampling.PER:
        total += 2 * (1 << (capacity - 1).bit_length()) * 8  # SumTree: float64 [2 P]
    return total


def check_replay_memory(start: Start) -> None:
    """Refuse (one line ConfigError) a replay memory larger than the memory available, before
    anything is written. Checked on rank 0 (a learner) for its own shard; skipped for an
    external solver, whose sizes are known only from its first message."""
    if start.dims is None:
        return
    available = available_memory()
    needed = replay_bytes(start.config, start.dims, start.layout.learners)
    if available is not None and needed > available:
        per = " per learner" if start.layout.learners > 1 else ""
        raise ConfigError(
            f"replay.size = {start.config.replay.size} needs {needed / 2**30:.1f} GiB of "
            f"memory{per} for the replay, but {available / 2**30:.1f} GiB is available: "
            f"lower --replay.size")


def start_warnings(config: Config, resume: Resume | None) -> list[str]:
    """Warnings logged when a run starts: a new run too short to reach
    ``replay.learn_start`` (about one state is stored per environment step)."""
    start = config.replay.start
    if resume is None and config.run.steps < start:
        return [f"run.steps = {config.run.steps} < replay.learn_start = {start} "
                f"(states stored before the first gradient step): no gradient step will be "
                f"made; set --replay.learn-start below run.steps for a short trial"]
    return []


def load_resume(config: Config, run_dir: Path) -> Resume:
    """The newest complete checkpoint of ``run_dir``, verified, and checked against
    ``config`` (raises CheckpointError or ConfigError saying what is wrong)."""
    path = checkpoint.latest(run_dir)
    if path is None:
        raise checkpoint.CheckpointError(f"--restart {run_dir}: no complete checkpoint in "
                                         f"{run_dir / 'checkpoints'}")
    resume = Resume.of(path)
    manifest = resume.manifest
    saved = build_config(manifest["meta"]["config"])  # in today's layout (new keys' defaults)
    checkpoint.check_compatible(saved.to_dict(), config.to_dict(), set(RESTART_MAY_CHANGE))
    meta = manifest["meta"]
    dims = env_kind(config.run.env).dims(SolverSpec.of(config))
    if dims is not None and tuple(dims) != (meta["obs_dim"], meta["act_dim"]):
        raise CheckpointError(
            f"run.env = {config.run.env!r} now has (obs_dim, act_dim) = {tuple(dims)}, but the "
            f"checkpoint's networks were built for ({meta['obs_dim']}, {meta['act_dim']})")
    step = int(meta["env_step"])
    if config.run.steps <= step:
        raise ConfigError(f"run.steps = {config.run.steps} is not beyond the checkpoint's step "
                          f"{step}: raise --steps to train further")
    return resume


def write_run_report(run_dir: Path) -> Path:
    """The run directory's report writer: :func:`hpc_refer.report.build.write_run_report`,
    imported at the first report (so matplotlib is imported where a report is drawn, not by
    every rank at start-up)."""
    from hpc_refer.report.build import write_run_report as write

    return write(run_dir)


def _open_run(start: Start) -> tuple[RunDirectory, Resume | None]:
    """Rank 0: hold the run directory (its lock) and create it, or, resuming, reopen it; then
    record the start (state.txt = running) before any other rank starts. Errors as OSError
    (:class:`~hpc_refer.report.lock.RunLockedError`: another run holds it), ConfigError or
    CheckpointError, before anything is written."""
    config = start.config
    check_replay_memory(start)
    metrics = env_kind(config.run.env).metric_names(config.run.env)  # checked in _validate
    if start.restart is None:
        run = RunDirectory(new_run_dir(config), config, metrics, report=write_run_report)
        resume = None
    else:
        run, resume = _reopen(start.restart, config, metrics)
    run.set_state("running")
    return run, resume


def _reopen(run_dir: Path, config: Config, metrics: tuple[str, ...]
            ) -> tuple[RunDirectory, Resume]:
    """``--restart``: hold ``run_dir``, then verify its checkpoint, remove unpublished parts
    and reopen its files; a previous start that ended without a stop record (killed) is said
    in one line (log.txt too)."""
    lock = RunLock.acquire(run_dir)
    try:
        resume = load_resume(config, run_dir)
        try:
            before = read_state(run_dir / STATE_FILE)
            note = (died_message(lock.previous, "the previous run")
                    if before is not None and before.state == "running" else "")
        except ValueError as err:  # a state.txt edited by hand: say so, resume all the same
            note = str(err)
        checkpoint.discard_partials(run_dir)  # parts of an attempt killed mid-checkpoint
    except BaseException:
        lock.release()
        raise
    meta = resume.manifest["meta"]
    run = RunDirectory(run_dir, config, metrics, resume=(meta["files"], int(meta["env_step"])),
                       report=write_run_report, lock=lock)
    if note:
        LOG.warning("%s", note)
    return run, resume


START_ERRORS = (ConfigError, LayoutError, OSError, CheckpointError)
FAILED = 1
"""Exit status of a run stopped by an environment that failed for good (checkpointed first;
the job is then aborted, since a stuck external solver would keep MPI_Finalize waiting)."""


def _outcome(start: Start, run: RunDirectory, result: object) -> int:
    """Rank 0: record how the loop ended (state.txt, log.txt; a stop before ``run.steps``
    with the command that resumes it); the exit status (0 unless an environment failed).
    Rank 0 is a learner: its result is the learner loop's."""
    from hpc_refer.loop.learner_loop import LearnerResult

    if not isinstance(result, LearnerResult) or not result.stopped_by:
        run.set_state("finished")
        return 0
    hint = resume_command(run.path, start.layout.world, start.flags, app_count())
    if result.stopped_by == "signal":
        state, why, status = "preempted", f"signal {result.stop_signal}", 0
    else:
        state, why, status = "failed", result.stopped_by, FAILED
    LOG.info("stopped at step %d (%s); resume with: %s", result.env_steps, why, hint)
    run.set_state(state, why)
    if status == FAILED:
        print(f"hpc_refer.run: error: {why}", file=sys.stderr, flush=True)
    return status


def main(argv: list[str] | None = None) -> int:
    """Validate everything on every rank, then create the run directory (rank 0) and train:
    the same lifecycle for one process and for every rank of an MPI job."""
    rank, world = world_rank_size()
    logs.configure(rank)
    singleton = singleton_error()
    if singleton is not None:
        return _error(singleton, rank)
    try:
        start = _validate(argv, rank, world)
    except START_ERRORS as err:
        return _error(str(err), rank)
    except SystemExit as done:  # argparse's --help or usage error
        if done.code and app_count() > 1:
            abort_job(2)
        raise
    STOP.install()
    fabric = Fabric(start.layout) if world > 1 else None
    run = resume = None
    error = ""
    if rank == 0:
        try:
            run, resume = _open_run(start)
        except START_ERRORS as err:
            error = str(err)
    path = run.path if run is not None else None
    if fabric is not None:
        error, path, resume = fabric.bcast((error, path, resume))
    if error:
        return _error(error, rank)
    assert path is not None
    hosts = fabric.gather_hosts() if fabric is not None else None
    if fabric is not None:
        barrier()  # every rank starts the run's clock as all of them leave it
    CLOCK.start(resume.elapsed if resume is not None else 0.0)
    return _train(start, rank, fabric, run, path, resume, hosts)


def run_role(config: Config, layout: Layout, fabric: Fabric | None,
             run: RunDirectory | None, run_dir: Path | None = None,
             resume: Resume | None = None) -> LearnerResult | ActorResult | None:
    """Run this rank's role to the end; returns what a learner or actor rank ends with.

    A world of one rank (``fabric`` may then be None) trains in this process. ``run_dir``
    (on every rank; None: no checkpoints) receives the checkpoints; ``resume`` is the
    checkpoint to continue from. The learning side is imported here, by the ranks that
    learn alone (:mod:`hpc_refer.run.roles`)."""
    role = layout.role(fabric.rank if fabric is not None else 0)
    if role is Role.ACTOR:
        assert fabric is not None
        return actor_main(config, layout, fabric, run_dir, resume)
    if role is Role.SOLVER:
        assert fabric is not None
        solver_main(config, layout, fabric, run_dir)
        return None
    from hpc_refer.run.learning import learner_main, set_threads, train_local

    set_threads(config)
    if role is Role.SINGLE:
        return train_local(config, run, run_dir, resume)
    assert fabric is not None
    return learner_main(config, layout, fabric, run, run_dir, resume)


def rank_table(layout: Layout, hosts: list[str]) -> list[dict[str, Any]]:
    """Each rank of an MPI job: its role, its team (actors and solver ranks) and its host."""
    return [{"rank": r, "role": layout.role(r).value, "host": host,
             **({"team": layout.team(r)} if r >= layout.learners else {})}
            for r, host in enumerate(hosts)]


def _start_line(start: Start, path: Path | None, resume: Resume | None) -> str:
    layout = start.layout
    roles = ("one process: learner and actor" if layout.world == 1 else
             f"{layout.learners} learners, {layout.envs} environment teams of "
             f"{layout.ranks_per_env} ranks")
    return (f"run directory {path} ({roles})"
            + (f", resumed from {resume.path}" if resume is not None else ""))


def _reason(err: BaseException) -> str:
    """``Type: message`` of an exception (its type alone when it has no message)."""
    text = str(err)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _train(start: Start, rank: int, fabric: Fabric | None, run: RunDirectory | None,
           path: Path, resume: Resume | None, hosts: list[str] | None) -> int:
    """This rank's role from start to end. Why it ended is recorded by the rank that knows
    it: rank 0 (``run``) for the loop's end (:func:`_outcome`), the rank that meets an error
    for that error (:func:`~hpc_refer.report.metrics.record_stop`: state.txt and log.txt, with the
    traceback), whichever rank it is. Any failure of one rank of an MPI job ends the whole
    job (never a hang); in one process it propagates."""
    config, layout = start.config, start.layout
    abort = fabric.abort if fabric is not None else abort_job
    status = 0
    try:
        if run is not None:
            run.record_machine(machine_info(
                layout.world, layout.learners, layout.envs, layout.ranks_per_env,
                config.run.threads, None if hosts is None else rank_table(layout, hosts),
                None if fabric is None else mpi_library()))
            LOG.info("%s", _start_line(start, path, resume))
            for line in start_warnings(config, resume):
                LOG.warning("%s", line)
        result = run_role(config, layout, fabric, run, path, resume)
        if run is not None:
            status = _outcome(start, run, result)
    except SolverStartError as err:  # one line: the solver never answered
        record_stop(path, rank, "failed", str(err), err.details)
        print(f"hpc_refer.run: error: {err}", file=sys.stderr, flush=True)
        if fabric is not None:
            fabric.abort(FAILED)
        status = FAILED
    except BaseException as err:
        where = f"rank {rank} ({layout.role(rank).value})"
        record_stop(path, rank, "failed", f"{where}: {_reason(err)}", traceback.format_exc())
        if fabric is None:
            raise
        # any failure on one rank must stop the whole job
        print(f"hpc_refer.run: {where} failed:\n{traceback.format_exc()}", file=sys.stderr,
              flush=True)
        fabric.abort(1)
    finally:
        if run is not None:
            run.close()
    if status == FAILED and (fabric is not None or env_kind(config.run.env).outside_ranks):
        abort(FAILED)
    return status if fabric is None else fabric.exit_status(status)


def _error(message: str, rank: int) -> int:
    """Report a start-up error on rank 0 and return 2; under MPMD end the solver app too."""
    if rank == 0:
        print(f"hpc_refer.run: error: {message}", file=sys.stderr, flush=True)
        if app_count() > 1:
            abort_job(2)
    return 2


if __name__ == "__main__":
    sys.exit(main())
