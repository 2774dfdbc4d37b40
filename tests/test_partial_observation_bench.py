"""bench/partial_observation.py without training: the masked task is Pendulum-v1 without its
velocity, the settings' flags, and the windowed learning curve of the report."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[1] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))  # bench scripts import their siblings

import partial_observation as po  # noqa: E402
from po_envs import PendulumNoVelocity  # noqa: E402

from hpc_refer.envs.gym_env import GymEnv  # noqa: E402


def test_the_masked_task_is_pendulum_without_its_velocity():
    masked, full = PendulumNoVelocity(), GymEnv("Pendulum-v1")
    np.testing.assert_array_equal(masked.reset(4), full.reset(4)[:2])
    for a in (0.5, -2.0, 1.0):
        (s, r, status), (s_full, r_full, status_full) = (masked.step(np.array([a])),
                                                         full.step(np.array([a])))
        np.testing.assert_array_equal(s, s_full[:2])
        assert (r, status) == (r_full, status_full)
    masked.close()
    full.close()


def test_the_settings_differ_only_in_what_the_policy_sees():
    assert po.setting_flags("full", "sac") == ["--env", "Pendulum-v1"]
    assert po.setting_flags("ff", "sac") == ["--env", po.MASKED]
    assert po.setting_flags("stack", "sac")[-2:] == ["--env.history", "4"]
    assert po.setting_flags("gru", "ddpg")[-2:] == ["--ddpg.cell", "gru"]


def test_the_learning_curve_averages_the_episodes_of_each_window():
    steps = np.array([100, 200, 300, 700, 1000])
    returns = np.array([-10.0, -20.0, -30.0, -5.0, -1.0])
    out = po.windowed(steps, returns, np.array([0.0, 250.0, 500.0, 750.0, 1000.0, 1250.0]))
    np.testing.assert_array_equal(out[:4], [-15.0, -30.0, -5.0, -1.0])
    assert np.isnan(out[4])
