"""The Collision task (Ghiassian & Sutton 2021): an eight-state chain, evaluated off-policy.

States ``s = 0..7`` (paper labels 1..8) plus the terminal index ``TERMINAL = 8``. ``forward`` moves
``s -> s+1`` (reward +1 and termination from state 7); ``turnaway`` terminates with reward 0.
Episodes start uniformly in ``{0, 1, 2, 3}`` and are concatenated into one stream of transitions.
The target policy pi always goes forward; the behaviour policy mu goes forward in states 0-3 and
picks either action with probability 1/2 in states 4-7, so ``rho = pi/mu`` is 1, 2 or 0.

The stored feature matrices, state weighting d_mu and true values v_pi ship in ``data/`` and are
checked against their SHA-256 at load time (spec section 1.2-1.3). Trajectories reproduce the
reference code bit for bit: run seed ``r`` seeds the legacy MT19937 stream and draws happen only at
episode starts (``randint(0, 4)``) and in states 4-7 (``randint(0, 2)``) (spec section 1.5).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

import numpy as np

N_STATES = 8
TERMINAL = 8
FORWARD = 0
TURNAWAY = 1
GAMMA = 0.9
N_STORED_RUNS = 50
#: pi(forward | s) = 1 everywhere; mu(forward | s) = 1 in states 0-3 and 1/2 in states 4-7.
MU_FORWARD = np.array([1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5])

_SHA256 = {
    "feature_rep": "c38c500d42b3b67257cedcbfee8074179378c772e7a3a43d68e535f0244a484a",
    "d_mu": "a0386620830aad1fa6a432865b03e12c556f61d8b680621fc96154571b5395c6",
    "state_values": "7f3c8f861688072be82693e8f8a3cfe561f1c721cf950f2f6bdfd0e91de2231d",
}
#: The exact stationary weighting under mu; the stored d_mu estimates it (spec ambiguity A6).
D_MU_EXACT = np.array([2.0, 4.0, 6.0, 8.0, 8.0, 4.0, 2.0, 1.0]) / 35.0

DMuChoice = Literal["stored", "exact"]


@cache
def _load(name: str) -> np.ndarray:
    """Load ``data/<name>.npy`` and verify the SHA-256 of its raw C-order float64 bytes."""
    with resources.files(__package__).joinpath(f"data/{name}.npy").open("rb") as fh:
        array = np.load(fh)
    digest = hashlib.sha256(np.ascontiguousarray(array, dtype=np.float64).tobytes()).hexdigest()
    if digest != _SHA256[name]:
        raise RuntimeError(f"data/{name}.npy is corrupted: SHA-256 {digest} != {_SHA256[name]}")
    array.setflags(write=False)
    return array


def feature_matrix(run: int) -> np.ndarray:
    """Features of run ``run`` as a (9, 6) array: rows 0..7 from the stored slice, row 8 zero."""
    if not 0 <= run < N_STORED_RUNS:
        raise ValueError(f"run: feature slice {run} outside the stored 0..{N_STORED_RUNS - 1}")
    phi = np.zeros((N_STATES + 1, _load("feature_rep").shape[1]))
    phi[:N_STATES] = _load("feature_rep")[:, :, run]
    return phi


def true_values() -> np.ndarray:
    """The stored v_pi(s) = 0.9^(7-s) of the eight non-terminal states."""
    return _load("state_values")


def state_weighting(choice: DMuChoice = "stored") -> np.ndarray:
    """d_mu: the stored estimate (default, reproduces [R]) or the exact (2,4,6,8,8,4,2,1)/35."""
    if choice == "stored":
        return _load("d_mu")
    if choice == "exact":
        return D_MU_EXACT
    raise ValueError(f"d_mu: unknown choice {choice!r}; allowed: stored, exact")


def rmsve(values: np.ndarray, d_mu: np.ndarray) -> np.ndarray:
    """RMSVE = sqrt(sum_s d_mu(s) (v_hat(s) - v_pi(s))^2 / sum_s d_mu(s)).

    ``values`` holds v_hat of the 8 non-terminal states in axis -2, shape (..., 8, K); -> (..., K).
    """
    return np.sqrt((d_mu / d_mu.sum()) @ np.square(values - true_values()[:, None]))


@dataclass(frozen=True)
class Trajectory:
    """One run's behaviour stream: ``steps`` transitions (S_t, A_t, S_{t+1}, R_{t+1}).

    ``state`` and ``next_state`` are state indices (``next_state == TERMINAL`` on termination);
    ``pi``, ``mu`` and ``rho = pi/mu`` are the probabilities of the action taken;
    ``cont[t]`` is 0 when step t starts an episode (t = 0 or step t-1 terminated) and 1 otherwise.
    """

    state: np.ndarray
    action: np.ndarray
    next_state: np.ndarray
    reward: np.ndarray
    terminal: np.ndarray
    pi: np.ndarray
    mu: np.ndarray
    rho: np.ndarray
    cont: np.ndarray


def transition(state: int, action: int) -> tuple[int, float, bool]:
    """Deterministic dynamics: (next state, reward, terminal) for ``action`` in ``state``."""
    if action == TURNAWAY:
        return TERMINAL, 0.0, True
    if state == N_STATES - 1:
        return TERMINAL, 1.0, True
    return state + 1, 0.0, False


def simulate(seed: int, steps: int) -> Trajectory:
    """Generate ``steps`` behaviour transitions with the legacy ``np.random.seed(seed)`` stream.

    Draw order of the reference code: ``randint(0, 4)`` for the start state (run start and after
    every termination), ``randint(0, 2)`` for the action in states 4-7, nothing in states 0-3.
    """
    rng = np.random.RandomState(seed)
    state_a = np.empty(steps, dtype=np.int64)
    action_a = np.empty(steps, dtype=np.int64)
    next_a = np.empty(steps, dtype=np.int64)
    reward_a = np.empty(steps)
    term_a = np.empty(steps, dtype=bool)
    state = int(rng.randint(0, 4))
    for t in range(steps):
        action = FORWARD if MU_FORWARD[state] == 1.0 else int(rng.randint(0, 2))
        nxt, reward, terminal = transition(state, action)
        state_a[t], action_a[t], next_a[t], reward_a[t], term_a[t] = (
            state, action, nxt, reward, terminal)
        state = int(rng.randint(0, 4)) if terminal else nxt
    mu_fwd = MU_FORWARD[state_a]
    forward = action_a == FORWARD
    pi = forward.astype(float)
    mu = np.where(forward, mu_fwd, 1.0 - mu_fwd)
    cont = np.ones(steps)
    cont[0] = 0.0
    cont[1:][term_a[:-1]] = 0.0
    return Trajectory(state_a, action_a, next_a, reward_a, term_a, pi, mu, pi / mu, cont)
