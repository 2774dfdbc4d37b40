"""MPI training invariants that hold at any rank count (run under mpirun -n 1, 2, 3, 4).

The layout adapts to the world size W: one process for W = 1 (the same learner loop over the
in-process channel), otherwise L = 2 learners when W >= 4 else 1, and the remaining ranks as
one-rank teams.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch
from learners import small_table
from mpi4py import MPI

import hpc_refer.loop.local_channel as local_channel
import hpc_refer.run.roles as training
from hpc_refer.algorithms.kit.collectives import SerialReducer
from hpc_refer.algorithms.kit.networks import flat_state
from hpc_refer.algorithms.kit.renorm import BatchRenorm
from hpc_refer.algorithms.registry import ALGORITHMS
from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.config.layout import Role, compute_layout
from hpc_refer.config.resolve import build_config
from hpc_refer.envs.registry import SolverSpec, env_kind
from hpc_refer.loop.learner import Learner
from hpc_refer.loop.learner_loop import LearnerResult
from hpc_refer.parallel.channels import Fabric
from hpc_refer.parallel.world import MpiReducer
from hpc_refer.replay.shard import HAS_ACTION, IN_USE, ReplayShard
from hpc_refer.report.metrics import RunDirectory
from hpc_refer.report.records import TRUNCATED, Chunk
from hpc_refer.run.learning import make_learner
from hpc_refer.run.main import run_role

COMM = MPI.COMM_WORLD
W = COMM.Get_size()
L = 2 if W >= 4 else 1


def small_config(env="Diffusion1D", steps=600, size=4096, algorithm=VRacer.name, **run):
    return build_config({
        "run": {"env": env, "steps": steps, "learners": L, "chunk_len": 20, "log_every": 200,
                "checksum_every": 5, "algorithm": algorithm, **run},
        algorithm: {"hidden": [16, 16], "batch": 16},
        "replay": {"size": size, "learn_start": 100},
    })


def train_everywhere(config, tmp_path, monkeypatch):
    """Run the roles on every rank; actors record each chunk they send."""
    sent_chunks = []
    original = training.next_message

    def recording(actor, *args):
        message = original(actor, *args)
        if message is not None:
            sent_chunks.append(message[0])
        return message

    monkeypatch.setattr(training, "next_message", recording)  # actor ranks
    monkeypatch.setattr(local_channel, "next_message", recording)  # one process
    run_dir = tmp_path / "run"
    layout = compute_layout(W, config.run.learners, config.run.ranks_per_env)
    fabric = Fabric(layout)
    run = (RunDirectory(run_dir, config, env_kind(config.run.env).metric_names(config.run.env))
           if COMM.Get_rank() == 0 else None)
    result = run_role(config, layout, fabric, run)
    if run is not None:
        run.close()
    return result, sent_chunks, COMM.bcast(run_dir)


def learner_summaries(result) -> list[dict]:
    """Picklable facts of every learner rank, on every rank."""
    mine = None
    if isinstance(result, LearnerResult):
        replay = result.learner.replay
        mine = {"received": result.received, "stored": replay.n_transitions,
                "removed": replay.n_removed, "env_steps": result.env_steps,
                "rows": shard_rows(replay), "finished": result.finished_actors,
                "obs_dim": replay.obs.shape[1], "act_dim": replay.act.shape[1]}
    return [x for x in COMM.allgather(mine) if x is not None]


def shard_rows(replay: ReplayShard) -> np.ndarray:
    """The stored transitions as rows (obs, act, rew, mu), sorted, for comparison."""
    used = np.flatnonzero((replay.flags & IN_USE) & (replay.flags & HAS_ACTION))
    rows = np.concatenate([replay.obs[used], replay.act[used], replay.rew[used, None],
                           replay.mu_mean[used], replay.mu_std[used]], axis=1)
    return rows[np.lexsort(rows.T[::-1])]


@pytest.mark.mpi
def test_every_sent_step_is_stored_once_and_shards_equal_one_replay(tmp_path, monkeypatch):
    config = small_config(env="mpi_envs:ReportsItsEpisodes")
    result, chunks, run_dir = train_everywhere(config, tmp_path, monkeypatch)
    sent = sum(c.act.shape[0] for c in chunks)
    learners = learner_summaries(result)
    all_sent = COMM.allreduce(sent)
    # Counted: every sent step arrived, and is stored or was forgotten by FIFO.
    assert sum(r["received"] for r in learners) == all_sent
    for r in learners:
        assert r["stored"] + r["removed"] == r["received"]
        assert r["env_steps"] == all_sent, "the global counter is the sum of the local ones"
    assert all_sent >= config.run.steps
    # Shards together hold exactly what one replay fed the same chunks holds.
    all_chunks = [c for part in COMM.allgather(chunks) for c in part]
    single = ReplayShard(config.replay.size, learners[0]["obs_dim"], learners[0]["act_dim"],
                         config.algorithm.gamma)
    for c in all_chunks:
        single.add(c, 5.0)
    together = np.concatenate([r["rows"] for r in learners])
    np.testing.assert_array_equal(together[np.lexsort(together.T[::-1])], shard_rows(single))
    # Rank 0 logged every actor's episodes with its rank and the solver's episode metrics.
    if COMM.Get_rank() == 0:
        with (run_dir / "episodes.csv").open() as f:
            rows = list(csv.DictReader(f))
        ranks = {int(row["rank"]) for row in rows}
        expected = {a for a in range(W)
                    if compute_layout(W, L, 1).role(a) in (Role.ACTOR, Role.SINGLE)}
        assert ranks == expected
        assert all(row["steps"] == row["length"] and row["world_rank"] == row["rank"]
                   for row in rows), rows
        for rank in ranks:  # each actor stamped its episodes' ends: in order, none alike
            ends = [float(row["wall_s"]) for row in rows if int(row["rank"]) == rank]
            assert ends == sorted(set(ends)), (rank, ends)
        assert (run_dir / "train.jsonl").read_text().count("\n") >= 3


def all_weights(learner: Learner) -> np.ndarray:
    """Every network of the algorithm (target networks included), as one vector."""
    return np.concatenate([flat_state(m) for m in learner.algo.modules.values()])


@pytest.mark.mpi
@pytest.mark.parametrize("sampling", ["uniform", "per"])
@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_learner_weights_stay_identical_and_ratio_holds(tmp_path, monkeypatch, algorithm,
                                                        sampling):
    config = small_config(steps=800, algorithm=algorithm)
    config = build_config({**config.to_dict(), "replay": {**config.to_dict()["replay"],
                                                          "sampling": sampling}})
    result, _, _ = train_everywhere(config, tmp_path, monkeypatch)
    learner = result.learner if isinstance(result, LearnerResult) else None
    weights = COMM.allgather(None if learner is None else all_weights(learner))
    weights = [w for w in weights if w is not None]
    assert len(weights) == L
    for w in weights[1:]:
        np.testing.assert_array_equal(w, weights[0])
    if learner is not None:
        assert learner.grad_steps > 0
        expected = learner.steps_due(0)  # nothing more owed at the end ...
        assert expected == 0
        start = learner.start_env_steps
        assert learner.grad_steps == int(config.replay.grad_ratio * (result.env_steps - start))


@pytest.mark.mpi
def test_recurrent_learners_stay_identical_and_actors_send_their_carries(tmp_path,
                                                                         monkeypatch):
    """A GRU V-RACER: the learners' weights stay identical (W >= 4: two learners), every
    stored row is [s, c] with the cell's carry, and the carries crossed the messages."""
    config = small_config(steps=600)
    table = {**config.to_dict()}
    table["vracer"] = {**table["vracer"], "cell": "gru", "cell_width": 6, "bptt": 4}
    result, sent, _ = train_everywhere(build_config(table), tmp_path, monkeypatch)
    learner = result.learner if isinstance(result, LearnerResult) else None
    weights = [w for w in COMM.allgather(None if learner is None else all_weights(learner))
               if w is not None]
    assert len(weights) == L
    for w in weights[1:]:
        np.testing.assert_array_equal(w, weights[0])
    for summary in learner_summaries(result):
        assert summary["obs_dim"] == state_width(config) + 6
    if learner is not None:
        carries = learner.replay.obs[:learner.replay.size, -6:]
        assert np.abs(carries).max() > 0.01, "the stored carries move"
    for chunk in sent:
        assert chunk.obs.shape[1] == state_width(config) + 6


def state_width(config) -> int:
    dims = env_kind(config.run.env).dims(SolverSpec.of(config))
    assert dims is not None
    return dims[0]


@pytest.mark.mpi
def test_clean_shutdown_when_some_actors_finish_early(tmp_path, monkeypatch):
    if W == 1:
        pytest.skip("needs actor ranks")
    config = small_config(env="mpi_envs:FiniteOnOddRanks", steps=1500)
    result, _, _ = train_everywhere(config, tmp_path, monkeypatch)
    finished = COMM.allgather(getattr(result, "finished_early", None))
    layout = compute_layout(W, L, 1)
    actors = [a for a in range(W) if layout.role(a) is Role.ACTOR]
    assert [finished[a] for a in actors] == [a % 2 == 1 for a in actors]
    learners = learner_summaries(result)
    assert sorted(a for r in learners for a in r["finished"]) == [a for a in actors if a % 2]


def store_episodes(learner: Learner, rng: np.random.Generator) -> None:
    """Four truncated random episodes of 40 steps (3 observations, 2 actions)."""
    for _ in range(4):
        n = 40
        learner.store(Chunk(rng.standard_normal((n + 1, 3)).astype(np.float32),
                            rng.standard_normal((n, 2)).astype(np.float32),
                            rng.standard_normal(n).astype(np.float32),
                            (0.3 * rng.standard_normal((n, 2))).astype(np.float32),
                            np.full((n, 2), 0.5, np.float32), TRUNCATED, 0))


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_two_learners_average_to_the_full_batch_gradient(algorithm, monkeypatch):
    """L = 2 with B/2 rows each gives the mean of the two halves' gradients, the gradient of
    L = 1 with the same B rows for every algorithm whose samples do not meet in batch
    statistics (CrossQ's: each learner normalises its own rows), and both learners keep the
    same networks, running statistics included (learning rate 0, so that the weights do not
    move between the calls; the noise of a stochastic loss, SAC's, set to 0: each learner
    draws its own, so the average equals the full batch's gradient only in expectation)."""
    monkeypatch.setattr(torch, "randn_like", torch.zeros_like)
    comm = COMM.Split(0 if COMM.Get_rank() < 2 else MPI.UNDEFINED, COMM.Get_rank())
    if comm == MPI.COMM_NULL:
        return
    rng = np.random.default_rng(0)

    def filled(reducer):
        # Same shard content for both: capacity N / L = 256 rows.
        cfg = build_config({"run": {"algorithm": algorithm, "compile": "off"},  # p.grad
                            algorithm: small_table(algorithm, batch=32),
                            "replay": {"size": 256 * reducer.size, "learn_start": 64}})
        learner = make_learner(cfg, 3, 2, reducer)
        learner.algo.optimizers = {k: spec._replace(lr0=0.0)  # lr 0: the weights stay
                                   for k, spec in learner.algo.optimizers.items()}
        store_episodes(learner, np.random.default_rng(0))
        return learner

    def gradients(learner, rows):
        learner.step(learner.replay.batch(rows), learner.terms, 0)
        return [p.grad.clone() for spec in learner.algo.optimizers.values()
                for group in spec.optimizer.param_groups for p in group["params"]]

    learner_1 = filled(SerialReducer())
    rows = learner_1.replay.sample_rows(32, rng)
    full = gradients(learner_1, rows)
    halves = [gradients(filled(SerialReducer()), rows[k * 16 : (k + 1) * 16]) for k in (0, 1)]
    learner_2 = filled(MpiReducer(comm))
    half = rows[comm.Get_rank() * 16 : (comm.Get_rank() + 1) * 16]
    batch_statistics = any(isinstance(m, BatchRenorm) for module in learner_2.algo.modules.values()
                           for m in module.modules())
    for g_split, g_full, g_0, g_1 in zip(gradients(learner_2, half), full, *halves,
                                         strict=True):
        torch.testing.assert_close(g_split, (g_0 + g_1) / 2, rtol=1e-5, atol=1e-6)
        if not batch_statistics:
            torch.testing.assert_close(g_split, g_full, rtol=1e-5, atol=1e-6)
    sums = comm.allgather(learner_2.algo.checksum())
    assert sums[0] == sums[1], "the learners keep the same networks and statistics"
    comm.Free()


@pytest.mark.mpi(min_size=2)
def test_two_compiled_learners_take_the_eager_step():
    """L = 2 learners with the compiled step (two graphs around the gradient allreduce) move
    their weights as two eager learners do, and stay identical to each other."""
    comm = COMM.Split(0 if COMM.Get_rank() < 2 else MPI.UNDEFINED, COMM.Get_rank())
    if comm == MPI.COMM_NULL:
        return

    def learner(mode):
        cfg = build_config({"run": {"compile": mode}, VRacer.name: {"hidden": [16, 16],
                                                                "batch": 32},
                            "replay": {"size": 512, "learn_start": 64}})
        out = make_learner(cfg, 3, 2, MpiReducer(comm))
        store_episodes(out, np.random.default_rng(comm.Get_rank()))
        out.update_start(10**6, 0)
        for _ in range(3):
            out.train_step()
        return out

    eager, compiled = learner("off"), learner("on")
    assert compiled.step.compiled
    for a, b in zip(eager.algo.net.state_dict().values(),
                    compiled.algo.net.state_dict().values(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    sums = comm.allgather(compiled.algo.checksum())
    assert sums[0] == sums[1], "the compiled learners took identical steps"
    comm.Free()


@pytest.mark.mpi(min_size=2)
def test_diffusion_split_over_a_team_equals_one_rank():
    """The multi-rank test environment really splits its state: every rank holds only its
    cells, and the team's trajectory equals the one-rank trajectory."""
    from hpc_refer.envs.diffusion import N_CELLS, Diffusion1D
    from hpc_refer.parallel.world import MpiTeam

    team_env = Diffusion1D(MpiTeam(COMM))
    alone = Diffusion1D(None)
    assert team_env.cells.size < N_CELLS
    assert COMM.allreduce(team_env.cells.size) == N_CELLS
    obs_team, obs_alone = team_env.reset(5), alone.reset(5)
    rng = np.random.default_rng(0)
    for _ in range(60):
        a = rng.uniform(-1, 1, 4)
        obs_team, r_team, s_team = team_env.step(a)
        obs_alone, r_alone, s_alone = alone.step(a)
        assert r_team == pytest.approx(r_alone, rel=1e-12, abs=1e-14)
        assert s_team == s_alone
        if COMM.Get_rank() == 0:
            np.testing.assert_allclose(obs_team, obs_alone, rtol=1e-6)
        else:
            assert obs_team.size == 0


@pytest.mark.mpi(min_size=2)
def test_a_solver_gathering_its_state_on_another_rank():
    """A solver whose state lives on its last rank (``state_rank``): the actor's driver gets
    the same states, rewards and statuses as from the one-rank solver."""
    from mpi_envs import GatheredOnLastRank

    from hpc_refer.envs.diffusion import Diffusion1D
    from hpc_refer.envs.driver import TeamDriver, serve_team
    from hpc_refer.parallel.world import MpiTeam

    team = MpiTeam(COMM)
    if team.rank != 0:
        serve_team(GatheredOnLastRank, team)
        return
    driver, alone = TeamDriver(GatheredOnLastRank(team), team), Diffusion1D(None)
    assert driver.state_rank == team.size - 1
    np.testing.assert_allclose(driver.reset(3), alone.reset(3), rtol=1e-6)
    rng = np.random.default_rng(1)
    for _ in range(60):
        a = rng.uniform(-1, 1, 4)
        (obs, reward, status), want = driver.step(a), alone.step(a)
        np.testing.assert_allclose(obs, want[0], rtol=1e-6)
        assert reward == pytest.approx(want[1], rel=1e-12) and status == want[2]
    driver.close()


def test_a_state_rank_outside_the_team_is_refused():
    from hpc_refer.config.modes import ConfigError
    from hpc_refer.envs.diffusion import Diffusion1D
    from hpc_refer.envs.driver import TeamDriver

    env = Diffusion1D(None)
    env.state_rank = 1
    with pytest.raises(ConfigError, match=r"Diffusion1D.state_rank = 1 is invalid: allowed are "
                                          r"the team ranks 0..0"):
        TeamDriver(env, None)


def test_episode_metrics_that_clash_with_the_columns_are_refused(tmp_path, monkeypatch, capsys):
    """Refused at start-up with the field and the taken names, before anything is written."""
    from hpc_refer.run.main import main as run_main

    if W > 1:
        pytest.skip("a one-process run")
    monkeypatch.chdir(tmp_path)
    assert run_main(["--env", "mpi_envs:MetricNamedReturn", "--steps", "10"]) == 2
    assert "mpi_envs:MetricNamedReturn.episode_metrics = ('return',) is invalid" in (
        capsys.readouterr().err)
    assert not (tmp_path / "runs").exists()
