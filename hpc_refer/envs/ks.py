"""KuramotoSivashinsky: a cheap chaotic flow-control environment (Bucci et al. 2019 style).

The equation, on a periodic domain x in [0, L)::

    u_t + u u_x + u_xx + u_xxxx = f(x, a),      f(x, a) = A_MAX sum_j a_j psi(x - c_j)

with L = 22 (chaotic regime), ``N_ACT`` = 4 Gaussian actuators psi(d) = exp(-d^2 / (2 SIGMA^2))
(SIGMA = 0.4, peak 1, periodic distance d) centred at c_j = (j + 1/2) L / 4, and actions
a_j in [-1, 1] scaled by A_MAX = 1 (so |f| <= ~1). The spatial mean of f is removed (its
k = 0 Fourier coefficient is set to 0), so the mean of u, conserved by the equation, stays 0.

Discretisation: Fourier pseudo-spectral on N = 64 equispaced points (numpy ``rfft``, no
dealiasing), wavenumbers k = 2 pi n / L, the derivative of the Nyquist mode set to 0. In
Fourier space v' = (k^2 - k^4) v - (i k / 2) FFT(u^2) + FFT(f): the stiff linear part is
diagonal and integrated exactly by ETDRK4 (Cox & Matthews 2002) with the phi-function
coefficients computed by contour integrals (Kassam & Trefethen 2005, 32 points), fourth order
nominally. Validated in ``tests/test_ks.py``: a single Fourier mode evolves as
exp((k^2 - k^4) t) to rounding, constant forcing is integrated exactly, the error of the full
nonlinear equation falls 10-12-fold per halving of dt near DT (observed order ~3.4, the stiff
order reduction of this scheme), the energy stays bounded on the attractor.

Control: one action every DT_CONTROL = 0.25 time units = SUBSTEPS = 5 solver steps of
DT = 0.05 (the forcing is held constant over them). Observation: u at ``N_SENS`` = 8 equispaced
grid points (localized sensing, every 8th point). The energy is E = mean_x(u^2) / 2. Reward:
the rate at which the energy fell over the control step, less an actuation cost,

    r_t = -(E_{t+1} - E_t) / DT_CONTROL - ACT_COST mean_j a_j^2,      ACT_COST = 0.02.

Its discounted sum is sum_t gamma^t r_t = E_0 / DT_CONTROL - (1 - gamma) / DT_CONTROL
sum_{t>=1} gamma^{t-1} E_t - ACT_COST sum_t gamma^t |a_t|^2 / N_ACT (telescoping, for an
unending episode or one bootstrapped at its truncation), so maximising it minimises the
discounted energy plus the action cost: the same control goal as the reward
-(E_{t+1} + ACT_COST' |a|^2) of Bucci et al. (2019), reached by potential-based shaping
(Ng et al. 1999, potential -E / DT_CONTROL) with ACT_COST' = ACT_COST DT_CONTROL / (1 - gamma).
The shaping is what makes learning fast: with the plain reward -E, V-RACER + ReF-ER did not
lower the energy within 20,000 steps (measured, BENCHMARKS.md section 5; presumably because E
varies from state to state far more than one action changes it, and the 8 sensors see only
part of that variation). The energy itself is :meth:`KuramotoSivashinsky.energy`; its mean
over the steps of an episode, <E>, is the episode metric ``energy`` (a column of
``episodes.csv``, shown in the progress line). Episodes last ``HORIZON`` = 100 control steps
(25 time units) and end TRUNCATED. ``reset(seed)`` draws a random smooth initial condition
(the first four Fourier modes, amplitude ~1) from the environment's generator, then runs
TRANSIENT = 40 time units uncontrolled so episodes start on the attractor; a seed re-seeds the
generator, ``reset()`` continues it.

Team of K > 1 ranks: the grid is split over the ranks (np.array_split); each rank holds its
slice of u and does the physical-space work of a control step on it (actuation, u^2, sensors,
energy). The Fourier transforms are distributed as partial DFTs: a rank multiplies its points
by its columns of the DFT matrix and one team Allreduce sums the 33 coefficients (one per
nonlinear evaluation, 4 per solver step); the inverse evaluates only the rank's own points.
The 33 Fourier coefficients and their O(N) diagonal ETDRK4 updates are replicated on the
team. The uncontrolled transient of ``reset`` is run redundantly on every rank by the serial
FFT path (same code, same bits, no messages), each rank then keeps its slice. The energy is a
team sum and the sensors are gathered on team rank 0. The trajectory equals the one-rank
trajectory to rounding (tested to 1e-10).

The pieces are parametrised by the domain's length, the grid size and the actuator and sensor
counts (:func:`spectral_operators`, :func:`serial_nonlinear`'s ``deriv``, :class:`KSSolver`,
which holds the field, the transforms, the control step and the episode's bookkeeping):
:class:`KuramotoSivashinsky` is KSSolver on L = 22, 64 points, 4 actuators and 8 sensors plus
its ``step``; :class:`hpc_refer.envs.ks_agents.KuramotoSivashinskyAgents` reuses it with one
agent per actuator on a domain that grows with the number of agents.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hpc_refer.envs.interface import Status, Team

LENGTH = 22.0
N = 64
N_ACT = 4
N_SENS = 8
SIGMA = 0.4
A_MAX = 1.0
ACT_COST = 0.02
DT = 0.05
SUBSTEPS = 5
DT_CONTROL = DT * SUBSTEPS
HORIZON = 100
TRANSIENT = 40.0



def spectral_operators(length: float, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The wavenumbers k = 2 pi m / length of ``rfft`` modes m = 0..n/2 on n points, the
    diagonal linear operator k^2 - k^4 and the derivative's k (0 at the Nyquist mode)."""
    modes = np.arange(n // 2 + 1)
    wavenumbers = 2 * np.pi / length * modes
    return wavenumbers, wavenumbers**2 - wavenumbers**4, np.where(modes == n // 2, 0.0,
                                                                   wavenumbers)


WAVENUMBERS, LINEAR, DERIV = spectral_operators(LENGTH, N)


class ETDRK4:
    """Exponential time differencing RK4 for v' = lin v + nonlinear(v), ``lin`` diagonal.

    Coefficients of Kassam & Trefethen (2005), eq. (2.5), evaluated by the mean over
    ``n_contour`` points of a circle of radius 1 around each h lin (stable for h lin -> 0).
    """

    def __init__(self, lin: np.ndarray, h: float, n_contour: int = 32) -> None:
        hl = h * lin
        self.e = np.exp(hl)
        self.e2 = np.exp(hl / 2)
        r = np.exp(1j * np.pi * (np.arange(1, n_contour + 1) - 0.5) / n_contour)
        lr = hl[:, None] + r[None, :]
        ex = np.exp(lr)
        self.q = h * np.real(np.mean((np.exp(lr / 2) - 1) / lr, axis=1))
        self.f1 = h * np.real(np.mean((-4 - lr + ex * (4 - 3 * lr + lr**2)) / lr**3, axis=1))
        self.f2 = h * np.real(np.mean((2 + lr + ex * (lr - 2)) / lr**3, axis=1))
        self.f3 = h * np.real(np.mean((-4 - 3 * lr - lr**2 + ex * (4 - lr)) / lr**3, axis=1))

    def step(self, v: np.ndarray, nonlinear: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """One step of length h from v."""
        nv = nonlinear(v)
        a = self.e2 * v + self.q * nv
        na = nonlinear(a)
        b = self.e2 * v + self.q * na
        nb = nonlinear(b)
        c = self.e2 * a + self.q * (2 * nb - nv)
        nc = nonlinear(c)
        return self.e * v + self.f1 * nv + 2 * self.f2 * (na + nb) + self.f3 * nc


def serial_nonlinear(forcing_hat: np.ndarray,
                     deriv: np.ndarray = DERIV) -> Callable[[np.ndarray], np.ndarray]:
    """The Fourier-space nonlinear term -(i k / 2) FFT(u^2) + forcing_hat on the full grid of
    n = 2 (deriv.size - 1) points (``deriv``: the derivative's k, see spectral_operators)."""
    n = 2 * (deriv.size - 1)

    def term(v: np.ndarray) -> np.ndarray:
        u = np.fft.irfft(v, n)
        return -0.5j * deriv * np.fft.rfft(u * u) + forcing_hat

    return term


class KSSolver:
    """The controlled KS field on a periodic domain of length ``length`` with ``n`` grid
    points, ``n_act`` equispaced Gaussian actuators and ``n_sens`` equispaced sensors (every
    n / n_sens-th point); collective over the team's ranks. The numerics and episode
    bookkeeping that :class:`KuramotoSivashinsky` (length 22, 64 points, 4 actuators, 8
    sensors) and :class:`hpc_refer.envs.ks_agents.KuramotoSivashinskyAgents` share; a
    subclass adds the solver interface's class attributes and its ``step``."""

    episode_metrics = ("energy",)
    field_label = "u(x, t)"

    def __init__(self, team: Team | None, length: float, n: int, n_act: int,
                 n_sens: int) -> None:
        self.length, self.n = length, n
        self.team = team if team is not None and team.size > 1 else None
        rank, size = (team.rank, team.size) if team is not None else (0, 1)
        self.points = np.array_split(np.arange(n), size)[rank]
        x = length * self.points / n
        centres = length * (np.arange(n_act) + 0.5) / n_act
        d = (x[:, None] - centres[None, :] + length / 2) % length - length / 2
        self.actuators = A_MAX * np.exp(-0.5 * (d / SIGMA) ** 2)
        self.sensors = self.points % (n // n_sens) == 0
        modes = np.arange(n // 2 + 1)[:, None]
        self.dft = np.exp(-2j * np.pi * modes * self.points[None, :] / n)
        weights = np.where((modes == 0) | (modes == n // 2), 1.0, 2.0)
        self.idft = (weights * np.conj(self.dft)).T / n
        _, linear, self.deriv = spectral_operators(length, n)
        self.integrator = ETDRK4(linear, DT)
        self.rng: np.random.Generator | None = None
        self.u = np.zeros(self.points.size)
        self.t = 0
        self.last_energy = 0.0
        self.energy_sum = 0.0
        self.history: list[np.ndarray] = []
        """u on the whole grid at the episode's start and after each step (team rank 0)."""

    # Transforms: serial numpy FFTs, or partial DFTs summed over the team.
    def _forward(self, local: np.ndarray) -> np.ndarray:
        """Fourier coefficients (rows) of the fields whose local rows are ``local``."""
        if self.team is None:
            return np.fft.rfft(local, axis=-1)
        partial = np.ascontiguousarray(local @ self.dft.T)
        return self.team.sum_array(partial.view(np.float64)).view(np.complex128)

    def _backward(self, v: np.ndarray) -> np.ndarray:
        """This rank's grid values of the field with Fourier coefficients v."""
        if self.team is None:
            return np.fft.irfft(v, self.n)
        return np.real(self.idft @ v)

    def _nonlinear(self, forcing_hat: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        if self.team is None:
            return serial_nonlinear(forcing_hat, self.deriv)

        def term(v: np.ndarray) -> np.ndarray:
            u = self._backward(v)
            return -0.5j * self.deriv * self._forward(u * u) + forcing_hat

        return term

    def _record_field(self) -> None:
        """Append the whole field u to the episode's history on team rank 0 (collective)."""
        full = self.team.gather_rows(self.u) if self.team is not None else self.u
        if full is not None:
            self.history.append(np.array(full, np.float32))

    def _observe(self) -> np.ndarray:
        """u at the sensors, in grid order, on team rank 0 (empty elsewhere; collective)."""
        local = self.u[self.sensors]
        full = self.team.gather_rows(local) if self.team is not None else local
        return np.asarray(full if full is not None else np.zeros(0), np.float32)

    def reset(self, seed: int | None = None) -> np.ndarray:
        """A new episode on the attractor; collective (the same state on every rank)."""
        self.start(self._initial_field(seed))
        return self._observe()

    def _initial_field(self, seed: int | None) -> np.ndarray:
        """u on the whole grid after TRANSIENT uncontrolled time units from a random smooth
        field (run redundantly, by the serial FFT path, on every rank)."""
        if seed is None and self.rng is None:
            seed = self._team_seed()
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        assert self.rng is not None
        v = np.zeros(self.n // 2 + 1, np.complex128)
        v[1:5] = self.n / 2 * (self.rng.standard_normal(4)
                               + 1j * self.rng.standard_normal(4)) / 2
        unforced = serial_nonlinear(np.zeros_like(v), self.deriv)
        for _ in range(round(TRANSIENT / DT)):
            v = self.integrator.step(v, unforced)
        return np.fft.irfft(v, self.n)

    def start(self, u: np.ndarray) -> None:
        """Begin an episode at the field ``u`` (the whole grid, the same on every rank; each
        rank keeps its slice); collective. ``reset`` starts from a random field on the
        attractor, a test from the field it wants."""
        self.u = np.array(u, np.float64)[self.points]
        self.t = 0
        self.last_energy = self.energy()
        self.energy_sum = 0.0
        self.history = []
        self._record_field()

    def _team_seed(self) -> int:
        """A fresh seed, the same on every rank (drawn on team rank 0)."""
        seed = int(np.random.SeedSequence().generate_state(1)[0] >> 1)
        if self.team is None:
            return seed
        mine = np.array([seed if self.team.rank == 0 else 0], np.float64)
        return int(self.team.sum_array(mine)[0])

    def _advance(self, a: np.ndarray) -> tuple[float, Status]:
        """Advance DT_CONTROL with the actuators' amplitudes a (clipped to [-1, 1] by the
        caller); collective. Returns the energy before the step and the step's status."""
        v, forcing_hat = self._forward(np.stack([self.u, self.actuators @ a]))
        forcing_hat[0] = 0.0
        nonlinear = self._nonlinear(forcing_hat)
        for _ in range(SUBSTEPS):
            v = self.integrator.step(v, nonlinear)
        self.u = self._backward(v)
        previous, self.last_energy = self.last_energy, self.energy()
        self.energy_sum += self.last_energy
        self.t += 1
        self._record_field()
        return previous, Status.TRUNCATED if self.t >= HORIZON else Status.CONTINUE

    def energy(self) -> float:
        """E = mean_x(u^2) / 2 of the current field; collective (a team sum)."""
        local = float(np.sum(self.u**2))
        return (self.team.sum(local) if self.team is not None else local) / (2 * self.n)

    def episode_values(self) -> tuple[float]:
        """<E>: the mean energy after each step of the episode so far (not collective)."""
        return (self.energy_sum / max(self.t, 1),)

    def episode_field(self) -> np.ndarray:
        """u(x, t) of the episode so far: rows are the control steps (the start, then after
        each step), columns the grid points (team rank 0, not collective)."""
        return np.stack(self.history) if self.history else np.zeros((0, self.n), np.float32)

    def close(self) -> None:
        """Nothing to release."""


class KuramotoSivashinsky(KSSolver):
    """Controlled 1-D Kuramoto-Sivashinsky equation; collective over the team's ranks."""

    obs_dim = N_SENS
    act_dim = N_ACT
    low = -np.ones(N_ACT)
    high = np.ones(N_ACT)

    def __init__(self, team: Team | None = None) -> None:
        super().__init__(team, LENGTH, N, N_ACT, N_SENS)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, Status]:
        """Advance DT_CONTROL with the action (as seen on team rank 0); collective."""
        a = np.clip(np.asarray(action, np.float64), -1.0, 1.0)
        previous, status = self._advance(a)
        reward = -(self.last_energy - previous) / DT_CONTROL - ACT_COST * float(np.mean(a**2))
        return self._observe(), reward, status
