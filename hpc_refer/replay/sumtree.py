"""A sum tree over the replay ring, for prioritized experience replay (proportional variant).

Prioritized experience replay (Schaul et al. 2016, "Prioritized Experience Replay", Sec. 3.3)
samples transition i with probability

    P(i) = p_i / sum_k p_k,

where p_i >= 0 is the priority of row i (proportional variant: p_i = |delta_i| + eps, raised to
the power alpha by the caller). Here a priority of 0 means "never sampled": rows that are not
sampleable transitions (empty rows, final states of truncated episodes, transitions whose
successor has not arrived) keep priority 0.

Tree layout
-----------
One float64 array ``tree`` of size 2P, where P is the smallest power of two >= capacity. Leaf
``row`` lives at ``tree[P + row]`` (leaves P + capacity .. 2P - 1 are padding and stay 0),
internal node i >= 1 holds ``tree[2i] + tree[2i + 1]``, so ``tree[1]`` is the total; ``tree[0]``
is unused. An update sets its leaves and then recomputes every ancestor of a changed leaf from
its two children (O(k log P) for k rows). Parents are never adjusted by adding deltas, so the
internal sums do not drift: each one is always the rounded sum of its children.

Stratified sampling
-------------------
``sample(n)`` splits [0, total) into n equal segments, draws one uniform value per segment
(u_j = (j + U_j) total / n, U_j ~ U[0, 1)) and descends from the root: at node i go left if
u < tree[2i], otherwise subtract tree[2i] and go right. The leaf reached is the row whose slice
of the cumulative sum contains u, so each row is drawn with probability P(i) (the sample is a
stratified one: counts deviate from n P(i) by less than 2, unlike n independent draws).

Rounding can leave u at or beyond the sum of the subtree it descends into (u close to the total,
or u just below a cumulative boundary followed by zero leaves). The descent therefore never
enters a child whose sum is 0: it goes left only when the left sum is positive and u falls in it
(or the right sum is 0), and right otherwise. Every node entered has a positive sum (a sum of
two non-negative floats is positive iff one of them is), so the descent always ends on a leaf
with positive priority.
"""

from __future__ import annotations

import numba
import numpy as np

from hpc_refer.report.records import StateTree


@numba.njit(cache=True, nogil=True)
def _update(tree, n_leaves, rows, priorities):
    """Set the leaves of ``rows`` (in order: the last value of a repeated row wins), then
    recompute every ancestor of a changed leaf from its children.

    All leaves are written before any ancestor is recomputed, and a path is walked bottom-up,
    so the last recomputation of each node comes after the last recomputation of its children:
    every node on a changed path ends up equal to the sum of its children's final values.
    """
    for j in range(rows.shape[0]):
        tree[n_leaves + rows[j]] = priorities[j]
    for j in range(rows.shape[0]):
        i = (n_leaves + rows[j]) >> 1
        while i >= 1:
            tree[i] = tree[2 * i] + tree[2 * i + 1]
            i >>= 1


@numba.njit(cache=True, nogil=True)
def _sample(tree, n_leaves, uniforms, out):
    """Stratified descent: one value per segment of [0, total), never ending on a zero leaf."""
    n = uniforms.shape[0]
    segment = tree[1] / n
    for j in range(n):
        u = (j + uniforms[j]) * segment
        i = 1
        while i < n_leaves:
            left = tree[2 * i]
            if left > 0.0 and (u < left or tree[2 * i + 1] <= 0.0):
                i = 2 * i
            else:
                u -= left
                i = 2 * i + 1
        out[j] = i - n_leaves


class SumTree:
    """Priorities of ``capacity`` replay rows with O(log capacity) proportional sampling.

    All priorities start at 0 (never sampled). ``max_priority`` is a running maximum: the
    largest priority ever set, not the largest one currently stored (see its docstring).
    """

    def __init__(self, capacity: int) -> None:
        capacity = int(capacity)
        if capacity < 1:
            raise ValueError(f"SumTree capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.n_leaves = 1 << (capacity - 1).bit_length()
        """P: the smallest power of two >= capacity; leaf ``row`` is ``tree[P + row]``."""
        self.tree = np.zeros(2 * self.n_leaves, np.float64)
        self._max = 0.0

    @property
    def total(self) -> float:
        """Sum of all priorities (the root of the tree)."""
        return float(self.tree[1])

    @property
    def max_priority(self) -> float:
        """Largest priority ever passed to ``update`` (0.0 on a fresh tree).

        A running maximum, cheaper than an exact maximum of the current leaves (which would
        need a second, max-tree): it never decreases, even when the row that held the maximum
        is overwritten or lowered. That is what PER needs, since new transitions get "the
        maximal priority seen so far" (Schaul et al. 2016, Algorithm 1). On a fresh tree it is
        0.0, which would make new rows unsampleable: callers should insert new rows with
        ``max(tree.max_priority, 1.0)`` or another positive floor (Algorithm 1 starts at 1).
        """
        return self._max

    def raise_max_priority(self, priority: float) -> None:
        """Raise the running maximum to at least ``priority`` (rows carried over from another
        tree, whose running maximum may exceed every priority it still holds)."""
        self._max = max(self._max, float(priority))

    def checkpoint_state(self) -> StateTree:
        """The leaves p_0 .. p_{capacity-1} (float64) and the running maximum.

        The internal nodes are not stored: each is the rounded sum of its two children
        (see the module docstring), so :meth:`restore_state` rebuilds them bit for bit.
        """
        return {"capacity": self.capacity,
                "leaves": self.tree[self.n_leaves : self.n_leaves + self.capacity].copy(),
                "max_priority": self._max}

    def restore_state(self, state: StateTree) -> None:
        """Inverse of :meth:`checkpoint_state` (same capacity): the leaves, then every level
        of internal nodes from the level below, tree[i] = tree[2i] + tree[2i + 1]."""
        if int(state["capacity"]) != self.capacity:
            raise ValueError(f"SumTree capacity {state['capacity']} in the checkpoint, "
                             f"{self.capacity} here")
        leaves = np.asarray(state["leaves"], np.float64)
        if leaves.shape != (self.capacity,):
            raise ValueError(f"SumTree leaves of shape {leaves.shape}, expected "
                             f"({self.capacity},)")
        self.tree[:] = 0.0
        self.tree[self.n_leaves : self.n_leaves + self.capacity] = leaves
        width = self.n_leaves // 2
        while width >= 1:
            level = self.tree[2 * width : 4 * width]
            self.tree[width : 2 * width] = level[0::2] + level[1::2]
            width //= 2
        self._max = float(state["max_priority"])

    def _rows(self, rows: np.ndarray) -> np.ndarray:
        r = np.asarray(rows)
        if r.ndim != 1:
            raise ValueError(f"rows must be a 1-D array, got shape {r.shape}")
        if r.size and r.dtype.kind not in "iu":
            raise ValueError(f"rows must be integers, got dtype {r.dtype}")
        r = r.astype(np.int64, copy=False)
        if r.size and (r.min() < 0 or r.max() >= self.capacity):
            bad = r[(r < 0) | (r >= self.capacity)][0]
            raise ValueError(f"row {bad} out of range [0, {self.capacity})")
        return np.ascontiguousarray(r)

    def update(self, rows: np.ndarray, priorities: np.ndarray | float) -> None:
        """Set the priorities of ``rows``; a repeated row takes its last value.

        ``priorities`` has the shape of ``rows`` or is a scalar (e.g. ``max_priority`` for new
        rows). Priorities must be finite and >= 0; 0 makes a row unsampleable.
        """
        r = self._rows(rows)
        p = np.asarray(priorities, dtype=np.float64)
        if p.ndim == 0:
            p = np.full(r.shape, float(p))
        elif p.shape != r.shape:
            raise ValueError(f"priorities shape {p.shape} does not match rows shape {r.shape}")
        if r.size == 0:
            return
        if not np.isfinite(p).all():
            raise ValueError("priorities must be finite (got NaN or inf)")
        if (p < 0.0).any():
            raise ValueError(f"priorities must be >= 0, got {p[p < 0.0].min()}")
        _update(self.tree, self.n_leaves, r, np.ascontiguousarray(p))
        self._max = max(self._max, float(p.max()))

    def get(self, rows: np.ndarray) -> np.ndarray:
        """Leaf priorities of ``rows`` (a copy, float64)."""
        return self.tree[self.n_leaves + self._rows(rows)]

    def probabilities(self, rows: np.ndarray) -> np.ndarray:
        """P(row) = p_row / total, the probability that one draw of ``sample`` returns row."""
        total = self.total
        if total <= 0.0:
            raise ValueError("probabilities of an empty SumTree (total priority is 0)")
        return self.get(rows) / total

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Stratified sample of ``n`` rows (int64), row i drawn with probability P(i).

        Rows with priority 0 are never returned. The draw of segment j is the j-th output, so
        rows come out in non-decreasing order (shuffle them if order matters). Raises
        ValueError if the total is 0 (nothing sampleable) or not finite (the priorities' sum
        overflowed float64).
        """
        n = int(n)
        if n < 1:
            raise ValueError(f"sample size must be >= 1, got {n}")
        total = self.total
        if total <= 0.0:
            raise ValueError("cannot sample from a SumTree whose total priority is 0")
        if not np.isfinite(total):
            raise ValueError(f"total priority is not finite ({total}): priorities too large")
        uniforms = np.ascontiguousarray(rng.random(n), dtype=np.float64)
        out = np.empty(n, np.int64)
        _sample(self.tree, self.n_leaves, uniforms, out)
        return out
