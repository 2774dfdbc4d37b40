"""``replay.forget = far_policy``: a full shard forgets whole episodes, the largest fraction of
far-policy transitions first (ties: the oldest; an episode still being continued last), new
rows take the freed ones; episode ids survive a checkpoint, and schema-1 shards (without
them) get them back from their links. The invariants under random operations (links, counts,
V-tbc, sampling) are the property tests of test_replay_properties.py, run under both rules."""

from __future__ import annotations

import numpy as np
import pytest
from learners import small_learner

from hpc_refer.config.modes import ConfigError, Forget
from hpc_refer.config.resolve import build_config
from hpc_refer.replay.shard import ReplayShard
from hpc_refer.report.records import OPEN, TERMINATED, TRUNCATED, Chunk

C_MAX = 2.0


def chunk(n_act: int, end: int = TERMINATED, source: int = 0) -> Chunk:
    n = n_act + (end == TRUNCATED)
    obs = np.arange(n, dtype=np.float32)[:, None]
    return Chunk(obs=obs, act=obs[:n_act].copy(), rew=np.ones(n_act, np.float32),
                 mu_mean=np.zeros((n_act, 1), np.float32),
                 mu_std=np.ones((n_act, 1), np.float32), end=end, source=source)


def store(shard: ReplayShard, n_act: int, n_far: int, end: int = TERMINATED,
          source: int = 0) -> np.ndarray:
    """An episode chunk of ``n_act`` transitions, the first ``n_far`` of them far-policy
    (rho = 10 >= c_max), the rest near (rho = 1)."""
    rows = shard.add(chunk(n_act, end, source), C_MAX)
    rho = np.ones(rows.size, np.float32)
    rho[:n_far] = 10.0
    shard.refresh(rows, np.zeros(rows.size, np.float32), rho, C_MAX)
    return rows


def far_shard(capacity: int = 12) -> ReplayShard:
    return ReplayShard(capacity, 1, 1, 0.9, forget=Forget.FAR_POLICY)


def test_the_episode_with_the_largest_far_fraction_goes_first():
    shard = far_shard()
    a = store(shard, 4, 1)  # 1/4 far
    b = store(shard, 4, 3)  # 3/4 far: forgotten first
    c = store(shard, 4, 0)
    assert shard.n_far == 4
    d = store(shard, 3, 0)
    assert sorted(d.tolist()) == sorted(b[:3].tolist()), "the new rows are b's freed ones"
    assert shard.flags[b[3]] == 0 and shard.episode[b[3]] == -1
    assert (shard.n_far, shard.n_transitions, shard.n_removed) == (1, 11, 4)
    assert np.all(shard.flags[a]) and np.all(shard.flags[c])
    e = store(shard, 2, 0)  # b[3] alone is free; then a (1/4) goes before c and d (0)
    assert set(e.tolist()) <= set(a.tolist()) | {b[3]}
    assert not np.any(shard.flags[np.setdiff1d(a, e)]) and np.all(shard.flags[c])


def test_ties_go_to_the_oldest_episode():
    shard = far_shard()
    a = store(shard, 4, 2)
    b = store(shard, 4, 2)
    store(shard, 4, 0)
    new = store(shard, 4, 0)
    assert sorted(new.tolist()) == sorted(a.tolist()) and np.all(shard.flags[b])


def test_an_episode_still_being_continued_goes_last_and_its_continuation_starts_anew():
    shard = far_shard()
    tail = store(shard, 4, 4, end=OPEN, source=7)  # all far, but its actor continues it
    done = store(shard, 4, 1)
    store(shard, 4, 0)
    new = store(shard, 4, 0)
    assert sorted(new.tolist()) == sorted(done.tolist()) and np.all(shard.flags[tail])
    awaited = shard.episode[tail[0]]
    store(shard, 11, 0)  # frees every episode: the awaited one last
    assert awaited not in shard.episode
    cont = store(shard, 2, 0, source=7)
    assert shard.prev[cont[0]] == -1, "its tail is gone: the continuation is a new episode"
    assert shard.episode[cont[0]] not in shard.episode[np.setdiff1d(np.flatnonzero(
        shard.flags), cont)]


def test_a_continuation_links_to_its_stored_tail_wherever_the_rows_are():
    shard = far_shard()
    tail = store(shard, 3, 0, end=OPEN, source=1)
    store(shard, 4, 4)
    store(shard, 4, 0)
    cont = store(shard, 3, 0, source=1)  # takes rows of the far episode, not the ring's next
    assert shard.prev[cont[0]] == tail[-1] and shard.next[tail[-1]] == cont[0]
    assert shard.episode[cont].tolist() == [shard.episode[tail[0]]] * 3


def snapshot(shard: ReplayShard) -> dict:
    tree = shard.checkpoint_state()
    return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in tree.items()
            if not isinstance(v, dict)}


def test_checkpoint_restores_holes_episodes_and_what_is_forgotten_next():
    shard = far_shard()
    store(shard, 4, 1)
    store(shard, 3, 0, end=OPEN, source=2)
    store(shard, 4, 3)
    store(shard, 2, 0)  # frees the 3/4 episode, leaves holes
    assert np.count_nonzero(shard.flags == 0) > 0
    copy = far_shard()
    copy.restore_state(shard.checkpoint_state())
    for k, v in snapshot(shard).items():
        np.testing.assert_array_equal(snapshot(copy)[k], v, err_msg=k)
    for twin in (shard, copy):
        store(twin, 5, 0, source=2)
        store(twin, 4, 2)
    for k, v in snapshot(shard).items():
        np.testing.assert_array_equal(snapshot(copy)[k], v, err_msg=k)


def test_a_schema_1_shard_gets_its_episode_ids_from_the_links():
    shard = far_shard(20)
    store(shard, 4, 1)
    store(shard, 3, 0, end=OPEN, source=2)
    store(shard, 5, 2, end=TRUNCATED)
    store(shard, 2, 0, source=2)  # continues the open episode
    tree = shard.checkpoint_state()
    old = {k: v for k, v in tree.items()  # as schema 1 wrote it: no ids, no version stamp
           if k not in ("episode", "next_episode", "tree_version")}
    copy = far_shard(20)
    copy.restore_state(old)
    np.testing.assert_array_equal(copy.episode, shard.episode)
    assert copy.checkpoint_state()["next_episode"] == tree["next_episode"]


@pytest.mark.parametrize("forget", list(Forget))
def test_the_learner_builds_its_shard_with_the_configured_rule(forget):
    assert small_learner(forget=forget.value).replay.forget is forget


def test_a_bad_rule_names_the_field_and_the_allowed_values():
    with pytest.raises(ConfigError, match=r"replay\.forget = 'newest' is invalid: allowed "
                                          r"values are oldest, far_policy"):
        build_config({"replay": {"forget": "newest"}})


def test_the_stored_episodes_of_a_shard_with_holes_skip_the_holes():
    """Rows freed by forgetting a whole episode (flags 0 inside the used range) are no
    episode of a checkpoint: a resized restart deals out exactly the episodes in use."""
    from hpc_refer.replay.tree import stored_episodes

    shard = far_shard()
    a = store(shard, 4, 1)
    b = store(shard, 4, 3)  # forgotten first
    c = store(shard, 4, 0)
    d = store(shard, 3, 0)  # takes three of b's rows: b[3] stays a hole
    assert shard.flags[b[3]] == 0
    found = stored_episodes(shard.checkpoint_state())
    assert sorted(r.tolist() for r in found) == sorted(x.tolist() for x in (a, c, d))
