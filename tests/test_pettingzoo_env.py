"""A PettingZoo ParallelEnv as an hpc_refer environment (``--env pettingzoo:module:factory``,
:mod:`hpc_refer.envs.pettingzoo_env`): the adapter's (n_agents, ...) arrays in
``possible_agents`` order, agents that end at different steps, the faults it names (an
unknown agent, one that comes back), the homogeneous spaces it demands, and the id through
its kind (:mod:`hpc_refer.envs.kinds.pettingzoo_factory`: its sizes and factory, with
``[env]`` keyword arguments, and the team a factory that names ``team`` receives).

:class:`PointMasses` is a small, real continuous-action ParallelEnv (point masses pushed
toward their targets; agent i's target is i + 1 full-speed steps away, so the agents end at
different steps), checked by PettingZoo's own ``parallel_api_test``. It is loaded by id as
``pettingzoo:test_pettingzoo_env:point_masses``.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
from mpi_launch import mpi_env, mpirun_exe
from pettingzoo import ParallelEnv
from pettingzoo.test import parallel_api_test
from pettingzoo.utils import parallel_to_aec

from hpc_refer.config.modes import ConfigError
from hpc_refer.envs.interface import SolverFault, Status, Team
from hpc_refer.envs.pettingzoo_env import PettingZooEnv
from hpc_refer.envs.registry import SolverSpec, env_kind

ID = "pettingzoo:test_pettingzoo_env:point_masses"
C, T, R = Status.CONTINUE, Status.TERMINAL, Status.TRUNCATED


class PointMasses(ParallelEnv):
    """``n_agents`` point masses in the plane, each pushed toward its own target: the
    action (2 values in [-1, 1]) is a velocity times ``speed``; the observation is the
    position and the target (4 values), the reward minus the distance left. Agent i starts at
    the origin with its target (i + 1) * speed away in a direction drawn from the seed, and
    terminates once within ``radius`` of it; every agent still moving is truncated after
    ``max_cycles`` steps."""

    metadata: ClassVar[dict[str, Any]] = {"name": "point_masses_v0", "render_modes": []}

    def __init__(self, n_agents: int = 3, max_cycles: int = 25, speed: float = 0.5,
                 radius: float = 0.1) -> None:
        self.possible_agents = [f"agent_{i}" for i in range(n_agents)]
        self.render_mode = None
        self.agents: list[str] = []
        self.max_cycles, self.speed, self.radius = max_cycles, speed, radius
        self._obs = {a: gym.spaces.Box(-100.0, 100.0, (4,), np.float32)
                     for a in self.possible_agents}
        self._act = {a: gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
                     for a in self.possible_agents}

    def observation_space(self, agent: str) -> gym.spaces.Space:
        return self._obs[agent]

    def action_space(self, agent: str) -> gym.spaces.Space:
        return self._act[agent]

    def _observe(self, agent: str) -> np.ndarray:
        return np.concatenate([self.pos[agent], self.target[agent]]).astype(np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.cycles = 0
        self.pos = {a: np.zeros(2) for a in self.agents}
        self.target = {}
        for i, a in enumerate(self.agents):
            angle = rng.uniform(0, 2 * np.pi)
            self.target[a] = (i + 1) * self.speed * np.array([np.cos(angle), np.sin(angle)])
        return ({a: self._observe(a) for a in self.agents}, {a: {} for a in self.agents})

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        if set(actions) != set(self.agents):
            raise ValueError(f"actions for {sorted(actions)}, expected {self.agents}")
        self.cycles += 1
        moves = self._moves(actions)
        obs, rewards, terms, truncs = {}, {}, {}, {}
        for a in self.agents:
            self.pos[a] = self.pos[a] + moves[a]
            dist = float(np.linalg.norm(self.target[a] - self.pos[a]))
            obs[a], rewards[a] = self._observe(a), -dist
            terms[a] = dist < self.radius
            truncs[a] = self.cycles >= self.max_cycles
        infos = {a: {} for a in self.agents}
        self.agents = [a for a in self.agents if not (terms[a] or truncs[a])]
        return obs, rewards, terms, truncs, infos

    def _moves(self, actions: dict) -> dict:
        """Each active agent's displacement: speed times its action clipped to [-1, 1]."""
        return {a: self.speed * np.clip(actions[a], -1.0, 1.0) for a in self.agents}


def point_masses(**params: Any) -> PointMasses:
    """The factory the id names."""
    return PointMasses(**params)


class SplitPointMasses(PointMasses):
    """PointMasses on a team of K ranks (``team``; None: one rank moves them all): rank r moves
    the agents i with i mod K = r, the moves are summed over the team (every rank then holds
    every position; a sum with zeros is exact, so the trajectory is PointMasses' to the
    bit), and team rank 0 alone answers (the others return empty dicts, which the adapter
    does not read there). Every rank keeps ``agents``."""

    def __init__(self, team: Team | None = None, **params: Any) -> None:
        super().__init__(**params)
        self.team = team

    def _answers(self) -> bool:
        return self.team is None or self.team.rank == 0

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        obs, infos = super().reset(seed, options)  # every rank draws the targets from the seed
        return (obs, infos) if self._answers() else ({}, {})

    def _moves(self, actions: dict) -> dict:
        """Rank r computes the moves of its agents, the team sums them."""
        size, rank = (1, 0) if self.team is None else (self.team.size, self.team.rank)
        moves = np.zeros((len(self.possible_agents), 2))
        for i, a in enumerate(self.possible_agents):
            if a in self.agents and i % size == rank:
                moves[i] = self.speed * np.clip(actions[a], -1.0, 1.0)
        if self.team is not None:
            moves = self.team.sum_array(moves.reshape(-1)).reshape(moves.shape)
        return {a: moves[i] for i, a in enumerate(self.possible_agents) if a in self.agents}

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        answer = super().step(actions)
        return answer if self._answers() else ({}, {}, {}, {}, {})


def split_point_masses(team: Team | None = None, n_agents: int = 3,
                       max_cycles: int = 25) -> SplitPointMasses:
    """A factory that names ``team``: its ParallelEnv may span the ranks of a team."""
    return SplitPointMasses(team, n_agents=n_agents, max_cycles=max_cycles)


TEAM_ID = "pettingzoo:test_pettingzoo_env:split_point_masses"


def adapter(**params: Any) -> PettingZooEnv:
    """The adapter of :data:`ID` with ``params`` as its ``[env]``, built by its kind's
    factory without a team (as the sizes are learnt)."""
    return env_kind(ID).factory(SolverSpec(ID, params=params))(None)


def toward_targets(states: np.ndarray) -> np.ndarray:
    """Every agent's full-speed action straight at its target (rows of states)."""
    delta = states[:, 2:] - states[:, :2]
    norm = np.linalg.norm(delta, axis=1, keepdims=True)
    return np.where(norm > 0, delta / np.maximum(norm, 1e-12), 0.0)


def test_point_masses_is_a_conforming_parallel_env():
    parallel_api_test(PointMasses(), num_cycles=30)
    parallel_to_aec(PointMasses()).reset(seed=1)  # converts as a ParallelEnv does


def test_shapes_dtypes_and_possible_agents_order():
    env = adapter(n_agents=4)
    assert (env.n_agents, env.obs_dim, env.act_dim) == (4, 4, 2)
    np.testing.assert_array_equal(env.low, [-1.0, -1.0])
    np.testing.assert_array_equal(env.high, [1.0, 1.0])
    assert env.low.dtype == env.high.dtype == np.float64
    states = env.reset(seed=3)
    assert states.shape == (4, 4) and states.dtype == np.float32
    for i, agent in enumerate(env.possible_agents):  # row i is agent_i's target
        assert agent == f"agent_{i}"
        np.testing.assert_allclose(np.linalg.norm(states[i, 2:]), (i + 1) * 0.5, rtol=1e-6)
    # one agent's action: row 2 moves agent_2 only
    actions = np.zeros((4, 2))
    actions[2] = [1.0, -0.5]
    states, rewards, statuses = env.step(actions)
    assert states.shape == (4, 4) and rewards.shape == (4,) and statuses.shape == (4,)
    assert rewards.dtype == np.float64 and np.issubdtype(statuses.dtype, np.integer)
    np.testing.assert_allclose(states[2, :2], [0.5, -0.25])
    np.testing.assert_array_equal(states[[0, 1, 3], :2], 0.0)
    np.testing.assert_allclose(rewards, -np.linalg.norm(states[:, 2:] - states[:, :2], axis=1),
                               rtol=1e-6)
    assert list(statuses) == [C, C, C, C]
    env.close()


def test_agents_end_at_different_steps_and_their_rows_stay_put():
    env = adapter(n_agents=3, max_cycles=10)
    states = env.reset(seed=0)
    seen, rows = [], []
    for _ in range(3):
        states, rewards, statuses = env.step(toward_targets(states))
        seen.append(list(statuses))
        rows.append((states.copy(), rewards.copy()))
    assert seen == [[T, C, C], [T, T, C], [T, T, T]]  # agent i ends at step i + 1
    for step, (states, rewards) in enumerate(rows):
        for i in range(step):  # agent i ended at step i: its last state, reward 0 since
            np.testing.assert_array_equal(states[i], rows[i][0][i])
            assert rewards[i] == 0.0
    assert np.all([rows[k][1][k] > -0.1 for k in range(3)])  # at its target when it ended
    with pytest.raises(RuntimeError, match="every agent ended"):
        env.step(np.zeros((3, 2)))
    assert env.reset(seed=0).shape == (3, 4)  # reset starts them all again
    _, _, statuses = env.step(np.zeros((3, 2)))
    assert list(statuses) == [C, C, C]


def test_truncation_and_terminal_wins_over_truncation():
    env = adapter(n_agents=3, max_cycles=2)
    states = env.reset(seed=5)
    actions = toward_targets(states)
    actions[2] = 0.0  # agent_0 reaches its target at step 1; agent_2 stands still
    states, _, statuses = env.step(actions)
    assert list(statuses) == [T, C, C]
    actions = toward_targets(states)
    actions[2] = 0.0  # agent_1 arrives at step 2, the time limit: both flags, TERMINAL
    _, _, statuses = env.step(actions)
    assert list(statuses) == [T, T, R]


class Intruder(PointMasses):
    """Answers its second step with an observation of an agent it never declared."""

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        answer = super().step(actions)
        if self.cycles == 2:
            answer[0]["intruder"] = np.zeros(4, np.float32)
        return answer


class Newcomer(PointMasses):
    """An agent it never declared joins env.agents after the first step."""

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        answer = super().step(actions)
        self.agents.append("agent_9")
        return answer


class LateComer(PointMasses):
    """agent_2 of possible_agents is missing after reset: from env.agents, or (``no_obs``)
    from the observations."""

    no_obs = False

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        obs, infos = super().reset(seed, options)
        if self.no_obs:
            del obs["agent_2"]
        else:
            self.agents.remove("agent_2")
        return obs, infos


class Revenant(PointMasses):
    """Puts agent_0 back into env.agents after it terminated."""

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        answer = super().step(actions)
        if "agent_0" not in self.agents:
            self.agents.insert(0, "agent_0")
        return answer


def adapter_of(env_class: type, monkeypatch: pytest.MonkeyPatch, **params: Any) -> PettingZooEnv:
    """The adapter of ``env_class`` loaded by id (the module's factory replaced)."""
    monkeypatch.setattr(__import__(__name__), "point_masses", env_class)
    return adapter(**params)


@pytest.mark.parametrize(("env_class", "n_agents", "expected"), [
    (Intruder, 4, "step: observation for unknown agent 'intruder', allowed: agent_0..agent_3"),
    (Newcomer, 3, "step: env.agents holds unknown agent 'agent_9', allowed: agent_0, agent_1, "
                  "agent_2"),
])
def test_an_unknown_agent_is_a_fault_naming_the_field(monkeypatch, env_class, n_agents,
                                                      expected):
    env = adapter_of(env_class, monkeypatch, n_agents=n_agents)
    env.reset(seed=0)
    if env_class is Intruder:
        env.step(np.zeros((n_agents, 2)))
    with pytest.raises(SolverFault) as err:
        env.step(np.zeros((n_agents, 2)))
    assert str(err.value) == expected


@pytest.mark.parametrize("no_obs", [False, True])
def test_an_agent_that_is_absent_at_reset_or_comes_back_is_a_fault(monkeypatch, no_obs):
    env = adapter_of(type("Late", (LateComer,), {"no_obs": no_obs}), monkeypatch)
    with pytest.raises(SolverFault, match=r"^reset: agent 'agent_2' of possible_agents is not "
                                          r"active after reset"):
        env.reset(seed=0)
    env = adapter_of(Revenant, monkeypatch)
    states = env.reset(seed=0)
    env.step(toward_targets(states))  # agent_0 terminates, and is put back
    with pytest.raises(SolverFault, match=r"^step: agent 'agent_0' is in env.agents after it "
                                          r"ended"):
        env.step(np.zeros((3, 2)))


class Heterogeneous(PointMasses):
    """One agent (``odd``) with another ``field`` space."""

    odd, field, space = "agent_2", "action", gym.spaces.Box(-1.0, 1.0, (3,), np.float32)

    def action_space(self, agent: str) -> gym.spaces.Space:
        odd = agent == self.odd and self.field == "action"
        return self.space if odd else super().action_space(agent)

    def observation_space(self, agent: str) -> gym.spaces.Space:
        odd = agent == self.odd and self.field == "observation"
        return self.space if odd else super().observation_space(agent)


@pytest.mark.parametrize(("odd", "field", "space", "expected"), [
    ("agent_2", "action", gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
     "agent 'agent_2' action_space has shape (3,), expected (2,) (that of agent 'agent_0'): "
     "agents must be homogeneous"),
    ("agent_1", "action", gym.spaces.Box(-1.0, 2.0, (2,), np.float32),
     "agent 'agent_1' action_space.high[0] = 2.0, expected 1.0 (that of agent 'agent_0')"),
    ("agent_1", "observation", gym.spaces.Box(-100.0, 100.0, (5,), np.float32),
     "agent 'agent_1' observation_space has shape (5,), expected (4,)"),
    ("agent_2", "observation", gym.spaces.Discrete(4),
     "agent 'agent_2' has a Discrete observation_space, expected a Box space"),
])
def test_heterogeneous_spaces_are_refused_naming_the_agent(monkeypatch, odd, field, space,
                                                            expected):
    kind = type("Odd", (Heterogeneous,), {"odd": odd, "field": field, "space": space})
    with pytest.raises(ConfigError) as err:
        adapter_of(kind, monkeypatch)
    message = str(err.value)
    assert message.startswith(f"run.env = {ID!r}: ") and expected in message
    assert "\n" not in message


@pytest.mark.parametrize(("space", "expected"), [
    (gym.spaces.Discrete(5), "agent 'agent_0' has a Discrete action_space, expected a "
                             "continuous (Box) space"),
    (gym.spaces.Box(-3, 3, (2,), np.int64), "agent 'agent_0' action_space has dtype int64, "
                                            "expected a continuous (floating-point) Box"),
])
def test_a_discrete_action_space_is_refused(monkeypatch, space, expected):
    kind = type("Odd", (Heterogeneous,), {"odd": "agent_0", "field": "action", "space": space})
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        adapter_of(kind, monkeypatch)


def test_the_id_through_its_kind_dims_and_factory_with_env_params():
    spec = SolverSpec(ID, params={"n_agents": 5, "max_cycles": 4, "speed": 0.25})
    kind = env_kind(ID)
    assert kind.dims(spec) == (4, 2)
    env = kind.factory(spec, index=1)(None)
    assert isinstance(env, PettingZooEnv) and env.n_agents == 5
    assert isinstance(env.env, PointMasses) and env.env.speed == 0.25
    env.reset(seed=0)
    for _ in range(4):
        _, _, statuses = env.step(np.zeros((5, 2)))
    assert list(statuses) == [R] * 5  # max_cycles = 4 from [env]
    env.close()


class NotParallel:
    """Something a factory might return by mistake."""


def aec_factory() -> Any:
    return parallel_to_aec(PointMasses())


@pytest.mark.parametrize(("env_id", "params", "expected"), [
    ("pettingzoo:no_such_module_xyz:make", {},
     "module 'no_such_module_xyz' cannot be imported"),
    ("pettingzoo:test_pettingzoo_env:no_such_factory", {},
     "module 'test_pettingzoo_env' has no 'no_such_factory'"),
    ("pettingzoo:test_pettingzoo_env:ID", {}, "test_pettingzoo_env.ID is a str, not callable"),
    ("pettingzoo:test_pettingzoo_env", {}, "is invalid: allowed is pettingzoo:package.module:"
                                           "factory"),
    ("pettingzoo:test_pettingzoo_env:NotParallel", {},
     "NotParallel() returned a NotParallel, expected a pettingzoo ParallelEnv"),
    ("pettingzoo:test_pettingzoo_env:aec_factory", {},
     "expected a pettingzoo ParallelEnv (pettingzoo.utils.aec_to_parallel converts an AECEnv)"),
    (ID, {"n_agent": 2}, "[env] {'n_agent': 2} is refused by run.env = "
                         "'pettingzoo:test_pettingzoo_env:point_masses'"),
    ("pettingzoo:test_pettingzoo_env:PointMasses", {"n_agent": 2},
     "its parameters are n_agents, max_cycles, speed, radius"),
])
def test_bad_ids_are_one_line_config_errors(env_id, params, expected):
    with pytest.raises(ConfigError) as err:
        env_kind(env_id).dims(SolverSpec(env_id, params=params))
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_a_factory_that_names_no_team_runs_on_one_rank():
    with pytest.raises(ConfigError, match=r"is a PettingZoo environment whose factory names no "
                                          r"team parameter, and runs on one rank: "
                                          r"run.ranks_per_env = 2 is invalid, allowed is 1"):
        env_kind(ID).dims(SolverSpec(ID, ranks_per_env=2))


def test_a_parallel_env_trains_end_to_end_with_one_episode_per_agent(in_tmp):
    """``--env pettingzoo:...`` through the whole run: each agent's episodes in
    episodes.csv with its index, its length at most ``max_cycles``."""
    from hpc_refer.run.main import main as run_main

    assert run_main(["--env", ID, "--env.n_agents", "2", "--env.max_cycles", "12",
                     "--steps", "600", "--replay.size", "1000", "--replay.learn-start", "200",
                     "--vracer.batch", "16", "--vracer.hidden", "8,8", "--run-dir", "r"]) == 0
    with (in_tmp / "r" / "episodes.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {r["agent"] for r in rows} == {"0", "1"}
    assert all(1 <= int(r["length"]) <= 12 for r in rows)


def test_a_team_factory_receives_the_team_and_is_its_own_on_one_rank():
    """The factory that names ``team`` gets None without a team, and the adapter reads its
    answers there; its one-rank trajectory is PointMasses' (the same seed, the same moves)."""
    split = env_kind(TEAM_ID).factory(SolverSpec(TEAM_ID, params={"n_agents": 3}))(None)
    plain = adapter(n_agents=3)
    assert split.env.team is None and split.state_rank == 0
    states = split.reset(seed=7)
    np.testing.assert_array_equal(states, plain.reset(seed=7))
    for _ in range(3):
        actions = toward_targets(states)
        got = split.step(actions)
        for a, b in zip(got, plain.step(actions), strict=True):
            np.testing.assert_array_equal(a, b)
        states = got[0]


@pytest.mark.mpi(min_size=2)
def test_a_parallel_env_spans_a_team_as_a_python_solver_does():
    """``split_point_masses`` on a team of every rank of the world (2, 3 or 4): team rank 0
    drives it through the driver its kind starts, the other ranks follow in ``serve_team``
    with the kind's factory (each moving its own agents, answering empty dicts); the states,
    rewards and statuses are those of the one-rank environment, bit for bit, for two
    episodes."""
    from mpi4py import MPI

    from hpc_refer.envs.driver import serve_team
    from hpc_refer.envs.registry import make_driver
    from hpc_refer.parallel.world import MpiTeam

    team = MpiTeam(MPI.COMM_WORLD)
    kind = env_kind(TEAM_ID)
    spec = SolverSpec(TEAM_ID, ranks_per_env=team.size, params={"n_agents": 5, "max_cycles": 6})
    assert kind.dims(spec) == (4, 2)  # on every rank, without a team
    if team.rank != 0:
        serve_team(kind.factory(spec), team)
        return
    driver = make_driver(spec, team)
    alone = kind.factory(spec._replace(ranks_per_env=1))(None)
    assert driver.n_agents == 5 and driver.env.env.team is team  # the factory's team
    steps = 0
    for seed in (3, 4):
        states = driver.reset(seed)
        np.testing.assert_array_equal(states, alone.reset(seed))
        statuses = np.full(5, C)
        while (statuses == C).any():
            actions = 0.7 * toward_targets(states)
            states, rewards, statuses = driver.step_agents(actions)
            for got, want in zip((states, rewards, statuses), alone.step(actions), strict=True):
                np.testing.assert_array_equal(got, want)
            steps += 1
    assert steps >= 4 and {*statuses} <= {T, R}
    driver.close()
    alone.close()


@pytest.mark.mpi_skip
def test_a_parallel_env_on_a_team_of_two_trains_checkpoints_resumes_and_evaluates(in_tmp):
    """``mpirun -n 3``: one learner and one team of 2 ranks running ``split_point_masses`` (the
    team's rank 1 moves every other agent), 300 steps and a checkpoint, then resumed to 600;
    each agent's episodes in episodes.csv; then its policy evaluated by one team of 2."""
    flags = ["--env", TEAM_ID, "--ranks-per-env", "2", "--env.n_agents", "3",
             "--env.max_cycles", "12", "--replay.size", "1000", "--replay.learn-start", "200",
             "--vracer.batch", "16", "--vracer.hidden", "8,8", "--log-every", "100",
             "--chunk-len", "50", "--compile", "off"]
    head = [mpirun_exe(), "-n", "3", sys.executable, "-m", "hpc_refer.run"]
    for args in ([*flags, "--steps", "300", "--run-dir", "r"],
                 ["--restart", "r", "--steps", "600"]):
        done = subprocess.run([*head, *args], capture_output=True, text=True, timeout=300,
                              env=mpi_env(), check=False)
        assert done.returncode == 0, done.stderr[-3000:]
    run = in_tmp / "r"
    assert (run / "state.txt").read_text().strip() == "finished"
    assert "resumed" in (run / "log.txt").read_text()
    assert sorted(p.name for p in (run / "checkpoints").glob("step-*"))[-1].endswith("600")
    with (run / "episodes.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {r["agent"] for r in rows} == {"0", "1", "2"}
    assert all(1 <= int(r["length"]) <= 12 for r in rows)
    assert max(int(r["env_step"]) for r in rows) > 300  # episodes after the restart
    evaluate = [mpirun_exe(), "-n", "2", sys.executable, "-m", "hpc_refer.evaluate", "r",
                "--episodes", "2"]
    done = subprocess.run(evaluate, capture_output=True, text=True, timeout=300,
                          env=mpi_env(), check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    stats = json.loads((run / "evaluation.json").read_text())
    assert stats["agents"] == 3 and stats["episodes"] == 6 and stats["env_step"] == 600


def test_a_parallel_env_of_one_agent_answers_in_the_single_agent_form(in_tmp):
    """n_agents = 1 is the solver interface's single-agent form: a state (obs_dim,), a float
    reward and a Status; it trains end to end as a one-agent environment."""
    env = adapter(n_agents=1, max_cycles=3)
    state = env.reset(seed=0)
    assert state.shape == (env.obs_dim,) and state.dtype == np.float32
    nxt, reward, status = env.step(np.zeros(env.act_dim))
    assert nxt.shape == (env.obs_dim,) and isinstance(reward, float)
    assert status is Status.CONTINUE
    from hpc_refer.run.main import main as run_main

    assert run_main(["--env", ID, "--env.n_agents", "1", "--env.max_cycles", "12",
                     "--steps", "300", "--replay.size", "1000", "--replay.learn-start", "100",
                     "--vracer.batch", "16", "--vracer.hidden", "8,8", "--run-dir", "one"]) == 0
    with (in_tmp / "one" / "episodes.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert rows and {r["agent"] for r in rows} == {"0"}
    assert all(1 <= int(r["length"]) <= 12 for r in rows)
