"""The Python API (``hpc_refer.train``, ``load_policy``, ``evaluate``) and the deployed
controller: a policy run on the raw environment through ``Controller.act`` returns exactly
what ``python -m hpc_refer.evaluate`` reports for the same seed, for a feed-forward, a
stacked-history and a recurrent policy; README's example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import tomli_w

import hpc_refer
from hpc_refer.envs.gym_env import GymEnv
from hpc_refer.envs.interface import Status
from hpc_refer.export.__main__ import main as export_main
from hpc_refer.loop.checkpoint import CheckpointError
from hpc_refer.loop.policy_file import load_policy

pytestmark = pytest.mark.mpi_skip

SMALL = {"run": {"env": "Pendulum-v1", "steps": 400, "log_every": 200, "compile": "off"},
         "replay": {"size": 2000, "learn_start": 300}}


def config(**tables: dict) -> dict:
    return {**SMALL, **{k: {**SMALL.get(k, {}), **v} for k, v in tables.items()}}


def controller_return(policy: hpc_refer.export.controller.Controller, seed: int) -> float:
    """One Pendulum episode of ``policy`` on the raw environment from ``reset(seed)``."""
    env = GymEnv("Pendulum-v1")
    state, ret = env.reset(seed), 0.0
    policy.reset()
    while True:
        state, reward, status = env.step(policy.act(state))
        ret += reward
        if status != Status.CONTINUE:
            return ret


@pytest.mark.parametrize("tables", [
    {"vracer": {"hidden": [16, 16], "batch": 32}},
    {"vracer": {"hidden": [16], "batch": 32}, "env": {"history": 3, "history_actions": True}},
    {"vracer": {"hidden": [8], "batch": 32, "cell": "gru", "cell_width": 4, "bptt": 4}},
    {"run": {"algorithm": "sac"}, "sac": {"hidden": [16], "batch": 32}},
    {"run": {"algorithm": "crossq"}, "crossq": {"hidden": [16], "critic_hidden": [16],
                                                "batch": 32}},
    {"run": {"algorithm": "ddpg"}, "ddpg": {"hidden": [16], "batch": 32}},
], ids=["feed-forward", "history", "gru", "sac", "crossq", "ddpg"])
def test_the_controller_acts_as_evaluate_does(in_tmp, tables):
    run_dir = hpc_refer.train(config(**tables), in_tmp / "r")
    assert run_dir == in_tmp / "r" and (run_dir / "policy.h5").exists()
    stats = hpc_refer.evaluate(run_dir, episodes=1, seed=7)
    policy = hpc_refer.load_policy(run_dir)
    assert controller_return(policy, 7) == stats["episode_returns"][0]
    # again after a reset, from the policy file's path
    policy = hpc_refer.load_policy(run_dir / "policy.h5")
    assert controller_return(policy, 7) == stats["episode_returns"][0]


def test_act_takes_agents_and_refuses_bad_states(in_tmp):
    (in_tmp / "c.toml").write_text(tomli_w.dumps(config(vracer={"hidden": [8], "batch": 32})))
    run_dir = hpc_refer.train(in_tmp / "c.toml", None, "--steps", "500")  # a TOML file, a flag
    assert run_dir == Path("runs/Pendulum-v1-vracer-refer-seed0")
    assert load_policy(run_dir / "policy.h5").env_step == 500
    with pytest.raises(ValueError, match="as run_dir="):
        hpc_refer.train(in_tmp / "c.toml", None, "--run-dir", "x")
    policy = hpc_refer.load_policy(run_dir)
    states = np.random.default_rng(0).standard_normal((5, 3))
    actions = policy.act(states)
    assert actions.shape == (5, 1) and np.all(np.abs(actions) <= 2.0)
    policy.reset()
    for k in range(5):  # row k alone, each a new episode: the same action (to float32
        policy.reset()   # round-off: a batched product sums in another order)
        np.testing.assert_allclose(policy.act(states[k]), actions[k], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"inside an episode of states \(3,\)"):
        policy.act(states)  # 5 agents inside the one-agent episode of row 4
    huge = policy.act(np.array([1e30, -1e30, 1e30]))  # far outside training: clipped to the box
    assert np.all(np.abs(huge) <= 2.0)
    with pytest.raises(ValueError, match=r"states of 3 values"):
        policy.act(np.zeros(4))
    with pytest.raises(ValueError, match="1 NaN or infinite"):
        policy.act(np.array([0.0, np.nan, 1.0]))
    with pytest.raises(FileNotFoundError, match=r"nowhere\.h5: no policy file"):
        hpc_refer.load_policy(in_tmp / "nowhere.h5")
    (in_tmp / "other.h5").write_bytes((run_dir / "config.toml").read_bytes())
    with pytest.raises((CheckpointError, OSError)):
        hpc_refer.load_policy(in_tmp / "other.h5")


def test_train_raises_when_the_run_does_not_start(in_tmp):
    with pytest.raises(RuntimeError, match="did not finish"):
        hpc_refer.train({"run": {"env": "Pendulum-v1", "steps": 100},
                         "replay": {"learn_start": 5000}}, in_tmp / "r", "--steps", "-1")
    with pytest.raises(ValueError, match="failed"):
        hpc_refer.evaluate(in_tmp / "nowhere")


def test_the_guides_python_example_runs(in_tmp):
    """The guide's Python example (docs/guide.md), as written."""
    guide = (Path(__file__).parents[1] / "docs" / "guide.md").read_text()
    code = re.search(r"<!-- api-example -->\n```python\n(.*?)```", guide, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "docs/guide.md", "exec"), namespace)
    assert namespace["stats"]["episodes"] == 2


@pytest.mark.parametrize("tables", [
    {"vracer": {"hidden": [16, 16], "batch": 32}},
    {"vracer": {"hidden": [8], "batch": 32, "cell": "gru", "cell_width": 4, "bptt": 4},
     "env": {"history": 2, "history_actions": True}},
], ids=["feed-forward", "gru-history"])
def test_evaluate_runs_an_exported_onnx_policy_as_the_saved_one(in_tmp, tables):
    """``evaluate --policy policy.onnx``: the episodes of the saved policy (same seeds), the
    ONNX file on raw states with its own stack and carry, returns to float32 round-off."""
    run_dir = hpc_refer.train(config(**tables), in_tmp / "r")
    saved = hpc_refer.evaluate(run_dir, 3, 11)
    assert export_main([str(run_dir), "--out", str(in_tmp / "x")]) == 0
    onnx = hpc_refer.evaluate(run_dir, 3, 11, in_tmp / "x" / "policy.onnx", "--out",
                              str(in_tmp / "onnx.json"))
    np.testing.assert_allclose(onnx["episode_returns"], saved["episode_returns"], rtol=1e-5)
    assert (onnx["env_step"], onnx["policy"]) == (saved["env_step"],
                                                  str(in_tmp / "x" / "policy.onnx"))
    (in_tmp / "x" / "bad.onnx").write_bytes(b"not onnx")
    with pytest.raises(ValueError, match="failed"):
        hpc_refer.evaluate(run_dir, 1, 11, in_tmp / "x" / "bad.onnx")
