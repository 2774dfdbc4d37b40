"""The compiled replay paths against a straightforward numpy reference.

``sample_rows``, ``batch``, ``bootstrap_rows``, ``refresh``, ``recompute_vtbc`` and
``scaling_sums`` of :class:`~hpc_refer.replay.shard.ReplayShard` run as numba kernels that fuse
several numpy steps (deduplication, value and rho stores, the far-policy count, the
newest-first order, eq. 8; the scaling sums in one pass).
:class:`NumpyShard` below does the same maths one numpy operation at a time, with eq. 8 as a
plain Python loop:

    V-tbc_k = V_k + min(1, rho_k) (scale r_{k+1} + gamma V-tbc_{k+1} - V_k)

(Novati & Koumoutsakos 2019, eq. 8), evaluated with the kernels' precision: the reward term
and Q-ret in float32, as numpy rounds ``scale * rew`` (weak Python scalars, NEP 50), and the
recursion as the kernel's linear form a_k + (gamma rho-bar_k) V-tbc_{k+1},
a_k = V_k + rho-bar_k (scale r_{k+1} - V_k), in numpy float32 scalars. Both shards go
through the random scenarios of ``test_replay_properties`` (interleaved sources, FIFO
forgetting, repeated rows, training-like steps, c_max and reward-scale changes), uniform or
prioritized, with or without V-tbc; after every operation every column, count, sample,
minibatch and generator state must agree: integers, flags, counts, sampled rows and generator
states exactly, floats to the round-off of their dtype (two implementations, ``tolerances.py``).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_replay_properties import (
    CONTINUED_TAIL,
    TERMINATED,
    TRUNCATED,
    Add,
    Refresh,
    Scenario,
    SetCMax,
    SetScale,
    Train,
    scenarios,
)
from tolerances import F32, F64

from hpc_refer.replay.kernels import ATOL, RTOL
from hpc_refer.replay.shard import (
    HAS_ACTION,
    TERMINAL,
    Batch,
    PriorityConfig,
    ReplayShard,
    ScalingSums,
)
from hpc_refer.report.records import Chunk


class NumpyShard(ReplayShard):
    """The compiled methods redone with plain numpy and a Python loop for eq. 8."""

    def sample_rows(self, batch: int, rng: np.random.Generator) -> np.ndarray:
        if self.tree is not None:
            return self.tree.sample(batch, rng)
        out = np.empty(0, np.int64)
        while out.size < batch:
            cand = rng.integers(0, self.size, size=batch + batch // 4 + 8)
            out = np.concatenate([out, cand[self.sampleable(cand)]])
        return out[:batch]

    def batch(self, rows: np.ndarray, beta_is: float = 1.0) -> Batch:
        succ = self.next[rows]
        done = (self.flags[rows] & TERMINAL) != 0
        next_rows = np.where(done | (succ < 0), rows, succ)
        return Batch(rows, self.obs[rows], self.act[rows], self.mu_mean[rows],
                     self.mu_std[rows], self.log_mu[rows],
                     (self.reward_scale * self.rew[rows]).astype(np.float32),
                     self.obs[next_rows], done.astype(np.float32),
                     self.q_ret(rows) if self.retrace else None,
                     self.importance_weights(rows, beta_is))

    def q_ret(self, rows: np.ndarray) -> np.ndarray:
        succ = self.next[rows]
        terminal = (self.flags[rows] & TERMINAL) != 0
        boot = np.where(terminal, 0.0, self.vtbc[np.maximum(succ, 0)])
        return (self.reward_scale * self.rew[rows] + self.gamma * boot).astype(np.float32)

    def bootstrap_rows(self, rows: np.ndarray) -> np.ndarray:
        succ = self.next[rows]
        succ = succ[succ >= 0]
        return np.unique(succ[(self.flags[succ] & HAS_ACTION) == 0])

    def refresh(self, rows: np.ndarray, value: np.ndarray | None, rho: np.ndarray | None,
                c_max: float) -> None:
        rows, first = np.unique(np.asarray(rows), return_index=True)
        if rows.size == 0:
            return
        if value is not None:
            self.value[rows] = np.asarray(value)[first]
        if rho is not None:
            acts = rows[(self.flags[rows] & HAS_ACTION) != 0]
            before = self._far(acts, c_max)
            self.rho[rows] = np.where((self.flags[rows] & HAS_ACTION) != 0,
                                      np.asarray(rho)[first], 1.0)
            self.n_far += self._far(acts, c_max) - before
        if self.retrace:
            self.recompute_vtbc(rows)

    def recompute_vtbc(self, rows: np.ndarray, exact: bool = False) -> None:
        starts = np.unique(rows)
        starts = starts[np.argsort(-((starts - self.head) % self.capacity), kind="stable")]
        gamma, scale = np.float32(self.gamma), np.float32(self.reward_scale)
        seen: set[int] = set()
        for s in starts.tolist():
            if s in seen:
                continue
            k = s
            while k >= 0:
                seen.add(k)
                old, f = self.vtbc[k], self.flags[k]
                if f & HAS_ACTION and (f & TERMINAL or self.next[k] >= 0):
                    boot = np.float32(0.0) if f & TERMINAL else self.vtbc[self.next[k]]
                    rb = min(np.float32(1.0), self.rho[k])
                    v = self.value[k]
                    a = v + rb * (scale * self.rew[k] - v)
                    self.vtbc[k] = a + (gamma * rb) * boot
                else:
                    self.vtbc[k] = self.value[k]
                new = self.vtbc[k]
                if not exact and k != s and abs(new - old) <= ATOL + RTOL * abs(new):
                    break
                k = int(self.prev[k])


    def scaling_sums(self) -> ScalingSums:
        n = self.size
        used = self.flags[:n] != 0
        obs = self.obs[:n][used].astype(np.float64)
        rew = self.rew[:n][(self.flags[:n] & HAS_ACTION) != 0].astype(np.float64)
        return ScalingSums(obs.shape[0], rew.size, obs.sum(0), (obs**2).sum(0), float(rew.sum()),
                           float((rew**2).sum()))


def same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    """Equal shapes, dtype kinds and integers; floats of the same dtype equal to its round-off
    (NaN equal to NaN): the kernels and numpy evaluate the same formulas as different code,
    whose rounding a compiler for another CPU may change (tolerances.py)."""
    if a is None or b is None:
        return a is b
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype.kind != b.dtype.kind:
        return False
    if a.dtype.kind == "f":
        tol = F32 if a.dtype == np.float32 else F64
        return a.dtype == b.dtype and bool(np.allclose(a, b, equal_nan=True, **tol))
    return bool(np.array_equal(a, b))


class Twins:
    """A compiled shard and a numpy one, driven through the same operations."""

    def __init__(self, sc: Scenario, retrace: bool, per: bool) -> None:
        priorities = PriorityConfig(0.6, 1e-3) if per else None
        self.shards = [cls(sc.capacity, 2, 1, sc.gamma, retrace, priorities, sc.forget)
                       for cls in (ReplayShard, NumpyShard)]
        for shard in self.shards:
            shard.reward_scale = sc.scale
        self.retrace, self.c_max, self.beta = retrace, sc.c_max, 0.4
        self.sent = 0

    def both(self, method: str, *args):
        """Call ``method`` on both shards; its two results must be identical."""
        out = [getattr(shard, method)(*args) for shard in self.shards]
        if isinstance(out[0], Batch):
            for name, a, b in zip(Batch._fields, *out, strict=True):
                assert same(a, b), f"Batch.{name} differs"
        else:
            assert (out[0] is None and out[1] is None) or same(*out), f"{method} differs"
        return out[0]

    def check(self) -> None:
        a, b = self.shards
        for name in ("obs", "act", "rew", "log_mu", "value", "rho", "vtbc", "prev", "next",
                     "flags", "episode"):
            assert same(getattr(a, name), getattr(b, name)), f"column {name} differs"
        assert (a.n_far, a.n_transitions, a.head, a.size) == (
            b.n_far, b.n_transitions, b.head, b.size)
        if a.tree is not None and b.tree is not None:
            assert same(a.tree.tree, b.tree.tree)
        # float64 sums in another order than numpy's pairwise ones: equal to round-off
        np.testing.assert_allclose(a.scaling_sums().pack(), b.scaling_sums().pack(),
                                   rtol=1e-12, atol=0.0)

    def values(self, vs: tuple[float, ...]) -> np.ndarray | None:
        return np.array(vs, np.float32) if self.retrace else None

    def apply(self, op) -> None:
        match op:
            case Add():
                m = len(op.rew)
                n = m + (op.end == TRUNCATED)
                obs = np.stack([np.arange(self.sent, self.sent + n),
                                np.full(n, op.source)], 1).astype(np.float32)
                self.sent += n
                chunk = Chunk(obs, obs[:m, :1] * 0.5, np.array(op.rew, np.float32),
                              np.zeros((m, 1), np.float32), np.ones((m, 1), np.float32),
                              op.end, op.source)
                rows = self.both("add", chunk, self.c_max)
                self.both("refresh", rows, self.values(op.value), np.array(op.rho, np.float32),
                          self.c_max)
            case Refresh():
                used = np.flatnonzero(self.shards[0].flags)
                if used.size:
                    chosen = used[np.array(op.picks) % used.size]
                    rows = np.concatenate([chosen, chosen[list(op.repeats)]])
                    value = np.resize(np.array(op.value, np.float32), rows.size)
                    rho = np.resize(np.array(op.rho, np.float32), rows.size)
                    self.both("refresh", rows, value if self.retrace else None,
                              rho if op.with_rho else None, self.c_max)
            case Train():
                if not self.shards[0].sampleable(np.arange(self.shards[0].size)).any():
                    return
                rngs = [np.random.default_rng(op.seed) for _ in self.shards]
                rows = [shard.sample_rows(op.batch, rng)
                        for shard, rng in zip(self.shards, rngs, strict=True)]
                assert same(*rows), "sampled rows differ"
                assert rngs[0].bit_generator.state == rngs[1].bit_generator.state
                self.both("batch", rows[0], self.beta)
                self.both("refresh", rows[0], self.values(op.value[: op.batch]),
                          np.array(op.rho, np.float32), self.c_max)
                boot = self.both("bootstrap_rows", rows[0])
                if boot.size:
                    self.both("refresh", boot, self.values(op.value[op.batch:][: boot.size]),
                              None, self.c_max)
                self.both("update_priorities", rows[0], np.array(op.value[: op.batch]))
            case SetCMax(c_max):
                self.c_max = c_max
                self.both("recount_far", c_max)
            case SetScale(scale):
                for shard in self.shards:
                    shard.reward_scale = scale
                self.both("recompute_all_vtbc")


@settings(max_examples=80, deadline=None)
@given(scenarios(), st.booleans(), st.booleans())
def test_compiled_paths_equal_the_numpy_reference(sc, retrace, per):
    """After every add, refresh (rows repeated, with or without rho), training step (sample,
    minibatch, refresh, s_T rows, priorities), c_max change and reward-scale change, the
    compiled shard holds the numpy shard's columns (floats to round-off) and exactly its counts,
    and returned its samples and bootstrap rows exactly and its minibatches to round-off."""
    twins = Twins(sc, retrace, per)
    for op in sc.ops:
        twins.apply(op)
        twins.check()
    if retrace:
        used = np.flatnonzero(twins.shards[0].flags)
        twins.both("recompute_vtbc", used[::-1].copy(), True)
        twins.check()


def test_the_continued_open_tail_is_redone_as_in_the_reference():
    twins = Twins(CONTINUED_TAIL, True, False)
    for op in CONTINUED_TAIL.ops:
        twins.apply(op)
        twins.check()
    assert twins.shards[0].vtbc[1] == np.float32(1.0)


@pytest.mark.parametrize("c_max", [3.0, 3.3, 7.0])
def test_far_policy_bounds_compare_in_float32_as_numpy_does(c_max):
    """rho exactly at float32(1/c_max) or float32(c_max) is far-policy (numpy compares a
    float32 column with a Python float in float32), also where float64 would say otherwise."""
    shards = [cls(8, 1, 1, 0.9) for cls in (ReplayShard, NumpyShard)]
    chunk = Chunk(np.zeros((4, 1), np.float32), np.zeros((4, 1), np.float32),
                  np.zeros(4, np.float32), np.zeros((4, 1), np.float32),
                  np.ones((4, 1), np.float32), TERMINATED)
    rho = np.array([1.0 / c_max, c_max, 1.0, 1.0], np.float32)
    assert float(rho[0]) != 1.0 / c_max or float(rho[1]) != c_max  # float64 would differ
    for shard in shards:
        rows = shard.add(chunk, c_max)
        shard.refresh(rows, np.zeros(4, np.float32), np.ones(4, np.float32), c_max)
        shard.refresh(rows[::-1], None, rho[::-1], c_max)
    assert shards[0].n_far == shards[1].n_far == 2


def test_a_repeated_row_keeps_its_first_value_and_rho():
    shards = [cls(8, 1, 1, 0.9) for cls in (ReplayShard, NumpyShard)]
    chunk = Chunk(np.zeros((3, 1), np.float32), np.zeros((2, 1), np.float32),
                  np.ones(2, np.float32), np.zeros((2, 1), np.float32),
                  np.ones((2, 1), np.float32), TRUNCATED)
    for shard in shards:
        rows = shard.add(chunk, 2.0)
        shard.refresh(rows[[0, 1, 0, 2]], np.array([1, 2, 3, 4], np.float32),
                      np.array([0.1, 0.5, 0.9, 0.7], np.float32), 2.0)
    a, b = shards
    assert same(a.value, b.value) and same(a.rho, b.rho) and same(a.vtbc, b.vtbc)
    assert a.value[rows[0]] == 1 and a.rho[rows[0]] == np.float32(0.1)
    assert a.rho[rows[2]] == 1.0  # s_T carries no action: rho = 1
    assert a.n_far == b.n_far == 2  # rho 0.1 and 0.5 <= 1 / c_max


def test_passes_run_newest_first_so_an_older_start_sees_the_newer_pass():
    """Two refreshed rows of one episode: the pass from the newer one (the terminal row)
    stops after one step back (its change there is below ATOL), and the older start's pass
    then uses that step's new V-tbc: 0.5 (0.5 x 5e-8), not 0 as it would with the older
    start first. V = r = 0 elsewhere, gamma = rho = 0.5."""
    shards = [cls(8, 1, 1, 0.5) for cls in (ReplayShard, NumpyShard)]
    chunk = Chunk(np.zeros((5, 1), np.float32), np.zeros((5, 1), np.float32),
                  np.zeros(5, np.float32), np.zeros((5, 1), np.float32),
                  np.ones((5, 1), np.float32), TERMINATED)
    half = np.full(5, 0.5, np.float32)
    for shard in shards:
        rows = shard.add(chunk, 4.0)
        shard.refresh(rows, np.zeros(5, np.float32), half, 4.0)
        shard.refresh(rows[[2, 4]], np.array([0.0, 4e-7], np.float32), half[:2], 4.0)
    a, b = shards
    assert same(a.vtbc, b.vtbc)
    assert a.vtbc[rows[3]] == np.float32(np.float32(2e-7) * 0.25)
    assert a.vtbc[rows[2]] == np.float32(0.25 * a.vtbc[rows[3]]) != 0.0
