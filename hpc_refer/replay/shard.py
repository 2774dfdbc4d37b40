"""The replay memory (one shard per learner): preallocated numpy columns in a FIFO ring.

Storage
-------
Every stored *state* is one row. A row that carries an action also carries the reward that
followed it and the behaviour policy mu_k (mean and std of the Gaussian that drew a_k), plus
the most recently computed V_w(s_k), rho_k and V-tbc_k (Sec. 2 of the paper). Rows of one
episode are linked by ``prev``/``next`` indices, so episodes may arrive in chunks interleaved
with other actors' chunks. The last state s_T of an episode cut by a time limit is stored as a
row without action: its V_w(s_T) is the bootstrap value. After a terminal transition nothing
is stored (V-tbc after a terminal state is 0).

Forgetting (``replay.forget``) is first-in first-out over rows by default: a new row
overwrites the oldest one, and an episode whose first steps were forgotten simply starts later
(its remaining transitions stay valid). With ``far_policy`` a full shard forgets whole
episodes instead, the one with the largest fraction of far-policy transitions first (ties:
the oldest; an episode whose next chunk is still to come only when no other is left), and new
rows take the freed rows, wherever they are. The capacity counts stored states, final states
of truncated episodes included. Every row knows its episode (``episode``, an id per shard).

Only the learner writes these columns (:class:`~hpc_refer.loop.learner.Learner`): algorithms read
minibatches (:class:`Batch`) and return the values the learner stores back.

Sampling is uniform, or proportional prioritized replay (PER, Schaul et al. 2016): a
transition k is drawn with P(k) = p_k / sum_j p_j, p_k = (|delta_k| + eps)^alpha from its
last sampled error (new transitions get the largest priority so far), and its loss is weighted
by w_k = (N P(k))^-beta_IS / max_j w_j over the minibatch.

V-tbc (eq. 8), backward along an episode, with rho-bar = min(1, rho) and rewards scaled by
the replay's reward scale::

    V-tbc_k = V_k + rho-bar_k (r_{k+1} + gamma V-tbc_{k+1} - V_k)
    V-tbc_{k+1} = 0 after a terminal transition, V-tbc_T = V_w(s_T) at a truncation,
    and V-tbc_k = V_k while the successor of k has not arrived yet.

Notes
-----
With L learners each holds one shard of capacity N / L fed by its own actors; shards never
exchange rows. Counts that must be global (stored transitions, far-policy transitions) are
exposed as plain integers for the caller to reduce. Under PER each learner draws its B / L
rows from its own shard's priorities, with N and P(k) local to the shard (see ARCHITECTURE.md
for how this approximates one global distribution).

Checkpoints
-----------
:meth:`ReplayShard.checkpoint_state` hands over the first ``size`` rows of every column (rows
0 .. size-1 are the rows in use: the ring fills them in order and, once it has wrapped, size
is the capacity), the ring counters, the open tails and the PER tree; :meth:`restore_state`
makes a shard of the same capacity continue bit for bit. The tree's format and its upgrades,
and the dealing of its episodes out to another number of learners, are
:mod:`hpc_refer.replay.tree`'s.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hpc_refer.config.modes import Forget
from hpc_refer.replay.kernels import (
    HAS_ACTION,
    IN_USE,
    TERMINAL,
    final_successors,
    gather,
    state_reward_sums,
    store_refreshed,
    take_sampleable,
    vtbc_backward,
)
from hpc_refer.replay.near import NearBounds, is_far
from hpc_refer.replay.sumtree import SumTree
from hpc_refer.replay.tree import REPLAY_FORMAT
from hpc_refer.report.records import OPEN, TERMINATED, Chunk, StateTree

COLUMNS = ("obs", "act", "rew", "mu_mean", "mu_std", "log_mu", "value", "rho", "vtbc", "prev",
           "next", "flags", "episode")
"""The per-row columns of a shard, as a checkpoint stores them."""

_UNUSED_FILL = {"mu_std": 1, "rho": 1, "prev": -1, "next": -1, "episode": -1}
"""Value of a column in rows never written (0 for the columns not named)."""

_MARK_MAX = int(np.iinfo(np.int32).max)
"""The last visit stamp before the stamps are cleared."""


class Batch(NamedTuple):
    """A sampled minibatch of transitions k (numpy, float32)."""

    rows: np.ndarray
    obs: np.ndarray
    act: np.ndarray
    mu_mean: np.ndarray
    mu_std: np.ndarray
    log_mu: np.ndarray
    """log mu_k(a_k|s_k), stored when the step entered the replay memory."""
    rew: np.ndarray
    """r_{k+1} times the replay's reward scale."""
    next_obs: np.ndarray
    """s_{k+1} (s_k itself after a terminal transition, where ``done`` masks it)."""
    done: np.ndarray
    """1 after a terminal transition, else 0."""
    q_ret: np.ndarray | None
    """Q-ret_k = r_{k+1} + gamma V-tbc_{k+1} (0 bootstrap after a terminal state); None when
    the replay keeps no V-tbc."""
    weight: np.ndarray
    """Importance weight w_k of prioritized replay (1 under uniform sampling)."""


class ScalingSums(NamedTuple):
    """Sums over stored rows for the input and reward scaling, added over learners."""

    n_states: float
    n_rewards: float
    obs_sum: np.ndarray
    obs_sq: np.ndarray
    rew_sum: float
    rew_sq: float

    def pack(self) -> np.ndarray:
        """[n_states, n_rewards, sum s (d), sum s^2 (d), sum r, sum r^2] in float64."""
        return np.concatenate([[self.n_states, self.n_rewards], self.obs_sum, self.obs_sq,
                               [self.rew_sum, self.rew_sq]]).astype(np.float64)

    @classmethod
    def unpack(cls, flat: np.ndarray) -> ScalingSums:
        d = (flat.size - 4) // 2
        return cls(float(flat[0]), float(flat[1]), flat[2 : 2 + d], flat[2 + d : 2 + 2 * d],
                   float(flat[-2]), float(flat[-1]))

    def moments(self) -> tuple[np.ndarray, np.ndarray, float]:
        """Mean and std of the states, and std of the rewards."""
        n, m = max(self.n_states, 1.0), max(self.n_rewards, 1.0)
        mean = self.obs_sum / n
        std = np.sqrt(np.maximum(self.obs_sq / n - mean**2, 0.0))
        r_mean = self.rew_sum / m
        return mean, std, float(np.sqrt(max(self.rew_sq / m - r_mean**2, 0.0)))


class PriorityConfig(NamedTuple):
    """Prioritized replay's exponents: p = (|delta| + eps)^alpha."""

    alpha: float
    eps: float


class ReplayShard:
    """FIFO ring of ``capacity`` states with uniform or prioritized sampling of transitions.

    ``retrace``: keep V-tbc (eq. 8) and Q-ret for algorithms that use them (V-RACER); without
    it the V and V-tbc columns are left at zero. ``priorities``: a :class:`PriorityConfig`
    for prioritized replay, None for uniform sampling. ``forget``: what a full shard forgets
    (see the module docstring).
    """

    def __init__(self, capacity: int, obs_dim: int, act_dim: int, gamma: float,
                 retrace: bool = True, priorities: PriorityConfig | None = None,
                 forget: Forget = Forget.OLDEST) -> None:
        self.capacity = capacity
        self.forget = forget
        self.gamma = gamma
        self.retrace = retrace
        self.priorities = priorities
        self.tree = SumTree(capacity) if priorities is not None else None
        f32 = np.float32
        self.obs = np.zeros((capacity, obs_dim), f32)
        self.act = np.zeros((capacity, act_dim), f32)
        self.rew = np.zeros(capacity, f32)
        self.mu_mean = np.zeros((capacity, act_dim), f32)
        self.mu_std = np.ones((capacity, act_dim), f32)
        self.log_mu = np.zeros(capacity, f32)
        self.value = np.zeros(capacity, f32)
        self.rho = np.ones(capacity, f32)
        self.vtbc = np.zeros(capacity, f32)
        self.prev = np.full(capacity, -1, np.int32)
        self.next = np.full(capacity, -1, np.int32)
        self.flags = np.zeros(capacity, np.uint8)
        self.episode = np.full(capacity, -1, np.int64)
        """The episode of each row in use (ids in the order episodes began here)."""
        self._next_episode = 0
        self._stamp = np.zeros(capacity, np.int32)
        self._mark = 0
        self.head = 0
        """Ring position of the next row to write (the oldest row once full)."""
        self.size = 0
        """Rows in use."""
        self.n_transitions = 0
        self.n_far = 0
        self.n_removed = 0
        """Transitions forgotten by FIFO so far."""
        self.reward_scale = 1.0
        self._open: dict[tuple[int, int], tuple[int, int]] = {}
        self._written = 0

    def checkpoint_state(self) -> StateTree:
        """The shard's state: rows 0 .. size-1 of every column of :data:`COLUMNS` (copies),
        the ring counters, the open tails and, under PER, the sum tree.

        ``open`` holds four int64 arrays of equal length, one entry per episode whose next
        chunk has not arrived: the actor ``source`` and its ``agent`` (the lane of chunks
        that continue each other), the ring ``row`` of its tail and the ``written`` count at
        that row (which tells whether the tail was overwritten since).
        The V-tbc pass's visit stamps are not stored: each pass uses a new mark, so a shard
        restored with cleared stamps takes the same decisions.
        """
        n = self.size
        tree: StateTree = {name: getattr(self, name)[:n].copy() for name in COLUMNS}
        sources = list(self._open)
        tree.update(
            capacity=self.capacity, retrace=self.retrace, head=self.head, size=n,
            n_transitions=self.n_transitions, n_far=self.n_far, n_removed=self.n_removed,
            reward_scale=float(self.reward_scale), written=self._written,
            next_episode=self._next_episode,
            open={"source": np.array([k[0] for k in sources], np.int64),
                  "agent": np.array([k[1] for k in sources], np.int64),
                  "row": np.array([self._open[k][0] for k in sources], np.int64),
                  "written": np.array([self._open[k][1] for k in sources], np.int64)},
        )
        if self.tree is not None:
            tree["priorities"] = self.tree.checkpoint_state()
        return REPLAY_FORMAT.stamp(tree)

    def restore_state(self, tree: StateTree) -> None:
        """Inverse of :meth:`checkpoint_state` (a tree of any version of
        :data:`~hpc_refer.replay.tree.REPLAY_FORMAT`, upgraded first), into a shard of the same
        capacity, state and action sizes, V-tbc setting and sampling (ValueError naming what
        differs)."""
        tree = REPLAY_FORMAT.upgrade(tree)
        per = self.tree is not None
        saved = {"capacity": int(tree["capacity"]), "retrace": bool(tree["retrace"]),
                 "obs_dim": tree["obs"].shape[1], "act_dim": tree["act"].shape[1],
                 "prioritized": "priorities" in tree}
        here = {"capacity": self.capacity, "retrace": self.retrace,
                "obs_dim": self.obs.shape[1], "act_dim": self.act.shape[1], "prioritized": per}
        differ = [f"{k}: checkpoint {saved[k]}, here {here[k]}" for k in saved
                  if saved[k] != here[k]]
        if differ:
            raise ValueError("replay shard does not match the checkpoint: " + "; ".join(differ))
        n = int(tree["size"])
        for name in COLUMNS:
            column = getattr(self, name)
            column[:n] = tree[name]
            column[n:] = _UNUSED_FILL.get(name, 0)
        self._stamp[:] = 0
        self._mark = 0
        self.head, self.size = int(tree["head"]), n
        self.n_transitions, self.n_far = int(tree["n_transitions"]), int(tree["n_far"])
        self.n_removed, self._written = int(tree["n_removed"]), int(tree["written"])
        self.reward_scale = float(tree["reward_scale"])
        tails = tree["open"]
        self._open = {(int(k), int(a)): (int(r), int(w))
                      for k, a, r, w in zip(tails["source"], tails["agent"], tails["row"],
                                            tails["written"], strict=True)}
        if self.tree is not None:
            self.tree.restore_state(tree["priorities"])
        self._next_episode = int(tree["next_episode"])

    def forget_open_tails(self) -> None:
        """No chunk will continue the open episodes any more (their actors went elsewhere):
        their tails stay stored, and the last transition of each stays unsampleable, as
        when an actor's next chunk never comes."""
        self._open.clear()

    @property
    def column_bytes(self) -> int:
        """Raw bytes of the stored columns (the memory target's reference)."""
        columns = (self.obs, self.act, self.rew, self.mu_mean, self.mu_std, self.log_mu,
                   self.value, self.rho, self.vtbc, self.prev, self.next, self.flags,
                   self.episode, self._stamp)
        return sum(a.nbytes for a in columns)

    def _far(self, rows: np.ndarray, c_max: float) -> int:
        """Far-policy transitions among ``rows`` (the rule of :mod:`hpc_refer.replay.near`)."""
        acts = (self.flags[rows] & HAS_ACTION) != 0
        return int(np.count_nonzero(acts & is_far(self.rho[rows], NearBounds.of(c_max))))

    def rho_histogram(self, edges: np.ndarray) -> np.ndarray:
        """Counts of log10(rho) of the stored transitions (rows with an action) in the bins
        of ``edges``, values outside them counted in the first or last bin."""
        n = self.size
        rho = self.rho[:n][(self.flags[:n] & HAS_ACTION) != 0]
        logs = np.clip(np.log10(np.maximum(rho, 1e-30)), edges[0], edges[-1])
        return np.histogram(logs, bins=edges)[0]

    def add(self, chunk: Chunk, c_max: float) -> np.ndarray:
        """Store a chunk, forgetting the oldest rows if full; return the ring rows written.

        Under PER the transitions that become sampleable (those of the chunk, and the open
        tail of its episode that it continues) get the largest priority so far.

        The new rows get V = 0, rho = 1, log mu = 0 and an unknown V-tbc (NaN) until the
        learner stores the network's values (:meth:`refresh`, which runs eq. 8 over them and
        the open tail they continue) and the behaviour log-probabilities (``log_mu``).
        """
        n = chunk.obs.shape[0]
        m = chunk.act.shape[0]
        if n > self.capacity:
            raise ValueError(f"chunk of {n} states exceeds the replay capacity {self.capacity}")
        rows = self._rows_for(n, c_max)
        self.obs[rows] = chunk.obs
        self.act[rows[:m]] = chunk.act
        self.rew[rows[:m]] = chunk.rew
        self.mu_mean[rows[:m]] = chunk.mu_mean
        self.mu_std[rows[:m]] = chunk.mu_std
        self.value[rows] = 0.0
        self.rho[rows] = 1.0
        # Unknown until eq. 8 runs over them: NaN never counts as "unchanged", so the pass
        # of :meth:`refresh` crosses every new row into the open tail that the chunk continues.
        self.vtbc[rows] = np.nan if self.retrace else 0.0
        self.flags[rows] = IN_USE
        self.flags[rows[:m]] |= HAS_ACTION
        if chunk.end == TERMINATED:
            self.flags[rows[m - 1]] |= TERMINAL
        self.prev[rows[1:]] = rows[:-1]
        self.next[rows[:-1]] = rows[1:]
        self.next[rows[-1]] = -1
        tail = self._link((chunk.source, chunk.agent), rows[0], n)
        self.prev[rows[0]] = tail
        if tail >= 0:
            self.episode[rows] = self.episode[tail]
        else:
            self.episode[rows] = self._next_episode
            self._next_episode += 1
        if chunk.end == OPEN:  # (``_link`` took the source's previous open tail)
            self._open[chunk.source, chunk.agent] = (int(rows[-1]), self._written + n - 1)
        self._written += n
        self.head = int((rows[-1] + 1) % self.capacity)
        self.size = max(self.size, int(rows.max()) + 1)
        self.n_transitions += m
        if self.tree is not None:
            linked = rows if self.prev[rows[0]] < 0 else np.append(rows, self.prev[rows[0]])
            fresh = linked[self.sampleable(linked)]
            self.tree.update(fresh, np.full(fresh.size, max(self.tree.max_priority, 1.0)))
        return rows

    def _rows_for(self, n: int, c_max: float) -> np.ndarray:
        """The ``n`` rows a new chunk takes: the next ones of the ring, forgetting what they
        held (``oldest``), or free rows, forgetting whole episodes until there are ``n``
        (``far_policy``, :meth:`_forget_worst_episode`)."""
        if self.forget is Forget.OLDEST:
            rows = (self.head + np.arange(n)) % self.capacity
            old = rows[(self.flags[rows] & IN_USE) != 0]
            if old.size:
                self._forget(old, c_max)
            return rows
        free = np.flatnonzero(self.flags == 0)
        while free.size < n:
            self._forget_worst_episode(c_max)
            free = np.flatnonzero(self.flags == 0)
        return free[:n]

    def _forget_worst_episode(self, c_max: float) -> None:
        """Forget the stored episode with the largest fraction of far-policy transitions
        (ties: the oldest), preferring episodes whose next chunk is not awaited."""
        used = np.flatnonzero(self.flags != 0)
        ids, inverse = np.unique(self.episode[used], return_inverse=True)
        acts = (self.flags[used] & HAS_ACTION) != 0
        far = acts & is_far(self.rho[used], NearBounds.of(c_max))
        n_act = np.bincount(inverse, weights=acts, minlength=ids.size)
        n_far = np.bincount(inverse, weights=far, minlength=ids.size)
        fraction = np.divide(n_far, n_act, out=np.zeros(ids.size), where=n_act > 0)
        awaited = np.isin(ids, [self.episode[row] for row, _ in self._open.values()])
        order = np.lexsort((ids, -fraction, awaited))  # closed first, then far, then old
        victim = ids[order[0]]
        rows = used[self.episode[used] == victim]
        self._open = {k: v for k, v in self._open.items() if self.episode[v[0]] != victim}
        self._forget(rows, c_max)

    def _link(self, lane: tuple[int, int], first: int, n: int) -> int:
        """Row continued by ``first`` (the open tail of ``lane``: a chunk's (source, agent)),
        or -1 if it is forgotten (under FIFO also when the ``n`` rows being written now
        overwrite it; ``far_policy`` drops the tail of an episode it forgets)."""
        tail = self._open.pop(lane, None)
        if tail is None or (self.forget is Forget.OLDEST
                            and self._written + n - tail[1] > self.capacity):
            return -1
        self.next[tail[0]] = first
        return tail[0]

    def _forget(self, rows: np.ndarray, c_max: float) -> None:
        acts = int(np.count_nonzero(self.flags[rows] & HAS_ACTION))
        self.n_far -= self._far(rows, c_max)
        self.n_transitions -= acts
        self.n_removed += acts
        succ = self.next[rows]
        self.prev[succ[succ >= 0]] = -1
        self.flags[rows] = 0
        self.episode[rows] = -1
        if self.tree is not None:
            self.tree.update(rows, np.zeros(rows.size))

    def sampleable(self, rows: np.ndarray) -> np.ndarray:
        """Mask of rows that are transitions with a known successor (or a terminal one)."""
        f = self.flags[rows]
        return ((f & HAS_ACTION) != 0) & (((f & TERMINAL) != 0) | (self.next[rows] >= 0))

    def sample_rows(self, batch: int, rng: np.random.Generator) -> np.ndarray:
        """Sample ``batch`` transition rows (with replacement): uniformly, or by priority.

        Uniform: rounds of ``batch + batch // 4 + 8`` uniform candidates from ``rng``, the
        sampleable ones kept in order until ``batch`` are found.
        """
        if self.n_transitions == 0:
            raise ValueError("cannot sample from an empty replay memory")
        if self.tree is not None:
            return self.tree.sample(batch, rng)
        out = np.empty(batch, np.int64)
        count = rounds = 0
        while count < batch:
            cand = rng.integers(0, self.size, size=batch + batch // 4 + 8)
            count = take_sampleable(cand, self.flags, self.next, out, count)
            rounds += 1
            if rounds == 64 and count == 0 and not self.sampleable(
                    np.arange(self.size)).any():
                raise ValueError("no stored transition has its successor yet: nothing to "
                                 "sample (replay.learn_start below one chunk?)")
        return out

    def importance_weights(self, rows: np.ndarray, beta_is: float) -> np.ndarray:
        """PER's w_k = (N P(k))^-beta_IS / max_j w_j over ``rows`` (ones when uniform).

        N is the number of sampleable transitions of this shard, P(k) = p_k / sum_j p_j.
        """
        if self.tree is None:
            return np.ones(rows.size, np.float32)
        w = (self.n_transitions * self.tree.probabilities(rows)) ** -beta_is
        return (w / w.max()).astype(np.float32)

    def update_priorities(self, rows: np.ndarray, td_error: np.ndarray) -> None:
        """PER: p_k = (|delta_k| + eps)^alpha for the sampled ``rows``."""
        if self.tree is None or self.priorities is None:
            return
        cfg = self.priorities
        self.tree.update(rows, (np.abs(td_error).astype(np.float64) + cfg.eps) ** cfg.alpha)

    def batch(self, rows: np.ndarray, beta_is: float = 1.0) -> Batch:
        """Gather the minibatch columns of ``rows`` (PER weights with exponent ``beta_is``).

        One compiled pass (:func:`~hpc_refer.replay.kernels.gather`) fills new arrays on
        every call, so a Batch stays valid for as long as its holder keeps it (no buffer is
        reused); the values are those of numpy's indexing, bit for bit.
        """
        obs, act, mu_mean, mu_std, log_mu, rew, next_obs, done, q_ret = gather(
            np.asarray(rows, np.int64), self.obs, self.act, self.mu_mean, self.mu_std,
            self.log_mu, self.rew, self.vtbc, self.next, self.flags,
            np.float32(self.reward_scale), np.float32(self.gamma), self.retrace)
        return Batch(rows, obs, act, mu_mean, mu_std, log_mu, rew, next_obs, done,
                     q_ret if self.retrace else None, self.importance_weights(rows, beta_is))

    def bootstrap_rows(self, rows: np.ndarray) -> np.ndarray:
        """Final states s_T (rows without action) that directly follow ``rows``: distinct,
        sorted, int32 like ``next``."""
        return final_successors(np.asarray(rows, np.int64), self.next, self.flags)

    def refresh(self, rows: np.ndarray, value: np.ndarray | None, rho: np.ndarray | None,
                c_max: float) -> None:
        """Store the current V_w (and rho, for rows with actions) of ``rows``, then redo eq. 8.

        ``value`` is None for algorithms without a state value (no V-tbc is kept for them).

        The V-tbc recursion runs backward from every refreshed row to the first stored row of
        its episode (compiled loop, each row visited at most once per call). The far-policy
        count is updated for the changed rho, classified with the current ``c_max``; a row
        that appears several times in ``rows`` (a minibatch samples with replacement) is
        counted once, with its first V and rho.

        One compiled call (:func:`~hpc_refer.replay.kernels.store_refreshed`) deduplicates
        the rows with the visit stamps, stores V and rho, counts the far-policy change and
        orders the rows newest first; a second (:func:`~hpc_refer.replay.kernels.vtbc_backward`)
        runs eq. 8. Same values as numpy's unique, stores and argsort
        (``tests/test_replay_fused.py``).
        """
        rows = np.asarray(rows, np.int64)
        if rows.size == 0:
            return
        bounds = NearBounds.of(c_max)
        starts, far = store_refreshed(
            rows, None if value is None else np.asarray(value),
            None if rho is None else np.asarray(rho), np.float32(bounds.low),
            np.float32(bounds.high), self.value, self.rho, self.flags, self._stamp,
            self._new_mark(), self.head, self.capacity)
        self.n_far += far
        if self.retrace:
            self._backward(starts, False)

    def recompute_vtbc(self, rows: np.ndarray, exact: bool = False) -> None:
        """Eq. 8 backward from ``rows`` (any order) to the start of their episodes.

        A pass ends early where V-tbc no longer changes at float32 resolution
        (``replay_kernels.RTOL``, ``ATOL``), unless ``exact``.
        """
        starts = np.unique(rows)
        starts = starts[np.argsort(-((starts - self.head) % self.capacity), kind="stable")]
        self._backward(starts.astype(np.int64), exact)

    def _backward(self, starts: np.ndarray, exact: bool) -> None:
        """Eq. 8 from the distinct ``starts``, ordered newest first
        (:func:`~hpc_refer.replay.kernels.vtbc_backward`)."""
        vtbc_backward(starts, self.value, self.rho, self.rew, self.vtbc,
                      self.prev, self.next, self.flags, np.float32(self.gamma),
                      np.float32(self.reward_scale), self._stamp, self._new_mark(), exact)

    def _new_mark(self) -> int:
        """A visit stamp no row holds yet (the stamps are cleared when the int32 marks run
        out)."""
        if self._mark == _MARK_MAX:
            self._stamp[:] = 0
            self._mark = 0
        self._mark += 1
        return self._mark

    def recompute_all_vtbc(self) -> None:
        """Eq. 8 over every stored episode (after the reward scale changed)."""
        if not self.retrace:
            return
        used = np.flatnonzero(self.flags[: self.size])
        self.recompute_vtbc(used[self.next[used] < 0], exact=True)

    def recount_far(self, c_max: float) -> int:
        """Recount the far-policy transitions from scratch with the current c_max."""
        self.n_far = self._far(np.arange(self.size), c_max)
        return self.n_far

    def scaling_sums(self) -> ScalingSums:
        """Local sums for the input and reward scaling, to be added over learners."""
        n_obs, s_sum, s_sq, n_rew, r_sum, r_sq = state_reward_sums(self.obs, self.rew,
                                                                   self.flags, self.size)
        return ScalingSums(n_obs, n_rew, s_sum, s_sq, r_sum, r_sq)
