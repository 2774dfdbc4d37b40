"""bench/partial_observation.py without training: the masked task is Pendulum-v1 without its
velocity, the memory task scores the distance to its cue, the settings' flags, and the
windowed learning curve of the report (the staleness probe runs in the smoke run)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[1] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))  # bench scripts import their siblings

import partial_observation as po  # noqa: E402
from po_envs import CueRecall, CueShown, PendulumNoVelocity  # noqa: E402

from hpc_refer.envs.gym_env import GymEnv  # noqa: E402
from hpc_refer.envs.interface import Status  # noqa: E402


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


def episode(env: CueRecall, policy, seed: int) -> tuple[list[np.ndarray], float, float]:
    """One episode of ``policy`` (states seen so far -> action): the states, the return and
    the cue."""
    states = [env.reset(seed)]
    total, status = 0.0, Status.CONTINUE
    while status is Status.CONTINUE:
        state, reward, status = env.step(np.array([policy(states)]))
        total += reward
        states.append(state)
    return states, total, env.cue


def test_the_cue_is_seen_once_and_asked_for_after_twelve_steps():
    """The cue is in the first state only (CueShown: in every state); remembering it scores
    0, the memoryless best guess 0 scores -D c^2, and a stack of 16 states (the cue seen at
    steps 12-15 of the 12 answers at 12-23) -8 c^2."""
    env = CueRecall()
    states, remembered, cue = episode(env, lambda seen: seen[0][0], seed=3)
    assert len(states) == 2 * CueRecall.delay + 1 == 25
    assert cue != 0 and states[0][0] == cue and all(s[0] == 0 for s in states[1:])
    np.testing.assert_allclose([s[1] for s in states[:-1]], np.arange(24) / 24)
    assert remembered == 0
    _, guessed, cue = episode(env, lambda seen: 0.0, seed=3)
    np.testing.assert_allclose(guessed, -12 * cue**2)
    _, stacked, cue = episode(env, lambda seen: seen[-16:][0][0], seed=3)
    np.testing.assert_allclose(stacked, -8 * cue**2)
    shown = CueShown()
    states, total, cue = episode(shown, lambda seen: seen[-1][0], seed=3)
    assert all(s[0] == cue for s in states) and total == 0


def test_the_settings_differ_only_in_what_the_policy_sees():
    assert po.setting_flags("full", "sac") == ["--env", "Pendulum-v1"]
    assert po.setting_flags("ff", "sac") == ["--env", po.MASKED]
    assert po.setting_flags("stack", "sac")[-2:] == ["--env.history", "4"]
    assert po.setting_flags("gru", "ddpg")[-2:] == ["--ddpg.cell", "gru"]
    assert po.setting_flags("full", "sac", "cue") == ["--env", "po_envs:CueShown"]
    assert po.setting_flags("stack16", "sac", "cue") == ["--env", "po_envs:CueRecall",
                                                         "--env.history", "16"]
    assert po.setting_flags("gru-b8", "sac", "cue") == ["--env", "po_envs:CueRecall",
                                                        "--sac.cell", "gru",
                                                        "--sac.burn-in", "8"]


def test_the_learning_curve_averages_the_episodes_of_each_window():
    steps = np.array([100, 200, 300, 700, 1000])
    returns = np.array([-10.0, -20.0, -30.0, -5.0, -1.0])
    out = po.windowed(steps, returns, np.array([0.0, 250.0, 500.0, 750.0, 1000.0, 1250.0]))
    np.testing.assert_array_equal(out[:4], [-15.0, -30.0, -5.0, -1.0])
    assert np.isnan(out[4])
