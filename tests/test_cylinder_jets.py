"""CylinderJets (issue 13, point 4): the start state made once and reused, zero net mass flux
of the jets, the jets blowing where the action says, the interface (shapes, rewards in
Rabault's form, truncation, metrics), a missing start file made on first use (issue 26,
point 5) and written atomically, and blow-up as an error. At
N = 20 nodes per diameter (N = 10 is unstable at Re = 100), from a start state of 6 time units
(the shedding is established by 5)."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
from log_records import own_messages, own_records

import hpc_refer.envs.cylinder_jets as cj
from hpc_refer.envs import lbm_kernels as lk
from hpc_refer.envs.interface import Status

N = 20


@pytest.fixture(scope="module")
def start(tmp_path_factory) -> Path:
    return cj.make_start(tmp_path_factory.mktemp("cj") / "start.h5", N, duration=6.0)


def test_the_jets_add_no_net_mass_and_blow_where_the_action_says(start):
    env = cj.CylinderJets(resolution=N, start_file=str(start))
    jet_links = env.wall != 0
    assert jet_links.sum() >= 4
    assert np.all(env.rules[jet_links] == lk.BOUZIDI)
    assert abs(env.wall.sum()) < 1e-15 * np.abs(env.wall).sum() + 1e-16
    env.reset(0)
    mass = env.f[:, 1:-1, 1:-1].sum()
    for action, sign in ((1.0, 1.0), (-1.0, -1.0)):
        for _ in range(3):
            env.step(np.array([action]))
        fields = env.fields()
        assert fields is not None
        uy = fields[2]
        # just above the top slot (theta = 90 deg) and below the bottom one (270 deg)
        above, below = uy[2 * N, 2 * N + N // 2 + 1], uy[2 * N, 2 * N - N // 2 - 2]
        assert sign * above > 0.1 * env.u_mean_lat
        assert sign * below > 0.1 * env.u_mean_lat
    # the jets' zero net flux leaves the mass to what the inlet and outlet exchange
    assert abs(env.f[:, 1:-1, 1:-1].sum() - mass) < 1e-3 * mass


def test_episode_interface_and_metrics(start):
    env = cj.CylinderJets(resolution=N, start_file=str(start))
    obs = env.reset(3)
    assert obs.shape == (cj.N_PROBES + 1,) == (env.obs_dim,) and obs.dtype == np.float32
    assert np.all(np.isfinite(obs)) and np.ptp(obs) > 0
    assert obs[-1] == 0.0  # the jets are off after a reset
    drags = []
    for t in range(cj.HORIZON):
        obs, reward, status = env.step(np.array([0.0]))
        cd, cl = env.step_values()
        drags.append(cd)
        assert reward == pytest.approx(cj.C_D_REF - cd - 0.2 * abs(cl), abs=1e-12)
        assert status == (Status.TRUNCATED if t == cj.HORIZON - 1 else Status.CONTINUE)
    assert env.episode_values()[0] == pytest.approx(np.mean(drags), rel=1e-12)
    assert env.episode_field().shape == (cj.HORIZON + 1, cj.N_PROBES)
    np.testing.assert_array_equal(env.episode_field()[-1], obs[:cj.N_PROBES])
    w = env.vorticity()
    assert w is not None and w.shape == (env.nx, env.ny)
    assert w[: 3 * N].max() > 1 and w[: 3 * N].min() < -1  # the shear layers, both signs
    assert 2.5 < np.mean(drags) < 4.0  # coarse-grid drag of the shedding flow
    # the same seed starts at the same phase: the same first observation
    again = cj.CylinderJets(resolution=N, start_file=str(start))
    np.testing.assert_array_equal(again.reset(3), env.reset(3))


def test_a_missing_start_file_is_made_on_first_use_and_reused(tmp_path, monkeypatch, caplog):
    """The first reset makes the missing start state where --make-start puts it (one log line
    saying so, where, and how long), goes on from it; a second solver reuses the file. A start
    of 0.2 time units (the default 12 take ~17 s)."""
    monkeypatch.setattr(cj, "start_path", lambda n: tmp_path / "cache" / f"start_N{n}.h5")
    monkeypatch.setattr(cj.CylinderJets, "start_duration", 0.2)
    made = []
    real = cj.make_start
    monkeypatch.setattr(cj, "make_start", lambda *a: made.append(a) or real(*a))
    env = cj.CylinderJets(resolution=N)
    with caplog.at_level("INFO", logger="hpc_refer.envs.cylinder_jets"):
        obs = env.reset(0)
    path = tmp_path / "cache" / "start_N20.h5"
    assert made == [(path, N, 0.2)] and path.is_file()
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    (line,) = own_messages(caplog)
    assert "making it" in line and str(path) in line and "0.2 time units" in line
    assert obs.shape == (env.obs_dim,) and np.all(np.isfinite(obs)) and np.ptp(obs) > 0
    stamp = path.stat().st_mtime_ns
    caplog.clear()
    with caplog.at_level("INFO", logger="hpc_refer.envs.cylinder_jets"):
        np.testing.assert_array_equal(cj.CylinderJets(resolution=N).reset(0), obs)
    assert len(made) == 1 and path.stat().st_mtime_ns == stamp and not own_records(caplog)
    # the default duration's estimate: ~17 s at resolution 20
    monkeypatch.setattr(cj.CylinderJets, "start_duration", cj.START_TIME)
    monkeypatch.setattr(cj, "make_start", lambda *a: None)
    with caplog.at_level("INFO", logger="hpc_refer.envs.cylinder_jets"):
        cj.CylinderJets(resolution=N, start_file=str(tmp_path / "x.h5"))._ensure_start()
    last = own_messages(caplog)[-1]
    assert "12 time units" in last and "about 17 s" in last


def test_make_start_renames_a_complete_file_onto_the_target(tmp_path, monkeypatch):
    """make_start writes a temporary file in the target's directory and renames it onto the
    target (os.replace): the target never exists partially written; a failure leaves neither
    the target nor the temporary file."""
    target = tmp_path / "start.h5"
    seen = []
    real = cj.os.replace

    def replace(src, dst):
        with h5py.File(src, "r") as h5:  # complete before it gets the target's name
            seen.append((Path(src).parent, Path(dst), target.exists(), h5["f"].shape))
        real(src, dst)

    monkeypatch.setattr(cj.os, "replace", replace)
    assert cj.make_start(target, N, duration=0.05) == target
    assert seen == [(tmp_path, target, False, (9, 22 * N, 41 * N // 10))]
    assert [p.name for p in tmp_path.iterdir()] == ["start.h5"]
    with h5py.File(target, "r") as h5:
        assert h5["f"].shape == (9, 22 * N, 41 * N // 10) and h5.attrs["duration"] == 0.05

    def broken(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(cj.os, "replace", broken)
    other = tmp_path / "other.h5"
    with pytest.raises(OSError, match="disk full"):
        cj.make_start(other, N, duration=0.05)
    assert [p.name for p in tmp_path.iterdir()] == ["start.h5"]


def test_a_blow_up_is_a_floating_point_error(start):
    env = cj.CylinderJets(resolution=N, start_file=str(start))
    env.reset(0)
    env.wall *= 1e6
    with pytest.raises(FloatingPointError):
        for _ in range(20):
            env.step(np.array([1.0]))


@pytest.mark.mpi(min_size=2)
def test_multi_rank_episode_equals_the_single_rank_one(tmp_path_factory):
    """Observations, rewards and metrics of a few controlled steps over the team's slabs
    equal those of one rank (the probes and forces are team sums: round-off); the slabs cut
    through the cylinder and the probes (columns 40, 80, ...)."""
    from hpc_refer.parallel.world import world_team

    team = world_team()
    path = cj.make_start(tmp_path_factory.mktemp("cj") / "start.h5", N, duration=6.0)

    cuts = tuple(range(40, 40 * team.size, 40))

    def episode(t):
        env = cj.CylinderJets(t, resolution=N, start_file=str(path),
                              split_at=cuts if t is not None else None)
        out = [env.reset(1)]
        for a in (0.5, -1.0, 1.0):
            obs, reward, _ = env.step(np.array([a]))
            out += [obs, np.array([reward, *env.step_values()])]
        return out

    got = episode(team)
    if team.rank == 0:
        for g, w in zip(got, episode(None), strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-9)


def test_the_observation_ends_with_the_jets_speed_and_horizon_sets_the_episode(start):
    env = cj.CylinderJets(resolution=N, start_file=str(start), horizon=3)
    env.reset(1)
    statuses = []
    for action in (0.5, -0.25, 2.0):
        obs, _, status = env.step(np.array([action]))
        statuses.append(status)
        # the ramp ends at the target: the last entry is the clipped action
        assert obs[-1] == pytest.approx(min(action, 1.0), abs=1e-6)
    assert statuses == [Status.CONTINUE, Status.CONTINUE, Status.TRUNCATED]
    assert env.reset(1)[-1] == 0.0
    with pytest.raises(ValueError, match=r"env\.horizon = 0"):
        cj.CylinderJets(resolution=N, start_file=str(start), horizon=0)
