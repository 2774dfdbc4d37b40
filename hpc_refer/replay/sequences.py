"""Sequences of consecutive transitions for recurrent learners (truncated BPTT over W steps,
:mod:`hpc_refer.algorithms.kit.recurrent`).

A sequence begins at a sampled transition k (uniform over the sampleable ones, as a
feed-forward minibatch draws its rows) and follows its episode's ``next`` links forward:
k, next(k), ... while each is a sampleable transition (an action with a known successor, or
a terminal one), W steps at most (nothing is linked after a terminal step). Links only join
steps of one episode, so a sequence never crosses an episode's start, nor its end, nor a
step whose successor has not arrived. A shorter sequence (near the episode's end) is padded
to W rows by repeating its last row, flagged invalid: the learner gives those rows weight 0
and refreshes none of them.

A burn-in of b steps (R2D2; :mod:`hpc_refer.algorithms.kit.recurrent`) is the b steps before
a sequence's first, found by the ``prev`` links backward (:func:`preceding`): fewer where the
episode begins (or its older steps left the memory) less than b steps before, none at an
episode's first step. They are padded at the front by repeating their earliest row, flagged
invalid.
"""

from __future__ import annotations

import numpy as np

from hpc_refer.replay.kernels import HAS_ACTION, TERMINAL


def follow(starts: np.ndarray, length: int, nxt: np.ndarray, flags: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray]:
    """The rows [n W] of the sequences that begin at the transitions ``starts`` [n] (each
    sequence's W rows consecutive, in time order) and their validity mask [n W]."""
    n = starts.size
    rows = np.empty((n, length), np.int64)
    valid = np.zeros((n, length), bool)
    cur = np.asarray(starts, np.int64).copy()
    alive = np.ones(n, bool)
    for t in range(length):
        rows[:, t] = cur
        valid[:, t] = alive
        if t == length - 1:
            break
        succ = np.where(alive, nxt[cur], -1)  # -1 after a terminal step: nothing follows it
        known = succ >= 0
        succ = np.where(known, succ, cur)
        f = flags[succ]
        alive = known & ((f & HAS_ACTION) != 0) & (((f & TERMINAL) != 0) | (nxt[succ] >= 0))
        cur = np.where(alive, succ, cur)
    return rows.reshape(-1), valid.reshape(-1)


def preceding(starts: np.ndarray, length: int, prev: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """The rows [n b] of the b = ``length`` steps before each of the sequences that begin at
    ``starts`` [n] (in time order, the last one the step before the start) and their validity
    mask [n b]. Where fewer than b steps precede a start, its burn-in is padded at the front by
    repeating its earliest row (the start itself when none precedes it), flagged invalid."""
    n = starts.size
    rows = np.empty((n, length), np.int64)
    valid = np.zeros((n, length), bool)
    cur = np.asarray(starts, np.int64).copy()
    for t in range(length - 1, -1, -1):
        back = prev[cur] if n else cur
        alive = back >= 0
        cur = np.where(alive, back, cur)
        rows[:, t] = cur
        valid[:, t] = alive
        if not alive.any():
            rows[:, :t] = cur[:, None]
            break
    return rows.reshape(-1), valid.reshape(-1)
