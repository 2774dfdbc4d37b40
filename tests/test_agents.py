"""Several agents in one simulation (issue 26): the interface's checks of per-agent answers,
the actor of a simulation of agents (one batched policy call per step, each agent's
trajectory its own episode in the replay, budgets, faults, checkpoints), and runs of
``python -m hpc_refer.run`` with them: episodes.csv's agent column, restart bit for bit,
``evaluate``, and under mpirun with two learners and with a team of two ranks.

The solvers are :mod:`agents_envs`'s (agent i's episode lasts ``horizon + 3 i`` steps).
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from agents_envs import Points
from hypothesis import given, settings
from hypothesis import strategies as st
from mpi_launch import mpi_env, mpirun_exe
from test_restart import assert_same_arrays, newest_checkpoint, rows

from hpc_refer.algorithms.vracer import GaussianPolicyValueNet
from hpc_refer.config.modes import ActionBounds, ConfigError
from hpc_refer.config.resolve import Config
from hpc_refer.config.tables import NetworkShape
from hpc_refer.envs import SolverFailure
from hpc_refer.envs.checks import InterfaceError, agents_of, check_agents_step, check_state
from hpc_refer.envs.interface import SolverFault
from hpc_refer.envs.registry import SolverSpec, make_driver
from hpc_refer.evaluate import main as evaluate_main
from hpc_refer.loop.actor import Actor
from hpc_refer.replay.kernels import HAS_ACTION
from hpc_refer.replay.shard import ReplayShard
from hpc_refer.report.agents import agent_count, simulations
from hpc_refer.report.build import main as report_main
from hpc_refer.report.metrics import RunDirectory
from hpc_refer.report.records import ChunkEnd, LoggedEpisode
from hpc_refer.report.series import read_series
from hpc_refer.run.main import main as run_main

SMALL = ["--replay.size", "2000", "--replay.learn-start", "300", "--vracer.batch", "32",
         "--vracer.hidden", "16,16", "--log-every", "500", "--chunk-len", "40"]


# --- the interface ---------------------------------------------------------------------

def test_per_agent_answers_are_checked_naming_the_field_and_the_agent():
    states = np.zeros((3, 2))
    ok = check_agents_step((states, np.array([1.0, 2, 3]), np.array([0, 1, 2])), 2, 3)
    assert ok[0].shape == (3, 2) and ok[0].dtype == np.float32
    assert ok[1].tolist() == [1, 2, 3] and ok[2].tolist() == [0, 1, 2]
    cases = [
        ((np.zeros((2, 2)), np.zeros(3), np.zeros(3)), "state has shape (2, 2), expected (3, 2)"),
        ((states, np.zeros(2), np.zeros(3)), "rewards have shape (2,), expected (3,)"),
        ((states, np.zeros(3), np.zeros((3, 1))), "statuses have shape (3, 1)"),
        ((states, np.zeros(3), np.array([0, 7, 0])), "statuses[1] = 7 is unknown"),
        ((states, np.array([0, np.inf, 0]), np.zeros(3)), "rewards[1] = inf is not finite"),
        ((states, np.zeros(3)), "expected a tuple (states, rewards, statuses)"),
    ]
    for answer, message in cases:
        with pytest.raises(SolverFault, match=re.escape(message)):
            check_agents_step(answer, 2, 3)
    bad = np.zeros((3, 2))
    bad[2, 1] = np.nan
    with pytest.raises(SolverFault, match=r"state\[2, 1\] = nan"):
        check_state(bad, 2, 3)
    with pytest.raises(InterfaceError, match=r"expected \(2,\)"):
        check_state(np.zeros((3, 2)), 2)  # one agent: today's form


@pytest.mark.parametrize("value", [0, -2, 1.5, True, "3"])
def test_an_invalid_agent_count_is_one_line_naming_it(value):
    class Solver:
        n_agents = value

    with pytest.raises(ConfigError, match=r"Solver\.n_agents = .* allowed are integers >= 1"):
        agents_of(Solver(), "Solver")


def test_an_agent_count_that_changes_in_a_rebuild_fails_the_environment(in_tmp):
    from agents_envs import Shifty
    Shifty.built = 0
    env = make_driver(SolverSpec("agents_envs:Shifty"), None)
    assert env.n_agents == 3
    env.reset(0)
    actions = np.zeros((3, 1))
    for _ in range(4):
        env.step_agents(actions)
    with pytest.raises(SolverFault, match="the points left the line"):
        env.step_agents(actions)
    with pytest.raises(SolverFailure, match="rebuilt after a fault with n_agents = 4, but it "
                                            "started with 3"):
        env.reset(0)
    env.close()


# --- the actor -------------------------------------------------------------------------

def points_actor(agents: int = 3, chunk_len: int = 12, **params: object) -> Actor:
    env = make_driver(SolverSpec("agents_envs:Points", params={"agents": agents, **params}),
                      None)
    torch.manual_seed(0)  # the same policy copy in every actor (a learner's would be loaded)
    net = GaussianPolicyValueNet(Points.obs_dim, Points.act_dim, NetworkShape((8,)), sigma_init=0.5)
    return Actor(env, net.program(), ActionBounds.CLIP, seed=3, chunk_len=chunk_len, source=7)


def run_actor(actor: Actor, messages: int, budgets: list[int] | None = None) -> list:
    out = []
    for k in range(messages):
        actor.grant(budgets[k % len(budgets)] if budgets else actor.chunk_len)
        while True:
            chunk, record = actor.step()
            if chunk is not None:
                out.append((chunk, record))
                break
    return out


def test_one_policy_call_per_step_batches_the_agents():
    actor = points_actor()
    calls = []
    policy = actor._behaviour

    def counted(obs):
        calls.append(np.shape(obs))
        return policy(obs)

    actor._behaviour = counted  # type: ignore[assignment]
    for _ in range(30):
        actor.step()
    assert actor.env.env.calls >= 20
    assert calls == [(3, 2)] * actor.env.env.calls


def test_each_agents_trajectory_is_its_own_episode_with_its_own_record():
    """Agents end at steps 10, 13 and 16 (the last TERMINAL): each one's chunks, joined in
    order, hold exactly its steps, its record's return is the sum of its rewards, the
    simulation's metric goes with the agents that end at its last step, and a replay shard
    links every agent's chunks into an episode of its own."""
    actor = points_actor(chunk_len=12)
    messages = run_actor(actor, 40)
    per_agent: dict[int, list] = {0: [], 1: [], 2: []}
    for chunk, record in messages:
        assert chunk.source == 7 and chunk.act.shape[0] <= 12
        per_agent[chunk.agent].append((chunk, record))
    first = {a: [] for a in per_agent}
    for a, items in per_agent.items():  # the first episode of each agent
        for chunk, record in items:
            first[a].append(chunk)
            if record is not None:
                assert record.agent == a
                assert record.length == 10 + 3 * a
                assert record.ret == pytest.approx(sum(float(c.rew.sum()) for c in first[a]),
                                                   rel=1e-5)
                assert (np.isnan(record.values[0]) if a < 2 else record.values[0] > 0)
                break
        ends = [c.end for c in first[a]]
        assert ends[:-1] == [ChunkEnd.OPEN] * (len(ends) - 1)
        assert ends[-1] == (ChunkEnd.TERMINATED if a == 2 else ChunkEnd.TRUNCATED)
        assert sum(c.act.shape[0] for c in first[a]) == 10 + 3 * a
    shard = ReplayShard(4096, 2, 1, 0.99)
    for chunk, _ in messages:
        shard.add(chunk, 5.0)
    expected = []  # each agent's episodes, recounted from its chunks: their action counts
    for items in per_agent.values():
        new = True
        for chunk, _ in items:
            if new:
                expected.append(0)
            expected[-1] += chunk.act.shape[0]
            new = chunk.end != ChunkEnd.OPEN
    used = shard.episode[:shard.size]
    ids = np.unique(used)
    stored = [int(np.count_nonzero(shard.flags[:shard.size][used == e] & HAS_ACTION))
              for e in ids]
    assert sorted(stored) == sorted(expected)


def test_chunks_never_exceed_the_budget_and_every_step_is_sent_once():
    actor = points_actor(chunk_len=12)
    messages = run_actor(actor, 60, budgets=[12, 1, 5, 2, 7])
    budgets = [12, 1, 5, 2, 7]
    for k, (chunk, _) in enumerate(messages):
        assert 1 <= chunk.act.shape[0] <= budgets[k % 5]
    sent = sum(c.act.shape[0] for c, _ in messages)
    pending = sum(len(lane.act) for lane in actor._lanes)
    held = sum(c.act.shape[0] for c, _ in actor._outbox)
    taken = sum(r.length for _, r in messages if r is not None) + sum(
        lane.length for lane in actor._lanes)
    assert sent + pending + held == taken


def test_a_fault_closes_every_active_agents_episode_without_records():
    actor = points_actor(chunk_len=100, fault_at=6)
    messages = run_actor(actor, 3)
    assert actor.faults == 1
    assert [(c.agent, c.end, c.act.shape[0], c.obs.shape[0]) for c, _ in messages] == [
        (a, ChunkEnd.TRUNCATED, 5, 6) for a in range(3)]
    assert all(r is None for _, r in messages)
    # A fault right after the lanes' steps were all sent: each open episode is still closed,
    # by a chunk of its last state alone.
    actor = points_actor(chunk_len=6, fault_at=5)
    messages = run_actor(actor, 9)
    assert [(c.agent, c.end, c.act.shape[0], c.obs.shape[0]) for c, _ in messages[6:]] == [
        (a, ChunkEnd.TRUNCATED, 0, 1) for a in range(3)]


def test_the_actor_continues_bit_for_bit_from_its_checkpoint():
    straight = points_actor(chunk_len=7)
    first = run_actor(straight, 9)
    tree = straight.checkpoint_state()
    rest = run_actor(straight, 25)
    resumed = points_actor(chunk_len=7)
    run_actor(resumed, 2)  # a different place: the restore must overwrite it all
    resumed.restore_state(tree)
    again = run_actor(resumed, 25)
    assert first
    for (a, ra), (b, rb) in zip(rest, again, strict=True):
        for name in ("obs", "act", "rew", "mu_mean", "mu_std"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
        assert (a.end, a.agent, ra is None) == (b.end, b.agent, rb is None)
        if ra is not None:
            assert (ra.ret, ra.length, ra.agent) == (rb.ret, rb.length, rb.agent)


def test_evaluation_gives_one_record_per_agent_and_simulation():
    actor = points_actor()
    records = actor.evaluate(2, seed=5)
    assert [r.agent for r in records] == [0, 1, 2, 0, 1, 2]
    assert [r.length for r in records] == [10, 13, 16] * 2
    assert all(r.values == records[0].values for r in records[:3])
    actor.step()
    with pytest.raises(RuntimeError, match="episode is in progress"):
        actor.evaluate(1)


# --- runs ------------------------------------------------------------------------------

def csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_a_run_with_agents_logs_each_agents_episodes_and_restarts_bit_for_bit(in_tmp):
    """1,500 transitions with a checkpoint near 750; a copy of the run resumed from that
    checkpoint ends exactly as the run that went straight on: metrics, learner and actor
    parts (lanes, outbox), policy."""
    common = ["--env", "agents_envs:Points", "--seed", "2", "--checkpoint-every", "750",
              *SMALL]
    assert run_main([*common, "--steps", "1500", "--run-dir", "straight"]) == 0
    straight = in_tmp / "straight"
    episodes = csv_rows(straight / "episodes.csv")
    assert list(episodes[0])[:6] == ["env_step", "rank", "return", "length", "wall_s", "agent"]
    by_agent = {a: [int(r["length"]) for r in episodes if r["agent"] == str(a)]
                for a in range(3)}
    assert all(set(lengths) == {10 + 3 * a} for a, lengths in by_agent.items()), by_agent
    assert abs(len(by_agent[0]) - len(by_agent[2])) <= 1
    last = json.loads((straight / "train.jsonl").read_text().splitlines()[-1])
    assert last["env_step"] == 1500
    full = in_tmp / "full"
    shutil.copytree(straight, full)
    checkpoints = sorted((straight / "checkpoints").glob("step-*"))
    assert len(checkpoints) == 2
    shutil.rmtree(checkpoints[-1])
    (straight / "state.txt").write_text("preempted: signal 15\n")
    assert run_main(["--restart", "straight", "--steps", "1500"]) == 0
    for name in ("episodes.csv", "train.jsonl"):
        assert rows(full / name) == rows(straight / name), name
    for part in ("learner-0.h5", "actor-0.h5"):
        assert_same_arrays(newest_checkpoint(full) / part, newest_checkpoint(straight) / part)
    assert_same_arrays(full / "policy.h5", straight / "policy.h5")
    # evaluate: one record per agent, per-agent and summed returns
    assert evaluate_main([str(straight), "--episodes", "2", "--out", "ev.json"]) == 0
    stats = json.loads(Path("ev.json").read_text())
    assert stats["agents"] == 3 and stats["episodes"] == 6
    assert len(stats["return_mean_per_agent"]) == 3
    sums = np.array(stats["episode_returns"]).reshape(2, 3).sum(axis=1)
    assert stats["summed_return_mean"] == pytest.approx(sums.mean())


def test_a_run_directory_written_before_agents_keeps_its_columns(in_tmp):
    """A restart of a run whose episodes.csv has no agent column writes rows without one."""
    old = ",".join(["env_step", "rank", "return", "length", "wall_s"])
    run_dir = in_tmp / "old"
    run_dir.mkdir()
    (run_dir / "episodes.csv").write_text(f"{old}\n10,0,1.5,10,0.100\n")
    for name in ("train.jsonl",):
        (run_dir / name).write_text("")
    config = Config()
    run = RunDirectory(run_dir, config, resume=({"episodes.csv": 10**6}, 10))
    run.episode(LoggedEpisode(20, 0, 2.0, 10, (), 0.2, 0))
    run.close()
    lines = (run_dir / "episodes.csv").read_text().splitlines()
    assert lines[0] == old and lines[-1] == "20,0,2,10,0.200"


@pytest.mark.mpi_skip
@pytest.mark.parametrize("launch", [["-n", "4", "--learners", "2"],
                                    ["-n", "3", "--ranks-per-env", "2"]])
def test_agents_under_mpirun_with_two_learners_and_with_a_team(in_tmp, launch):
    exe = mpirun_exe()
    n, rest = launch[:2], launch[2:]
    proc = subprocess.run(
        [exe, *n, sys.executable, "-m", "hpc_refer.run", "--env", "agents_envs:Points",
         "--steps", "1200", "--run-dir", "r", *rest, *SMALL],
        capture_output=True, text=True, timeout=300, env=mpi_env(), check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    episodes = csv_rows(in_tmp / "r" / "episodes.csv")
    ranks = {r["rank"] for r in episodes}
    assert len(ranks) == (2 if "--learners" in rest else 1)
    for rank in ranks:
        mine = [r for r in episodes if r["rank"] == rank]
        assert {r["agent"] for r in mine} == {"0", "1", "2"}
        assert all(int(r["length"]) == 10 + 3 * int(r["agent"]) for r in mine)
    last = json.loads((in_tmp / "r" / "train.jsonl").read_text().splitlines()[-1])
    assert last["env_step"] == 1200


def test_simulations_are_found_where_an_agent_repeats_per_actor():
    rows = [{"rank": "1", "agent": "0", "return": "1", "env_step": "10"},
            {"rank": "2", "agent": "0", "return": "5", "env_step": "11"},
            {"rank": "1", "agent": "1", "return": "2", "env_step": "13"},
            {"rank": "1", "agent": "0", "return": "3", "env_step": "20"},  # rank 1's 2nd
            {"rank": "2", "agent": "1", "return": "6", "env_step": "21"},
            {"rank": "1", "agent": "1", "return": "4", "env_step": "23"}]
    assert simulations(rows) == [(13, 3.0, 2), (21, 11.0, 2), (23, 7.0, 2)]
    cut = [{"rank": "1", "agent": "0", "return": "1", "env_step": "10"},  # agent 1 faulted
           {"rank": "1", "agent": "0", "return": "2", "env_step": "30"},
           {"rank": "1", "agent": "1", "return": "3", "env_step": "33"}]
    assert simulations(cut) == [(10, 1.0, 1), (33, 5.0, 2)]
    assert agent_count(cut) == 2 and agent_count([{"rank": "0", "return": "1"}]) == 1


def test_the_report_draws_each_agents_and_the_summed_returns(in_tmp):
    assert run_main(["--env", "agents_envs:Points", "--steps", "600", "--run-dir", "r",
                     *SMALL]) == 0
    assert report_main(["r"]) == 0
    page = (in_tmp / "r" / "report.html").read_text()
    section = page[page.index("<h2>Agents</h2>"):]
    section = section[:section.index("</section>")]
    assert "return summed over the agents of a simulation" in section
    points = int(re.search(r'data-points="(\d+)"', section).group(1))
    assert points > 4


def test_evaluation_rounds_wait_for_the_end_of_a_simulation(in_tmp):
    """The learner asks for evaluation only between simulations (the chunk header's
    ``between``): an agent's episode that ends while others go on is no boundary."""
    assert run_main(["--env", "agents_envs:Points", "--steps", "900", "--run-dir", "r",
                     "--eval-every", "150", "--eval-episodes", "1", *SMALL]) == 0
    evals = csv_rows(in_tmp / "r" / "eval.csv")
    assert len(evals) >= 9 and len(evals) % 3 == 0
    for k in range(0, len(evals), 3):  # each round: one whole simulation
        round_ = evals[k:k + 3]
        assert len({e["env_step"] for e in round_}) == 1
        assert sorted((int(e["agent"]), int(e["length"])) for e in round_) == [
            (0, 10), (1, 13), (2, 16)]


@settings(max_examples=30, deadline=None)
@given(agents=st.integers(2, 5), horizon=st.integers(2, 9), chunk_len=st.integers(1, 20),
       budgets=st.lists(st.integers(1, 20), min_size=1, max_size=6),
       fault_at=st.sampled_from([0, 0, 3, 17]))
def test_any_budgets_keep_every_agents_steps_in_order(agents, horizon, chunk_len, budgets,
                                                      fault_at):
    """Whatever the budgets, chunk length, agent count and faults: no chunk exceeds its
    budget; each agent's chunks, in the order sent, form its episodes (only the last chunk
    of an episode ends it; a finished one has the agent's length unless a fault cut it);
    and every step taken is sent, pending or waiting in the outbox."""
    actor = points_actor(agents=agents, chunk_len=chunk_len, horizon=horizon,
                         fault_at=fault_at)
    taken = [0]
    step = actor.env.step

    def counted(actions):  # transitions answered: one per agent active in the step
        active = len(actor._running)
        answer = step(actions)
        taken[0] += active
        return answer

    actor.env.step = counted
    messages = run_actor(actor, 40, budgets)
    for k, (chunk, record) in enumerate(messages):
        assert chunk.act.shape[0] <= min(chunk_len, budgets[k % len(budgets)])
        assert (record is not None) <= (chunk.end != ChunkEnd.OPEN)
    for agent in range(agents):
        steps = 0
        for chunk, record in (m for m in messages if m[0].agent == agent):
            steps += chunk.act.shape[0]
            if record is not None:
                assert record.length == steps == horizon + 3 * agent
            if chunk.end != ChunkEnd.OPEN:
                assert steps <= horizon + 3 * agent
                steps = 0
    sent = sum(c.act.shape[0] for c, _ in messages)
    pending = sum(len(lane.act) for lane in actor._lanes)
    held = sum(c.act.shape[0] for c, _ in actor._outbox)
    assert sent + pending + held == taken[0]


def test_step_series_and_fields_belong_to_the_simulation(in_tmp):
    """A solver of agents records one row of step metrics per simulation step and one field
    per simulation (rows: its steps, columns: the agents), as a solver of one agent does."""
    assert run_main(["--env", "agents_envs:PointsWithSeries", "--steps", "300", "--run-dir",
                     "r", *SMALL]) == 0
    series = read_series(in_tmp / "r" / "series" / "env-0.h5")
    episodes = csv_rows(in_tmp / "r" / "episodes.csv")
    simulations_done = sum(e["agent"] == "2" for e in episodes)
    steps_per_simulation = 10 + 3 * 2  # the last agent's episode
    assert simulations_done >= 5
    numbers, rows_each = np.unique(series["episode"], return_counts=True)
    assert list(rows_each[:simulations_done]) == [steps_per_simulation] * simulations_done
    assert list(numbers[:simulations_done]) == list(range(numbers[0],
                                                          numbers[0] + simulations_done))
    assert np.isfinite(series["mean_x"]).all()
    field = np.load(in_tmp / "r" / "fields" / "env-0.npz")
    assert field["field"].shape == (steps_per_simulation + 1, 3)
    assert str(field["label"]) == "x_i(t)"
