"""Sum tree for prioritized replay: sums after updates, stratified sampling, input checks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpc_refer.replay.sumtree import SumTree

PRIORITY = st.one_of(
    st.just(0.0),
    st.floats(0.0, 1e6, allow_nan=False, allow_infinity=False),
    st.sampled_from([5e-324, 1e-300, 1e-12, 0.1, 0.2, 0.3, 1.0]),
)
FAST = settings(max_examples=60, deadline=None)


@st.composite
def filled_tree(draw, max_capacity=70):
    """A tree after a random sequence of updates (rows may repeat), and the reference leaves."""
    capacity = draw(st.integers(1, max_capacity))
    tree = SumTree(capacity)
    leaves = np.zeros(capacity)
    for _ in range(draw(st.integers(1, 6))):
        k = draw(st.integers(0, 2 * capacity))
        rows = draw(st.lists(st.integers(0, capacity - 1), min_size=k, max_size=k))
        prios = draw(st.lists(PRIORITY, min_size=k, max_size=k))
        tree.update(np.array(rows, np.int64), np.array(prios, np.float64))
        for r, p in zip(rows, prios, strict=True):
            leaves[r] = p  # the last value of a repeated row wins
    return tree, leaves


class ConstantRng:
    """Stands in for a Generator whose draws all equal ``u`` (1.0 mimics rounding overshoot)."""

    def __init__(self, u: float) -> None:
        self.u = u

    def random(self, n: int) -> np.ndarray:
        return np.full(n, self.u)


@FAST
@given(filled_tree())
def test_total_and_internal_nodes_match_leaves(case):
    tree, leaves = case
    P = tree.n_leaves
    np.testing.assert_array_equal(tree.get(np.arange(tree.capacity)), leaves)
    assert tree.total == pytest.approx(leaves.sum(), rel=1e-12, abs=0.0)
    t = tree.tree
    assert not t[P + tree.capacity:].any(), "padding leaves must stay 0"
    # every internal node is exactly the sum of its children (no drift, no stale parent):
    # one float64 addition each, correctly rounded on every IEEE machine
    np.testing.assert_array_equal(t[1:P], t[2:2 * P:2] + t[3:2 * P:2])
    assert tree.max_priority >= leaves.max()


@FAST
@given(filled_tree(), st.integers(1, 200), st.integers(0, 2**32 - 1))
def test_sampled_rows_have_positive_priority(case, n, seed):
    tree, leaves = case
    if tree.total == 0.0:
        with pytest.raises(ValueError, match="total priority is 0"):
            tree.sample(n, np.random.default_rng(seed))
        return
    rows = tree.sample(n, np.random.default_rng(seed))
    assert rows.dtype == np.int64 and rows.shape == (n,)
    assert ((rows >= 0) & (rows < tree.capacity)).all()
    assert (leaves[rows] > 0).all()
    assert (np.diff(rows) >= 0).all()  # one draw per segment, segments in order


@FAST
@given(filled_tree(), st.integers(1, 64), st.sampled_from([0.0, np.nextafter(1.0, 0.0), 1.0]))
def test_extreme_draws_never_reach_a_zero_leaf(case, n, u):
    """Draws at the segment edges (and past the total, as rounding can produce) stay positive."""
    tree, leaves = case
    if tree.total == 0.0:
        return
    rows = tree.sample(n, ConstantRng(u))  # type: ignore[arg-type]
    assert (leaves[rows] > 0).all()


def test_rounding_at_the_total_with_trailing_zero_leaves():
    """Leaves 0.1, 0.2, 0.3 then zeros: u at the top of [0, total) must end on row 2, not 3."""
    tree = SumTree(6)
    tree.update(np.arange(6), np.array([0.1, 0.2, 0.3, 0.0, 0.0, 0.0]))
    for u in (np.nextafter(1.0, 0.0), 1.0):
        rows = tree.sample(7, ConstantRng(u))  # type: ignore[arg-type]
        assert rows[-1] == 2
        assert (tree.get(rows) > 0).all()


def test_frequencies_match_probabilities():
    rng = np.random.default_rng(1234)
    capacity = 37
    p = rng.exponential(size=capacity)
    p[rng.random(capacity) < 0.3] = 0.0
    tree = SumTree(capacity)
    tree.update(np.arange(capacity), p)
    draws = np.concatenate([tree.sample(32, rng) for _ in range(2000)])
    counts = np.bincount(draws, minlength=capacity)
    assert counts[p == 0].sum() == 0
    pos = p > 0
    expected = draws.size * p[pos] / p.sum()
    chi2 = float(((counts[pos] - expected) ** 2 / expected).sum())
    df = int(pos.sum()) - 1
    # multinomial chi-square bound; stratification only lowers the statistic
    assert chi2 < df + 5.0 * np.sqrt(2.0 * df), (chi2, df)
    # but a uniform sampler (ignoring priorities) must fail it
    uniform = np.bincount(rng.choice(np.flatnonzero(pos), draws.size), minlength=capacity)
    assert float(((uniform[pos] - expected) ** 2 / expected).sum()) > df + 5.0 * np.sqrt(2.0 * df)


def test_one_stratified_sample_is_within_two_of_expectation():
    """With one draw per segment, row i is hit n P(i) times up to the two boundary segments."""
    rng = np.random.default_rng(7)
    capacity = 300
    p = rng.exponential(size=capacity) ** 2
    p[::7] = 0.0
    tree = SumTree(capacity)
    tree.update(np.arange(capacity), p)
    n = 20_000
    counts = np.bincount(tree.sample(n, rng), minlength=capacity)
    assert np.abs(counts - n * tree.probabilities(np.arange(capacity))).max() < 2.0 + 1e-6


@FAST
@given(filled_tree())
def test_probabilities_sum_to_one(case):
    tree, leaves = case
    if tree.total == 0.0:
        with pytest.raises(ValueError, match="total priority is 0"):
            tree.probabilities(np.arange(tree.capacity))
        return
    rows = np.flatnonzero(leaves > 0)
    probs = tree.probabilities(rows)
    assert (probs >= 0).all()  # 5e-324 / total may underflow to 0
    assert probs.sum() == pytest.approx(1.0, rel=1e-12)
    assert (tree.probabilities(np.flatnonzero(leaves == 0)) == 0).all()


@pytest.mark.parametrize("capacity", [1, 2, 3, 5, 100, 1000, 2**10 + 1])
def test_capacity_not_a_power_of_two(capacity):
    tree = SumTree(capacity)
    assert tree.n_leaves >= capacity and tree.n_leaves & (tree.n_leaves - 1) == 0
    assert tree.n_leaves < 2 * capacity
    tree.update(np.arange(capacity), 1.0)  # a scalar priority applies to every row
    assert tree.total == float(capacity)
    rows = tree.sample(4 * capacity, np.random.default_rng(0))
    assert rows.max() < capacity
    # equal priorities, one draw per segment: every row, the last one included, is hit 4 times
    np.testing.assert_array_equal(np.bincount(rows, minlength=capacity), 4)
    if capacity > 1:  # with the last row zeroed, the trailing zero leaves are never reached
        tree.update(np.array([capacity - 1]), np.array([0.0]))
        assert tree.sample(4 * capacity, np.random.default_rng(0)).max() == capacity - 2


def test_max_priority_is_a_running_max():
    tree = SumTree(4)
    assert tree.max_priority == 0.0
    tree.update(np.array([0, 1]), np.array([3.0, 5.0]))
    assert tree.max_priority == 5.0
    tree.update(np.array([1]), np.array([0.5]))  # lowering the max row keeps the running max
    assert tree.max_priority == 5.0
    tree.update(np.array([2, 2]), np.array([9.0, 1.0]))  # set, even if overwritten in the call
    assert tree.max_priority == 9.0
    np.testing.assert_array_equal(tree.get(np.arange(4)), [3.0, 0.5, 1.0, 0.0])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda t: t.update(np.array([0]), np.array([np.nan])), "finite"),
        (lambda t: t.update(np.array([0]), np.array([np.inf])), "finite"),
        (lambda t: t.update(np.array([0, 1]), np.array([1.0, -0.5])), ">= 0"),
        (lambda t: t.update(np.array([10]), np.array([1.0])), r"row 10 out of range \[0, 10\)"),
        (lambda t: t.update(np.array([-1]), np.array([1.0])), "row -1 out of range"),
        (lambda t: t.update(np.array([0.5]), np.array([1.0])), "integers"),
        (lambda t: t.update(np.array([[0]]), np.array([[1.0]])), "1-D"),
        (lambda t: t.update(np.array([0, 1]), np.array([1.0])), "does not match"),
        (lambda t: t.get(np.array([10])), "out of range"),
        (lambda t: t.sample(4, np.random.default_rng(0)), "total priority is 0"),
        (lambda t: t.probabilities(np.array([0])), "total priority is 0"),
    ],
)
def test_bad_input_raises(call, message):
    tree = SumTree(10)
    with pytest.raises(ValueError, match=message):
        call(tree)
    np.testing.assert_array_equal(tree.tree, 0.0)  # a rejected update changes nothing


def test_bad_capacity_and_sample_size():
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        SumTree(0)
    tree = SumTree(3)
    tree.update(np.array([1]), np.array([1.0]))
    with pytest.raises(ValueError, match="sample size must be >= 1"):
        tree.sample(0, np.random.default_rng(0))
    tree.update(np.array([0, 2]), np.array([1e308, 1e308]))
    with pytest.raises(ValueError, match="not finite"):
        tree.sample(1, np.random.default_rng(0))
