"""CylinderJetsAgents (issue 26, point 5): the two jets as two agents under the wake's mirror
symmetry. A mirrored flow gives agent 1 agent 0's observation (and back); each agent's action
drives its own jet, the jets taking q = (a_0 - a_1) / 2 with zero net mass flux; the same
physics as CylinderJets with action q; the multi-agent interface's shapes, rewards and
statuses. At N = 20 (the smallest stable resolution) from a start state of 2 time units (the
shedding has begun: the wake is not symmetric)."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

import hpc_refer.envs.cylinder_jets as cj
from hpc_refer.envs import lbm_kernels as lk
from hpc_refer.envs.interface import Status

N = 20
FLIP = [int(np.flatnonzero((lk.CX[k] == lk.CX) & (-lk.CY[k] == lk.CY))[0]) for k in range(9)]
"""The D2Q9 direction of c_k mirrored (c_y -> -c_y)."""
SEED = next(s for s in range(1000) if np.random.default_rng(s).integers(0, 13) == 0)
"""A seed whose reset runs no uncontrolled steps: the state is the stored one."""


def mirror(f: np.ndarray) -> np.ndarray:
    """The populations (9, nx, ny) mirrored about the cylinder's centre line: rows j and
    4 N - 1 - j swapped, directions mirrored (the rows above 4 N, next to the top wall, which
    have no image, are kept)."""
    out = f.copy()
    out[:, :, :4 * N] = f[FLIP][:, :, 4 * N - 1::-1]
    return out


@pytest.fixture(scope="module")
def start(tmp_path_factory) -> Path:
    return cj.make_start(tmp_path_factory.mktemp("cja") / "start.h5", N, duration=2.0)


@pytest.fixture(scope="module")
def mirrored(start) -> Path:
    with h5py.File(start, "r") as h5:
        f = h5["f"][()]
    path = start.with_name("mirrored.h5")
    with h5py.File(path, "w") as h5:
        h5["f"] = mirror(f)
    return path


def test_a_mirrored_flow_gives_agent_1_what_agent_0_sees(start, mirrored):
    """Agent 1's observation of the mirrored flow is agent 0's of the flow and back, jets
    included (mirroring the flow and swapping the agents' actions turns q into -q); the wake
    is not symmetric, so the two agents see different things in one flow."""
    env = cj.CylinderJetsAgents(resolution=N, start_file=str(start))
    image = cj.CylinderJetsAgents(resolution=N, start_file=str(mirrored))
    states, seen = env.reset(SEED), image.reset(SEED)
    assert np.abs(states[0] - states[1]).max() > 0.1
    np.testing.assert_allclose(seen[1], states[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(seen[0], states[1], rtol=1e-6, atol=1e-6)
    # the mirror images of the probes, in the probes' order (today's probe rows at N = 20
    # are 28, 36, 43, 52: not a symmetric set, so agent 1 reads rows of its own)
    np.testing.assert_array_equal(env.mirrored[:, 0], env.probes[:, 0])
    assert (np.unique(env.probes[:, 1]).tolist(), np.unique(env.mirrored[:, 1]).tolist()) == (
        [28, 36, 43, 52], [27, 36, 43, 51])
    # the jets' speeds: agent 0's is q, agent 1's -q; swapped actions on the image swap them
    for a in ((0.6, -0.2), (0.3, 0.9)):
        env.jet = image.jet = 0.0  # a fresh ramp on both
        states = env.step(np.array(a).reshape(2, 1))[0]
        seen = image.step(np.array(a[::-1]).reshape(2, 1))[0]
        q = (a[0] - a[1]) / 2
        assert states[:, -1] == pytest.approx([q, -q], abs=1e-6)
        np.testing.assert_allclose(seen[:, -1], states[::-1, -1], atol=1e-6)


def test_the_jets_are_mirror_images_with_opposite_signs():
    """The wall terms of the jet links: the mirror image of the top jet blowing (q > 0) is
    the bottom jet blowing (-q): wall at the mirrored node and direction = -wall, so the
    mirrored flow under swapped actions is the image of the flow."""
    env = cj.CylinderJetsAgents(resolution=N, start_file="unused.h5")
    index = {(int(i), int(j)): b for b, (i, j) in enumerate(env.nodes)}
    links = np.argwhere(env.wall != 0)
    assert len(links) >= 4
    for b, k in links:
        i, j = env.nodes[b]
        image = index[(int(i), int(4 * N + 1 - j))]  # array rows: j + 1 <-> 4 N - j
        assert env.wall[image, FLIP[k]] == pytest.approx(-env.wall[b, k], rel=1e-9, abs=1e-15)


def test_each_agent_drives_its_own_jet(start):
    """Against the flow with the jets off: agent 0's action alone blows the top jet out (up
    above its slot), agent 1's alone the bottom one (down below its slot), each at
    q = +-a / 2; equal actions cancel (no net mass flux): the jets stay off; the mass stays."""
    env = cj.CylinderJetsAgents(resolution=N, start_file=str(start))

    def run(actions):
        env.reset(SEED)
        mass = env.f[:, 1:-1, 1:-1].sum()
        for _ in range(3):
            states = env.step(np.array(actions).reshape(2, 1))[0]
        assert abs(env.f[:, 1:-1, 1:-1].sum() - mass) < 1e-3 * mass
        fields = env.fields()
        assert fields is not None
        # just above the top slot (theta = 90 deg) and below the bottom one (270 deg)
        uy = fields[2][2 * N, [2 * N + N // 2 + 1, 2 * N - N // 2 - 2]] / env.u_mean_lat
        return states, uy

    off, base = run((0.0, 0.0))
    equal, same = run((0.7, 0.7))
    assert env.jet == 0.0
    np.testing.assert_array_equal(equal, off)
    np.testing.assert_array_equal(same, base)
    for actions, q in (((1.0, 0.0), 0.5), ((0.0, 1.0), -0.5)):
        states, uy = run(actions)
        assert env.jet == pytest.approx(q * cj.JET_MAX * env.u_mean_lat, abs=1e-15)
        assert states[:, -1] == pytest.approx([q, -q], abs=1e-6)
        above, below = uy - base
        if q > 0:  # the top jet blows out, the bottom one sucks in: both push upwards
            assert above > 0.1 and below > 0.05
        else:  # the bottom jet blows out (downwards), the top one sucks
            assert below < -0.1 and above < -0.05


def test_the_same_physics_as_cylinder_jets_with_action_q(start):
    """Agents' actions (a_0, a_1) step the flow as CylinderJets' action (a_0 - a_1) / 2
    (each clipped first): agent 0's state is CylinderJets' state, both rewards its reward,
    the metrics and the episode's field its own."""
    single = cj.CylinderJets(resolution=N, start_file=str(start), horizon=4)
    agents = cj.CylinderJetsAgents(resolution=N, start_file=str(start), horizon=4)
    np.testing.assert_allclose(agents.reset(5)[0], single.reset(5), rtol=1e-6, atol=1e-7)
    for a0, a1 in ((0.6, -0.2), (-0.5, 0.5), (1.5, -0.3), (0.1, 0.4)):
        q = (np.clip(a0, -1, 1) - np.clip(a1, -1, 1)) / 2
        obs, reward, status = single.step(np.array([q]))
        states, rewards, statuses = agents.step(np.array([[a0], [a1]]))
        np.testing.assert_allclose(states[0], obs, rtol=1e-6, atol=1e-7)
        assert states[1, -1] == pytest.approx(-obs[-1], abs=1e-7)
        np.testing.assert_allclose(rewards, [reward, reward], rtol=1e-9)
        assert statuses.tolist() == [status, status]
        np.testing.assert_allclose(agents.step_values(), single.step_values(), rtol=1e-9)
    assert status == Status.TRUNCATED
    np.testing.assert_allclose(agents.episode_values(), single.episode_values(), rtol=1e-9)
    np.testing.assert_allclose(agents.episode_field(), single.episode_field(), rtol=1e-6,
                               atol=1e-7)


def test_the_multi_agent_interface(start):
    """n_agents = 2; per-agent spaces as CylinderJets'; reset -> (2, obs_dim) float32; step
    (2, act_dim) -> states (2, obs_dim), rewards (2,) floats, statuses (2,) ints of Status,
    all agents truncated together at the horizon; a wrong number of actions is an error."""
    env = cj.CylinderJetsAgents(resolution=N, start_file=str(start), horizon=2)
    assert cj.CylinderJetsAgents.n_agents == 2
    for name in ("obs_dim", "act_dim", "low", "high", "episode_metrics", "step_metrics"):
        np.testing.assert_array_equal(getattr(cj.CylinderJetsAgents, name),
                                      getattr(cj.CylinderJets, name))
    assert not hasattr(cj.CylinderJets, "n_agents")
    states = env.reset(1)
    assert states.shape == (2, env.obs_dim) and states.dtype == np.float32
    assert np.all(np.isfinite(states)) and np.all(states[:, -1] == 0.0)
    for t in range(2):
        states, rewards, statuses = env.step(np.zeros((2, env.act_dim)))
        assert states.shape == (2, env.obs_dim) and states.dtype == np.float32
        assert rewards.shape == (2,) and rewards.dtype.kind == "f"
        assert np.all(np.isfinite(rewards)) and rewards[0] == rewards[1]
        assert statuses.shape == (2,) and statuses.dtype.kind == "i"
        want = Status.TRUNCATED if t == 1 else Status.CONTINUE
        assert [Status(s) for s in statuses] == [want, want]
    assert env.episode_field().shape == (3, cj.N_PROBES)
    with pytest.raises(ValueError):
        env.step(np.zeros(3))


@pytest.mark.mpi(min_size=2)
def test_multi_rank_agents_equal_the_single_rank_ones(tmp_path_factory):
    """Both agents' states (the probes and their mirror images, read on the ranks holding
    their columns), rewards and metrics over the team's slabs equal those of one rank
    (round-off of the team sums); the slabs cut through the cylinder (and the probes from 3
    ranks on: columns 40, 80, ...).

    ``mpirun -n 2 python -m pytest --with-mpi tests/test_cylinder_agents.py``"""
    from hpc_refer.parallel.world import world_team

    team = world_team()
    path = cj.make_start(tmp_path_factory.mktemp("cja") / "start.h5", N, duration=1.0)
    cuts = tuple(range(40, 40 * team.size, 40))

    def episode(t):
        env = cj.CylinderJetsAgents(t, resolution=N, start_file=str(path),
                                    split_at=cuts if t is not None else None)
        out = [env.reset(1)]
        for a in ((0.5, -0.5), (-1.0, 0.2), (1.0, 0.0)):
            states, rewards, statuses = env.step(np.array(a).reshape(2, 1))
            out += [states, rewards, statuses, np.array(env.step_values())]
        return out

    got = episode(team)
    if team.rank == 0:
        for g, w in zip(got, episode(None), strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-9)
