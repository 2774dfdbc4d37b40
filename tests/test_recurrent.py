"""Recurrent policies (``--vracer.cell gru|lstm``): the cell's maths, the carry the actor
stores after each state, sequences that never leave their episode, the unroll, the compiled
step, and a restart that continues the carries bit for bit."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from algorithm_traits import BUILT_IN, RECURRENT, has_field
from hypothesis import given, settings
from hypothesis import strategies as st
from test_agents import SMALL, run_actor
from test_compiled_step import OBS, make_batch, pair, take_steps
from test_history import chunks
from test_restart import assert_resumes_straight

from hpc_refer.algorithms.kit.base import Algorithm, ReferTerms
from hpc_refer.algorithms.kit.collectives import SerialReducer
from hpc_refer.algorithms.kit.ops import viewed
from hpc_refer.algorithms.kit.program import run_ops
from hpc_refer.algorithms.kit.recurrent import RecurrentCell
from hpc_refer.algorithms.registry import algorithm_class, make_algorithm
from hpc_refer.algorithms.vracer import GaussianPolicyValueNet
from hpc_refer.config.modes import ActionBounds, Cell, ConfigError
from hpc_refer.config.resolve import build_config
from hpc_refer.config.tables import NetworkShape
from hpc_refer.envs.registry import SolverSpec, make_driver
from hpc_refer.evaluate import main as evaluate_main
from hpc_refer.loop.actor import Actor
from hpc_refer.loop.learner import Learner
from hpc_refer.replay.kernels import HAS_ACTION, TERMINAL
from hpc_refer.replay.sequences import follow, preceding
from hpc_refer.replay.shard import Batch, ReplayShard
from hpc_refer.report.records import Chunk, ChunkEnd
from hpc_refer.run.learning import make_learner
from hpc_refer.run.roles import make_actor

# --- the cell --------------------------------------------------------------------------

@pytest.mark.parametrize("cell", [Cell.GRU, Cell.LSTM])
def test_the_cell_is_torchs_gru_or_lstm_and_its_numpy_twin_agrees(cell):
    torch.manual_seed(0)
    ours = RecurrentCell(cell, 5, 4)
    theirs = (torch.nn.LSTMCell if cell is Cell.LSTM else torch.nn.GRUCell)(5, 4)
    with torch.no_grad():
        theirs.weight_ih.copy_(ours.ih.weight)
        theirs.weight_hh.copy_(ours.hh.weight)
        theirs.bias_ih.copy_(ours.ih.bias)
        theirs.bias_hh.copy_(ours.hh.bias)
    x, carry = torch.randn(7, 5), torch.randn(7, ours.carry_dim)
    with torch.no_grad():
        h, new = ours(x, carry)
        want = (theirs(x, (carry[:, :4], carry[:, 4:])) if cell is Cell.LSTM
                else (theirs(x, carry),))
    torch.testing.assert_close(h, want[0])
    torch.testing.assert_close(new, torch.cat(want, dim=1))
    h_np, new_np = run_ops([ours.op(viewed)], x.numpy(), carry.numpy())
    h_np = h_np[:, x.shape[1]:]  # the op's x is [x, h']
    np.testing.assert_allclose(h_np, h.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(new_np, new.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cell", [Cell.GRU, Cell.LSTM])
def test_the_unroll_from_a_stored_carry_repeats_the_actors_steps(cell):
    """Rows made as an actor makes them ([s_t, c_{t-1}], the carries of numpy_step): the
    learner's unroll from the first row's carry gives each row's outputs as the row alone
    does (the same weights made the stored carries)."""
    torch.manual_seed(1)
    net = GaussianPolicyValueNet(3, 2, NetworkShape((8,), cell=cell, cell_width=6), 0.5)
    net.body.normalizer.set_stats(np.full(3, 0.2), np.full(3, 1.5))
    step = net.numpy_step()
    states = np.random.default_rng(0).standard_normal((2, 5, 3)).astype(np.float32)
    seqs = []
    for seq in states:
        carry, made = np.zeros(net.carry_dim, np.float32), []
        for s in seq:
            row = np.concatenate([s, carry]).astype(np.float32)
            made.append(row)
            carry = step(row)[2].astype(np.float32)
        seqs.append(np.stack(made))
    flat = torch.from_numpy(np.concatenate(seqs))
    with torch.no_grad():
        unrolled, alone = net.sequences(flat, 5), net(flat)
    for a, b in zip(unrolled, alone, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    mean, _, _ = step(flat.numpy())
    np.testing.assert_allclose(mean, alone[1].numpy(), rtol=1e-4, atol=1e-6)


# --- sequences of the replay -----------------------------------------------------------

def add(shard: ReplayShard, source: int, values: list[float], end: ChunkEnd) -> None:
    n = len(values) - (1 if end is ChunkEnd.TRUNCATED else 0)
    obs = np.array(values, np.float32)[:, None]
    zeros = np.zeros((n, 1), np.float32)
    shard.add(Chunk(obs, zeros, np.zeros(n, np.float32), zeros, zeros + 1, end, source), 2.0)


def test_sequences_follow_one_episode_and_are_padded_at_its_end():
    shard = ReplayShard(64, 1, 1, 0.99)
    add(shard, 0, [0, 1, 2, 3, 4], ChunkEnd.TERMINATED)  # rows 0-4
    add(shard, 0, [10, 11, 12], ChunkEnd.TRUNCATED)      # rows 5-7, 7 the final state
    add(shard, 1, [20, 21, 22], ChunkEnd.OPEN)           # rows 8-10, 10 has no successor
    seq, valid = follow(np.array([1, 3, 5, 8]), 3, shard.next, shard.flags)
    got = shard.obs[seq, 0].reshape(4, 3)
    np.testing.assert_array_equal(got, [[1, 2, 3], [3, 4, 4], [10, 11, 11], [20, 21, 21]])
    np.testing.assert_array_equal(valid.reshape(4, 3), [[1, 1, 1], [1, 1, 0], [1, 1, 0],
                                                        [1, 1, 0]])


def test_a_burn_in_is_the_steps_before_a_sequence_padded_at_the_front():
    shard = ReplayShard(64, 1, 1, 0.99)
    add(shard, 0, [0, 1, 2, 3, 4], ChunkEnd.TERMINATED)  # rows 0-4
    add(shard, 0, [10, 11, 12], ChunkEnd.TRUNCATED)      # rows 5-7
    add(shard, 1, [20, 21, 22], ChunkEnd.OPEN)           # rows 8-10
    before, valid = preceding(np.array([3, 1, 5, 9]), 3, shard.prev)
    got = shard.obs[before, 0].reshape(4, 3)
    np.testing.assert_array_equal(got, [[0, 1, 2], [0, 0, 0], [10, 10, 10], [20, 20, 20]])
    np.testing.assert_array_equal(valid.reshape(4, 3), [[1, 1, 1], [0, 0, 1], [0, 0, 0],
                                                        [0, 0, 1]])


PLANS = st.lists(st.tuples(st.integers(0, 2), st.integers(1, 9), st.sampled_from(list(ChunkEnd))),
                 min_size=1, max_size=30)
"""Chunks (actor, steps, end) of three actors, interleaved."""


def planned_shard(chunk_plan: list[tuple[int, int, ChunkEnd]]) -> ReplayShard:
    """The chunks of ``chunk_plan`` in a small FIFO shard (old episodes are cut at their
    start), each state's value its arrival count."""
    shard = ReplayShard(24, 1, 1, 0.99)
    count = 0
    for source, n, end in chunk_plan:
        add(shard, source, [float(count + i) for i in range(n + 1)], end)
        count += n + 1
    return shard


@settings(max_examples=60, deadline=None)
@given(PLANS, st.integers(1, 6))
def test_a_burn_in_is_the_stored_steps_of_the_episode_just_before_its_sequence(chunk_plan, b):
    """From every sampleable row, the burn-in's valid rows are a suffix: consecutive steps of
    the start's episode ending just before it, as many as are stored (b at most), and the
    padding before them repeats the earliest (the start itself when nothing precedes it)."""
    shard = planned_shard(chunk_plan)
    used = np.flatnonzero(shard.sampleable(np.arange(shard.size)))
    if used.size == 0:
        return
    before, valid = preceding(used, b, shard.prev)
    for start, r, v in zip(used, before.reshape(-1, b), valid.reshape(-1, b), strict=True):
        k = int(v.sum())
        assert not v[:b - k].any() and v[b - k:].all(), "the valid rows are a suffix"
        earliest = r[b - k] if k else start
        assert (r[:b - k] == earliest).all(), "padding repeats the earliest row"
        chain = [*r[b - k:], start]
        assert all(shard.next[a] == c for a, c in itertools.pairwise(chain))
        assert len(set(shard.episode[chain])) == 1, "one episode"
        assert k == b or shard.prev[earliest] < 0, "as many steps as are stored"
        assert (shard.flags[r[b - k:]] & HAS_ACTION).all()


@settings(max_examples=60, deadline=None)
@given(PLANS, st.integers(1, 6))
def test_no_sequence_leaves_its_episode(chunk_plan, length):
    """Chunks of three actors interleaved into a small FIFO shard (old episodes are cut at
    their start): every sequence from every sampleable row is consecutive steps of one
    episode, each a sampleable transition, and stops only at the window, a terminal step,
    or a step whose successor is no transition."""
    shard = planned_shard(chunk_plan)
    used = np.flatnonzero(shard.sampleable(np.arange(shard.size)))
    if used.size == 0:
        return
    seq, valid = follow(used, length, shard.next, shard.flags)
    seq, valid = seq.reshape(-1, length), valid.reshape(-1, length)
    for r, v in zip(seq, valid, strict=True):
        k = int(v.sum())
        assert v[:k].all() and not v[k:].any(), "the valid rows are a prefix"
        assert (r[k:] == r[k - 1]).all(), "padding repeats the last valid row"
        assert shard.sampleable(r[:k]).all()
        assert len(set(shard.episode[r[:k]])) == 1, "one episode"
        assert (shard.next[r[:k - 1]] == r[1:k]).all(), "consecutive steps"
        assert not (shard.flags[r[:k - 1]] & TERMINAL).any()
        if k < length:
            last = r[k - 1]
            succ = shard.next[last]
            assert (shard.flags[last] & TERMINAL) or succ < 0 or not shard.sampleable(
                np.array([succ]))[0]
        assert (shard.flags[r[:k]] & HAS_ACTION).all()


# --- the actor -------------------------------------------------------------------------

def recurrent_actor(cell: Cell = Cell.GRU, seed: int = 3, name: str = "vracer") -> Actor:
    env = make_driver(SolverSpec("history_envs:Walk"), None)
    torch.manual_seed(0)
    config = build_config({"run": {"algorithm": name},
                           name: {"cell": str(cell), "cell_width": 4, "hidden": [8]}})
    net = algorithm_class(name).behaviour_policy(env.obs_dim, env.act_dim, config.algorithm)
    return Actor(env, net.program(), ActionBounds.CLIP, seed=seed, chunk_len=5)


@pytest.mark.parametrize("cell", [Cell.GRU, Cell.LSTM])
@pytest.mark.parametrize("name", RECURRENT)
def test_the_actor_stores_the_carry_it_entered_each_step_with(name, cell):
    actor = recurrent_actor(cell, name=name)
    step = actor._behaviour
    sent = chunks(actor, 6)  # two episodes of 12 steps
    assert actor.row_dim == 2 + actor.carry_dim
    starts = 0
    for chunk in sent:
        width = chunk.obs.shape[1]
        assert width == actor.row_dim
        carries = chunk.obs[:, 2:]
        if chunk.obs[0, 0] == 0.0:  # t = 0: an episode starts with a zero carry
            starts += 1
            np.testing.assert_array_equal(carries[0], 0.0)
        made = step(chunk.obs[:-1])[2]  # row t's step gives row t+1's carry
        np.testing.assert_allclose(carries[1:], made, rtol=1e-5, atol=1e-6)
    assert starts == 2
    assert np.abs(sent[0].obs[1:, 2:]).max() > 0.01, "the carry moves"


def test_each_agent_carries_its_own_state():
    """Three agents of one simulation, one batched policy call per step: each agent's rows
    carry its own carry, zero at its episode's start."""
    env = make_driver(SolverSpec("agents_envs:Points", params={"agents": 3}), None)
    config = build_config({"vracer": {"cell": "gru", "cell_width": 4, "hidden": [8]}})
    net = algorithm_class("vracer").behaviour_policy(env.obs_dim, env.act_dim,
                                                     config.algorithm)
    actor = Actor(env, net.program(), ActionBounds.CLIP, seed=3, chunk_len=6)
    step = net.numpy_step()
    sent = run_actor(actor, 9)
    for chunk, _ in sent:
        assert chunk.obs.shape[1] == env.obs_dim + 4
        np.testing.assert_allclose(chunk.obs[1:, 2:], step(chunk.obs[:-1])[2], rtol=1e-5,
                                   atol=1e-6)
    firsts = [chunk for chunk, _ in sent if chunk.obs[0, 1] == 0.0]  # t = 0
    assert {c.agent for c in firsts} == {0, 1, 2}
    for chunk in firsts:
        np.testing.assert_array_equal(chunk.obs[0, 2:], 0.0)


def test_the_actor_continues_its_carry_bit_for_bit():
    straight = recurrent_actor()
    chunks(straight, 2)
    straight.step()
    tree = straight.checkpoint_state()
    rest = chunks(straight, 5)
    resumed = recurrent_actor(seed=8)
    chunks(resumed, 1)
    resumed.restore_state(tree)
    for a, b in zip(rest, chunks(resumed, 5), strict=True):
        np.testing.assert_array_equal(a.obs, b.obs)
        np.testing.assert_array_equal(a.act, b.act)


# --- the learner -----------------------------------------------------------------------

@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("name", RECURRENT)
def test_the_compiled_recurrent_step_equals_the_eager_step(name, cell):
    """Minibatches of 8 sequences of 4 rows: outputs, parameters (targets included) and
    Adam's state agree to float32 round-off over five steps."""
    eager, compiled = pair(name, cell=cell, cell_width=8, bptt=4)
    take_steps(eager, compiled, 5)


@pytest.mark.parametrize("name", RECURRENT)
def test_the_loss_unrolls_each_sequence_from_its_first_stored_carry(name):
    """Sequences of W = 4 rows: the stored carries of a sequence's later rows do not enter
    the step (the unroll makes its own), the first row's does."""
    eager, _ = pair(name, cell="gru", cell_width=8, bptt=4)
    algo, batch = eager.algo, make_batch(eager.algo, 32, seed=1)
    terms = ReferTerms(beta=0.5, c_max=2.0, lr_factor=1.0)
    first = np.arange(32) % 4 == 0

    def rho_with_carries_moved(rows: np.ndarray) -> np.ndarray:
        obs = batch.obs.copy()
        obs[rows, OBS:] += 0.5
        torch.manual_seed(0)  # SAC's loss draws noise
        return algo.losses(batch._replace(obs=obs), terms).rho.numpy()

    torch.manual_seed(0)
    rho = algo.losses(batch, terms).rho.numpy()
    np.testing.assert_array_equal(rho_with_carries_moved(~first), rho)
    assert not np.allclose(rho_with_carries_moved(first), rho)


def critics(algo: Algorithm) -> list[torch.nn.Module]:
    """The algorithm's critics (modules ``critic``, ``critic1``, ...; not their targets)."""
    return [m for k, m in algo.modules.items() if k.startswith("critic")]


WITH_CRITICS = [name for name in RECURRENT if critics(make_algorithm(
    build_config({"run": {"algorithm": name}, name: {"cell": "gru", "hidden": [4]}}), 2, 1, 0))]
"""The recurrent algorithms with critics beside their actor."""


@pytest.mark.parametrize("name", WITH_CRITICS)
def test_the_critics_read_the_policys_cell_and_train_it(name):
    """With a cell the critics see [s, h_t]: the critics' loss alone moves the cell's
    parameters (the memory is trained by the value regression), and the actor's loss
    reaches the cell through its action only."""
    eager, _ = pair(name, cell="gru", cell_width=8, bptt=4)
    algo = eager.algo
    batch = make_batch(algo, 32, seed=0)
    assert all(critic.normalizer.mean.numel() == OBS + 8 for critic in critics(algo))
    losses = algo.losses(batch, ReferTerms(beta=1.0, c_max=2.0, lr_factor=1.0))
    q_name = "loss_q"
    cell = algo.behaviour.body.cell
    grads = torch.autograd.grad(losses.stats[q_name].mean(), list(cell.parameters()),
                                allow_unused=True)
    assert any(g is not None and g.abs().max() > 0 for g in grads)


def recurrent_learner(horizon: int = 6, **vracer: int) -> Learner:
    """A GRU V-RACER learner whose replay holds 400 transitions of Walk episodes (``vracer``:
    more of its settings)."""
    config = build_config({"run": {"env": "history_envs:Walk", "compile": "off"},
                           "env": {"horizon": horizon},
                           "vracer": {"cell": "gru", "cell_width": 8, "bptt": 4, "batch": 32,
                                      "hidden": [16, 16], **vracer},
                           "replay": {"size": 2000, "learn_start": 300}})
    env = make_driver(SolverSpec.of(config), None)
    learner = make_learner(config, env.obs_dim, env.act_dim, SerialReducer())
    actor = make_actor(config, env, learner.algo.behaviour.program(), 0, 0)
    while learner.replay.n_transitions < 400:
        chunk, _ = actor.step()
        if chunk is not None:
            learner.store(chunk)
    learner.update_start(400, 400)
    return learner


def taken_step(learner: Learner) -> tuple[np.ndarray, np.ndarray, Batch]:
    """The rows and validity mask the learner's next step samples and the minibatch that
    step is given (the step itself is taken)."""
    seen = []
    step = learner.step
    learner.step = lambda batch, terms, t: (seen.append(batch), step(batch, terms, t))[1]
    state = learner.rng.bit_generator.state
    rows, valid = learner.sample()
    learner.rng.bit_generator.state = state
    learner.train_step()
    learner.step = step
    np.testing.assert_array_equal(seen[0].rows, rows)
    return rows, valid, seen[0]


def test_padding_rows_weigh_nothing_in_the_step():
    _, valid, batch = taken_step(recurrent_learner())
    np.testing.assert_array_equal(batch.weight, valid.astype(np.float32))
    assert not valid.all()


def test_a_recurrent_step_refreshes_the_valid_rows_of_its_sequences_only():
    """After a step, each valid row holds the V_w and rho of its first valid place in the
    sequences, a row that is only padding keeps its values, and the bootstrap states after
    the valid rows get V_w of their own row."""
    learner = recurrent_learner()
    replay = learner.replay
    padded = 0
    for _ in range(3):
        state = learner.rng.bit_generator.state
        rows, valid = learner.sample()
        learner.rng.bit_generator.state = state
        padded += int((~valid).sum())
        value, rho = replay.value.copy(), replay.rho.copy()
        result = learner.train_step()
        seen: set[int] = set()
        for j in np.flatnonzero(valid):
            if rows[j] not in seen:
                seen.add(int(rows[j]))
                assert replay.value[rows[j]] == result.value[j]
                assert replay.rho[rows[j]] == result.rho[j]
        padding = np.setdiff1d(rows[~valid], rows[valid])
        np.testing.assert_array_equal(replay.value[padding], value[padding])
        np.testing.assert_array_equal(replay.rho[padding], rho[padding])
        boot = replay.bootstrap_rows(rows[valid])
        if boot.size:
            np.testing.assert_array_equal(replay.value[boot],
                                          learner.algo.values(replay.obs[boot]))
    assert padded, "some sequences were padded (episodes of 6 steps, W = 4)"


def first_rows_of_step(learner: Learner) -> tuple[np.ndarray, np.ndarray]:
    """The sampled rows of the learner's next step and the states [n, row_dim] its batch
    gives the first row of each sequence (the step itself is taken)."""
    rows, _, batch = taken_step(learner)
    return rows, batch.obs[::learner.config.algorithm.sequence_length]


def test_the_burn_in_starts_each_unroll_from_the_carry_the_current_cell_reaches():
    """With burn-in b = 3 the batch's first row of each sequence holds the carry of the
    torch cell run from the stored carry of the earliest of the (up to) 3 steps before it
    through those steps; every other row is the replay's own."""
    learner = recurrent_learner(horizon=12, burn_in=3)
    for _ in range(2):
        learner.train_step()
    replay, body = learner.replay, learner.algo.behaviour.body
    d = learner.algo.obs_dim
    state = learner.rng.bit_generator.state
    rows, _ = learner.sample()
    learner.rng.bit_generator.state = state
    starts = rows[::4]
    before, valid = preceding(starts, 3, replay.prev)
    before, valid = before.reshape(-1, 3), valid.reshape(-1, 3)
    assert valid.all(axis=1).any() and (~valid).all(axis=1).any()
    expected = []
    with torch.no_grad():
        for start, prefix, ok in zip(starts, before, valid, strict=True):
            steps = [*prefix[ok], start]
            carry = torch.from_numpy(replay.obs[steps[0]:steps[0] + 1, d:])
            for k in steps[:-1]:
                state = torch.from_numpy(replay.obs[k:k + 1, :d])
                carry = body.rows(torch.cat([state, carry], dim=-1)).carry
            expected.append(carry[0].numpy())
    taken, firsts = first_rows_of_step(learner)
    np.testing.assert_array_equal(taken, rows)
    np.testing.assert_allclose(firsts[:, d:], np.stack(expected), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(firsts[:, :d], replay.obs[starts, :d])


@pytest.mark.parametrize("burn_in", [0, 12])
def test_a_burn_in_back_to_the_episode_start_forgets_the_stale_stored_carries(burn_in):
    """Episodes of 6 steps, b = 12 reaches back to every episode's start, whose carry is 0:
    perturbing every other stored carry leaves the carries the sequences start from as
    they were. Without burn-in (b = 0, the control) the stored carries are what they start
    from, so the perturbation moves them."""
    learner = recurrent_learner(horizon=6, burn_in=burn_in)
    replay, d = learner.replay, learner.algo.obs_dim
    state = learner.rng.bit_generator.state, torch.get_rng_state()
    snapshot = learner.checkpoint_state()
    _, clean = first_rows_of_step(learner)
    learner.restore_state(snapshot)
    learner.rng.bit_generator.state, torch_state = state
    torch.set_rng_state(torch_state)
    used = np.arange(replay.size)
    later = used[replay.prev[used] >= 0]
    assert later.size and (replay.prev[used] < 0).any()
    replay.obs[later, d:] += 0.7
    _, stale = first_rows_of_step(learner)
    if burn_in:
        np.testing.assert_allclose(stale, clean, rtol=1e-5, atol=1e-6)
    else:
        assert not np.allclose(stale[:, d:], clean[:, d:])


def test_the_burn_in_steps_are_outside_the_refresh_of_rho():
    """After a step with burn-in, the rows that were only in burn-in prefixes keep their rho
    and V_w (neither the losses nor Rule 1's count see them)."""
    learner = recurrent_learner(horizon=12, burn_in=4)
    replay = learner.replay
    state = learner.rng.bit_generator.state
    rows, valid = learner.sample()
    learner.rng.bit_generator.state = state
    before, used = preceding(rows[::4], 4, replay.prev)
    only_burnt = np.setdiff1d(before[used], rows[valid])
    assert only_burnt.size
    value, rho = replay.value.copy(), replay.rho.copy()
    learner.train_step()
    np.testing.assert_array_equal(replay.rho[only_burnt], rho[only_burnt])
    np.testing.assert_array_equal(replay.value[only_burnt], value[only_burnt])


@pytest.mark.parametrize(("sequences", "expected"), [(0, 8), (5, 5)])
def test_a_minibatch_holds_the_configured_number_of_sequences(sequences, expected):
    """``sequences`` sequences of W = 4 rows per minibatch; 0: batch / W = 32 / 4."""
    learner = recurrent_learner(sequences=sequences)
    rows, valid = learner.sample()
    assert rows.size == valid.size == expected * 4


@pytest.mark.parametrize(("table", "named"), [

    ({"vracer": {"cell": "rnn"}}, "vracer.cell = 'rnn'"),
    ({"vracer": {"cell": "gru"}, "replay": {"sampling": "per"}}, "replay.sampling = 'per'"),
    ({"vracer": {"cell": "gru", "burn_in": -1}}, "vracer.burn_in = -1"),
    ({"vracer": {"cell": "gru", "sequences": -2}}, "vracer.sequences = -2"),
])
def test_bad_recurrent_settings_are_one_line_naming_the_key(table, named):
    with pytest.raises(ConfigError, match=f"^{named} is invalid"):
        build_config(table)


@pytest.mark.parametrize("name", sorted(set(BUILT_IN) - set(RECURRENT)))
def test_an_algorithm_without_recurrent_networks_has_no_cell_key(name):
    with pytest.raises(ConfigError, match=rf"^unknown config key {name}\.cell: allowed keys are"):
        build_config({"run": {"algorithm": name}, name: {"cell": "gru"}})


@pytest.mark.parametrize("name", RECURRENT)
def test_a_recurrent_run_restarts_bit_for_bit_and_evaluates(in_tmp, name):
    """A GRU policy on Walk, 50-step episodes in chunks of 40, checkpoint mid-episode after
    440 steps: the resumed run's carries (in the actor's rows, the replay's rows and the
    episode in progress) and networks equal the straight run's."""
    small = [a.replace("--vracer.", f"--{name}.") for a in SMALL]
    common = ["--env", "history_envs:Walk", "--env.horizon", "50", "--algorithm", name,
              f"--{name}.cell", "gru", f"--{name}.cell-width", "8", f"--{name}.bptt", "4",
              "--seed", "1", "--checkpoint-every", "430", *small]
    straight = assert_resumes_straight(in_tmp, common, 800, "step-000000000440")
    assert evaluate_main([str(straight), "--episodes", "2", "--out", "ev.json"]) == 0
    assert json.loads(Path("ev.json").read_text())["length_mean"] == 50


@pytest.mark.parametrize("cell", [Cell.GRU, Cell.LSTM])
def test_the_cell_starts_as_torchs_cells_uniform_in_plus_minus_one_over_root_width(cell):
    """Every weight and bias starts in U(-1/sqrt(H), 1/sqrt(H)), as torch.nn.GRUCell and
    LSTMCell initialise theirs: bounded by it and spread over it (H = 16: bound 0.25; over
    more than 1,000 values the mean is within 5 standard errors of 0)."""
    torch.manual_seed(3)
    ours = RecurrentCell(cell, 5, 16)
    values = torch.cat([p.detach().reshape(-1) for p in ours.parameters()])
    assert values.numel() > 1000
    assert values.abs().max() <= 0.25
    assert values.max() > 0.24 and values.min() < -0.24
    assert abs(float(values.mean())) < 5 * 0.25 / 3**0.5 / values.numel() ** 0.5


@pytest.mark.parametrize("name", RECURRENT)
@pytest.mark.parametrize("cell", [Cell.GRU, Cell.LSTM])
def test_each_algorithms_recurrent_policy_is_built_as_configured_and_its_numpy_step_agrees(
        name, cell):
    """The behaviour policy of ``{name}.cell`` has that cell and the table's activation (ReLU
    where the table offers it), and the actors' numpy step gives the torch policy's mean and
    std and the cell's new carry, row by row from stored carries."""
    relu = has_field(name, "activation")
    config = build_config({"run": {"algorithm": name},
                           name: {"cell": str(cell), "cell_width": 4, "hidden": [8],
                                  **({"activation": "relu"} if relu else {})}})
    torch.manual_seed(0)
    net = algorithm_class(name).behaviour_policy(3, 2, config.algorithm)
    assert net.body.cell.lstm is (cell is Cell.LSTM)
    assert net.carry_dim == (8 if cell is Cell.LSTM else 4)
    kinds = {type(m).__name__ for m in net.body.trunk}
    assert ("ReLU" in kinds) is relu and ("Softsign" in kinds) is not relu
    rng = np.random.default_rng(5)
    rows = rng.standard_normal((6, 3 + net.carry_dim)).astype(np.float32)
    with torch.no_grad():
        mean, std = (x.numpy() for x in net.policy(torch.from_numpy(rows)))
        carry = net.body.rows(torch.from_numpy(rows))[2].numpy()
    np_mean, np_std, np_carry = net.numpy_step()(rows)
    np.testing.assert_allclose(np_mean, mean, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.broadcast_to(np_std, mean.shape),
                               np.broadcast_to(std, mean.shape), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(np_carry, carry, rtol=1e-4, atol=1e-5)


def test_the_recurrent_value_is_the_trunks_first_output():
    """V-RACER's recurrent net reads V_w from output 0 of its trunk and the mean from the
    rest (as the feed-forward net), in its step and in its sequences."""
    config = build_config({"run": {"algorithm": "vracer"},
                           "vracer": {"cell": "gru", "cell_width": 4, "hidden": [8]}})
    torch.manual_seed(0)
    net = algorithm_class("vracer").behaviour_policy(3, 2, config.algorithm)
    with torch.no_grad():
        net.body.trunk[-1].bias.copy_(torch.tensor([5.0, -1.0, 1.0]))
    rows = torch.from_numpy(np.random.default_rng(6).standard_normal((8, 3 + 4))
                            .astype(np.float32))
    with torch.no_grad():
        out = net.body.rows(rows)[0]
        value, mean, _ = net(rows)
        seq_value, seq_mean, _ = net.sequences(rows, 2)
        seq_out = net.body.sequences(rows, 2)[0]
    torch.testing.assert_close(value, out[:, 0])
    torch.testing.assert_close(mean, out[:, 1:])
    torch.testing.assert_close(seq_value, seq_out[:, 0])
    torch.testing.assert_close(seq_mean, seq_out[:, 1:])
    assert value.mean() > 3.0 and mean.mean() < 3.0
