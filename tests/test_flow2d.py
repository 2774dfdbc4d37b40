"""Flow2D (issue 13): the empty channel's Poiseuille flow, the cylinder's geometry, the DFG
benchmark at a coarse resolution (2D-1 and 2D-2, N = 20 nodes per diameter, with tolerances from
the convergence table of bench/turek.py), blow-up as an error, and the multi-rank fields equal
to the one-rank fields (pytest-mpi).

Run the MPI part with ``mpirun -n 2 python -m pytest --only-mpi tests/test_flow2d.py``
(or -n 3).
"""

from __future__ import annotations

import numpy as np
import pytest

from hpc_refer.envs import lbm_kernels as lk
from hpc_refer.envs.flow2d import Flow2D


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


def run(team, split_at=None) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
    """300 steps of 2D-2 at N = 10 from the kicked start: coefficients and gathered fields."""
    flow = Flow2D(team, resolution=10, reynolds=100.0, u_max_lattice=0.1, perturb=1.0,
                  split_at=split_at)
    return flow.advance(300), flow.fields()


@pytest.mark.mpi(min_size=2)
def test_multi_rank_fields_equal_the_single_rank_fields():
    """Default slabs, and slabs cut through the cylinder (the first cut at its centre column,
    so Bouzidi links read the halo): fields equal bit for bit, forces to round-off."""
    from hpc_refer.parallel import world_team

    team = world_team()
    cuts = (20, *range(100, 100 + 10 * (team.size - 2), 10))
    for split_at in (None, cuts):
        coeffs, fields = run(team, split_at)
        if team.rank == 0:
            ref_coeffs, ref_fields = run(None)
            assert fields is not None and ref_fields is not None
            for got, want in zip(fields, ref_fields, strict=True):
                np.testing.assert_array_equal(got, want)
            np.testing.assert_allclose(coeffs, ref_coeffs, rtol=1e-12, atol=1e-12)
        else:
            assert fields is None


def test_the_trt_rates_give_the_viscosity_and_the_magic_parameter():
    """nu = U_mean N / Re = (1/omega_p - 1/2) / 3 and Lambda = 3/16 (module docstring)."""
    flow = Flow2D(resolution=30, reynolds=100.0, u_max_lattice=0.06)
    nu = (1 / flow.omega_p - 0.5) / 3
    assert nu == pytest.approx(0.04 * 30 / 100, rel=1e-12)
    assert 3 * nu * (1 / flow.omega_m - 0.5) == pytest.approx(3 / 16, rel=1e-12)
