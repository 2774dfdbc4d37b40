"""Stacked observations (``--env.history k``, ``--env.history_actions``): the policy, the
replay, checkpoints and evaluation see the last k states (and actions), stacked on the
actor's rank; the solver never sees the keys."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from test_agents import SMALL, run_actor
from test_restart import assert_resumes_straight

from hpc_refer.algorithms.vracer import GaussianPolicyValueNet
from hpc_refer.config.modes import ActionBounds, ConfigError
from hpc_refer.config.tables import NetworkShape
from hpc_refer.envs.history import History, ObservationStack
from hpc_refer.envs.registry import SolverSpec, env_kind, make_driver
from hpc_refer.evaluate import main as evaluate_main
from hpc_refer.loop.actor import Actor
from hpc_refer.loop.policy_file import load_policy


def test_the_stack_holds_the_last_states_and_actions_newest_first():
    stack = ObservationStack(History(3, actions=True), obs_dim=2, act_dim=1)
    s0, s1, s2 = np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.array([5.0, 6.0])
    np.testing.assert_array_equal(stack.reset(s0), [1, 2, 1, 2, 1, 2, 0, 0, 0])
    np.testing.assert_array_equal(stack.push(s1, np.array([0.5])),
                                  [3, 4, 1, 2, 1, 2, 0.5, 0, 0])
    np.testing.assert_array_equal(stack.push(s2, np.array([-0.25])),
                                  [5, 6, 3, 4, 1, 2, -0.25, 0.5, 0])
    np.testing.assert_array_equal(stack.reset(s2), [5, 6, 5, 6, 5, 6, 0, 0, 0])


def test_each_agent_has_its_own_stack():
    stack = ObservationStack(History(2), obs_dim=1, act_dim=1, agents=2)
    np.testing.assert_array_equal(stack.reset(np.array([[1.0], [2.0]])), [[1, 1], [2, 2]])
    np.testing.assert_array_equal(stack.push(np.array([[3.0], [4.0]]), np.zeros((2, 1))),
                                  [[3, 1], [4, 2]])


@pytest.mark.parametrize(("params", "named"), [
    ({"history": 0}, "env.history = 0"), ({"history": 2.5}, "env.history = 2.5"),
    ({"history": True}, "env.history = True"),
    ({"history_actions": 1}, "env.history_actions = 1"),
])
def test_a_bad_history_is_one_line_naming_the_key(params, named):
    with pytest.raises(ConfigError, match=f"^{re.escape(named)} is invalid: allowed are"):
        env_kind("history_envs:Walk").params("history_envs:Walk", params)


def test_the_keys_never_reach_the_solver_and_are_reserved_in_its_signature():
    params = env_kind("history_envs:Walk").params("history_envs:Walk", {"horizon": 5, "history": 3,
                                                 "history_actions": True})
    assert params == {"horizon": 5, "history": 3, "history_actions": True}
    spec = SolverSpec("history_envs:Walk", params={"horizon": 5}, history=History(3, True))
    assert env_kind(spec.env_id).factory(spec)(None).horizon == 5  # built without the history keys
    assert env_kind(spec.env_id).dims(spec) == (9, 1)
    with pytest.raises(ConfigError, match=r"'history', which is reserved: env\.history"):
        env_kind("history_envs:Remembers").params("history_envs:Remembers", {})


def test_a_gymnasium_environment_is_stacked_too():
    assert env_kind("Pendulum-v1").dims(SolverSpec("Pendulum-v1", history=History(4))) == (12, 1)


def walk_actor(history: History, chunk_len: int = 5, seed: int = 3) -> Actor:
    env = make_driver(SolverSpec("history_envs:Walk", history=history), None)
    torch.manual_seed(0)
    net = GaussianPolicyValueNet(env.obs_dim, env.act_dim, NetworkShape((8,)), sigma_init=0.5)
    return Actor(env, net.program(), ActionBounds.CLIP, seed=seed, chunk_len=chunk_len)


def chunks(actor: Actor, n: int) -> list:
    out = []
    while len(out) < n:
        chunk, _ = actor.step()
        if chunk is not None:
            out.append(chunk)
    return out


def test_the_stored_states_are_the_stacks_the_policy_saw():
    """Every stored row is [s_t, s_{t-1}, s_{t-2}, a_{t-1}, a_{t-2}, a_{t-3}] of the episode's
    own states and actions (s_0 repeated and zero actions before its start)."""
    actor = walk_actor(History(3, actions=True))
    episode = [c for c in chunks(actor, 3)]  # horizon 12, chunks of 5: one whole episode
    obs = np.concatenate([c.obs[:len(c.act)] for c in episode])
    acts = np.concatenate([actor.to_env(c.act) for c in episode]).astype(np.float32)
    assert obs.shape == (12, 9)
    states = obs[:, :2]
    np.testing.assert_array_equal(states[:, 0], (np.arange(12) / 12).astype(np.float32))
    for t in range(12):
        past = [states[max(t - j, 0)] for j in range(3)]
        actions = [acts[t - j] if t - j >= 0 else np.zeros(1, np.float32)
                   for j in range(1, 4)]
        np.testing.assert_array_equal(obs[t], np.concatenate(past + actions))
    final = episode[-1].obs[-1]  # the truncated chunk's final state is stacked as well
    np.testing.assert_array_equal(final[2:4], states[11])
    np.testing.assert_array_equal(final[6], acts[11, 0])


def test_agents_stack_their_own_states():
    env = make_driver(SolverSpec("agents_envs:Points", params={"agents": 3},
                                 history=History(2)), None)
    net = GaussianPolicyValueNet(env.obs_dim, env.act_dim, NetworkShape((8,)), sigma_init=0.5)
    actor = Actor(env, net.program(), ActionBounds.CLIP, seed=3, chunk_len=6)
    assert env.obs_dim == 4
    sent = run_actor(actor, 6)
    assert {chunk.agent for chunk, _ in sent} == {0, 1, 2}
    for chunk, _ in sent:  # each chunk is one agent's consecutive steps of one episode
        np.testing.assert_array_equal(chunk.obs[1:, 2:], chunk.obs[:-1, :2])


def test_the_actor_continues_bit_for_bit_with_its_stack():
    straight = walk_actor(History(3, actions=True))
    chunks(straight, 2)
    straight.step()  # mid-chunk, mid-episode: the stack holds a past
    tree = straight.checkpoint_state()
    rest = chunks(straight, 6)
    resumed = walk_actor(History(3, actions=True), seed=9)
    chunks(resumed, 1)
    resumed.restore_state(tree)
    again = chunks(resumed, 6)
    for a, b in zip(rest, again, strict=True):
        for name in ("obs", "act", "rew", "mu_mean", "mu_std"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_a_stacked_run_restarts_bit_for_bit_and_evaluates(in_tmp):
    """Episodes of 50 steps in chunks of 40: the checkpoint after 440 steps is mid-episode,
    where the stack holds a past that the resumed run must continue from."""
    common = ["--env", "history_envs:Walk", "--env.history", "3", "--env.history_actions",
              "true", "--env.horizon", "50", "--seed", "1", "--checkpoint-every", "430",
              *SMALL]
    straight = assert_resumes_straight(in_tmp, common, 800, "step-000000000440")
    assert load_policy(straight / "policy.h5").policy.body.normalizer.mean.numel() == 9
    assert evaluate_main([str(straight), "--episodes", "2", "--out", "ev.json"]) == 0
    stats = json.loads(Path("ev.json").read_text())
    assert stats["episodes"] == 2 and stats["length_mean"] == 50
