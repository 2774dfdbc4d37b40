"""The Collision task against the spec's section 1 (dynamics, data, seeding, error measure)."""

import numpy as np
import pytest

from hpc_refer.prediction import task

# Spec 1.5: first transitions (s, a, s', r, terminal) of run 0 and run 1.
RUN0 = [(0, 0, 1, 0, 0), (1, 0, 2, 0, 0), (2, 0, 3, 0, 0), (3, 0, 4, 0, 0), (4, 1, 8, 0, 1),
        (1, 0, 2, 0, 0), (2, 0, 3, 0, 0), (3, 0, 4, 0, 0), (4, 0, 5, 0, 0), (5, 1, 8, 0, 1),
        (3, 0, 4, 0, 0), (4, 1, 8, 0, 1)]
RUN1 = [(1, 0, 2, 0, 0), (2, 0, 3, 0, 0), (3, 0, 4, 0, 0), (4, 1, 8, 0, 1), (0, 0, 1, 0, 0)]
SPEC_D_MU = [0.05715077505175114, 0.11427990211510529, 0.17142456363441183, 0.2285684168707556,
             0.2285684168707556, 0.11428066755621491, 0.05715311278887139, 0.028574145112134203]


def _tuples(tr: task.Trajectory, n: int) -> list[tuple[int, ...]]:
    fields = (tr.state, tr.action, tr.next_state, tr.reward, tr.terminal)
    return [tuple(int(f[t]) for f in fields) for t in range(n)]


def test_dynamics() -> None:
    for s in range(7):
        assert task.transition(s, task.FORWARD) == (s + 1, 0.0, False)
        assert task.transition(s, task.TURNAWAY) == (task.TERMINAL, 0.0, True)
    assert task.transition(7, task.FORWARD) == (task.TERMINAL, 1.0, True)
    assert task.transition(7, task.TURNAWAY) == (task.TERMINAL, 0.0, True)


@pytest.mark.parametrize(("run", "expected"), [(0, RUN0), (1, RUN1)])
def test_reference_trajectories(run: int, expected: list[tuple[int, ...]]) -> None:
    assert _tuples(task.simulate(run, len(expected)), len(expected)) == expected


def test_stream_properties() -> None:
    tr = task.simulate(3, 5000)
    assert set(np.unique(tr.state[tr.cont == 0])) <= {0, 1, 2, 3}
    np.testing.assert_array_equal(tr.cont[1:] == 0, tr.terminal[:-1])
    assert tr.cont[0] == 0
    # rho = 1 in states 0-3, 2 for forward and 0 for turnaway in states 4-7.
    low = tr.state < 4
    assert np.all(tr.action[low] == task.FORWARD) and np.all(tr.rho[low] == 1.0)
    fwd = ~low & (tr.action == task.FORWARD)
    assert np.all(tr.rho[fwd] == 2.0) and np.all(tr.rho[~low & ~fwd] == 0.0)
    assert np.all(tr.mu[~low] == 0.5)
    np.testing.assert_array_equal(tr.reward == 1.0, (tr.state == 7) & (tr.action == task.FORWARD))
    # Behaviour frequencies approach the exact stationary weighting (2,4,6,8,8,4,2,1)/35.
    freq = np.bincount(task.simulate(0, 100_000).state, minlength=8) / 100_000
    np.testing.assert_allclose(freq, task.D_MU_EXACT, atol=0.01)


def test_stored_data() -> None:
    run0 = ["001011", "111000", "011001", "101100", "110010", "011100", "110001", "101001"]
    expected = np.array([[int(bit) for bit in row] for row in run0], dtype=float)
    phi = task.feature_matrix(0)
    np.testing.assert_array_equal(phi[:8], expected)
    np.testing.assert_array_equal(phi[task.TERMINAL], 0.0)
    assert all(task.feature_matrix(r)[:8].sum(axis=1).tolist() == [3.0] * 8 for r in range(50))
    assert np.linalg.matrix_rank(task.feature_matrix(1)) == 4
    assert task.state_weighting().tolist() == SPEC_D_MU
    np.testing.assert_allclose(task.true_values(), 0.9 ** (7 - np.arange(8)), atol=1e-12)
    assert np.abs(task.state_weighting("exact") - task.state_weighting()).max() < 1.04e-5


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="run"):
        task.feature_matrix(50)
    with pytest.raises(ValueError, match="allowed: stored, exact"):
        task.state_weighting("uniform")  # type: ignore[arg-type]


def test_initial_rmsve() -> None:
    initial = task.rmsve(np.zeros((8, 1)), task.state_weighting())[0]
    assert initial == pytest.approx(0.6890804616377058, abs=1e-15)
    truth = task.true_values()[:, None]
    assert task.rmsve(truth, task.state_weighting())[0] == 0.0
