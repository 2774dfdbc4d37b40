"""Algorithms are plug-ins (issue 23): an algorithm defined in a test module
(tests/plugin_algorithm.py, DelayedAC), not in the package, registered through
``--plugins plugin_algorithm``, trains in one process and under ``mpirun -n 3`` and ``-n 4``
(one and two learners, two actors), checkpoints and restarts, and steps its delayed actor's
optimizer every ``actor_every`` gradient steps through both the eager and the compiled step.

Everything runs in fresh interpreters (subprocesses): registering the plug-in here would add
it to the registry that other test modules iterate.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_launch import HERE, mpi_env, mpirun_exe
from output_lines import lines_with
from test_restart import assert_same_arrays, newest_checkpoint, rows

pytestmark = pytest.mark.mpi_skip  # mpirun runs inside the test

PLUGIN = ["--plugins", "plugin_algorithm", "--algorithm", "delayed_ac"]
SMALL = [*PLUGIN, "--env", "Pendulum-v1", "--replay.size", "1000", "--replay.learn-start",
         "200", "--log-every", "200", "--chunk-len", "100", "--compile", "off"]


def python(args: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_the_plugin_is_registered_and_offers_its_flags(tmp_path):
    proc = python(["-m", "hpc_refer.run", *PLUGIN, "--help"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "--delayed_ac.actor-every" in proc.stdout and "delayed_ac" in proc.stdout
    bad = python(["-m", "hpc_refer.run", *PLUGIN, "--delayed_ac.actor-every", "0"], tmp_path)
    assert bad.returncode == 2
    assert "delayed_ac.actor_every = 0 is invalid" in bad.stderr
    missing = python(["-m", "hpc_refer.run", "--plugins", "no_such_module"], tmp_path)
    assert missing.returncode == 2 and "run.plugins: module 'no_such_module'" in missing.stderr
    unknown = python(["-m", "hpc_refer.run", "--algorithm", "delayed_ac"], tmp_path)
    assert unknown.returncode == 2 and "--algorithm" in unknown.stderr


SCHEDULE = """
import numpy as np, torch
import plugin_algorithm
from hpc_refer.algorithms.kit.base import ReferTerms
from hpc_refer.config.resolve import build_config
from hpc_refer.algorithms.registry import make_algorithm
from hpc_refer.loop.learner import make_step
from test_compiled_step import OBS, ACT, make_batch
torch.set_num_threads(1)
config = build_config({"run": {"plugins": ["plugin_algorithm"], "algorithm": "delayed_ac"},
                       "delayed_ac": {"actor_every": 3}})
moved = {}
for compiled in (False, True):
    algo = make_algorithm(config, OBS, ACT, seed=2)
    step = make_step(algo, None, compiled)
    flags = []
    for t in range(6):
        actor = [p.detach().clone() for p in algo.actor.parameters()]
        critic = [p.detach().clone() for p in algo.critic.parameters()]
        step(make_batch(algo, 16, seed=t), ReferTerms(0.8, 2.0, 1.0), t)
        flags.append((any(not torch.equal(a, b) for a, b in zip(actor, algo.actor.parameters())),
                      all(not torch.equal(a, b) for a, b in zip(critic, algo.critic.parameters()))))
    assert step.compiled is compiled
    moved[compiled] = flags, [p.detach().clone() for p in algo.actor.parameters()]
for compiled, (flags, _) in moved.items():
    assert [a for a, _ in flags] == [t % 3 == 0 for t in range(6)], (compiled, flags)
    assert all(c for _, c in flags), (compiled, flags)
for a, b in zip(moved[False][1], moved[True][1]):
    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)  # eager vs compiled: round-off
print("delayed")
"""


def test_the_delayed_actor_steps_every_k_gradient_steps_eager_and_compiled(tmp_path):
    """t = 0, 3: actor and critic move; t = 1, 2, 4, 5: the critic only (its optimizer
    every step, the actor's every 3); the compiled step (a second graph for the steps on
    which the actor rests) ends where the eager one does."""
    proc = python(["-c", SCHEDULE], tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert lines_with(proc.stdout, "delayed") == ["delayed"], proc.stdout[-3000:]


def test_the_plugin_trains_checkpoints_and_resumes_bit_for_bit_in_one_process(tmp_path):
    """800 steps straight (kept as a copy); the run stopped at its checkpoint of step 400 (as
    a preemption leaves it) and resumed to 800 ends as the copy."""
    common = [*SMALL, "--seed", "3", "--checkpoint-every", "400"]
    run = ["-m", "hpc_refer.run"]
    straight, resumed = tmp_path / "full", tmp_path / "resumed"
    proc = python([*run, *common, "--steps", "800", "--run-dir", "resumed"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shutil.copytree(resumed, straight)
    shutil.rmtree(newest_checkpoint(resumed))
    assert newest_checkpoint(resumed).name == "step-000000000400"
    (resumed / "state.txt").write_text("preempted: signal 15\n")
    proc = python([*run, "--restart", "resumed", "--steps", "800"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = (resumed / "config.toml").read_text()
    assert 'plugins = [\n    "plugin_algorithm",\n]' in config and "[delayed_ac]" in config
    last = json.loads((resumed / "train.jsonl").read_text().splitlines()[-1])
    assert last["env_step"] == 800 and last["grad_step"] > 0 and "loss_q" in last
    for name in ("episodes.csv", "train.jsonl"):
        assert rows(straight / name) == rows(resumed / name), name
    for part in ("learner-0.h5", "actor-0.h5"):
        assert_same_arrays(newest_checkpoint(straight) / part, newest_checkpoint(resumed) / part)
    evaluation = python(["-m", "hpc_refer.evaluate", "resumed", "--episodes", "1"], tmp_path)
    assert evaluation.returncode == 0, evaluation.stderr[-3000:]


@pytest.mark.parametrize(("ranks", "learners"), [(3, 1), (4, 2)])
def test_the_plugin_trains_and_resumes_under_mpirun(tmp_path, ranks, learners):
    """mpirun -n 3 (one learner, two actor ranks) and -n 4 (two learners averaging their
    gradients, two actors); a restart from the checkpoint goes on to the new step count."""
    common = [*SMALL, "--learners", str(learners), "--checkpoint-every", "300", "--run-dir",
              "r"]
    env = mpi_env()
    for args in ([*common, "--steps", "600"], ["--restart", "r", "--steps", "900"]):
        proc = subprocess.run([mpirun_exe(), "-n", str(ranks), sys.executable, "-m",
                               "hpc_refer.run", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    records = [json.loads(x) for x in (tmp_path / "r" / "train.jsonl").read_text().splitlines()]
    assert records[-1]["env_step"] == 900 and records[-1]["grad_step"] > 0
    last = newest_checkpoint(tmp_path / "r")
    assert last.name == "step-000000000900"
    parts = {p.name for p in last.iterdir()}
    assert {f"learner-{r}.h5" for r in range(learners)} | {"actor-0.h5", "actor-1.h5"} <= parts
