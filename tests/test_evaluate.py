"""``python -m hpc_refer.evaluate``: the uncontrolled reference beside the policy
(``--baseline``), checked against episodes computed by hand."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from evaluate_envs import HORIZON
from output_lines import one_line_with

from hpc_refer.config.modes import ActionBounds, ConfigError
from hpc_refer.envs.registry import SolverSpec, make_driver
from hpc_refer.evaluate import baseline_action, constant_action
from hpc_refer.evaluate import main as evaluate_main
from hpc_refer.loop.actor import Actor
from hpc_refer.run.main import main as run_main

LOW, HIGH = np.array([-1.0, 0.0, -np.inf]), np.array([1.0, 4.0, np.inf])


def decay_episode(a: float) -> tuple[float, float]:
    """Return and last state of one Decay episode under the constant action a."""
    x, ret = 1.0, 0.0
    for _ in range(HORIZON):
        x = 0.9 * x + a
        ret -= x * x
    return ret, x


def test_baseline_actions_and_their_errors():
    assert baseline_action("zero", LOW[:1], HIGH[:1]).tolist() == [0.0]
    assert baseline_action("0.5", LOW, HIGH).tolist() == [0.5, 0.5, 0.5]
    assert baseline_action("-1,4,7", LOW, HIGH).tolist() == [-1.0, 4.0, 7.0]
    with pytest.raises(ConfigError, match=r"--baseline '1,2' is invalid: allowed are 'zero', "
                                          r"one number or 3 comma-separated numbers"):
        baseline_action("1,2", LOW, HIGH)
    with pytest.raises(ConfigError, match="allowed are 'zero'"):
        baseline_action("off", LOW, HIGH)
    with pytest.raises(ConfigError, match=r"action\[1\] = -0.5 is outside the action box "
                                          r"\[0, 4\]"):
        baseline_action("-0.5", LOW, HIGH)


@pytest.mark.parametrize("bounds", [ActionBounds.CLIP, ActionBounds.TANH])
def test_the_constant_policy_maps_to_the_asked_action(bounds):
    """Through the actor's own mapping (clip or tanh onto the box), the mean of the
    reference policy is the asked action, on bounded and unbounded dimensions."""
    driver = make_driver(SolverSpec("evaluate_envs:Decay"), None)
    driver.low, driver.high = LOW, HIGH
    driver.act_dim = 3
    for asked in ([0.0, 0.0, 0.0], [0.25, 3.0, -7.0], [1.0, 4.0, 2.0]):
        action = np.array(asked)
        policy = constant_action(action, LOW, HIGH, bounds is ActionBounds.TANH, 1)
        actor = Actor(driver, policy, bounds, 0, 10)
        mean, std = policy.bind(policy.params).policy(np.zeros((2, 1)))
        assert mean.shape == (2, 3)  # one per row (the agents of a simulation)
        np.testing.assert_allclose(actor.to_env(mean), [action, action], rtol=1e-6, atol=1e-6)
        assert not std.any()


def test_evaluate_runs_the_uncontrolled_reference_beside_the_policy(in_tmp, capsys):
    assert run_main(["--env", "evaluate_envs:Decay", "--steps", "200", "--run-dir", "r",
                     "--replay.learn-start", "100", "--vracer.batch", "16",
                     "--vracer.hidden", "8", "--log-every", "100"]) == 0
    capsys.readouterr()
    assert evaluate_main(["r", "--episodes", "2", "--baseline", "0.5", "--out", "e.json"]) == 0
    out = capsys.readouterr().out
    stats = json.loads(Path("e.json").read_text())
    ret, x_end = decay_episode(0.5)
    base = stats["baseline"]
    assert base["action"] == [0.5] and base["episodes"] == 2
    np.testing.assert_allclose(base["episode_returns"], [ret, ret], rtol=1e-6)
    np.testing.assert_allclose(base["x_end_mean"], x_end, rtol=1e-6)
    assert stats["episodes"] == 2 and np.isfinite(stats["return_mean"])
    assert out.count("baseline episode ") == 2 and out.count("policy episode ") == 2
    assert f"baseline: mean return {ret:.6g}" in out and "x_end" in out
    assert "policy - baseline: mean return" in out
    zero, _ = decay_episode(0.0)
    assert evaluate_main(["r", "--episodes", "1", "--baseline", "zero", "--out", "z.json"]) == 0
    np.testing.assert_allclose(json.loads(Path("z.json").read_text())["baseline"]["return_mean"],
                               zero, rtol=1e-6)
    assert evaluate_main(["r", "--baseline", "2"]) == 2
    assert "--baseline '2': action[0] = 2 is outside" in capsys.readouterr().err
    config = Path("r/config.toml")
    config.write_text(config.read_text().replace('"evaluate_envs:Decay"',
                                                 '"evaluate_envs:CannotStart"'))
    assert evaluate_main(["r", "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "KeyError: 'inflow_profile'" in err
    line = one_line_with(err, "hpc_refer.evaluate: error:")  # after the traceback
    assert line.startswith("hpc_refer.evaluate: error: env 0 (CannotStart)")
    assert err.rindex("Traceback") < err.index("hpc_refer.evaluate: error:"), err
