"""Numba kernels of the D2Q9 lattice Boltzmann solver of :mod:`hpc_refer.envs.flow2d`.

Lattice: velocities c_k, k = 0..8, ordered rest, E, N, W, S, NE, NW, SW, SE, weights
w = 4/9, 1/9 (axes), 1/36 (diagonals), sound speed c_s^2 = 1/3. Arrays ``f[k, i, j]`` hold the
post-collision populations f*_k of a slab of columns i = 1..nxl (0 and nxl + 1 are halo columns,
the neighbouring ranks' edge columns) and rows j = 1..ny (0 and ny + 1 are padding rows beyond
the channel walls: :func:`bulk_step` reads them in its plain pass and then replaces the wall
rows' results by bounce-back). Two lattices (``f_old``, ``f_new``): one time step is a pull,

    f_k(x, t + 1) = f*_k(x - c_k, t)            (streaming, read from f_old)

followed by the TRT collision (Ginzburg et al. 2008), written to f_new. With the symmetric and
antisymmetric parts f^±_k = (f_k ± f_kbar) / 2 (kbar: -c_k) and the incompressible equilibrium
of He & Luo (1997), rho = sum_k f_k (= 1 + 3 p), u = sum_k c_k f_k (rho_0 = 1, no division),

    f^eq_k = w_k (rho + 3 c_k.u + 9/2 (c_k.u)^2 - 3/2 u^2),
    f*_k = f_k - omega_p (f^+_k - f^eq+_k) - omega_m (f^-_k - f^eq-_k),

f^eq+_k = w_k (rho + 9/2 (c_k.u)^2 - 3/2 u^2), f^eq-_k = 3 w_k c_k.u; omega_p sets the
viscosity nu = (1/omega_p - 1/2) / 3, omega_m the "magic" product
Lambda = (1/omega_p - 1/2)(1/omega_m - 1/2). The incompressible equilibrium makes the steady
solutions those of the incompressible equations (no O(Ma^2) density factor in the momentum
flux u u): with the usual compressible equilibrium rho u u, c_D of 2D-1 at N = 20 moved from
5.67 to 5.82 when u_lat went from 0.05 to 0.1; with this one it stays at 5.614 (measured).

:func:`bulk_step` applies the pull to every node of the slab (branch-free inner loop), with
halfway bounce-back at the two channel walls written into the rows next to them;
:func:`boundary_step` then recomputes the few nodes next to the inlet, the outlet and the
cylinder, whose populations coming from outside the fluid follow the rule coded per link (see
:data:`PULL` ...), adds up the momentum exchanged with the cylinder, and resets the solid nodes
to rest. (Recomputing the wall rows there instead cost about a tenth of the step at N = 80:
their nodes lie a column apart in memory, nine cache lines each.)
"""

from __future__ import annotations

import numpy as np
from numba import njit

CX = np.array([0, 1, 0, -1, 0, 1, -1, -1, 1], np.int64)
CY = np.array([0, 0, 1, 0, -1, 1, 1, -1, -1], np.int64)
W = np.array([4 / 9, 1 / 9, 1 / 9, 1 / 9, 1 / 9, 1 / 36, 1 / 36, 1 / 36, 1 / 36])
OPP = np.array([0, 3, 4, 1, 2, 7, 8, 5, 6], np.int64)

PULL, WALL, INLET, OUTLET, BOUZIDI = 0, 1, 2, 3, 4
"""Link rules of a boundary node's incoming population k (source x - c_k):
PULL: a fluid node; WALL: beyond a channel wall, halfway bounce-back f_k = f*_kbar(x) (the
rows next to the walls get it in :func:`bulk_step`; the rule serves the corner nodes, which
the boundary pass recomputes for their inlet or outlet links);
INLET: beyond x = 0, Ladd's moving-wall bounce-back f_k = f*_kbar(x) + 6 w_k c_k.u_in;
OUTLET: beyond x = L, anti-bounce-back at pressure rho_out = 1,
f_k = -f*_kbar(x) + 2 w_k (1 + 9/2 (c_k.u_b)^2 - 3/2 u_b^2), u_b extrapolated to the outlet;
BOUZIDI: inside the cylinder, interpolated bounce-back with the wall at fraction q of the link."""

W0, WA, WD = 4 / 9, 1 / 9, 1 / 36


@njit(inline="always")
def _collide(f0: float, f1: float, f2: float, f3: float, f4: float, f5: float, f6: float,
             f7: float, f8: float, op: float, om: float
             ) -> tuple[float, float, float, float, float, float, float, float, float]:
    """TRT collision of one node's nine populations (module docstring)."""
    rho = f0 + f1 + f2 + f3 + f4 + f5 + f6 + f7 + f8
    ux = f1 - f3 + f5 - f6 - f7 + f8
    uy = f2 - f4 + f5 + f6 - f7 - f8
    usq = 1.5 * (ux * ux + uy * uy)
    g0 = f0 - op * (f0 - W0 * (rho - usq))
    # axis pairs (1, 3) and (2, 4), diagonal pairs (5, 7) and (6, 8)
    p, m = 0.5 * (f1 + f3), 0.5 * (f1 - f3)
    dp = op * (p - WA * (rho + 4.5 * ux * ux - usq))
    dm = om * (m - 3.0 * WA * ux)
    g1, g3 = f1 - dp - dm, f3 - dp + dm
    p, m = 0.5 * (f2 + f4), 0.5 * (f2 - f4)
    dp = op * (p - WA * (rho + 4.5 * uy * uy - usq))
    dm = om * (m - 3.0 * WA * uy)
    g2, g4 = f2 - dp - dm, f4 - dp + dm
    s = ux + uy
    p, m = 0.5 * (f5 + f7), 0.5 * (f5 - f7)
    dp = op * (p - WD * (rho + 4.5 * s * s - usq))
    dm = om * (m - 3.0 * WD * s)
    g5, g7 = f5 - dp - dm, f7 - dp + dm
    d = uy - ux
    p, m = 0.5 * (f6 + f8), 0.5 * (f6 - f8)
    dp = op * (p - WD * (rho + 4.5 * d * d - usq))
    dm = om * (m - 3.0 * WD * d)
    g6, g8 = f6 - dp - dm, f8 - dp + dm
    return g0, g1, g2, g3, g4, g5, g6, g7, g8


@njit(inline="always")
def _store(fn: np.ndarray, i: int, j: int,
           g: tuple[float, float, float, float, float, float, float, float, float]) -> None:
    """Write one node's nine post-collision populations."""
    fn[0, i, j] = g[0]
    fn[1, i, j] = g[1]
    fn[2, i, j] = g[2]
    fn[3, i, j] = g[3]
    fn[4, i, j] = g[4]
    fn[5, i, j] = g[5]
    fn[6, i, j] = g[6]
    fn[7, i, j] = g[7]
    fn[8, i, j] = g[8]


@njit(cache=True)
def bulk_step(fo: np.ndarray, fn: np.ndarray, op: float, om: float) -> None:
    """Pull-stream and collide every node of columns 1..nxl, rows 1..ny (fluid or not). Rows 1
    and ny lie next to the channel walls: the links that would pull from beyond a wall take
    halfway bounce-back, f_k(x, t + 1) = f*_kbar(x, t) (bottom wall: k = 2, 5, 6 from
    kbar = 4, 7, 8; top wall: k = 4, 7, 8 from 2, 5, 6). The first pass pulls every row
    plainly (reading the padding rows); a second pass over the columns then recomputes the
    two wall rows. (Measured at N = 80: an inner loop over rows 2..ny - 1 alone ran at half
    the speed, and the wall rows inside the column loop cost 15 %.)"""
    nxl, ny = fo.shape[1] - 2, fo.shape[2] - 2
    for i in range(1, nxl + 1):
        for j in range(1, ny + 1):
            _store(fn, i, j, _collide(fo[0, i, j], fo[1, i - 1, j], fo[2, i, j - 1],
                                      fo[3, i + 1, j], fo[4, i, j + 1], fo[5, i - 1, j - 1],
                                      fo[6, i + 1, j - 1], fo[7, i + 1, j + 1],
                                      fo[8, i - 1, j + 1], op, om))
    for i in range(1, nxl + 1):
        _store(fn, i, 1, _collide(fo[0, i, 1], fo[1, i - 1, 1], fo[4, i, 1], fo[3, i + 1, 1],
                                  fo[4, i, 2], fo[7, i, 1], fo[8, i, 1], fo[7, i + 1, 2],
                                  fo[8, i - 1, 2], op, om))
        _store(fn, i, ny, _collide(fo[0, i, ny], fo[1, i - 1, ny], fo[2, i, ny - 1],
                                   fo[3, i + 1, ny], fo[2, i, ny], fo[5, i - 1, ny - 1],
                                   fo[6, i + 1, ny - 1], fo[5, i, ny], fo[6, i, ny], op, om))


@njit(cache=True)
def boundary_step(fo: np.ndarray, fn: np.ndarray, op: float, om: float, nodes: np.ndarray,
                  rules: np.ndarray, q: np.ndarray, u_in: np.ndarray, solid: np.ndarray,
                  wall: np.ndarray, jet: float, force: np.ndarray) -> None:
    """Recompute the boundary nodes ``nodes[b] = (i, j)`` (array indices) from ``f_old`` with
    their link rules ``rules[b, k]`` and wall fractions ``q[b, k]``; ``u_in[b]`` is the inflow
    velocity at the inlet face of node b; a Bouzidi link moving with the wall (a jet) adds
    ``jet * wall[b, k]``, Bouzidi's moving-wall term 6 w_k c_k.u_w (divided by 2q for
    q >= 1/2) for the wall velocity u_w per unit ``jet``. ``force`` receives the momentum
    exchanged with the cylinder (Bouzidi links) during the step, sum over links of
    c_kbar (f*_kbar(x) + f_k(x)).
    Solid nodes ``solid[s] = (i, j)`` are set to rest, f = w."""
    force[0] = 0.0
    force[1] = 0.0
    f = np.empty(9)
    for b in range(nodes.shape[0]):
        i, j = nodes[b, 0], nodes[b, 1]
        for k in range(9):
            rule = rules[b, k]
            kb = OPP[k]
            if rule == PULL:
                f[k] = fo[k, i - CX[k], j - CY[k]]
            elif rule == WALL:
                f[k] = fo[kb, i, j]
            elif rule == INLET:
                f[k] = fo[kb, i, j] + 6.0 * W[k] * CX[k] * u_in[b]
            elif rule == OUTLET:
                # velocity at the outlet face, extrapolated from this node and its west one
                ux0, uy0 = _velocity(fo, i, j)
                ux1, uy1 = _velocity(fo, i - 1, j)
                ux, uy = 1.5 * ux0 - 0.5 * ux1, 1.5 * uy0 - 0.5 * uy1
                cu = CX[k] * ux + CY[k] * uy
                f[k] = -fo[kb, i, j] + 2.0 * W[k] * (1.0 + 4.5 * cu * cu
                                                     - 1.5 * (ux * ux + uy * uy))
            else:  # BOUZIDI: the link x -> x + c_kbar crosses the wall at fraction q
                qq = q[b, k]
                if qq < 0.5:
                    f[k] = 2.0 * qq * fo[kb, i, j] + (1.0 - 2.0 * qq) * fo[kb, i + CX[k],
                                                                           j + CY[k]]
                else:
                    f[k] = (fo[kb, i, j] + (2.0 * qq - 1.0) * fo[k, i, j]) / (2.0 * qq)
                f[k] += jet * wall[b, k]
                force[0] -= CX[k] * (fo[kb, i, j] + f[k])
                force[1] -= CY[k] * (fo[kb, i, j] + f[k])
        g = _collide(f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], op, om)
        for k in range(9):
            fn[k, i, j] = g[k]
    for s in range(solid.shape[0]):
        for k in range(9):
            fn[k, solid[s, 0], solid[s, 1]] = W[k]


@njit(inline="always")
def _velocity(f: np.ndarray, i: int, j: int) -> tuple[float, float]:
    """Velocity (u_x, u_y) = sum_k c_k f_k of node (i, j) (incompressible model, rho_0 = 1)."""
    jx = 0.0
    jy = 0.0
    for k in range(9):
        jx += CX[k] * f[k, i, j]
        jy += CY[k] * f[k, i, j]
    return jx, jy
