"""Flow2D (issue 13): the empty channel's Poiseuille flow, the cylinder's geometry, the DFG
benchmark at a coarse resolution (2D-1 and 2D-2, N = 20 nodes per diameter, with tolerances from
the convergence table of bench/turek.py), blow-up as an error, grid sequencing
(``continue_from``), and the multi-rank fields equal to the one-rank fields (pytest-mpi).

Run the MPI part with ``mpirun -n 2 python -m pytest --only-mpi tests/test_flow2d.py``
(or -n 3).
"""

from __future__ import annotations

import numpy as np
import pytest

from hpc_refer.envs import lbm_kernels as lk
from hpc_refer.envs.flow2d import Flow2D, equilibrium


def test_the_empty_channel_keeps_poiseuille_flow_with_a_constant_mass_flux():
    """Without the cylinder, the steady flow is the inflow's parabola everywhere: the mass flux
    through every column equals the inlet's (to the two corner links, 6e-4), the profile is
    parabolic to 0.5 % of U_max (the walls sit 0.03 dx inside their halfway position in this
    pressure-driven flow), the transverse velocity is below 0.1 % of U_max, the pressure
    falls linearly at Poiseuille's gradient 12 nu U / H^2,
    and there is no force."""
    flow = Flow2D(resolution=10, reynolds=20.0, u_max_lattice=0.1, cylinder=False)
    c = flow.advance(20_000)
    assert np.all(c == 0.0)
    fields = flow.fields()
    assert fields is not None
    rho, ux, uy = fields
    y = np.arange(flow.ny) + 0.5
    exact = 4 * 0.1 * y * (flow.ny - y) / flow.ny**2
    flux = ux.sum(axis=1)
    np.testing.assert_allclose(flux, exact.sum(), rtol=1e-3)
    np.testing.assert_allclose(flux, flux[0], rtol=1e-7)
    mid = flow.nx // 2
    np.testing.assert_allclose(ux[mid], exact, rtol=0, atol=5e-3 * 0.1)
    assert np.abs(uy[mid]).max() < 1e-3 * 0.1
    nu = (1 / flow.omega_p - 0.5) / 3
    gradient = 3 * 12 * nu * flow.u_mean_lat / flow.ny**2
    np.testing.assert_allclose(rho[mid] - rho[mid + 1], gradient, rtol=0.1)


def test_the_cylinder_links_cut_its_circle():
    """The solid nodes fill the circle's area to its perimeter's order; each Bouzidi link
    ends inside the circle and its wall point x + q c lies on the circle."""
    n = 20
    flow = Flow2D(resolution=n)
    r = n / 2
    assert abs(len(flow.solid) - np.pi * r**2) < 2 * np.pi * r
    b, k = np.nonzero(flow.rules == lk.BOUZIDI)
    assert len(b) > 4 * n
    q = flow.q[b, k]
    assert np.all((q > 0) & (q <= 1))
    x = flow.nodes[b, 0] - 1 + flow.x0 + 0.5 - q * lk.CX[k]
    y = flow.nodes[b, 1] - 1 + 0.5 - q * lk.CY[k]
    fallback = q == 0.5
    np.testing.assert_allclose(np.hypot(x - 2 * n, y - 2 * n)[~fallback], r, atol=1e-12)


def test_2d1_at_coarse_resolution():
    """DFG 2D-1 (Re = 20, steady) at N = 20: c_D = 5.614, +0.6 % above the band, c_L = 0.0093,
    -12 % (bench/turek.py: both converge to the band as N grows)."""
    flow = Flow2D(resolution=20, reynolds=20.0, u_max_lattice=0.1)
    c = flow.advance(round(16 / flow.dt))[-round(8 / flow.dt):]
    assert flow.coefficients() == tuple(c[-1])
    cd, cl = c.mean(axis=0)
    assert 5.57 < cd < 5.65
    assert 0.0088 < cl < 0.0112


def test_2d2_at_coarse_resolution():
    """DFG 2D-2 (Re = 100, periodic) at N = 20 (u_lat = 0.1, t <= 7 s): St within 2 % of 0.30;
    c_D,max about 5 % and c_L,max about 6 % above the bands (grid and Mach error, measured)."""
    flow = Flow2D(resolution=20, reynolds=100.0, u_max_lattice=0.1, perturb=1.0)
    flow.advance(round(5 / flow.dt))
    c = flow.advance(round(2 / flow.dt))
    cl = c[:, 1]
    up = np.nonzero((cl[:-1] < 0) & (cl[1:] >= 0))[0]
    period = np.diff(up).mean() * flow.dt
    assert 0.294 < 0.1 / period < 0.306
    assert 3.22 < c[:, 0].max() < 3.45
    assert 0.99 < cl.max() < 1.10


def test_a_blow_up_is_a_floating_point_error():
    flow = Flow2D(resolution=10, reynolds=1e5, u_max_lattice=0.4, perturb=1.0)
    with pytest.raises(FloatingPointError, match="blew up"):
        for _ in range(50):
            flow.advance(100)


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="multiple of 10"):
        Flow2D(resolution=15)


def steady_flow(resolution: int, u_lat: float, time: float) -> tuple[Flow2D, np.ndarray]:
    """2D-1 at ``resolution`` after ``time`` time units from the built-in start: the flow and
    its coefficients."""
    flow = Flow2D(resolution=resolution, reynolds=20.0, u_max_lattice=u_lat)
    return flow, flow.advance(round(time / flow.dt))


def stress(flow: Flow2D) -> np.ndarray:
    """The non-equilibrium second moments sum_k c_k c_k (f*_k - f^eq_k) (xx, xy, yy) of every
    node of the slab, shape (3, nxl, ny)."""
    f = flow.f[:, 1:-1, 1:-1]
    neq = f - equilibrium(*flow._local_fields())
    cx, cy = lk.CX[:, None, None], lk.CY[:, None, None]
    return np.stack([(cx * cx * neq).sum(0), (cx * cy * neq).sum(0), (cy * cy * neq).sum(0)])


def test_continue_from_keeps_the_flow_and_its_stress():
    """On the same grid the start reproduces density and velocity to round-off at every fluid
    node and the viscous stress to its first-order (Chapman-Enskog) estimate, about 10 % here
    (away from the boundaries); another u_lat rescales u by the ratio and rho - 1 by its
    square."""
    flow, _ = steady_flow(10, 0.1, 10.0)
    again = Flow2D(resolution=10, reynolds=20.0, u_max_lattice=0.1)
    again.continue_from(flow)
    fluid = np.ones((flow.nx, flow.ny), bool)
    fluid[flow.solid[:, 0] - 1, flow.solid[:, 1] - 1] = False
    for got, want in zip(again.fields(), flow.fields(), strict=True):
        np.testing.assert_allclose(got[fluid], want[fluid], rtol=0, atol=1e-14)
    inner = fluid.copy()
    inner[flow.nodes[:, 0] - 1, flow.nodes[:, 1] - 1] = False
    inner[:2], inner[-2:], inner[:, :2], inner[:, -2:] = False, False, False, False
    want, got = stress(flow)[:, inner], stress(again)[:, inner]
    assert np.linalg.norm(got - want) < 0.15 * np.linalg.norm(want)
    slower = Flow2D(resolution=10, reynolds=20.0, u_max_lattice=0.05)
    slower.continue_from(flow)
    rho, ux, uy = slower.fields()
    ref = flow.fields()
    np.testing.assert_allclose(ux[fluid], ref[1][fluid] / 2, rtol=0, atol=1e-15)
    np.testing.assert_allclose(uy[fluid], ref[2][fluid] / 2, rtol=0, atol=1e-15)
    np.testing.assert_allclose(rho[fluid] - 1, (ref[0][fluid] - 1) / 4, rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="same flow"):
        Flow2D(resolution=10, reynolds=100.0).continue_from(flow)


def test_a_refined_start_interpolates_the_coarse_fields():
    """Fields linear in x and y on N = 10 arrive exactly at the N = 20 nodes (the half-cell
    offsets of the two grids' node positions), and 2D-1 at N = 20 started from N = 10 is
    within 0.3 % of its own steady c_D after one time unit."""
    coarse = Flow2D(resolution=10, reynolds=20.0, u_max_lattice=0.1, cylinder=False)
    x = (np.arange(coarse.nx)[:, None] + 0.5) / 10 + 0 * np.arange(coarse.ny)[None, :]
    y = 0 * x + (np.arange(coarse.ny)[None, :] + 0.5) / 10
    coarse.f[:, 1:-1, 1:-1] = equilibrium(1 + 1e-3 * x, 0.01 * y, 0.02 * x - 0.01 * y)
    fine = Flow2D(resolution=20, reynolds=20.0, u_max_lattice=0.1, cylinder=False)
    fine.continue_from(coarse)
    rho, ux, uy = fine.fields()
    xf = (np.arange(fine.nx)[:, None] + 0.5) / 20 + 0 * np.arange(fine.ny)[None, :]
    yf = 0 * xf + (np.arange(fine.ny)[None, :] + 0.5) / 20
    inner = (slice(1, -1), slice(1, -1))
    np.testing.assert_allclose(rho[inner], (1 + 1e-3 * xf)[inner], rtol=0, atol=1e-13)
    np.testing.assert_allclose(ux[inner], (0.01 * yf)[inner], rtol=0, atol=1e-13)
    np.testing.assert_allclose(uy[inner], (0.02 * xf - 0.01 * yf)[inner], rtol=0, atol=1e-13)
    coarse, _ = steady_flow(10, 0.1, 8.0)
    _, scratch = steady_flow(20, 0.1, 16.0)
    fine = Flow2D(resolution=20, reynolds=20.0, u_max_lattice=0.1)
    fine.continue_from(coarse)
    c = fine.advance(round(1.0 / fine.dt))
    steady_cd = scratch[len(scratch) // 2:, 0].mean()
    assert abs(c[-round(0.2 / fine.dt):, 0].mean() / steady_cd - 1) < 3e-3


def run(team, split_at=None) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
    """300 steps of 2D-2 at N = 10 from the kicked start: coefficients and gathered fields."""
    flow = Flow2D(team, resolution=10, reynolds=100.0, u_max_lattice=0.1, perturb=1.0,
                  split_at=split_at)
    return flow.advance(300), flow.fields()


@pytest.mark.mpi(min_size=2)
def test_multi_rank_fields_equal_the_single_rank_fields():
    """Default slabs, and slabs cut through the cylinder (the first cut at its centre column,
    so Bouzidi links read the halo): fields equal bit for bit, forces to round-off."""
    from hpc_refer.parallel.world import world_team

    team = world_team()
    cuts = (20, *range(100, 100 + 10 * (team.size - 2), 10))
    for split_at in (None, cuts):
        coeffs, fields = run(team, split_at)
        if team.rank == 0:
            ref_coeffs, ref_fields = run(None)
            assert fields is not None and ref_fields is not None
            # Exact: one kernel computes every node either way (per-node arithmetic, no
            # fast-math, so no reordering by slab width); the team sums of forces are not.
            for got, want in zip(fields, ref_fields, strict=True):
                np.testing.assert_array_equal(got, want)
            np.testing.assert_allclose(coeffs, ref_coeffs, rtol=1e-12, atol=1e-12)
        else:
            assert fields is None


def sequenced(team, split_at=None) -> tuple[np.ndarray, ...] | None:
    """2D-2 at N = 10 for 100 steps (slabs cut at ``split_at``), continued at N = 20 (default
    slabs) for 20 steps: the gathered fields."""
    coarse = Flow2D(team, resolution=10, reynolds=100.0, u_max_lattice=0.1, perturb=1.0,
                    split_at=split_at)
    coarse.advance(100)
    fine = Flow2D(team, resolution=20, reynolds=100.0, u_max_lattice=0.1)
    fine.continue_from(coarse)
    fine.advance(20)
    return fine.fields()


@pytest.mark.mpi(min_size=2)
def test_a_multi_rank_refined_start_equals_the_single_rank_one():
    """continue_from over 2 or 3 ranks (the coarse slabs cut elsewhere than the fine ones):
    the fields after 20 steps equal the one-rank fields bit for bit."""
    from hpc_refer.parallel.world import world_team

    team = world_team()
    fields = sequenced(team, (50, *range(120, 120 + 10 * (team.size - 2), 10)))
    if team.rank == 0:
        assert fields is not None
        for got, want in zip(fields, sequenced(None), strict=True):
            np.testing.assert_array_equal(got, want)  # per-node arithmetic, as above


def test_the_trt_rates_give_the_viscosity_and_the_magic_parameter():
    """nu = U_mean N / Re = (1/omega_p - 1/2) / 3 and Lambda = 3/16 (module docstring)."""
    flow = Flow2D(resolution=30, reynolds=100.0, u_max_lattice=0.06)
    nu = (1 / flow.omega_p - 0.5) / 3
    assert nu == pytest.approx(0.04 * 30 / 100, rel=1e-12)
    assert 3 * nu * (1 / flow.omega_m - 0.5) == pytest.approx(3 / 16, rel=1e-12)
