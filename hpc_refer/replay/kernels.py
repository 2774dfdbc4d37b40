"""The replay shard's compiled kernels (numba): eq. 8's backward pass, the refresh of stored
V and rho, the minibatch gather with its Q-ret targets, and the sampling filters, over the
columns of :class:`~hpc_refer.replay.shard.ReplayShard` (see its module docstring for the layout).

Flags of a row (``flags`` column): HAS_ACTION (the row's state was acted on: a transition
starts there), TERMINAL (that transition ended the episode), IN_USE (the row holds a stored
state).
"""

from __future__ import annotations

import numba
import numpy as np

HAS_ACTION = np.uint8(1)
TERMINAL = np.uint8(2)
IN_USE = np.uint8(4)


RTOL, ATOL = np.float32(1e-6), np.float32(1e-7)
"""A backward pass stops once V-tbc changes by less than ATOL + RTOL |V-tbc| (float32
resolution): earlier rows would change by even less, since each step multiplies the change by
gamma min(1, rho) <= 1. Rows just stored hold NaN, which never counts as unchanged, so a pass
always reaches the open tail that a new chunk continues (whose V-tbc was computed without
it)."""


@numba.njit(cache=True, nogil=True)
def vtbc_backward(starts, value, rho, rew, vtbc, prev, nxt, flags, gamma, scale, stamp, mark,
                   exact):
    """Eq. 8 backward from each start row toward the first stored row of its episode, in
    float32 as the linear recursion

        V-tbc_k = a_k + c_k V-tbc_{k+1},   a_k = V_k + rho-bar_k (scale r_{k+1} - V_k),
                                           c_k = gamma rho-bar_k,   rho-bar_k = min(1, rho_k)

    (V-tbc_{k+1} = 0 after a terminal transition), each operation rounded to float32 as
    numpy's float32 scalars round it. Only the multiply-add by V-tbc_{k+1} lies on the chain
    of dependent operations whose latency is the pass's cost; a_k and c_k do not wait for
    it. (A float64 recursion rounded to float32 at every row costs a third more and differs
    by a few units in the last place: the stored V-tbc is a float32 column either way.)

    ``starts`` must be ordered newest first: a start already reached by the pass of a later
    start of the same episode is skipped (its refreshed V and rho were already used). Unless
    ``exact``, a pass stops where the change of V-tbc falls below float32 resolution.
    V-tbc_{k+1} of the row just visited comes from a register rather than from the column
    (the same float32 value, without waiting on its store).
    """
    one = np.float32(1.0)
    for s in starts:
        if stamp[s] == mark:
            continue
        k = s
        after, v = -1, np.float32(0.0)  # the row visited before k and its new V-tbc
        while k >= 0:
            stamp[k] = mark
            f = flags[k]
            old = vtbc[k]
            if f & HAS_ACTION and (f & TERMINAL or nxt[k] >= 0):
                if f & TERMINAL:
                    boot = np.float32(0.0)
                elif nxt[k] == after:  # V-tbc_{k+1} from a register, not from memory
                    boot = v
                else:
                    boot = vtbc[nxt[k]]
                rb = min(one, rho[k])
                val = value[k]
                v = val + rb * (scale * rew[k] - val) + (gamma * rb) * boot
            else:
                v = value[k]
            vtbc[k] = v
            if not exact and k != s and abs(v - old) <= ATOL + RTOL * abs(v):
                break
            after, k = k, prev[k]


@numba.njit(cache=True, nogil=True)
def store_refreshed(rows, new_value, new_rho, far_lo, far_hi, value, rho, flags, stamp, mark,
                     head, capacity):
    """Store V and rho of ``rows`` (the first occurrence of a repeated row wins); return the
    distinct rows ordered newest first and the change of the far-policy count.

    ``new_value`` / ``new_rho`` may be None (left as stored). A row without action gets
    rho = 1. A transition is far-policy when rho <= ``far_lo`` (1 / c_max) or rho >=
    ``far_hi`` (c_max), compared in float32 (:class:`hpc_refer.replay.near.NearBounds`).
    Duplicates are found with ``stamp = mark``; the age of a row is (row - head) mod
    capacity, so newest first is decreasing age.
    """
    n = rows.shape[0]
    distinct = np.empty(n, np.int64)
    first = np.empty(n, np.int64)
    m = 0
    for j in range(n):
        r = rows[j]
        if stamp[r] != mark:
            stamp[r] = mark
            distinct[m] = r
            first[m] = j
            m += 1
    far = 0
    for i in range(m):
        r, j = distinct[i], first[i]
        if new_value is not None:
            value[r] = new_value[j]
        if new_rho is not None:
            if flags[r] & HAS_ACTION:
                far -= rho[r] <= far_lo or rho[r] >= far_hi
                rho[r] = new_rho[j]
                far += rho[r] <= far_lo or rho[r] >= far_hi
            else:
                rho[r] = 1.0
    distinct = distinct[:m]
    return distinct[np.argsort(-((distinct - head) % capacity))], far


@numba.njit(cache=True, nogil=True)
def gather(rows, obs, act, mu_mean, mu_std, log_mu, rew, vtbc, nxt, flags, scale, gamma,
            retrace):
    """The minibatch columns of ``rows`` (float32): s_k, a_k, mu_k, log mu_k, scale r_{k+1},
    s_{k+1} (s_k after a terminal transition or before the successor arrived), done and,
    with ``retrace``, Q-ret_k = scale r_{k+1} + gamma V-tbc_{k+1} (V-tbc = 0 after a terminal
    state), each product and sum rounded to float32 as numpy rounds them."""
    n, d, a = rows.shape[0], obs.shape[1], act.shape[1]
    b_obs = np.empty((n, d), np.float32)
    b_next = np.empty((n, d), np.float32)
    b_act = np.empty((n, a), np.float32)
    b_mean = np.empty((n, a), np.float32)
    b_std = np.empty((n, a), np.float32)
    b_log_mu = np.empty(n, np.float32)
    b_rew = np.empty(n, np.float32)
    b_done = np.empty(n, np.float32)
    q_ret = np.empty(n if retrace else 0, np.float32)
    for i in range(n):
        r = rows[i]
        succ = nxt[r]
        terminal = (flags[r] & TERMINAL) != 0
        following = r if terminal or succ < 0 else succ
        for c in range(d):
            b_obs[i, c] = obs[r, c]
            b_next[i, c] = obs[following, c]
        for c in range(a):
            b_act[i, c] = act[r, c]
            b_mean[i, c] = mu_mean[r, c]
            b_std[i, c] = mu_std[r, c]
        b_log_mu[i] = log_mu[r]
        b_rew[i] = scale * rew[r]
        b_done[i] = 1.0 if terminal else 0.0
        if retrace:
            boot = np.float32(0.0) if terminal else vtbc[max(succ, 0)]
            q_ret[i] = b_rew[i] + gamma * boot
    return b_obs, b_act, b_mean, b_std, b_log_mu, b_rew, b_next, b_done, q_ret


@numba.njit(cache=True, nogil=True)
def state_reward_sums(obs, rew, flags, n):
    """In one pass over the rows in use among the first ``n``, in float64: their number,
    sum s and sum s^2 per state component, the number of rewards (rows with an action),
    sum r and sum r^2."""
    d = obs.shape[1]
    s_sum = np.zeros(d)
    s_sq = np.zeros(d)
    n_obs, n_rew, r_sum, r_sq = 0, 0, 0.0, 0.0
    for i in range(n):
        if flags[i] == 0:
            continue
        n_obs += 1
        for c in range(d):
            x = np.float64(obs[i, c])
            s_sum[c] += x
            s_sq[c] += x * x
        if flags[i] & HAS_ACTION:
            r = np.float64(rew[i])
            n_rew += 1
            r_sum += r
            r_sq += r * r
    return n_obs, s_sum, s_sq, n_rew, r_sum, r_sq


@numba.njit(cache=True, nogil=True)
def take_sampleable(candidates, flags, nxt, out, count):
    """Append the sampleable ``candidates`` (in order) to ``out[count:]`` until it is full;
    return the new count."""
    for c in candidates:
        if count == out.shape[0]:
            break
        f = flags[c]
        if f & HAS_ACTION and (f & TERMINAL or nxt[c] >= 0):
            out[count] = c
            count += 1
    return count


@numba.njit(cache=True, nogil=True)
def final_successors(rows, nxt, flags):
    """The distinct successors of ``rows`` that carry no action (final states s_T), sorted."""
    out = np.empty(rows.shape[0], np.int32)
    m = 0
    for r in rows:
        s = nxt[r]
        if s >= 0 and not flags[s] & HAS_ACTION:
            out[m] = s
            m += 1
    return np.unique(out[:m])
