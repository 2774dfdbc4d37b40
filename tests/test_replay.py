"""Replay memory: V-tbc recursion (eq. 8) against a plain loop, FIFO removal, sampling."""

from __future__ import annotations

import numpy as np
import pytest

from hpc_refer.replay.shard import HAS_ACTION, ReplayShard
from hpc_refer.report.records import OPEN, TERMINATED, TRUNCATED, Chunk

GAMMA = 0.9


def make_chunk(rng, n_act, end, source=0, ds=3, da=2):
    n = n_act + (1 if end == TRUNCATED else 0)
    return Chunk(
        obs=rng.standard_normal((n, ds)).astype(np.float32),
        act=rng.standard_normal((n_act, da)).astype(np.float32),
        rew=rng.standard_normal(n_act).astype(np.float32),
        mu_mean=rng.standard_normal((n_act, da)).astype(np.float32),
        mu_std=np.full((n_act, da), 0.5, np.float32),
        end=end,
        source=source,
    )


def reference_vtbc(values, rhos, rewards, gamma, end, bootstrap):
    """Plain backward loop of eq. 8 over one episode of T transitions.

    values[t], rhos[t], rewards[t] for t < T; after a terminal transition V-tbc_T = 0, after a
    truncation V-tbc_T = V(s_T) = ``bootstrap``.
    """
    T = len(rewards)
    out = np.zeros(T)
    nxt = 0.0 if end == TERMINATED else bootstrap
    for t in range(T - 1, -1, -1):
        rb = min(1.0, rhos[t])
        out[t] = values[t] + rb * (rewards[t] + gamma * nxt - values[t])
        nxt = out[t]
    return out


def fill_values(replay, rows, rng):
    value = rng.standard_normal(rows.size).astype(np.float32)
    rho = rng.uniform(0.2, 2.5, rows.size).astype(np.float32)
    replay.refresh(rows, value, rho, c_max=2.0)
    return value, rho


@pytest.mark.parametrize("end", [TERMINATED, TRUNCATED])
def test_vtbc_matches_reference_loop(end):
    rng = np.random.default_rng(0)
    replay = ReplayShard(100, 3, 2, GAMMA)
    chunk = make_chunk(rng, 12, end)
    rows = replay.add(chunk, c_max=2.0)
    value, rho = fill_values(replay, rows, rng)
    bootstrap = value[-1] if end == TRUNCATED else 0.0
    expected = reference_vtbc(value[:12], np.where(np.arange(rows.size) < 12, rho, 1)[:12],
                              chunk.rew, GAMMA, end, bootstrap)
    np.testing.assert_allclose(replay.vtbc[rows[:12]], expected, rtol=1e-5, atol=1e-6)
    if end == TRUNCATED:
        assert replay.vtbc[rows[12]] == pytest.approx(value[12])
        q_ret = replay.batch(rows[11:12]).q_ret
        assert q_ret is not None and q_ret[0] == pytest.approx(chunk.rew[11] + GAMMA * value[12])
    else:
        assert replay.batch(rows[11:12]).q_ret[0] == pytest.approx(chunk.rew[11])


def test_truncation_is_not_terminal():
    rng = np.random.default_rng(1)
    replay = ReplayShard(50, 3, 2, GAMMA)
    chunk = make_chunk(rng, 5, TRUNCATED)
    rows = replay.add(chunk, 2.0)
    replay.refresh(rows, np.full(rows.size, 10.0, np.float32), np.ones(rows.size, np.float32), 2)
    # V(s_T) = 10 is bootstrapped: Q-ret of the last step is r + gamma * 10, not r.
    assert replay.batch(rows[4:5]).q_ret[0] == pytest.approx(chunk.rew[4] + GAMMA * 10.0)


def test_refresh_of_sampled_rows_redoes_the_episode_prefix():
    """Changing V and rho of a few rows gives the same V-tbc as the loop on the new values."""
    rng = np.random.default_rng(2)
    replay = ReplayShard(200, 3, 2, GAMMA)
    chunks = [make_chunk(rng, n, e, source=s) for n, e, s in
              [(20, TERMINATED, 0), (15, TRUNCATED, 1), (30, TERMINATED, 0)]]
    all_rows = [replay.add(c, 2.0) for c in chunks]
    for rows in all_rows:
        fill_values(replay, rows, rng)
    sampled = np.array([all_rows[0][7], all_rows[0][3], all_rows[2][25], all_rows[1][14]])
    new_v = rng.standard_normal(sampled.size).astype(np.float32)
    new_rho = rng.uniform(0.1, 3.0, sampled.size).astype(np.float32)
    replay.refresh(sampled, new_v, new_rho, 2.0)
    for chunk, rows in zip(chunks, all_rows, strict=True):
        m = chunk.act.shape[0]
        boot = replay.value[rows[m]] if chunk.end == TRUNCATED else 0.0
        expected = reference_vtbc(replay.value[rows[:m]], replay.rho[rows[:m]], chunk.rew,
                                  GAMMA, chunk.end, boot)
        np.testing.assert_allclose(replay.vtbc[rows[:m]], expected, rtol=1e-5, atol=1e-5)


def test_chunks_of_one_episode_link_across_other_sources():
    rng = np.random.default_rng(3)
    replay = ReplayShard(200, 3, 2, GAMMA)
    a1 = make_chunk(rng, 6, OPEN, source=0)
    b = make_chunk(rng, 4, TERMINATED, source=1)
    a2 = make_chunk(rng, 5, TERMINATED, source=0)
    r1 = replay.add(a1, 2.0)
    assert not replay.sampleable(r1[-1:]).any(), "open tail has no successor yet"
    replay.add(b, 2.0)
    r2 = replay.add(a2, 2.0)
    assert replay.next[r1[-1]] == r2[0] and replay.prev[r2[0]] == r1[-1]
    assert replay.sampleable(r1).all()
    rows = np.concatenate([r1, r2])
    fill_values(replay, rows, rng)
    expected = reference_vtbc(replay.value[rows], replay.rho[rows],
                              np.concatenate([a1.rew, a2.rew]), GAMMA, TERMINATED, 0.0)
    np.testing.assert_allclose(replay.vtbc[rows], expected, rtol=1e-5, atol=1e-5)


def test_fifo_forgets_oldest_rows_and_counts_them():
    rng = np.random.default_rng(4)
    replay = ReplayShard(25, 3, 2, GAMMA)
    first = replay.add(make_chunk(rng, 10, TERMINATED), 2.0)
    second = replay.add(make_chunk(rng, 9, TRUNCATED), 2.0)  # 10 states
    assert replay.size == 20 and replay.n_transitions == 19
    third = replay.add(make_chunk(rng, 8, TERMINATED), 2.0)  # overwrites the 3 oldest rows
    assert replay.size == 25
    np.testing.assert_array_equal(third, [20, 21, 22, 23, 24, 0, 1, 2])
    assert replay.n_removed == 3
    assert replay.n_transitions == 19 + 8 - 3
    # The first episode now starts at its 4th step: no predecessor left.
    assert replay.prev[first[3]] == -1
    assert (replay.flags[second] & HAS_ACTION).sum() == 9
    np.testing.assert_array_equal(third[5:], first[:3])


def test_open_tail_forgotten_before_its_continuation_is_not_linked():
    rng = np.random.default_rng(5)
    replay = ReplayShard(10, 3, 2, GAMMA)
    replay.add(make_chunk(rng, 4, OPEN, source=7), 2.0)
    replay.add(make_chunk(rng, 9, TRUNCATED, source=1), 2.0)  # 10 states: forgets the open chunk
    cont = replay.add(make_chunk(rng, 2, TERMINATED, source=7), 2.0)
    assert replay.prev[cont[0]] == -1


def test_open_tail_still_stored_is_linked():
    rng = np.random.default_rng(5)
    replay = ReplayShard(13, 3, 2, GAMMA)
    tail = replay.add(make_chunk(rng, 4, OPEN, source=7), 2.0)
    replay.add(make_chunk(rng, 8, TERMINATED, source=1), 2.0)
    cont = replay.add(make_chunk(rng, 2, TERMINATED, source=7), 2.0)  # rows 12 and 0
    assert replay.prev[cont[0]] == tail[-1] and replay.next[tail[-1]] == cont[0]
    assert replay.prev[tail[-1]] == tail[-2] and replay.prev[tail[1]] == -1


def test_continuation_that_overwrites_its_own_tail_is_not_linked():
    rng = np.random.default_rng(5)
    replay = ReplayShard(10, 3, 2, GAMMA)
    replay.add(make_chunk(rng, 4, OPEN, source=7), 2.0)
    replay.add(make_chunk(rng, 4, TERMINATED, source=1), 2.0)
    cont = replay.add(make_chunk(rng, 6, TERMINATED, source=7), 2.0)  # rows 8, 9, 0, .., 3
    assert replay.prev[cont[0]] == -1
    assert replay.next[cont[-1]] == -1


def test_sampling_returns_only_valid_transitions():
    rng = np.random.default_rng(6)
    replay = ReplayShard(64, 3, 2, GAMMA)
    for s in range(12):
        replay.add(make_chunk(rng, int(rng.integers(1, 9)), [OPEN, TERMINATED, TRUNCATED][s % 3],
                              source=s % 4), 2.0)
    rows = replay.sample_rows(5000, np.random.default_rng(0))
    assert rows.size == 5000
    assert rows.min() >= 0 and rows.max() < replay.size
    assert replay.sampleable(rows).all()
    valid = np.flatnonzero(replay.sampleable(np.arange(replay.size)))
    assert set(np.unique(rows)) == set(valid), "every valid transition can be drawn"


def test_far_count_is_incremental_and_matches_recount():
    rng = np.random.default_rng(7)
    replay = ReplayShard(40, 3, 2, GAMMA)
    for s in range(8):
        rows = replay.add(make_chunk(rng, 6, TERMINATED, source=s), 2.0)
        replay.refresh(rows, np.zeros(rows.size, np.float32),
                       rng.uniform(0.1, 4.0, rows.size).astype(np.float32), 2.0)
    incremental = replay.n_far
    acts = (replay.flags[: replay.size] & HAS_ACTION) != 0
    r = replay.rho[: replay.size][acts]
    assert incremental == np.count_nonzero((r <= 0.5) | (r >= 2.0))
    assert replay.recount_far(2.0) == incremental


def test_rho_histogram_counts_stored_actions_by_log10_rho():
    replay = ReplayShard(40, 3, 2, GAMMA)
    rng = np.random.default_rng(3)
    rows = replay.add(make_chunk(rng, 5, TRUNCATED), 2.0)  # 6 states, 5 with an action
    replay.refresh(rows, None, np.array([1e-5, 0.05, 1.0, 30.0, 1e6, 7.0], np.float32), 2.0)
    edges = np.array([-2.0, -1.0, 0.0, 1.0, 2.0])
    # 1e-5 clipped into the first bin, 0.05 in [-2, -1), 1 in [0, 1), 30 in [1, 2],
    # 1e6 clipped into the last; the state without an action (the 7.0) is not counted
    assert replay.rho_histogram(edges).tolist() == [2, 0, 1, 2]


def test_sampling_with_no_complete_transition_is_an_error():
    """A single open chunk of one step: its successor has not arrived, nothing is
    sampleable, and sampling says so instead of looping forever."""
    replay = ReplayShard(16, 3, 2, GAMMA)
    replay.add(make_chunk(np.random.default_rng(0), 1, OPEN), 2.0)
    with pytest.raises(ValueError, match="nothing to sample"):
        replay.sample_rows(4, np.random.default_rng(1))


# --- the stored episodes of a shard checkpoint (a resized restart deals them out) -----------


def _episode(n_act: int, end: int, start: float) -> Chunk:
    """An episode chunk whose every column holds distinct values beginning at ``start``."""
    n = n_act + (end == TRUNCATED)
    obs = (start + np.arange(n, dtype=np.float32))[:, None]
    acts = obs[:n_act]
    return Chunk(obs=obs, act=acts + 0.25, rew=acts[:, 0] + 0.5, mu_mean=acts - 0.5,
                 mu_std=acts + 100.0, end=end)


def test_stored_episodes_of_a_wrapped_ring_come_back_oldest_first_as_their_chunks():
    """After the ring wrapped (FIFO cut the oldest episode's first rows), every stored
    episode is found from its first remaining row, in ring age order, and gives back its
    chunk: columns, and an end of TERMINATED, TRUNCATED or OPEN from its last row."""
    from hpc_refer.replay.tree import episode_chunk, stored_episodes

    shard = ReplayShard(10, 1, 1, 0.9)
    episodes = [_episode(4, TERMINATED, 0.0), _episode(3, TRUNCATED, 10.0),
                _episode(2, TERMINATED, 20.0), _episode(1, OPEN, 30.0)]
    for e in episodes:
        shard.add(e, 2.0)
    tree = shard.checkpoint_state()
    found = stored_episodes(tree)
    assert [r.tolist() for r in found] == [[1, 2, 3], [4, 5, 6, 7], [8, 9], [0]]
    cut_first = episodes[0]._replace(obs=episodes[0].obs[1:], act=episodes[0].act[1:],
                                     rew=episodes[0].rew[1:], mu_mean=episodes[0].mu_mean[1:],
                                     mu_std=episodes[0].mu_std[1:])
    for rows, want in zip(found, [cut_first, *episodes[1:]], strict=True):
        got = episode_chunk(tree, rows)
        assert got.end == want.end
        for name in ("obs", "act", "rew", "mu_mean", "mu_std"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name), name)


def test_an_episode_that_fills_the_shard_is_not_a_cycle():
    """One episode of exactly N rows is one episode; links that loop are refused."""
    from hpc_refer.replay.tree import stored_episodes

    shard = ReplayShard(6, 1, 1, 0.9)
    shard.add(_episode(6, TERMINATED, 0.0), 2.0)
    tree = shard.checkpoint_state()
    assert [r.tolist() for r in stored_episodes(tree)] == [list(range(6))]
    tree["next"] = tree["next"].copy()
    tree["next"][5] = 1
    with pytest.raises(ValueError) as err:
        stored_episodes(tree)
    assert str(err.value) == "replay checkpoint: the next links of its rows form a cycle"
