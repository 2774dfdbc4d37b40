"""bench/ks_agents.py without training: the matched control's flags give the single agent the
agents' gradient steps, replay span and learning start per simulation step, and the report's
tests are Welch's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from scipy import stats

BENCH = Path(__file__).resolve().parents[1] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))  # bench scripts import their siblings

import ks_agents  # noqa: E402

from hpc_refer.config.resolve import build_config, load_toml  # noqa: E402


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


@pytest.mark.parametrize("n", [4, 8])
def test_the_matched_single_agent_gets_what_n_agents_get_per_simulation_step(n):
    """N agents store N transitions per simulation step, so per simulation step they take N g
    gradient steps, their replay of N_RM transitions spans N_RM / N simulation steps, and they
    start learning after learn_start / N simulation steps: the matched single agent is given
    the same (its start no earlier than one minibatch)."""
    config = build_config(load_toml(ks_agents.CONFIG))
    single, matched = ks_agents.env_flags("single", n), ks_agents.env_flags("matched", n)
    assert matched[:len(single)] == single
    assert float(flag(matched, "--replay.grad-ratio")) == n * config.replay.grad_ratio
    assert int(flag(matched, "--replay.size")) == config.replay.size // n
    assert int(flag(matched, "--replay.learn-start")) == max(config.replay.learn_start // n,
                                                             config.algorithm.batch)
    assert ks_agents.env_flags("agents", n) == ["--env", "KSAgents", "--env.agents", str(n)]


def test_the_settings_are_compared_by_welchs_test_per_size():
    energies = {"single-N8": [0.74, 0.73, 0.76], "agents-N8": [0.40, 0.42, 0.41],
                "matched-N8": [0.60, 0.50, 0.66], "single-N4": [0.54]}
    results = {k: {"policy_energy": v} for k, v in energies.items()}
    tests = {(t["setting"], t["against"]): t for t in ks_agents.welch_tests(results)}
    assert set(tests) == {("agents", "single"), ("matched", "single"), ("agents", "matched")}
    expected = stats.ttest_ind(energies["agents-N8"], energies["matched-N8"], equal_var=False)
    assert tests[("agents", "matched")]["p"] == pytest.approx(expected.pvalue)
    assert tests[("agents", "matched")]["n"] == 8
