"""Flow2D: 2-D incompressible flow past the Schaefer-Turek cylinder by lattice Boltzmann.

The DFG benchmark (Schaefer & Turek 1996): a channel [0, 2.2] x [0, 0.41], a cylinder of
diameter D = 0.1 centred at (0.2, 0.2) (0.01 off the channel's mid-line, hence a lift even in
steady flow), viscosity nu = 1e-3, density rho = 1, parabolic inflow
u(0, y) = 4 U_max y (H - y) / H^2, no slip on the walls and the cylinder, free outflow.
U_mean = 2/3 U_max, Re = U_mean D / nu (20: U_max = 0.3, case 2D-1, steady; 100: U_max = 1.5,
2D-2, periodic shedding). Drag and lift coefficients c_D = 2 F_x / (rho U_mean^2 D),
c_L = 2 F_y / (rho U_mean^2 D), Strouhal number St = D f / U_mean with f the lift's frequency.

Method: D2Q9 lattice Boltzmann (kernels in :mod:`hpc_refer.envs.lbm_kernels`), which solves
the incompressible Navier-Stokes equations to second order in the grid spacing dx; with the
incompressible equilibrium of He & Luo (1997) the steady solutions carry no compressibility
error, unsteady ones an O(Ma^2) one (Ma = U / c_s, c_s = 1/sqrt(3) in lattice units): c_L,max of
2D-2 at N = 20 is 1.0174 at u_lat = 0.0656, 1.0077 at 0.045, 1.0028 at 0.035 and 1.0005 at
0.025 (bench/turek.py --mach). Choices:

- Grid: ``resolution`` = N nodes per diameter, dx = D / N, nodes at cell centres
  ((i + 1/2) dx, (j + 1/2) dx), nx = 22 N, ny = 4.1 N (N a multiple of 10), so every straight
  boundary lies half way between nodes. Time step dt = dx u_lat / U_max with ``u_max_lattice``
  u_lat, the inflow's peak speed in lattice units (acoustic scaling; u_lat is the Mach-number
  knob, Ma = sqrt(3) u_lat). Lattice viscosity nu_lat = (2/3) u_lat N / Re.
- Collision: two-relaxation-time (TRT, Ginzburg et al. 2008). BGK at Re = 100 on coarse grids
  needs omega_p near 2 (nu_lat = 0.01 at N = 20, u_lat = 0.075) where its single rate leaves
  the ghost modes barely damped; TRT relaxes the antisymmetric (odd) moments at their own rate
  omega_m fixed by Lambda = (1/omega_p - 1/2)(1/omega_m - 1/2) = 3/16, the value for which
  halfway bounce-back puts a straight wall exactly half way between nodes (Poiseuille flow is
  exact) and the steady solution does not depend on the viscosity through the wall position.
- Channel walls: halfway bounce-back f_k(x, t + 1) = f*_kbar(x, t) (second order with TRT).
- Cylinder: Bouzidi et al. (2001) interpolated bounce-back, second order for a curved wall at
  fraction q of the link from fluid node x to the solid: for q < 1/2,
  f_k(x, t + 1) = 2q f*_kbar(x) + (1 - 2q) f*_kbar(x + c_k); for q >= 1/2,
  f_k(x, t + 1) = [f*_kbar(x) + (2q - 1) f*_k(x)] / (2q) (kbar: the link's direction into the
  wall, k: back out of it). q solves |x + q c_kbar - centre| = R exactly.
- Inflow: Ladd's moving-wall bounce-back at the face x = 0,
  f_k = f*_kbar + 6 w_k c_k.u_in, which imposes the parabolic velocity to second order: the
  mass flux through the face is exactly sum_j u_in(y_j) (less the two corner links, whose
  diagonal neighbour lies beyond a wall and bounces back there: 0.06 % at N = 10).
- Outflow: anti-bounce-back at constant pressure (rho = 1) at x = 2.2,
  f_k = -f*_kbar + 2 w_k [1 + 9/2 (c_k.u_b)^2 - 3/2 u_b^2], with the outlet velocity u_b
  extrapolated linearly from the last two columns: it fixes the mean density (a velocity
  inlet with a zero-gradient outlet lets the mass drift) and lets the wake leave; 20 D
  downstream of the cylinder its pressure waves hardly reach the forces (measured: c_D
  agrees with the reference band, see bench/turek.py).
- Forces: momentum exchange (Ladd 1994) over the Bouzidi links, F = sum c_kbar
  [f*_kbar(x) + f_k(x, t + 1)] with the interpolated f_k, in lattice units
  (rho = 1, U_mean = 2/3 u_lat, D = N), so c_D = 2 F_x / (U_mean^2 N).

Parallel: the columns are split over the team's ranks (np.array_split, each rank at least 2
columns); every rank holds its slab with one halo column on each side, refreshed after every
step by :meth:`~hpc_refer.envs.interface.Team.exchange_slabs` (9 ny values each way), and sums its
own cylinder links; the force is a team sum. Every node's arithmetic is the same as on one
rank, so the fields equal the one-rank fields bit for bit and the forces to the round-off of
the sum's order (tested with 2 and 3 ranks).
"""

from __future__ import annotations

import numpy as np

from hpc_refer.envs import lbm_kernels as lk
from hpc_refer.envs.interface import Team

LENGTH, HEIGHT, DIAMETER = 2.2, 0.41, 0.1
CENTRE = (0.2, 0.2)
NU = 1e-3


class Flow2D:
    """The Schaefer-Turek channel at Reynolds number ``reynolds`` on ``resolution`` nodes per
    diameter; collective over the team's ranks (module docstring).

    ``u_max_lattice``: the inflow's peak speed in lattice units (Mach number / sqrt(3));
    ``magic``: the TRT parameter Lambda; ``perturb``: amplitude (in units of the peak inflow
    speed) of a transverse velocity blob one diameter behind the cylinder at t = 0, which
    starts the shedding of 2D-2 early; ``cylinder``: False for the empty channel (Poiseuille
    flow); ``split_at``: the first global columns of ranks 1..K-1 (default: np.array_split).
    ``wall`` (per boundary link) times ``jet`` is a moving-wall term on the cylinder's links
    (zero here; :class:`~hpc_refer.envs.cylinder_jets.CylinderJets` sets them).
    """

    def __init__(self, team: Team | None = None, resolution: int = 20, reynolds: float = 20.0,
                 u_max_lattice: float = 0.075, magic: float = 3 / 16,
                 perturb: float = 0.0, cylinder: bool = True,
                 split_at: tuple[int, ...] | None = None) -> None:
        if resolution % 10:
            raise ValueError(f"resolution must be a multiple of 10 (H = 4.1 D), not {resolution}")
        self.team = team if team is not None and team.size > 1 else None
        rank, size = (team.rank, team.size) if team is not None else (0, 1)
        n = resolution
        self.resolution, self.reynolds, self.u_lat = n, reynolds, u_max_lattice
        self.nx, self.ny = 22 * n, 41 * n // 10
        self.u_mean_lat = 2 / 3 * u_max_lattice
        nu_lat = self.u_mean_lat * n / reynolds
        self.omega_p = 1 / (3 * nu_lat + 0.5)
        self.omega_m = 1 / (magic / (3 * nu_lat) + 0.5)
        u_max = 1.5 * reynolds * NU / DIAMETER
        self.dt = DIAMETER / n * u_max_lattice / u_max
        cuts = split_at if split_at is not None else [
            c[0] for c in np.array_split(np.arange(self.nx), size)[1:]]
        if len(cuts) != size - 1:
            raise ValueError(f"split_at needs {size - 1} columns, got {len(cuts)}")
        cols = np.split(np.arange(self.nx), list(cuts))[rank]
        if cols.size < 2:
            raise ValueError(f"{size} ranks leave fewer than 2 of {self.nx} columns to a rank")
        self.x0, self.nxl = int(cols[0]), cols.size
        self.steps = 0
        self._build_geometry(perturb, cylinder)
        self._force = np.zeros(2)
        self.latest = np.full(2, np.nan)

    def _build_geometry(self, perturb: float, cylinder: bool) -> None:
        """Solid mask, boundary nodes with their link rules and q, initial equilibrium."""
        n, nx, ny = self.resolution, self.nx, self.ny
        cx, cy, r = 2.0 * n, 2.0 * n, n / 2
        gx = np.arange(nx)[:, None] + 0.5
        gy = np.arange(ny)[None, :] + 0.5
        solid = ((gx - cx) ** 2 + (gy - cy) ** 2 < r * r) & cylinder
        height = float(ny)
        u_in = lambda y: 4 * self.u_lat * y * (height - y) / height**2  # noqa: E731
        nodes, rules, qs = [], [], []
        # candidates: fluid nodes on the domain's edge or next to a solid node
        near = np.zeros((nx + 2, ny + 2), bool)
        near[1:-1, 1:-1] = solid
        near = np.logical_or.reduce([near[1 + a:nx + 1 + a, 1 + b:ny + 1 + b]
                                     for a in (-1, 0, 1) for b in (-1, 0, 1)])
        near[[0, -1], :] = True
        near[:, [0, -1]] = True
        near &= ~solid
        for i, j in zip(*np.nonzero(near[self.x0:self.x0 + self.nxl]), strict=True):
            li, i = i + 1, i + self.x0
            rule = np.full(9, lk.PULL, np.int64)
            q = np.zeros(9)
            for k in range(1, 9):
                si, sj = i - lk.CX[k], j - lk.CY[k]
                if not 0 <= sj < ny:
                    rule[k] = lk.WALL
                elif si < 0:
                    rule[k] = lk.INLET
                elif si >= nx:
                    rule[k] = lk.OUTLET
                elif solid[si, sj]:
                    rule[k] = lk.BOUZIDI
                    q[k] = _wall_fraction(i + 0.5, j + 0.5, -lk.CX[k], -lk.CY[k], cx, cy, r)
                    # q < 1/2 interpolates with the next node away from the wall; where
                    # that is solid too, fall back to halfway bounce-back (q = 1/2)
                    ni, nj = i + lk.CX[k], j + lk.CY[k]
                    if q[k] < 0.5 and (not 0 <= ni < nx or solid[ni, nj]):
                        q[k] = 0.5
            if ((rule != lk.PULL) & (rule != lk.WALL)).any():
                nodes.append((li, j + 1))
                rules.append(rule)
                qs.append(q)
        self.nodes = np.array(nodes, np.int64).reshape(-1, 2)
        self.rules = np.array(rules, np.int64).reshape(-1, 9)
        self.q = np.array(qs).reshape(-1, 9)
        self.wall = np.zeros_like(self.q)
        self.jet = 0.0
        self.u_in = u_in(self.nodes[:, 1] - 0.5) if self.nodes.size else np.zeros(0)
        local = solid[self.x0:self.x0 + self.nxl]
        si, sj = np.nonzero(local)
        self.solid = np.stack([si + 1, sj + 1], axis=1).astype(np.int64)
        # initial state: the inflow profile everywhere (zero in the cylinder) at the equilibrium
        # of a guessed pressure p = rho / 3: Poiseuille's gradient 12 nu U_mean / H^2 plus the
        # cylinder's jump F_x / H with c_D ~ 5.58 (20 / Re)^(1/2) (a rough fit of the benchmark),
        # so that the start launches weak pressure waves (they are hardly damped in the long
        # channel)
        xs = self.x0 - 0.5 + np.arange(self.nxl + 2)[:, None]
        ys = np.arange(ny + 2)[None, :] - 0.5
        nu_lat = (1 / self.omega_p - 0.5) / 3
        c_d = 5.58 * (20 / self.reynolds) ** 0.5 if cylinder else 0.0
        jump = c_d * 0.5 * self.u_mean_lat**2 * n / height
        p = (12 * nu_lat * self.u_mean_lat * (nx - xs) / height**2
             + jump * 0.5 * (1 - np.tanh((xs - cx) / r)))
        rho = 1 + 3 * p + 0 * ys
        ux = np.zeros((self.nxl + 2, ny + 2))
        uy = np.zeros_like(ux)
        ux[:, 1:-1] = u_in(gy)
        # optional transverse kick behind the cylinder, to start the shedding early
        uy += perturb * self.u_lat * np.exp(-((xs - cx - 2 * r) ** 2 + (ys - cy) ** 2) / r**2)
        ux[1:-1, 1:-1][local] = 0.0
        uy[1:-1, 1:-1][local] = 0.0
        self.f = equilibrium(rho, ux, uy)
        self.f_new = self.f.copy()

    def advance(self, n_steps: int) -> np.ndarray:
        """Advance ``n_steps`` time steps (collective); returns their (c_D, c_L), shape
        (n_steps, 2), on every rank. FloatingPointError when the solution blew up."""
        local = np.empty((n_steps, 2))
        for s in range(n_steps):
            lk.bulk_step(self.f, self.f_new, self.omega_p, self.omega_m)
            lk.boundary_step(self.f, self.f_new, self.omega_p, self.omega_m, self.nodes,
                             self.rules, self.q, self.u_in, self.solid, self.wall,
                             self.jet, self._force)
            if self.team is not None:
                left, right = self.team.exchange_slabs(self.f_new[:, 1], self.f_new[:, -2])
                if left is not None:
                    self.f_new[:, 0] = left
                if right is not None:
                    self.f_new[:, -1] = right
            self.f, self.f_new = self.f_new, self.f
            local[s] = self._force
        force = self.team.sum_array(local) if self.team is not None else local
        coeffs = 2 * force / (self.u_mean_lat**2 * self.resolution)
        self.steps += n_steps
        if n_steps:
            self.latest = coeffs[-1]
        if not np.isfinite(coeffs).all():
            raise FloatingPointError(f"Flow2D blew up before step {self.steps}")
        return coeffs

    def continue_from(self, coarse: Flow2D) -> None:
        """Start this flow from the state of ``coarse`` (same channel and Reynolds number, any
        resolution and u_lat, the same team): grid sequencing, so that a fine run needs only
        the few time units that its own grid changes, not the development of the shedding.
        Collective.

        The coarse density and velocity (every rank's columns, summed into the whole field on
        every rank) are interpolated bilinearly to this grid's nodes (held at the edge
        beyond the outermost nodes) and rescaled to this Mach number: u by u_lat / u_lat_c,
        rho - 1 (= 3 p) by (u_lat / u_lat_c)^2. The populations are set to the equilibrium
        plus the first-order (Chapman-Enskog) non-equilibrium part of the post-collision
        state, f*_k = f^eq_k + (1 - omega_p) f^(1)_k with
        f^(1)_k = -(3 / omega_p) w_k Q_k : grad u, Q_k = c_k c_k - I / 3 (its second moment
        is the viscous stress -2 rho c_s^2 tau S), velocity gradients by central
        differences; the solid nodes are at rest. Every rank interpolates the same whole
        field, so the start is the same for any number of ranks."""
        if coarse.reynolds != self.reynolds:
            raise ValueError(f"continue_from needs the same flow on another grid, not Re = "
                             f"{coarse.reynolds} for Re = {self.reynolds}")
        whole = np.zeros((3, coarse.nx, coarse.ny))
        whole[:, coarse.x0:coarse.x0 + coarse.nxl] = coarse._local_fields()
        if coarse.team is not None:
            whole = coarse.team.sum_array(whole.ravel()).reshape(whole.shape)
        scale = self.u_lat / coarse.u_lat
        whole[0] = 1 + (whole[0] - 1) * scale**2
        whole[1:] *= scale
        ratio = coarse.resolution / self.resolution
        lo, hi = self.x0 - 1, self.x0 + self.nxl + 1
        cols = np.clip(np.arange(lo - 1, hi + 1), 0, self.nx - 1)
        rows = np.arange(self.ny)
        rho, ux, uy = _bilinear(whole, (cols + 0.5) * ratio - 0.5, (rows + 0.5) * ratio - 0.5)
        dux_dx, dux_dy = np.gradient(ux)
        duy_dx, duy_dy = np.gradient(uy)
        state = np.empty((9, cols.size, self.ny + 2))
        state[:, :, 1:-1] = equilibrium(rho, ux, uy)
        for k in range(9):
            cx, cy = lk.CX[k], lk.CY[k]
            q_grad = (cx * cx * dux_dx + cx * cy * (dux_dy + duy_dx) + cy * cy * duy_dy
                      - (dux_dx + duy_dy) / 3)
            state[k, :, 1:-1] -= (1 - self.omega_p) * 3 / self.omega_p * lk.W[k] * q_grad
        state[:, :, [0, -1]] = state[:, :, [1, -2]]
        self.f[:] = state[:, 1:-1]
        self.f[:, self.solid[:, 0], self.solid[:, 1]] = lk.W[:, None]
        self.f_new[:] = self.f

    def coefficients(self) -> tuple[float, float]:
        """(c_D, c_L) of the last step."""
        return float(self.latest[0]), float(self.latest[1])

    def _local_fields(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Density and velocity of this rank's columns, each (nxl, ny), lattice units."""
        f = self.f[:, 1:-1, 1:-1]
        rho = f.sum(axis=0)
        ux = f[1] - f[3] + f[5] - f[6] - f[7] + f[8]
        uy = f[2] - f[4] + f[5] + f[6] - f[7] - f[8]
        return rho, ux, uy

    def fields(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Density and velocity (rho, u_x, u_y), each (nx, ny) in lattice units, gathered on
        team rank 0 (None elsewhere; collective); zero inside the cylinder."""
        full = [self.team.gather_rows(a.ravel()) if self.team is not None else a.ravel()
                for a in self._local_fields()]
        if full[0] is None or full[1] is None or full[2] is None:
            return None
        shape = (self.nx, self.ny)
        return full[0].reshape(shape), full[1].reshape(shape), full[2].reshape(shape)

    def vorticity(self) -> np.ndarray | None:
        """Vorticity du_y/dx - du_x/dy in units of U_mean / D, shape (nx, ny), on team rank 0
        (None elsewhere; collective): central differences of the gathered velocity."""
        fields = self.fields()
        if fields is None:
            return None
        return self._curl(fields[1], fields[2])

    def _curl(self, ux: np.ndarray, uy: np.ndarray) -> np.ndarray:
        """du_y/dx - du_x/dy of lattice velocities, in units of U_mean / D."""
        scale = self.resolution / self.u_mean_lat
        return (np.gradient(uy, axis=0) - np.gradient(ux, axis=1)) * scale

    snapshot_extent = (0.0, LENGTH, 0.0, HEIGHT)
    """The domain (x_min, x_max, y_min, y_max) the snapshot's arrays cover, for pictures."""
    snapshot_circles = ((CENTRE[0], CENTRE[1], DIAMETER / 2),)
    """The cylinder (x, y, radius), drawn on the snapshot's picture."""

    def snapshot(self) -> dict[str, np.ndarray] | None:
        """The flow now, on team rank 0 (None elsewhere; collective): ``vorticity`` (as
        :meth:`vorticity`) and the velocity ``ux``, ``uy`` in units of U_mean, each (nx, ny)
        indexed [x, y], NaN inside the cylinder."""
        fields = self.fields()
        if fields is None:
            return None
        _, ux, uy = fields
        vort = self._curl(ux, uy)
        n = self.resolution
        g = np.arange(self.nx)[:, None] + 0.5 - 2 * n, np.arange(self.ny)[None, :] + 0.5 - 2 * n
        inside = g[0] ** 2 + g[1] ** 2 < (n / 2) ** 2
        return {name: np.where(inside, np.nan, a) for name, a in
                (("vorticity", vort), ("ux", ux / self.u_mean_lat),
                 ("uy", uy / self.u_mean_lat))}


def equilibrium(rho: np.ndarray, ux: np.ndarray, uy: np.ndarray) -> np.ndarray:
    """Incompressible D2Q9 equilibrium f^eq_k = w_k (rho + 3 c_k.u + 9/2 (c_k.u)^2 - 3/2 u^2),
    shape (9, *rho.shape)."""
    usq = ux * ux + uy * uy
    out = np.empty((9, *rho.shape))
    for k in range(9):
        cu = lk.CX[k] * ux + lk.CY[k] * uy
        out[k] = lk.W[k] * (rho + 3 * cu + 4.5 * cu * cu - 1.5 * usq)
    return out


def _bilinear(values: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Bilinear interpolation of ``values[..., i, j]`` (given at integer positions) at the
    positions x (along i) and y (along j), clipped to the array's extent; shape
    (..., x.size, y.size)."""
    out = values
    for axis, pos in ((-2, x), (-1, y)):
        size = values.shape[axis]
        pos = np.clip(pos, 0, size - 1)
        i0 = np.minimum(np.floor(pos).astype(np.int64), size - 2)
        w = pos - i0
        a, b = np.take(out, i0, axis=axis), np.take(out, i0 + 1, axis=axis)
        w = w[:, None] if axis == -2 else w
        out = a * (1 - w) + b * w
    return out


def _wall_fraction(px: float, py: float, dx: int, dy: int, cx: float, cy: float,
                   r: float) -> float:
    """The fraction q in (0, 1] of the link from (px, py) along (dx, dy) at which it meets
    the circle of centre (cx, cy) and radius r: the smaller root of |p + q d - c|^2 = r^2."""
    a = dx * dx + dy * dy
    b = dx * (px - cx) + dy * (py - cy)
    c = (px - cx) ** 2 + (py - cy) ** 2 - r * r
    return float((-b - np.sqrt(b * b - a * c)) / a)
