"""Checkpoints from the user's side: exact restart, preemption, saved policies, evaluation,
and start-up errors that cost nothing (issue 10).

Runs ``python -m hpc_refer.run`` in this process or as a subprocess (one process), and under
``mpirun`` as a subprocess (serial pytest pass only: ``mpi_skip``).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from mpi_launch import mpi_env, mpirun_exe
from output_lines import one_error_line

from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.evaluate import main as evaluate_main
from hpc_refer.loop.policy_file import load_policy
from hpc_refer.report.curves import plot_runs
from hpc_refer.run.main import main as run_main

pytestmark = pytest.mark.mpi_skip

SMALL = ["--replay.size", "2000", "--replay.learn-start", "300", f"--{VRacer.name}.batch", "32",
         f"--{VRacer.name}.hidden", "16,16", "--log-every", "200", "--chunk-len", "100"]
NO_COMPILE = ["--compile", "off"]
"""For runs launched with 200,000 steps only to be stopped early: ``--compile auto`` would
compile their step (seconds per learner) for the few hundred steps they take."""
TIMING = {"wall_s", "env_steps_per_s", "grad_steps_per_s", "learner_busy"}
"""Columns that hold wall-clock figures (the only ones a resumed run may change)."""


def rows(path: Path) -> list[dict]:
    """episodes.csv / eval.csv rows, or train.jsonl records, without the timing columns."""
    if path.suffix == ".jsonl":
        records = [json.loads(x) for x in path.read_text().splitlines()]
    else:
        with path.open() as f:
            records = list(csv.DictReader(f))
    return [{k: v for k, v in r.items() if k not in TIMING} for r in records]


def newest_checkpoint(run_dir: Path) -> Path:
    return sorted((run_dir / "checkpoints").glob("step-*"))[-1]


def assert_resumes_straight(root: Path, flags: list[str], steps: int, first: str) -> Path:
    """Train ``flags`` for ``steps`` in ``root/straight``, then resume a copy from its first
    checkpoint (named ``first``, with the last one removed and the run marked preempted) and
    assert that it ends as the straight run did: episodes, intervals, learner and actor
    parts. Returns the resumed run's directory."""
    straight, full = root / "straight", root / "full"
    assert run_main([*flags, "--steps", str(steps), "--run-dir", str(straight)]) == 0
    shutil.copytree(straight, full)
    checkpoints = sorted((straight / "checkpoints").glob("step-*"))
    assert checkpoints[0].name == first
    shutil.rmtree(checkpoints[-1])
    (straight / "state.txt").write_text("preempted: signal 15\n")
    assert run_main(["--restart", str(straight), "--steps", str(steps)]) == 0
    for name in ("episodes.csv", "train.jsonl"):
        assert rows(full / name) == rows(straight / name), name
    for part in ("learner-0.h5", "actor-0.h5"):
        assert_same_arrays(newest_checkpoint(full) / part, newest_checkpoint(straight) / part)
    return straight


def h5_arrays(path: Path) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}

    def visit(name: str, obj: object) -> None:
        if isinstance(obj, h5py.Dataset):
            out[name] = obj[()]

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return out


def assert_same_arrays(a: Path, b: Path, prefix: str = "") -> None:
    """Every dataset under ``prefix`` equal, but clock readings (an unlogged episode's end
    time, ``.../wall_s``: the run's clock, not its state)."""
    left, right = h5_arrays(a), h5_arrays(b)

    def compared(tree: dict[str, np.ndarray]) -> list[str]:
        return sorted(k for k in tree if k.startswith(prefix)
                      and k.rsplit("/", 1)[-1] not in TIMING)

    keys = compared(left)
    assert keys and keys == compared(right)
    for k in keys:
        np.testing.assert_array_equal(left[k], right[k], err_msg=k)


def test_resume_is_bit_for_bit_in_one_process(in_tmp):
    """2N steps with a checkpoint at N, stopped there (a preemption), resumed to 2N == 2N
    straight: weights, replay, metrics, policy.

    HalfCheetah's episodes last 1000 steps, so the checkpoint at 600 falls inside an
    episode: the MuJoCo state, the actor's rng and its pending steps must all continue.
    """
    common = ["--env", "HalfCheetah-v5", "--seed", "4", "--checkpoint-every", "600", *SMALL]
    resumed = assert_resumes_straight(in_tmp, common, 1200, "step-000000000600")
    full = in_tmp / "full"
    # The rows the first part wrote after its checkpoint were moved aside, not lost.
    assert (resumed / "train.jsonl.after-step-600").exists()
    assert newest_checkpoint(full).name == newest_checkpoint(resumed).name == "step-000000001200"
    assert_same_arrays(full / "policy.h5", resumed / "policy.h5")
    assert "resumed from" in (resumed / "log.txt").read_text()
    final_checkpoint_is_final_state(resumed)


def final_checkpoint_is_final_state(run_dir: Path, module: str = "net") -> None:
    """A finished run's newest checkpoint holds what its policy.h5 and its last train.jsonl
    record hold: the same environment and gradient steps, and the behaviour module
    (``module`` of the algorithm) tensor for tensor."""
    last = newest_checkpoint(run_dir)
    meta = json.loads((last / "manifest.json").read_text())["meta"]
    record = json.loads((run_dir / "train.jsonl").read_text().splitlines()[-1])
    saved = load_policy(run_dir / "policy.h5")
    assert meta["grad_step"] == saved.grad_step == record["grad_step"]
    assert meta["env_step"] == saved.env_step == record["env_step"]
    policy, learner = h5_arrays(run_dir / "policy.h5"), h5_arrays(last / "learner-0.h5")
    tensors = [k for k in policy if k.startswith("state/policy/")]
    assert tensors
    for k in tensors:
        np.testing.assert_array_equal(policy[k], learner[
            f"state/learner/algorithm/modules/{module}/{k.removeprefix('state/policy/')}"])


def test_the_final_checkpoint_holds_the_final_policy(in_tmp):
    """The gradient steps owed at the end are made before the last checkpoint (issue 38,
    point 5): a restart continues from the policy that policy.h5 holds, here in one process
    with 4 gradient steps per environment step (the learner behind its actor at the end)."""
    assert run_main(["--env", "Pendulum-v1", "--steps", "500", "--run-dir", "r",
                     "--replay.grad-ratio", "4", *SMALL]) == 0
    final_checkpoint_is_final_state(in_tmp / "r")
    assert run_main(["--restart", "r", "--steps", "600"]) == 0
    assert rows(in_tmp / "r" / "train.jsonl")[-1]["grad_step"] == 4 * (600 - 300)


def test_restart_refuses_what_would_change_the_run(in_tmp, capsys):
    assert run_main(["--env", "Pendulum-v1", "--steps", "400", "--run-dir", "r", *SMALL]) == 0
    before = sorted(p.name for p in (in_tmp / "r").rglob("*"))
    assert run_main(["--restart", "r", "--steps", "800", f"--{VRacer.name}.lr", "0.001"]) == 2
    err = capsys.readouterr().err
    assert f"{VRacer.name}.lr cannot change" in err and "0.0001" in err and "0.001" in err
    assert run_main(["--restart", "r", "--steps", "400"]) == 2
    assert "not beyond the checkpoint's step 400" in capsys.readouterr().err
    assert run_main(["--restart", "nowhere", "--steps", "800"]) == 2
    assert "no config.toml" in capsys.readouterr().err
    # Output-only settings may change: the snapshot schedule, for one.
    assert run_main(["--restart", "r", "--steps", "600", "--snapshot", "every:3"]) == 0
    assert 'snapshot = "every:3"' in (in_tmp / "r" / "config.toml").read_text()
    # Networks built for other sizes than the environment's now.
    manifest_path = newest_checkpoint(in_tmp / "r") / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["meta"]["obs_dim"] = 4
    manifest_path.write_text(json.dumps(manifest))
    assert run_main(["--restart", "r", "--steps", "800"]) == 2
    assert "(obs_dim, act_dim) = (3, 1)" in capsys.readouterr().err
    manifest["meta"]["obs_dim"] = 3
    manifest_path.write_text(json.dumps(manifest))
    before = sorted(p.name for p in (in_tmp / "r").rglob("*"))
    # A checkpoint whose file changed after it was published is refused by name.
    part = newest_checkpoint(in_tmp / "r") / "learner-0.h5"
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    assert run_main(["--restart", "r", "--steps", "800"]) == 2
    assert "learner-0.h5" in capsys.readouterr().err
    assert sorted(p.name for p in (in_tmp / "r").rglob("*")) == before


def test_unusable_run_dir_is_one_line(in_tmp, capsys):
    Path("a_file").write_text("x")
    for bad in ("a_file", "a_file/sub", "/proc/hpc_refer_cannot_write_here"):
        assert run_main(["--env", "Pendulum-v1", "--steps", "200", "--run-dir", bad]) == 2
        one_error_line(capsys.readouterr().err, "hpc_refer.run: error:")


def wait_for(predicate, what: str, proc: subprocess.Popen, timeout: float = 240.0) -> None:
    """Poll ``predicate`` until it holds (the process must still run meanwhile)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"process ended ({proc.returncode}) before {what}: "
                                 f"{proc.stderr.read() if proc.stderr else ''}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def progress_lines(run_dir: Path) -> int:
    log = run_dir / "log.txt"
    return log.read_text().count("steps ") if log.exists() else 0


def assert_continuous(run_dir: Path, total: int) -> None:
    """episodes.csv and train.jsonl of a stopped and resumed run: no row twice, none
    missing, steps increasing to ``total``."""
    records = rows(run_dir / "train.jsonl")
    steps = [int(r["env_step"]) for r in records]
    assert steps == sorted(set(steps)) and steps[-1] >= total
    episodes = rows(run_dir / "episodes.csv")
    ends = [int(e["env_step"]) for e in episodes]
    assert ends == sorted(ends)
    # Pendulum episodes last 200 steps: every one of them is there once.
    assert sum(int(e["length"]) for e in episodes) == 200 * len(episodes)
    assert len(episodes) >= total // 200 - 1


def python_env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1"}


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1])
def test_signal_stops_checkpoints_and_resumes(in_tmp, signum):
    run_dir = in_tmp / "pre"
    proc = subprocess.Popen(
        [sys.executable, "-m", "hpc_refer.run", "--env", "Pendulum-v1", "--steps", "200000",
         "--run-dir", str(run_dir), *SMALL, *NO_COMPILE],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=python_env())
    wait_for(lambda: progress_lines(run_dir) >= 3, "three progress lines", proc)
    proc.send_signal(signum)
    assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
    assert (run_dir / "state.txt").read_text() == f"preempted: signal {int(signum)}\n"
    stopped = int(newest_checkpoint(run_dir).name.split("-")[1])
    assert 600 <= stopped < 200000
    log = (run_dir / "log.txt").read_text()
    assert f"[0] run preempted: signal {int(signum)}" in log
    # the launch line's flags that a restart takes: --steps and --log-every (of SMALL)
    assert (f"stopped at step {stopped} (signal {int(signum)}); resume with: python -m "
            f"hpc_refer.run --restart {run_dir} --steps 200000 --log-every 200\n") in log
    assert (run_dir / "policy.h5").exists()
    total = stopped + 400
    assert run_main(["--restart", str(run_dir), "--steps", str(total)]) == 0
    assert (run_dir / "state.txt").read_text().strip() == "finished"
    assert_continuous(run_dir, total)


def test_the_round_due_at_the_last_step_evaluates_the_final_policy(in_tmp):
    """A round asked for at the last step runs though an episode is in progress there (the
    round at 150 waits for the episode's end at 200, the one at 300 does not wait for 400);
    a longer restart from the last checkpoint reruns it at the next boundary, as a straight
    run does. The round of 450, pending until the boundary at 600 where the run ends, gives
    way to the one of 600 (both would evaluate the final policy)."""
    flags = ["--env", "Pendulum-v1", "--eval-every", "150", "--eval-episodes", "1", *SMALL]
    assert run_main([*flags, "--steps", "300", "--run-dir", "resumed"]) == 0
    evals = rows(in_tmp / "resumed" / "eval.csv")
    assert [(int(e["env_step"]), int(e["length"])) for e in evals] == [(150, 200), (300, 200)]
    assert rows(in_tmp / "resumed" / "train.jsonl")[-1]["env_step"] == 300
    saved = load_policy(in_tmp / "resumed" / "policy.h5")  # Pendulum's action box
    assert saved.action_low.tolist() == [-2.0] and saved.action_high.tolist() == [2.0]
    assert run_main(["--restart", "resumed", "--steps", "600"]) == 0
    assert run_main([*flags, "--steps", "600", "--run-dir", "straight"]) == 0
    straight = rows(in_tmp / "straight" / "eval.csv")
    assert [int(e["env_step"]) for e in straight] == [150, 300, 600]
    assert rows(in_tmp / "resumed" / "eval.csv") == straight


def test_evaluate_runs_the_saved_mean_policy(in_tmp, capsys):
    assert run_main(["--env", "Pendulum-v1", "--steps", "1000", "--run-dir", "r",
                     "--eval-every", "400", "--eval-episodes", "2", *SMALL]) == 0
    evals = rows(in_tmp / "r" / "eval.csv")
    assert [int(e["env_step"]) for e in evals] == [400, 400, 800, 800]
    assert all(int(e["length"]) == 200 for e in evals)
    (curve,) = plot_runs([in_tmp / "r"], in_tmp / "curves.png", window=200).values()
    assert curve["eval"]["steps"] == [400, 800]
    np.testing.assert_allclose(curve["eval"]["mean"], [
        np.mean([float(e["return"]) for e in evals if int(e["env_step"]) == s])
        for s in (400, 800)])
    capsys.readouterr()
    assert evaluate_main(["r", "--episodes", "3", "--out", "a.json"]) == 0
    out = capsys.readouterr().out
    assert out.count("episode ") == 3 and "mean return" in out
    first = json.loads(Path("a.json").read_text())
    assert evaluate_main(["r", "--episodes", "3", "--out", "b.json"]) == 0
    second = json.loads(Path("b.json").read_text())
    assert first["episodes"] == 3 and np.isfinite(first["return_mean"])
    assert first["episode_returns"] == second["episode_returns"]  # deterministic policy
    assert evaluate_main(["nowhere"]) == 2
    assert "hpc_refer.evaluate: error:" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# Under mpirun (subprocesses of the serial pass)


def mpirun(n: int, *args: str) -> list[str]:
    return [mpirun_exe(), "-n", str(n), sys.executable, "-m", "hpc_refer.run", *args]


def test_unusable_run_dir_under_mpirun_is_one_line_on_every_rank(in_tmp):
    Path("a_file").write_text("x")
    proc = subprocess.run(mpirun(3, "--env", "Pendulum-v1", "--steps", "200", "--run-dir",
                                 "a_file/sub"),
                          capture_output=True, text=True, timeout=180, env=mpi_env(),
                          check=False)
    assert proc.returncode != 0
    line = one_error_line(proc.stderr, "hpc_refer.run: error:")
    assert "a_file/sub" in line, proc.stderr


def test_evaluation_rounds_under_mpirun_with_two_learners(in_tmp):
    """mpirun -n 4 (2 learners, 2 actors): the round of 1000 runs at env 0's next episode
    boundary, the one due at the last step 2000 at once, with the final policy, though env 0
    may be inside an episode there; the learner without the evaluating actor takes part in
    the round's reduction (a mismatch would hang until the timeout). Env 0 reaches its next
    boundary (at most 200 of its steps away) before the end as long as it takes a fifth of
    the last 1000 steps: the actors' shares follow their speeds, which a loaded machine makes
    unequal (with rounds at 350 and 700, env 0 once took too few to reach it)."""
    proc = subprocess.run(mpirun(4, "--env", "Pendulum-v1", "--steps", "2000", "--learners",
                                 "2", "--eval-every", "1000", "--eval-episodes", "1",
                                 "--run-dir", "r", *SMALL, *NO_COMPILE),
                          capture_output=True, text=True, timeout=300, env=mpi_env(),
                          check=False)
    assert proc.returncode == 0, proc.stderr
    evals = rows(in_tmp / "r" / "eval.csv")
    assert [(int(e["env_step"]), int(e["length"])) for e in evals] == [(1000, 200),
                                                                         (2000, 200)]
    assert rows(in_tmp / "r" / "train.jsonl")[-1]["env_step"] == 2000
    saved = load_policy(in_tmp / "r" / "policy.h5")  # the box, sent by env 0's actor rank
    assert saved.action_low.tolist() == [-2.0] and saved.action_high.tolist() == [2.0]


def test_the_final_checkpoint_holds_the_final_policy_under_mpirun(in_tmp):
    """mpirun -n 3 (1 learner, 2 actors), 4 gradient steps per environment step: the
    learner owes many at the end; the final checkpoint is written after it made them, all
    4 per environment step from the step at which training started (the first iteration
    with 300 states stored: the chunks' lengths follow the actors' speeds)."""
    proc = subprocess.run(mpirun(3, "--env", "Pendulum-v1", "--steps", "600", "--run-dir",
                                 "r", "--replay.grad-ratio", "4", *SMALL, *NO_COMPILE),
                          capture_output=True, text=True, timeout=300, env=mpi_env(),
                          check=False)
    assert proc.returncode == 0, proc.stderr
    final_checkpoint_is_final_state(in_tmp / "r")
    with h5py.File(newest_checkpoint(in_tmp / "r") / "learner-0.h5", "r") as f:
        start = int(f["state/learner"].attrs["start_env_steps"])
    assert 300 <= start < 500
    assert rows(in_tmp / "r" / "train.jsonl")[-1]["grad_step"] == 4 * (600 - start)


def test_mpi_signal_checkpoints_and_resumes_with_other_learner_counts(in_tmp):
    """mpirun -n 4 (2 learners, 2 actors) stopped by SIGUSR1 sent to mpirun (Open MPI
    forwards it to every rank; its mpirun kills the ranks on SIGTERM), resumed by 1 learner
    (2 -> 1), then by 2 learners again (1 -> 2): every stored transition is kept each time."""
    run_dir = in_tmp / "mpi"
    proc = subprocess.Popen(
        mpirun(4, "--env", "Pendulum-v1", "--steps", "200000", "--learners", "2",
               "--run-dir", str(run_dir), *SMALL, *NO_COMPILE),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=mpi_env())
    wait_for(lambda: progress_lines(run_dir) >= 4, "four progress lines", proc)
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(timeout=180) == 0, proc.stderr.read() if proc.stderr else ""
    assert (run_dir / "state.txt").read_text() == f"preempted: signal {int(signal.SIGUSR1)}\n"
    stopped = int(newest_checkpoint(run_dir).name.split("-")[1])
    assert (f"resume with: mpirun -n 4 python -m hpc_refer.run --restart {run_dir} --steps "
            f"200000 --learners 2 --log-every 200\n") in (run_dir / "log.txt").read_text()
    for world, learners, more in ((3, 1, 400), (4, 2, 400)):
        stored = stored_transitions(newest_checkpoint(run_dir))
        total = stopped + more
        done = subprocess.run(mpirun(world, "--restart", str(run_dir), "--steps", str(total),
                                     "--learners", str(learners)),
                              capture_output=True, text=True, timeout=300, env=mpi_env(),
                              check=False)
        assert done.returncode == 0, done.stderr
        assert f"resumed {stored} stored transitions" in (run_dir / "log.txt").read_text()
        stopped = int(newest_checkpoint(run_dir).name.split("-")[1])
        assert stopped >= total
    assert (run_dir / "state.txt").read_text().strip() == "finished"
    assert_continuous(run_dir, stopped)


def stored_transitions(ckpt: Path) -> int:
    total = 0
    for part in sorted(ckpt.glob("learner-*.h5")):
        with h5py.File(part, "r") as f:
            total += int(f["state/learner/replay"].attrs["n_transitions"])
    return total


def test_evaluate_a_policy_of_a_team_solver_under_mpirun(in_tmp):
    """A Diffusion1D run with teams of 2 ranks, then its policy evaluated by one team of 2
    (rank 0 acts, rank 1 follows the solver's calls); a wrong rank count is one line."""
    small = ["--replay.size", "1000", "--replay.learn-start", "200", f"--{VRacer.name}.batch", "16",
             f"--{VRacer.name}.hidden", "16,16", "--log-every", "200", "--chunk-len", "50"]
    trained = subprocess.run(mpirun(3, "--env", "Diffusion1D", "--ranks-per-env", "2",
                                    "--steps", "400", "--run-dir", "team", *small),
                             capture_output=True, text=True, timeout=300, env=mpi_env(),
                             check=False)
    assert trained.returncode == 0, trained.stderr[-3000:]
    evaluate = [*mpirun(2)[:3], sys.executable, "-m", "hpc_refer.evaluate", "team",
                "--episodes", "2"]
    proc = subprocess.run(evaluate, capture_output=True, text=True, timeout=300,
                          env=mpi_env(), check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("episode ") == 2 and "mean return" in proc.stdout
    stats = json.loads((in_tmp / "team" / "evaluation.json").read_text())
    assert stats["episodes"] == 2 and np.isfinite(stats["return_mean"])
    assert stats["env_step"] == 400 and stats["grad_step"] > 0  # the policy's own steps
    one = subprocess.run([sys.executable, "-m", "hpc_refer.evaluate", "team"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert one.returncode == 2 and "mpirun -n 2" in one.stderr

