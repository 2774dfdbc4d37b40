"""KuramotoSivashinskyAgents: N = 4 agents are ks.py's KuramotoSivashinsky split per actuator,
a shift of the field by one segment permutes the agents, the mean of the segment energies is
the global energy, the per-agent rewards, the shapes for N = 4 and 8, the ``agents`` check and
the multi-rank trajectory (pytest-mpi), and a learning test: four agents sharing a policy
lower the energy.

Run the MPI part with ``mpirun -n 2 python -m pytest --with-mpi tests/test_ks_agents.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import hpc_refer.envs.ks as ks
from hpc_refer.config.modes import ConfigError
from hpc_refer.envs.interface import Status
from hpc_refer.envs.ks_agents import POINTS_PER_SEGMENT, KuramotoSivashinskyAgents
from hpc_refer.envs.registry import env_kind
from hpc_refer.evaluate import main as evaluate_main
from hpc_refer.run.main import main as run_main

SPEC = "hpc_refer.envs.ks_agents:KuramotoSivashinskyAgents"


def neighbourhoods(sensors: np.ndarray, agents: int) -> np.ndarray:
    """Agent j's observation built from all sensors in grid order: the 2 sensors of segment
    j - 1, then of j, then of j + 1 (periodic)."""
    own = sensors.reshape(agents, 2)
    return np.concatenate([np.roll(own, 1, axis=0), own, np.roll(own, -1, axis=0)], axis=1)


def segment_energies(u: np.ndarray, agents: int) -> np.ndarray:
    """E_j = sum of u^2 / 2 over segment j's points, divided by the points of one segment."""
    return (u.reshape(agents, -1) ** 2).sum(axis=1) / 2 / POINTS_PER_SEGMENT


def test_four_agents_are_ks_split_per_actuator():
    """agents = 4 has ks.py's grid: the same trajectory for the same seed and actions, the
    agents' own sensors are ks.py's observation, their mean reward is ks.py's reward."""
    single, multi = ks.KuramotoSivashinsky(), KuramotoSivashinskyAgents(agents=4)
    assert (multi.length, multi.n) == (ks.LENGTH, ks.N)
    rng = np.random.default_rng(0)
    for seed in (3, None):  # a seed, then the generator continued
        obs, states = single.reset(seed), multi.reset(seed)
        np.testing.assert_allclose(states, neighbourhoods(obs, 4), rtol=0, atol=1e-6)
        for t in range(ks.HORIZON):
            actions = rng.uniform(-1.2, 1.2, (4, 1))  # out of bounds: clipped to 1
            obs, reward, status = single.step(actions[:, 0])
            states, rewards, statuses = multi.step(actions)
            np.testing.assert_allclose(states, neighbourhoods(obs, 4), rtol=0, atol=1e-6)
            np.testing.assert_allclose(multi.u, single.u, rtol=0, atol=1e-10)
            assert np.mean(rewards) == pytest.approx(reward, rel=1e-9, abs=1e-9), t
            assert multi.energy() == pytest.approx(single.energy(), rel=1e-12)
            assert list(statuses) == [status] * 4
        assert status == Status.TRUNCATED
        assert multi.episode_values() == pytest.approx(single.episode_values(), rel=1e-12)
        np.testing.assert_allclose(multi.episode_field(), single.episode_field(), atol=1e-6)


@pytest.mark.parametrize("agents", [4, 8])
def test_the_energy_identity_and_the_per_agent_rewards(agents):
    """(1/N) sum_j E_j = E, E_j from the agent's own segment; r_j is the rate of decrease of
    E_j less ACT_COST a_j^2."""
    env = KuramotoSivashinskyAgents(agents=agents)
    env.reset(11)
    rng = np.random.default_rng(1)
    energies = [segment_energies(env.u, agents)]
    for _ in range(30):
        a = rng.uniform(-1, 1, (agents, 1))
        _, rewards, _ = env.step(a)
        energies.append(segment_energies(env.u, agents))
        np.testing.assert_allclose(env.segment_energies(), energies[-1], rtol=1e-12)
        assert np.mean(env.segment_energies()) == pytest.approx(env.energy(), rel=1e-12)
        assert np.mean(energies[-1]) == pytest.approx(np.mean(env.u**2) / 2, rel=1e-12)
        want = -(energies[-1] - energies[-2]) / ks.DT_CONTROL - ks.ACT_COST * a[:, 0] ** 2
        np.testing.assert_allclose(rewards, want, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("agents", [5, 8])
def test_a_shift_by_one_segment_permutes_the_agents(agents):
    """The field shifted by L / N (P grid points), driven by the actions shifted by one agent,
    gives agent j + 1 the observation and reward agent j has on the original field."""
    original, shifted = (KuramotoSivashinskyAgents(agents=agents) for _ in range(2))
    obs = original.reset(4)
    states = shifted.reset(5)
    assert not np.allclose(states, np.roll(obs, 1, axis=0), atol=1e-3)
    shifted.start(np.roll(original.u, POINTS_PER_SEGMENT))
    states = shifted._observe()
    np.testing.assert_allclose(states, np.roll(obs, 1, axis=0), rtol=0, atol=1e-6)
    rng = np.random.default_rng(2)
    for _ in range(40):
        a = rng.uniform(-1, 1, (agents, 1))
        obs, rewards, _ = original.step(a)
        states, shifted_rewards, _ = shifted.step(np.roll(a, 1, axis=0))
        np.testing.assert_allclose(states, np.roll(obs, 1, axis=0), rtol=0, atol=1e-5)
        np.testing.assert_allclose(shifted_rewards, np.roll(rewards, 1), rtol=0, atol=1e-8)
        np.testing.assert_allclose(shifted.u, np.roll(original.u, POINTS_PER_SEGMENT), atol=1e-8)
    assert not np.allclose(rewards, np.roll(rewards, 1), atol=1e-3), "agents differ"


@pytest.mark.parametrize("agents", [4, 8])
def test_shapes_and_the_episode(agents):
    env = KuramotoSivashinskyAgents(agents=agents)
    assert env.n_agents == agents and (env.obs_dim, env.act_dim) == (6, 1)
    np.testing.assert_array_equal(env.low, [-1.0])
    np.testing.assert_array_equal(env.high, [1.0])
    assert env.length == pytest.approx(22 * agents / 4) and env.n == 64 * agents // 4
    states = env.reset(7)
    assert states.shape == (agents, 6) and states.dtype == np.float32
    energies = []
    for t in range(ks.HORIZON):
        states, rewards, statuses = env.step(np.zeros((agents, 1)))
        energies.append(env.energy())
        assert states.shape == (agents, 6) and states.dtype == np.float32
        assert rewards.shape == (agents,) and rewards.dtype == np.float64
        assert statuses.shape == (agents,) and np.issubdtype(statuses.dtype, np.integer)
        want = Status.TRUNCATED if t == ks.HORIZON - 1 else Status.CONTINUE
        assert statuses.tolist() == [want] * agents
    assert 0.1 < np.mean(energies) < 1.5 and max(energies) < 3.0, energies
    assert env.episode_metrics == ("energy",)
    assert env.episode_values() == pytest.approx((np.mean(energies),), rel=1e-12)
    field = env.episode_field()
    assert field.shape == (ks.HORIZON + 1, env.n) and env.field_label == "u(x, t)"
    np.testing.assert_array_equal(states, neighbourhoods(field[-1][::8], agents))


@pytest.mark.parametrize("bad", [1, 0, -4, 2.5, True, "8"])
def test_a_bad_number_of_agents_is_a_config_error(bad):
    with pytest.raises(ConfigError) as err:
        KuramotoSivashinskyAgents(agents=bad)
    message = str(err.value)
    assert "\n" not in message and "env.agents" in message and ">= 2" in message, message
    assert "KuramotoSivashinskyAgents" in message


def test_agents_is_an_env_parameter():
    assert env_kind(SPEC).params(SPEC, {"agents": 8}) == {"agents": 8}
    with pytest.raises(ConfigError, match="agents"):
        env_kind(SPEC).params(SPEC, {"segments": 8})


def trajectory(team, seed: int, agents: int):
    env = KuramotoSivashinskyAgents(team, agents=agents)
    rng = np.random.default_rng(seed)
    observations, rewards = [env.reset(seed)], []
    for _ in range(ks.HORIZON):
        obs, reward, _ = env.step(rng.uniform(-1, 1, (agents, 1)))
        observations.append(obs)
        rewards.append(reward)
    return observations, rewards, env


@pytest.mark.mpi(min_size=2)
def test_multi_rank_trajectory_equals_the_single_rank_one():
    from mpi4py import MPI

    from hpc_refer.parallel.world import MpiTeam

    team = MpiTeam(MPI.COMM_WORLD)
    obs, rewards, env = trajectory(team, 5, 8)
    if team.rank == 0:
        ref_obs, ref_rewards, ref = trajectory(None, 5, 8)
        np.testing.assert_allclose(rewards, ref_rewards, rtol=0, atol=1e-10)
        for got, want in zip(obs, ref_obs, strict=True):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)  # float32
        np.testing.assert_allclose(env.episode_field(), ref.episode_field(), atol=1e-6)
    else:
        assert all(o.shape == (0, 6) for o in obs)
        assert env.history == []
    np.testing.assert_allclose(np.mean(env.segment_energies()), env.energy(), rtol=1e-12)


@pytest.mark.mpi_skip
def test_four_agents_sharing_a_policy_lower_the_energy(in_tmp):
    """16,000 transitions (4,000 simulation steps) of KSAgents with 4 agents, V-RACER +
    ReF-ER with configs/ks.toml, in one process; ``evaluate`` runs the mean policy and the
    uncontrolled flow from the same 3 initial conditions: <E> at least 10 % lower (measured:
    0.56 against 0.82, x0.68)."""
    config = Path(__file__).resolve().parents[1] / "configs" / "ks.toml"
    assert run_main(["--config", str(config), "--env", "KSAgents", "--env.agents", "4",
                     "--steps", "16000", "--log-every", "4000", "--seed", "0",
                     "--run-dir", "r"]) == 0
    assert evaluate_main(["r", "--episodes", "3", "--baseline", "zero", "--out", "ev.json"]) == 0
    stats = json.loads(Path("ev.json").read_text())
    assert stats["agents"] == 4 and stats["episodes"] == 12
    trained, uncontrolled = stats["energy_mean"], stats["baseline"]["energy_mean"]
    assert trained < 0.9 * uncontrolled, (trained, uncontrolled)
