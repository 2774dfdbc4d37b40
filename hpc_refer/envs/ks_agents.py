"""KuramotoSivashinskyAgents: Kuramoto-Sivashinsky with one agent per actuator (multi-agent).

The equation and numerics are those of :mod:`hpc_refer.envs.ks` (its
:class:`~hpc_refer.envs.ks.KSSolver`), on a periodic domain x in [0, L) that grows with the
number of agents N::

    u_t + u u_x + u_xx + u_xxxx = f(x, a),      f(x, a) = A_MAX sum_j a_j psi(x - c_j),

    L = 22 N / 4,      n = 64 N / 4 grid points,      c_j = (j + 1/2) L / N,  j = 0..N-1,

so the resolution stays 64 points per 22 length units and N = 4 is exactly the domain, grid
and actuators of :class:`~hpc_refer.envs.ks.KuramotoSivashinsky` (N = 8: L = 44, 128 points).
Same Gaussian actuators (SIGMA, A_MAX, mean of f removed), ETDRK4 with DT, DT_CONTROL =
SUBSTEPS DT, episodes of HORIZON control steps after a TRANSIENT from a random smooth field;
every agent's episode ends at HORIZON together, TRUNCATED.

Segments. The domain is cut into N segments [j L / N, (j + 1) L / N) of P = 16 grid points,
one per actuator (centred on it). Each holds 2 of the 2 N sensors (every 8th point, as in
ks.py): its first point and its centre (the actuator's position).

Agent j acts with a_j in [-1, 1] (act_dim 1) and observes the sensors of segments j - 1, j,
j + 1 (periodic), in this order relative to itself: left neighbour, own, right neighbour
(obs_dim 6 for every N). Its reward is the rate at which its own segment's energy fell, less
its actuation cost::

    r_j = -(E_j(t+1) - E_j(t)) / DT_CONTROL - ACT_COST a_j^2,
    E_j = sum_{x in segment j} u(x)^2 / 2 / P.

Energy identity: E_j is normalised by the points of ONE segment, so the mean over agents is
the global energy of ks.py, (1/N) sum_j E_j = sum_x u^2 / (2 N P) = mean_x(u^2) / 2 = E, and
the mean reward over agents is ks.py's reward for the same actions (tested, with N = 4, along
a whole trajectory). The shaping argument of ks.py then holds per agent: each agent's
discounted return telescopes into its segment's discounted energy plus its action cost.

Why so. The equation, the actuators and the sensors are invariant under a shift of x by L / N
(one segment, P points): shifting the field by one segment moves segment j's content to
segment j + 1, so the shifted state's observations and rewards are the original agents'
permuted, agent j + 1 now seeing what agent j saw (tested). Every agent therefore faces the
same task, which one shared policy can learn from all N agents' experience. The task is
also local, so its size per agent does not grow with N: a segment's energy changes by the
production inside it (the integral of u_x^2 - u_xx^2), the fluxes through its two ends and its
own actuator's work (a neighbour's Gaussian is exp(-(2.75 / 0.4)^2 / 2) ~ 5e-11 at the
segment's edge; the removed mean of f couples all segments only weakly, by
A_MAX sqrt(2 pi) SIGMA a_j / L).

Team of K > 1 ranks: as ks.py (the grid split over the ranks, partial DFTs summed over the
team); the segment energies are one team Allreduce of N partial sums, the sensors are gathered
on team rank 0, which alone returns the observations (other ranks: shape (0, obs_dim)).
"""

from __future__ import annotations

import numpy as np

from hpc_refer.config.modes import ConfigError
from hpc_refer.envs.interface import Team
from hpc_refer.envs.ks import ACT_COST, DT_CONTROL, LENGTH, N_ACT, N_SENS, KSSolver, N

POINTS_PER_SEGMENT = N // N_ACT
"""P = 16 grid points per segment (22 / 4 length units)."""
SENSORS_PER_SEGMENT = N_SENS // N_ACT
"""2 sensors per segment: its first point and its centre."""
NEIGHBOURS = (-1, 0, 1)
"""The segments an agent observes, relative to its own: left neighbour, own, right."""


class KuramotoSivashinskyAgents(KSSolver):
    """KS on L = 22 N / 4 with N actuators, each an agent (see the module docstring);
    collective over the team's ranks."""

    obs_dim = len(NEIGHBOURS) * SENSORS_PER_SEGMENT
    act_dim = 1
    low = -np.ones(1)
    high = np.ones(1)

    def __init__(self, team: Team | None = None, agents: int = 4) -> None:
        if isinstance(agents, bool) or not isinstance(agents, int) or agents < 2:
            raise ConfigError(f"env.agents = {agents!r}: KuramotoSivashinskyAgents needs an "
                              f"integer number of agents >= 2 (2, 3, 4, ...; the domain is "
                              f"L = 22 agents / 4)")
        self.n_agents = agents
        super().__init__(team, LENGTH * agents / N_ACT, POINTS_PER_SEGMENT * agents, agents,
                         SENSORS_PER_SEGMENT * agents)
        self.segment_of = self.points // POINTS_PER_SEGMENT
        """The segment (agent) of each of this rank's grid points."""
        segments = (np.arange(agents)[:, None] + np.array(NEIGHBOURS)[None, :]) % agents
        self.neighbourhood = (SENSORS_PER_SEGMENT * segments[:, :, None]
                              + np.arange(SENSORS_PER_SEGMENT)).reshape(agents, self.obs_dim)
        """Row j: the indices, among all sensors in grid order, of agent j's observation."""
        self.last_energies = np.zeros(agents)

    def segment_energies(self) -> np.ndarray:
        """E_j = sum over segment j of u^2 / 2 / P for each agent j (their mean is
        :meth:`energy`); collective (a team sum)."""
        local = np.bincount(self.segment_of, weights=self.u**2, minlength=self.n_agents)
        total = self.team.sum_array(local) if self.team is not None else local
        return total / (2 * POINTS_PER_SEGMENT)

    def start(self, u: np.ndarray) -> None:
        """Begin an episode at the whole-grid field ``u`` (see KSSolver.start); collective."""
        super().start(u)
        self.last_energies = self.segment_energies()

    def _observe(self) -> np.ndarray:
        """The agents' observations, shape (n_agents, obs_dim), on team rank 0 (shape
        (0, obs_dim) elsewhere); collective."""
        sensors = super()._observe()
        if sensors.size == 0:
            return np.zeros((0, self.obs_dim), np.float32)
        return sensors[self.neighbourhood]

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Advance DT_CONTROL with the agents' actions, shape (n_agents, act_dim) (as seen on
        team rank 0, clipped to [-1, 1]); collective. Returns the observations (n_agents,
        obs_dim), the rewards (n_agents,) and the statuses (n_agents,), all TRUNCATED at
        HORIZON."""
        a = np.clip(np.asarray(actions, np.float64).reshape(self.n_agents), -1.0, 1.0)
        _, status = self._advance(a)
        previous, self.last_energies = self.last_energies, self.segment_energies()
        rewards = -(self.last_energies - previous) / DT_CONTROL - ACT_COST * a**2
        return self._observe(), rewards, np.full(self.n_agents, int(status), np.int64)
