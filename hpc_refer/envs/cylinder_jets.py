"""CylinderJets: drag reduction of the DFG 2D-2 cylinder by two synthetic jets (Rabault et al.,
JFM 2019), on :class:`~hpc_refer.envs.flow2d.Flow2D`.

Flow: the Schaefer-Turek channel at Re = 100 (periodic shedding, St = 0.30), ``resolution``
nodes per diameter (default 20: c_D within 5 % of the benchmark, bench/turek.py).

Jets: two slots of angular width JET_WIDTH = 10 degrees on the cylinder, centred at 90 degrees
(top) and 270 degrees (bottom), blowing radially with the parabolic profile
u_w(theta) = +-v (1 - (2 (theta - theta_j) / JET_WIDTH)^2) (cos theta, sin theta): the top jet
blows out at peak speed v while the bottom one sucks in at the same speed, so the net mass
flux is zero (the two slots' Bouzidi links are mirror images about the cylinder's centre line:
the mass they add cancels to round-off, tested). The wall velocity enters every link of a slot
through Bouzidi's moving-wall term (:mod:`~hpc_refer.envs.lbm_kernels`), and the momentum
exchange then gives the force on the body jets included. The action a in [-1, 1] sets the
target peak speed v = a JET_MAX U_mean, JET_MAX = 1.0, a flow rate per jet of
|Q| <= (2/3) JET_MAX U_mean R JET_WIDTH = 5.8 % of the flow U_mean D past the cylinder
(Rabault bounded it at 6 %); v moves linearly from its last value to the target over the
control step (no jumps in the wall velocity).

Control: one action every DT_CONTROL = 0.025 time units (about 13 per shedding period).
Observation (N_PROBES + 1 = 25 values): the pressure (rho - 1) / 3 / U_mean^2 (lattice units,
so a pressure coefficient / 2) at N_PROBES = 24 probes in the wake,
x in {0.25, 0.3, 0.35, 0.4, 0.5, 0.6}, y in {0.14, 0.18, 0.22, 0.26} (nearest nodes; these y
lie on cell faces, where float rounding picks rows 28, 36, 43, 52 at N = 20), and the
jets' present speed v / (JET_MAX U_mean) in [-1, 1] (the last action once its ramp is over):
the jets start each control step from it, so without it the state would not be Markov in the
actuator (Rabault et al. observed the probes only). Reward, in Rabault's form,
r = C_D_REF - <c_D> - 0.2 |<c_L>|, with <.> the mean over the control step and
C_D_REF = 3.2 (about the uncontrolled mean). Episodes last ``horizon`` control steps (default
HORIZON = 80: 2 time units, 6 periods) and end TRUNCATED. Step metrics ``cD``, ``cL``
(control-step means) and episode metrics ``cD``, ``cL`` (episode means); the episode's field
is the probes' pressure history, and :meth:`~hpc_refer.envs.flow2d.Flow2D.snapshot` gives the
vorticity and velocity fields (team rank 0) that ``--snapshot`` writes at the end of chosen
episodes.

Start: every episode starts from a developed shedding state stored in HDF5 (12 time units of
the uncontrolled flow from a kicked start, :func:`make_start`), read by every reset; the reset
then runs 0..12 uncontrolled control steps drawn from the seed, so episodes start at different
phases. The file (``start_file``, default :func:`start_path`:
``~/.cache/hpc_refer/cylinder_jets_N<resolution>.h5``) is made on first use: a reset that
finds it missing logs one line (logger ``hpc_refer.envs.cylinder_jets``: making it, where, and
about how long: ~17 s at resolution 20, growing as resolution^3), makes it and caches it there,
so later resets and solvers reuse it. ``python -m hpc_refer.envs.cylinder_jets --make-start
[--resolution N] [--path P]`` makes it beforehand, into the same place (worth it at high
resolution: ~18 min at N = 80, beyond ``run.env_step_timeout``'s default of 600 s for the
first reset). :func:`make_start` writes a temporary file in the target's directory and renames
it onto the target (``os.replace``, atomic): processes racing to make it (the environments
of one run, the ranks of a team: each that finds it missing makes it) write the same state,
the last rename wins, and a reader opens either no file or a complete one, never a partial
one. A blow-up (non-finite forces) is a FloatingPointError raised by ``step``: a solver fault
for the driver, which rebuilds the solver. Team of K ranks: the flow's columns are split over
the ranks (Flow2D); the probes and the forces are team sums, so every rank returns the same
state and reward.

Agents: :class:`CylinderJetsAgents` is the same flow with the two jets as two agents
(``n_agents = 2``, the solver interface's multi-agent form: states of shape (2, obs_dim),
rewards and statuses of shape (2,)) that share one policy through the wake's mirror symmetry
about the cylinder's centre line y = 0.2 (node rows j <-> 4 N - 1 - j; the cylinder, its links
and the jets are mirror images on the grid; the channel is not quite, its walls lying 0.005 =
D / 20 higher). Agent 0 owns the top jet and sees the observation of CylinderJets; agent 1
owns the bottom jet and sees the flow mirrored: the pressure at the mirror images
(i, 4 N - 1 - j) of the probes, in the same order (the probes hold pressure only, a scalar
under the mirror), and its own jet's speed. Each agent's action is its own jet's outward
peak speed a_k JET_MAX U_mean, which under the mirror is the same thing for both agents;
zero net mass flux needs the two outward speeds to be opposite, so the jets take the
antisymmetric part q = (a_0 - a_1) / 2 (each a_k clipped to [-1, 1] first): the top jet
blows at q, the bottom one at -q, exactly CylinderJets with action q, and agent 0's state
ends with q, agent 1's with -q. (The symmetric part, both jets blowing out together, would
add mass and is dropped: an agent's action then moves its jet by half of it, and
(a_0, a_1) = (q, -q) gives q at full authority.) Mirroring the flow and swapping the agents'
actions mirrors the jets (q -> -q), so agent 1's experience is agent 0's in the mirror image.
Both agents receive the reward of CylinderJets, and both episodes end together (TRUNCATED
after ``horizon`` steps); the step and episode metrics and the episode's field (agent 0's
probes) are those of the one simulation.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
from pathlib import Path

import h5py
import numpy as np

from hpc_refer.envs import lbm_kernels as lk
from hpc_refer.envs.flow2d import Flow2D
from hpc_refer.envs.interface import Status, Team

LOG = logging.getLogger(__name__)

REYNOLDS = 100.0
U_LATTICE = 0.0656
JET_WIDTH = 10.0
JET_MAX = 1.0
DT_CONTROL = 0.025
HORIZON = 80
C_D_REF = 3.2
START_TIME = 12.0
START_SECONDS = 17.0
"""About the seconds :func:`make_start` takes for START_TIME at resolution 20 (measured on one
core; the cost grows as resolution^3)."""
PROBES_X = (0.25, 0.3, 0.35, 0.4, 0.5, 0.6)
PROBES_Y = (0.14, 0.18, 0.22, 0.26)
N_PROBES = len(PROBES_X) * len(PROBES_Y)


def start_path(resolution: int) -> Path:
    """Default start file of a resolution: ~/.cache/hpc_refer/cylinder_jets_N<res>.h5."""
    return Path.home() / ".cache" / "hpc_refer" / f"cylinder_jets_N{resolution}.h5"


def make_start(path: str | Path, resolution: int = 20, duration: float = START_TIME) -> Path:
    """Run the uncontrolled flow ``duration`` time units from a kicked start (one rank) and
    store its populations (dataset ``f``, shape (9, nx, ny)) in HDF5 at ``path``, atomically:
    written to a temporary file in the same directory, then renamed onto ``path``
    (``os.replace``), so that no reader ever sees a partial file and racing makers do not
    corrupt it (the last rename wins); the temporary file is removed if anything fails."""
    flow = Flow2D(resolution=resolution, reynolds=REYNOLDS, u_max_lattice=U_LATTICE,
                  perturb=1.0)
    flow.advance(round(duration / flow.dt))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        with h5py.File(tmp, "w") as h5:
            h5["f"] = flow.f[:, 1:-1, 1:-1]
            h5.attrs["resolution"] = resolution
            h5.attrs["u_max_lattice"] = U_LATTICE
            h5.attrs["duration"] = duration
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


class _JetsFlow(Flow2D):
    """What :class:`CylinderJets` and :class:`CylinderJetsAgents` share: the flow, the jets,
    the probes, the start state, the control step, the metrics (module docstring); each adds
    its ``step``. ``start_file``: the HDF5 start state (default :func:`start_path`, made on
    first use); ``horizon``: control steps per episode; ``split_at``: the slabs' first columns
    (see :class:`~hpc_refer.envs.flow2d.Flow2D`)."""

    obs_dim = N_PROBES + 1
    act_dim = 1
    low = -np.ones(1)
    high = np.ones(1)
    episode_metrics = ("cD", "cL")
    step_metrics = ("cD", "cL")
    field_label = "wake pressure (probe, control step)"
    start_duration = START_TIME
    """Time units of uncontrolled flow in a start state made on first use (tests shrink it)."""

    def __init__(self, team: Team | None = None, resolution: int = 20,
                 start_file: str = "", horizon: int = HORIZON,
                 split_at: tuple[int, ...] | None = None) -> None:
        if horizon < 1:
            raise ValueError(f"env.horizon = {horizon} is invalid: allowed are integers >= 1 "
                             f"(control steps per episode)")
        super().__init__(team, resolution=resolution, reynolds=REYNOLDS,
                         u_max_lattice=U_LATTICE, split_at=split_at)
        self.start_file = Path(start_file) if start_file else start_path(resolution)
        self.horizon = horizon
        self.substeps = max(1, round(DT_CONTROL / self.dt))
        self.wall = self._jet_links()
        n = resolution
        px = np.round(np.array(PROBES_X) / 0.1 * n - 0.5).astype(int)
        py = np.round(np.array(PROBES_Y) / 0.1 * n - 0.5).astype(int)
        gx, gy = np.meshgrid(px, py, indexing="ij")
        self.probes = np.stack([gx.ravel(), gy.ravel()], axis=1)
        self.observed = self.probes
        """The nodes whose pressures :meth:`_observe` reads, the probes first."""
        self.rng = np.random.default_rng()
        self.t = 0
        self.last = np.zeros(2)
        self.sums = np.zeros(2)
        self.history: list[np.ndarray] = []

    def _jet_links(self) -> np.ndarray:
        """Bouzidi moving-wall terms of the slots' links per unit peak jet speed."""
        n = self.resolution
        wall = np.zeros_like(self.q)
        b, k = np.nonzero(self.rules == lk.BOUZIDI)
        q = self.q[b, k]
        x = self.x0 + self.nodes[b, 0] - 0.5 - q * lk.CX[k] - 2 * n
        y = self.nodes[b, 1] - 0.5 - q * lk.CY[k] - 2 * n
        theta = np.degrees(np.arctan2(y, x)) % 360
        for centre, sign in ((90.0, 1.0), (270.0, -1.0)):
            s = 2 * (theta - centre) / JET_WIDTH
            profile = np.where(np.abs(s) < 1, sign * (1 - s * s), 0.0)
            cu = lk.CX[k] * np.cos(np.radians(theta)) + lk.CY[k] * np.sin(np.radians(theta))
            wall[b, k] += 6 * lk.W[k] * cu * profile * np.where(q < 0.5, 1.0, 0.5 / q)
        return wall

    def _observe(self) -> np.ndarray:
        """The state from the pressures at :attr:`observed` and the jets' speed (module
        docstring); the probes' pressures join the episode's field. Collective."""
        local = np.zeros(len(self.observed))
        f = self.f
        for p, (i, j) in enumerate(self.observed):
            li = i - self.x0 + 1
            if 1 <= li <= self.nxl:
                local[p] = (f[:, li, j + 1].sum() - 1) / 3 / self.u_mean_lat**2
        full = self.team.sum_array(local) if self.team is not None else local
        self.history.append(full[:N_PROBES].astype(np.float32))
        return self._state(full, self.jet / (JET_MAX * self.u_mean_lat))

    def _state(self, pressures: np.ndarray, jet: float) -> np.ndarray:
        """The state of the pressures at :attr:`observed` and the top jet's speed ``jet``."""
        return np.append(pressures, jet).astype(np.float32)

    def _ensure_start(self) -> None:
        """Make the start file if it is missing (module docstring: first use)."""
        if self.start_file.exists():
            return
        n = self.resolution
        LOG.info("CylinderJets: no start state at %s: making it there (%g time units of the "
                 "uncontrolled flow at resolution %d, about %.0f s; `python -m "
                 "hpc_refer.envs.cylinder_jets --make-start --resolution %d` makes it "
                 "beforehand)", self.start_file, self.start_duration, n,
                 START_SECONDS * (n / 20) ** 3 * self.start_duration / START_TIME, n)
        make_start(self.start_file, n, self.start_duration)

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Load the stored shedding state (made first if missing), run 0..12 control steps
        uncontrolled (drawn from the seed); collective."""
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self._ensure_start()
        lo, hi = max(self.x0 - 1, 0), min(self.x0 + self.nxl + 1, self.nx)
        with h5py.File(self.start_file, "r") as h5:
            stored = h5["f"]
            if stored.shape != (9, self.nx, self.ny):
                raise ValueError(f"{self.start_file} holds a grid {stored.shape[1:]}, "
                                 f"not {(self.nx, self.ny)}")
            self.f[:, lo - self.x0 + 1:hi - self.x0 + 1, 1:-1] = stored[:, lo:hi]
        self.jet = 0.0
        self.advance(int(self.rng.integers(0, 13)) * self.substeps)
        self.t = 0
        self.sums = np.zeros(2)
        self.history = []
        return self._observe()

    def _control(self, a: float) -> tuple[np.ndarray, float, Status]:
        """One control step with the jets' target speed a JET_MAX U_mean (a clipped to
        [-1, 1]); collective."""
        a = float(np.clip(a, -1.0, 1.0))
        start, target = self.jet, a * JET_MAX * self.u_mean_lat
        total = np.zeros(2)
        for s in range(self.substeps):
            self.jet = start + (target - start) * (s + 1) / self.substeps
            total += self.advance(1)[0]
        self.last = total / self.substeps
        self.sums += self.last
        self.t += 1
        reward = C_D_REF - self.last[0] - 0.2 * abs(self.last[1])
        status = Status.TRUNCATED if self.t >= self.horizon else Status.CONTINUE
        return self._observe(), float(reward), status

    def step_values(self) -> tuple[float, float]:
        """Mean c_D, c_L over the last control step."""
        return float(self.last[0]), float(self.last[1])

    def episode_values(self) -> tuple[float, float]:
        """Mean c_D, c_L over the episode."""
        m = self.sums / max(self.t, 1)
        return float(m[0]), float(m[1])

    def episode_field(self) -> np.ndarray:
        """The probes' pressures over the episode, shape (control steps + 1, N_PROBES)."""
        return np.stack(self.history) if self.history else np.zeros((0, N_PROBES), np.float32)

    def close(self) -> None:
        """Nothing to release."""


class CylinderJets(_JetsFlow):
    """The DFG 2D-2 flow controlled by two zero-net-flux jets, one action for both;
    collective over the team. ``start_file``: the HDF5 start state (default
    :func:`start_path`, made on first use); ``horizon``: control steps per episode;
    ``split_at``: the slabs' first columns (see :class:`~hpc_refer.envs.flow2d.Flow2D`)."""

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, Status]:
        """One control step with the jets' target speed a JET_MAX U_mean; collective."""
        return self._control(float(np.asarray(action, np.float64).ravel()[0]))


class CylinderJetsAgents(_JetsFlow):
    """The flow of :class:`CylinderJets` with its two jets as two agents under the mirror
    symmetry (module docstring): agent 0 the top jet and today's observation, agent 1 the
    bottom jet and the mirrored one; the jets blow at q = (a_0 - a_1) / 2 (top) and -q
    (bottom). obs_dim, act_dim, low, high are per agent. Collective over the team."""

    n_agents = 2

    def __init__(self, team: Team | None = None, resolution: int = 20,
                 start_file: str = "", horizon: int = HORIZON,
                 split_at: tuple[int, ...] | None = None) -> None:
        super().__init__(team, resolution, start_file, horizon, split_at)
        self.mirrored = np.stack([self.probes[:, 0], 4 * resolution - 1 - self.probes[:, 1]],
                                 axis=1)
        """The probes' mirror images about the cylinder's centre line, in the probes' order."""
        self.observed = np.concatenate([self.probes, self.mirrored])

    def _state(self, pressures: np.ndarray, jet: float) -> np.ndarray:
        """Agent 0: the probes and the top jet's speed; agent 1: the mirror images and the
        bottom jet's (-jet, outward as the top one's), shape (2, obs_dim)."""
        return np.stack([np.append(pressures[:N_PROBES], jet),
                         np.append(pressures[N_PROBES:], -jet)]).astype(np.float32)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One control step, ``actions`` of shape (2, act_dim): each agent's target outward
        speed of its jet, the jets taking q = (a_0 - a_1) / 2; returns states (2, obs_dim),
        rewards (2,) (the same) and statuses (2,) (the same); collective."""
        a = np.clip(np.asarray(actions, np.float64).reshape(self.n_agents), -1.0, 1.0)
        states, reward, status = self._control((a[0] - a[1]) / 2)
        return (states, np.full(self.n_agents, reward),
                np.full(self.n_agents, int(status), np.int64))


def main() -> None:
    parser = argparse.ArgumentParser(description="CylinderJets start state")
    parser.add_argument("--make-start", action="store_true", required=True)
    parser.add_argument("--resolution", type=int, default=20)
    parser.add_argument("--path", default="", help="default: ~/.cache/hpc_refer/...")
    args = parser.parse_args()
    path = args.path or start_path(args.resolution)
    print(make_start(path, args.resolution))


if __name__ == "__main__":
    main()
