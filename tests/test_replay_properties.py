"""Property-based tests (hypothesis) of the replay shard against the test's own record.

A scenario is a random shard (small capacity, so forgetting happens, under either rule of
``replay.forget``), gamma, c_max and reward scale, and a random sequence of operations as the
learner performs them: chunks of episodes from several interleaved sources (actors) ending
OPEN, TERMINATED or TRUNCATED (with the final state s_T as a row without action), each stored
and refreshed with V and rho at once like ``VRacer.ingest``; refreshes of random stored rows
with repetitions; training-like steps (``sample_rows``, refresh of the minibatch, refresh of
the s_T rows that follow it); c_max changes with ``recount_far``; reward scale changes with
``recompute_all_vtbc``.

The test records every state it sent (episode, order, reward, the last V and rho it gave)
and derives from that record alone what the shard must hold: the stored states are the last
``capacity`` sent (``oldest``), or what remains after forgetting whole episodes by the rule
of ``far_policy`` replayed on the record (:meth:`Harness.forget_episodes`); V-tbc is a plain
backward loop of eq. 8 over each episode's stored states, and the counts are recounts. Each
test checks one property after every operation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hpc_refer.config.modes import Forget
from hpc_refer.replay.kernels import ATOL, RTOL
from hpc_refer.replay.shard import HAS_ACTION, IN_USE, TERMINAL, ReplayShard
from hpc_refer.report.records import OPEN, TERMINATED, TRUNCATED, Chunk

SOURCES = 3
MAX_ACTIONS = 6
"""Transitions per chunk at most (the capacity bounds it too)."""

EPS32 = 2.0**-24
"""Unit roundoff of float32."""

PROPERTY = settings(max_examples=60, deadline=None)


class Add(NamedTuple):
    """An actor's chunk, then its refresh with V and rho (``value``/``rho`` per state)."""

    source: int
    end: int
    rew: tuple[float, ...]
    value: tuple[float, ...]
    rho: tuple[float, ...]


class Refresh(NamedTuple):
    """``refresh`` of stored states picked by index (modulo their number), then repeated."""

    picks: tuple[int, ...]
    value: tuple[float, ...]
    rho: tuple[float, ...]
    repeats: tuple[int, ...]
    with_rho: bool


class Train(NamedTuple):
    """A minibatch from ``sample_rows`` refreshed with rho, then its s_T rows without rho."""

    seed: int
    batch: int
    value: tuple[float, ...]
    rho: tuple[float, ...]


class SetCMax(NamedTuple):
    """A new c_max, then ``recount_far`` with it (later refreshes and adds classify with it)."""

    c_max: float


class SetScale(NamedTuple):
    """A new reward scale, then ``recompute_all_vtbc`` (exact)."""

    scale: float


class Scenario(NamedTuple):
    """Shard parameters, operations, and the seed of the row order of the final exact pass."""

    capacity: int
    gamma: float
    c_max: float
    scale: float
    ops: tuple
    order_seed: int
    forget: Forget = Forget.OLDEST


f32 = {"width": 32, "allow_nan": False, "allow_infinity": False}
# Round numbers as well, so that exact ties and cancellations (V-tbc = 0, V-tbc = V) occur.
rewards = st.one_of(st.floats(-3.0, 3.0, **f32), st.sampled_from([0.0, 1.0, -1.0, 0.5]))
values = st.one_of(st.floats(-4.0, 4.0, **f32), st.sampled_from([0.0, 1.0, -1.0, 0.5]))
# Plenty of far-policy ratios (<= 1/c_max or >= c_max), some exactly on the bounds of c_max =
# 2 or 4, and rho > 1 (clipped by rho-bar).
rhos = st.one_of(st.floats(0.0, 4.0, **f32), st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0, 4.0]))
c_maxes = st.one_of(st.floats(1.1, 4.0), st.sampled_from([2.0, 4.0]))
scales = st.floats(0.25, 4.0)


@st.composite
def scenarios(draw) -> Scenario:
    """Random shard parameters and operations; a source's chunks continue its open episode."""
    capacity = draw(st.integers(2, 14))
    open_sources: set[int] = set()
    ops: list = []
    for _ in range(draw(st.integers(1, 24))):
        kind = draw(st.sampled_from(["add", "add", "add", "refresh", "train", "c_max", "scale"]))
        if kind == "add":
            source = draw(st.integers(0, SOURCES - 1))
            end = draw(st.sampled_from([OPEN, TERMINATED, TRUNCATED]))
            extra = end == TRUNCATED
            # A chunk of s_T alone closes an episode whose earlier chunks were sent (an actor
            # after a solver fault); otherwise a chunk holds at least one transition.
            least = 0 if extra and source in open_sources else 1
            m = draw(st.integers(least, min(MAX_ACTIONS, capacity - extra)))
            n = m + extra
            ops.append(Add(source, end, tuple(draw(st.lists(rewards, min_size=m, max_size=m))),
                           tuple(draw(st.lists(values, min_size=n, max_size=n))),
                           tuple(draw(st.lists(rhos, min_size=n, max_size=n)))))
            (open_sources.add if end == OPEN else open_sources.discard)(source)
        elif kind == "refresh":
            k = draw(st.integers(1, 6))
            ops.append(Refresh(
                tuple(draw(st.lists(st.integers(0, 100), min_size=k, max_size=k))),
                tuple(draw(st.lists(values, min_size=k, max_size=k))),
                tuple(draw(st.lists(rhos, min_size=k, max_size=k))),
                tuple(draw(st.lists(st.integers(0, k - 1), max_size=4))),
                draw(st.booleans()),
            ))
        elif kind == "train":
            batch = draw(st.integers(1, 12))
            ops.append(Train(draw(st.integers(0, 2**16)), batch,
                             tuple(draw(st.lists(values, min_size=2 * batch,
                                                 max_size=2 * batch))),
                             tuple(draw(st.lists(rhos, min_size=batch, max_size=batch)))))
        elif kind == "c_max":
            ops.append(SetCMax(draw(c_maxes)))
        else:
            ops.append(SetScale(draw(scales)))
    return Scenario(capacity, draw(st.floats(0.5, 1.0)), draw(c_maxes), draw(scales),
                    tuple(ops), draw(st.integers(0, 2**16)), draw(st.sampled_from(Forget)))


CONTINUED_TAIL = Scenario(
    capacity=8, gamma=1.0, c_max=2.0, scale=1.0, order_seed=0, ops=(
        Add(0, OPEN, rew=(0.0, 1.0), value=(0.0, 5.0), rho=(1.0, 1.0)),
        Add(0, TERMINATED, rew=(0.5, -0.5), value=(0.0, 0.0), rho=(1.0, 1.0)),
    ))
"""The continuation's first V-tbc is 0.5 - 0.5 = 0, the V-tbc that ``add`` gives new rows;
the open tail it continues must still be redone: V-tbc 5 (= V, open) becomes 1 + 0."""


@dataclass
class Sent:
    """A state as the test sent it, with the last V and rho the test gave it."""

    episode: int
    has_action: bool
    terminal: bool
    reward: float
    value: float = 0.0
    rho: float = 1.0
    succ: int = -1
    """Send index of the next state of the episode, once sent."""


class Harness:
    """A shard and the test's record of everything sent to it (indexed by send order)."""

    def __init__(self, sc: Scenario, on_store=None) -> None:
        self.on_store = on_store
        """Called after ``add``, before the refresh of the new rows (which walks the links)."""
        self.capacity, self.gamma, self.forget = sc.capacity, sc.gamma, sc.forget
        self.c_max, self.scale = sc.c_max, sc.scale
        self.shard = ReplayShard(sc.capacity, 2, 1, sc.gamma, forget=sc.forget)
        self.shard.reward_scale = sc.scale
        self.states: list[Sent] = []
        self.kept: set[int] = set()
        """Send indices of the states the shard must hold."""
        self.row_of: list[int] = []
        """Ring row that ``add`` returned for each sent state."""
        self.at_row: dict[int, int] = {}
        self.episodes: list[list[int]] = []
        self.open: dict[int, int] = {}
        """Source -> episode continued by its next chunk."""
        self.passes = 0
        """Non-exact V-tbc passes (refresh calls) since the last exact full recompute."""
        self.magnitude = 1.0
        self.sampled = np.empty(0, np.int64)

    # -- the record --------------------------------------------------------------------------

    def stored(self) -> list[int]:
        """Send indices of the stored states, in the order sent."""
        return sorted(self.kept)

    def forget_episodes(self, n: int) -> None:
        """``far_policy``: until ``n`` more states fit, drop the kept states of the episode
        with the largest fraction of far-policy transitions among them (0 without any),
        preferring episodes no source continues, then the one whose first kept state is the
        oldest."""
        while self.capacity - len(self.kept) < n:
            awaited = set(self.open.values())
            keys = []
            for e, episode in enumerate(self.episodes):
                kept = [w for w in episode if w in self.kept]
                if not kept:
                    continue
                acts = [w for w in kept if self.states[w].has_action]
                far = far_recount([self.states[w].rho for w in acts], self.c_max)
                keys.append(((e in awaited, -(far / len(acts) if acts else 0.0), kept[0]),
                             kept))
            self.kept -= set(min(keys)[1])

    def rows(self, ids: list[int]) -> np.ndarray:
        return np.array([self.row_of[w] for w in ids], np.int64)

    def sampleable(self, w: int) -> bool:
        s = self.states[w]
        return s.has_action and (s.terminal or s.succ >= 0)

    def reference_vtbc(self) -> dict[int, float]:
        """Eq. 8 by a plain loop, backward over the stored states of each episode."""
        out: dict[int, float] = {}
        for episode in self.episodes:
            after = None  # V-tbc of the successor, None while it has not arrived
            for w in reversed([w for w in episode if w in self.kept]):
                s = self.states[w]
                rb = min(1.0, s.rho)
                if not s.has_action:  # s_T of a truncated episode: the bootstrap value
                    vtbc = s.value
                elif s.terminal:
                    vtbc = s.value + rb * (self.scale * s.reward - s.value)
                elif after is None:  # open tail: successor not sent yet
                    vtbc = s.value
                else:
                    vtbc = s.value + rb * (self.scale * s.reward + self.gamma * after - s.value)
                out[w] = after = vtbc
        return out

    def vtbc_tolerance(self, ref: dict[int, float]) -> float:
        """Allowed |V-tbc - reference| for the shard's float32, early-stopping passes.

        A non-exact pass stops at a row whose V-tbc changed by at most ATOL + RTOL |V-tbc|;
        the earlier rows keep values that are stale by at most that change (it shrinks by
        gamma min(1, rho) <= 1 per step back). Later passes may stop in the same stretch, so
        the staleness can add up over the passes since the last exact recompute. On top,
        float32 rounding of the recursion: a few units of roundoff of the largest magnitude
        per step, accumulated (again with a factor <= 1) over at most ``capacity`` steps.
        """
        stored = self.stored()
        mags = [abs(v) for v in ref.values()]
        mags += [abs(self.states[w].value) + self.scale * abs(self.states[w].reward)
                 for w in stored]
        self.magnitude = max(self.magnitude, 1.0 + max(mags, default=0.0))
        rounding = 16 * EPS32 * self.capacity * self.magnitude
        return self.passes * (ATOL + RTOL * self.magnitude) + rounding

    # -- operations ----------------------------------------------------------------------------

    def apply(self, op) -> None:
        match op:
            case Add():
                self._add(op)
            case Refresh():
                self._refresh_op(op)
            case Train():
                self._train(op)
            case SetCMax(c_max):
                self.c_max = c_max
                self.shard.recount_far(c_max)
            case SetScale(scale):
                self.scale = scale
                self.shard.reward_scale = scale
                self.shard.recompute_all_vtbc()
                self.passes = 0

    def _add(self, op: Add) -> None:
        m = len(op.rew)
        n = m + (op.end == TRUNCATED)
        first = len(self.states)
        ids = list(range(first, first + n))
        if self.forget is Forget.FAR_POLICY:
            self.forget_episodes(n)
        if op.source in self.open:
            episode = self.open.pop(op.source)
            self.states[self.episodes[episode][-1]].succ = first
        else:
            episode = len(self.episodes)
            self.episodes.append([])
        obs = np.array([[w, episode] for w in ids], np.float32)
        chunk = Chunk(obs=obs, act=obs[:m, :1].copy(), rew=np.array(op.rew, np.float32),
                      mu_mean=np.zeros((m, 1), np.float32), mu_std=np.ones((m, 1), np.float32),
                      end=op.end, source=op.source)
        rows = self.shard.add(chunk, self.c_max)
        assert rows.shape == (n,)
        for i, w in enumerate(ids):
            self.states.append(Sent(episode, i < m, op.end == TERMINATED and i == m - 1,
                                    op.rew[i] if i < m else 0.0, succ=w + 1 if i < n - 1 else -1))
            self.row_of.append(int(rows[i]))
            self.at_row[int(rows[i])] = w
        self.episodes[episode].extend(ids)
        self.kept.update(ids)
        if self.forget is Forget.OLDEST:
            self.kept -= set(range(len(self.states) - self.capacity))
        if op.end == OPEN:
            self.open[op.source] = episode
        if self.on_store is not None:
            self.on_store(self)
        self._assert_prev_chains_end()
        self._refresh(ids, dict(zip(ids, zip(op.value, op.rho, strict=True), strict=True)),
                      with_rho=True)

    def _assert_prev_chains_end(self) -> None:
        """The compiled V-tbc pass follows ``prev`` to -1: a cycle would hang it, not fail."""
        for row in self.rows(self.stored()):
            for _ in range(self.capacity + 1):
                row = self.shard.prev[row]
                if row < 0:
                    break
            assert row < 0, "prev links form a cycle"

    def _refresh(self, ids: list[int], given: dict[int, tuple[float, float]],
                 with_rho: bool) -> None:
        """``refresh`` of the rows of ``ids`` (repetitions kept), one (V, rho) per state."""
        value = np.array([given[w][0] for w in ids], np.float32)
        rho = np.array([given[w][1] for w in ids], np.float32)
        self.shard.refresh(self.rows(ids), value, rho if with_rho else None, self.c_max)
        self.passes += 1
        for w, (v, r) in given.items():
            s = self.states[w]
            s.value = float(np.float32(v))
            if with_rho and s.has_action:
                s.rho = float(np.float32(r))

    def _refresh_op(self, op: Refresh) -> None:
        stored = self.stored()
        if not stored:
            return
        chosen = [stored[p % len(stored)] for p in op.picks]
        given: dict[int, tuple[float, float]] = {}
        for w, v, r in zip(chosen, op.value, op.rho, strict=True):
            given.setdefault(w, (v, r))  # a state picked twice keeps one V and rho
        ids = chosen + [chosen[j] for j in op.repeats]
        self._refresh(ids, given, op.with_rho)

    def _train(self, op: Train) -> None:
        if not self.shard.sampleable(np.arange(self.shard.size)).any():
            return  # sample_rows would never return (whether that mask is right is checked)
        rows = self.shard.sample_rows(op.batch, np.random.default_rng(op.seed))
        self.sampled = rows
        ids = [self.at_row[int(r)] for r in rows]
        distinct = list(dict.fromkeys(ids))
        given = {w: (op.value[i], op.rho[i]) for i, w in enumerate(distinct)}
        self._refresh(ids, given, with_rho=True)
        finals = sorted({s.succ for s in (self.states[w] for w in distinct)
                         if s.succ >= 0 and not self.states[s.succ].has_action})
        if finals:
            self._refresh(finals, {w: (op.value[op.batch + i], 1.0)
                                   for i, w in enumerate(finals)}, with_rho=False)


def run(sc: Scenario, check, on_store=None) -> Harness:
    """Apply the scenario's operations, calling ``check(harness)`` after each one."""
    h = Harness(sc, on_store)
    for op in sc.ops:
        h.apply(op)
        check(h)
    return h


def assert_vtbc(h: Harness) -> None:
    stored = h.stored()
    if not stored:
        return
    rows = h.rows(stored)
    assert h.shard.value[rows].tolist() == [h.states[w].value for w in stored]
    assert h.shard.rho[rows].tolist() == [h.states[w].rho for w in stored]
    ref = h.reference_vtbc()
    want = np.array([ref[w] for w in stored])
    np.testing.assert_allclose(h.shard.vtbc[rows], want, rtol=0,
                               atol=h.vtbc_tolerance(ref))


@PROPERTY
@given(scenarios())
@example(CONTINUED_TAIL)
def test_vtbc_equals_a_plain_backward_loop(sc):
    """V-tbc of every stored state equals eq. 8 looped backward over the states sent.

    After every add (with its refresh), refresh, training step and scale change, within the
    early-stopping and float32 allowance; after an exact recompute from all stored rows given
    in random order, within float32 rounding alone. The V and rho columns hold the last V and
    rho given (rho = 1 for final states s_T).
    """
    h = run(sc, assert_vtbc)
    stored = h.stored()
    order = np.random.default_rng(sc.order_seed).permutation(h.rows(stored))
    h.shard.recompute_vtbc(order, exact=True)
    h.passes = 0
    assert_vtbc(h)


def far_recount(rho: np.ndarray, c_max: float) -> int:
    """Far-policy transitions among ``rho`` (float32, compared as the stored column is)."""
    rho = np.asarray(rho, np.float32)
    return int(np.count_nonzero((rho <= 1.0 / c_max) | (rho >= c_max)))


def assert_counts(h: Harness) -> None:
    shard, stored = h.shard, h.stored()
    acts = [w for w in stored if h.states[w].has_action]
    sent_acts = sum(s.has_action for s in h.states)
    used = np.flatnonzero(shard.flags & IN_USE)
    assert sorted(used.tolist()) == sorted(h.rows(stored).tolist())
    if h.forget is Forget.OLDEST:  # the ring fills from row 0 and never leaves a hole
        assert shard.size == len(stored)
    assert used.size == 0 or used.max() < shard.size
    with_action = (shard.flags[: shard.size] & HAS_ACTION) != 0
    assert shard.n_transitions == np.count_nonzero(with_action) == len(acts)
    assert shard.n_removed == sent_acts - len(acts)
    recount = far_recount(shard.rho[: shard.size][with_action], h.c_max)
    assert shard.n_far == recount == far_recount([h.states[w].rho for w in acts], h.c_max)


@PROPERTY
@given(scenarios(), c_maxes)
def test_counts_equal_recounts(sc, other_c_max):
    """n_transitions, n_far and n_removed always equal full recounts.

    n_transitions: rows with HAS_ACTION (and the transitions the test sent and FIFO kept);
    n_far: those with rho <= 1/c_max or rho >= c_max for the c_max of the refreshes, also
    when minibatches hold a row several times; n_removed: transitions sent minus stored.
    ``recount_far`` agrees with the incremental count, and with a recount for another c_max.
    Checked also right after each ``add``, before the refresh of the new rows.
    """
    h = run(sc, assert_counts, on_store=assert_counts)
    incremental = h.shard.n_far
    assert h.shard.recount_far(h.c_max) == incremental
    h.c_max = other_c_max
    assert h.shard.recount_far(other_c_max) == h.shard.n_far
    assert_counts(h)


def assert_q_ret_and_sampling(h: Harness) -> None:
    shard, stored = h.shard, h.stored()
    valid = [w for w in stored if h.sampleable(w)]
    mask = shard.sampleable(np.arange(shard.size))
    assert sorted(np.flatnonzero(mask).tolist()) == sorted(h.rows(valid).tolist())
    if h.sampled.size:
        assert h.sampled.min() >= 0 and h.sampled.max() < shard.size
        assert set(h.at_row[int(r)] for r in h.sampled) <= set(valid)
        follow = {h.states[h.at_row[int(r)]].succ for r in h.sampled}
        finals = sorted(h.row_of[w] for w in follow if w >= 0 and not h.states[w].has_action)
        assert shard.bootstrap_rows(h.sampled).tolist() == finals
        h.sampled = np.empty(0, np.int64)
    if not valid:
        return
    ref = h.reference_vtbc()
    want = []
    for w in valid:
        s = h.states[w]
        boot = 0.0 if s.terminal else ref[s.succ]
        want.append(h.scale * s.reward + h.gamma * boot)
    np.testing.assert_allclose(shard.batch(h.rows(valid)).q_ret, want, rtol=0,
                               atol=h.vtbc_tolerance(ref))


@PROPERTY
@given(scenarios())
@example(CONTINUED_TAIL)
def test_q_ret_and_sample_rows(sc):
    """Q-ret_k = scale r_k + gamma V-tbc_{k+1} (0 after a terminal step) for every sampleable
    row, ``sampleable`` holds exactly for transitions whose successor is stored or that are
    terminal, ``sample_rows`` draws only those, and ``bootstrap_rows`` of a minibatch are the
    s_T states that follow its rows."""
    run(sc, assert_q_ret_and_sampling)


def assert_links(h: Harness) -> None:
    shard = h.shard
    for episode in h.episodes:
        kept = [w for w in episode if w in h.kept]
        if not kept:
            continue
        row = h.row_of[kept[0]]
        assert shard.prev[row] == -1, "the first stored state of an episode has no prev"
        walked = []
        while row >= 0:
            assert len(walked) <= len(kept), "next links run past the episode"
            walked.append(row)
            row = int(shard.next[row])
        assert shard.obs[walked, 0].tolist() == [float(w) for w in kept]
        assert walked == h.rows(kept).tolist()
        assert shard.prev[walked[1:]].tolist() == walked[:-1]
        for w, r in zip(kept, walked, strict=True):
            s = h.states[w]
            assert bool(shard.flags[r] & HAS_ACTION) == s.has_action
            assert bool(shard.flags[r] & TERMINAL) == s.terminal


@PROPERTY
@given(scenarios())
def test_next_links_reproduce_each_episode(sc):
    """Following ``next`` from the first stored row of every episode gives its stored states
    in the order sent (across chunks of interleaved sources, forgetting dropping the oldest
    rows or whole episodes), and ends there; ``prev`` mirrors it; HAS_ACTION and TERMINAL
    flags are those sent.

    Checked also right after each ``add``, before the refresh walks the new links."""
    run(sc, assert_links, on_store=assert_links)
