"""bench/sample_efficiency.py without training: the command lines of both kinds of agent, the
refusal of an unfinished run directory, and the report (final windows, evaluations, the ratio
to SB3 SAC, the files) on fake runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))  # bench scripts import their siblings

import sample_efficiency as se  # noqa: E402


def fake_run(root: Path, task: str, agent: str, seed: int, returns: dict[int, float],
             evals: dict[int, float]) -> Path:
    d = root / task / f"{agent}-seed{seed}"
    d.mkdir(parents=True)
    header = "env_step,rank,return,length,wall_s\n"
    (d / "episodes.csv").write_text(header + "".join(
        f"{s},0,{r},100,{s / 100:.1f}\n" for s, r in returns.items()))
    (d / "eval.csv").write_text(header + "".join(
        f"{s},0,{r},1000,{s / 100:.1f}\n" for s, r in evals.items()))
    (d / "state.txt").write_text("finished\n")
    return d


def test_commands_of_sb3_and_hpc_agents(tmp_path):
    sb3 = se.command(se.RunKey("Hopper-v5", "sb3-td3", 2), 1000, tmp_path / "r", 500)
    assert sb3[1].endswith("sb3_runner.py") and sb3[2:6] == ["td3", "Hopper-v5", "1000", "2"]
    hpc = se.command(se.RunKey("Hopper-v5", "sac-er", 1), 1000, tmp_path / "r", 500)
    assert hpc[1:3] == ["-m", "hpc_refer.run"] and "--seed" in hpc
    assert hpc[-len(se.HPC_AGENTS["sac-er"]):] == se.HPC_AGENTS["sac-er"]


def test_an_unfinished_run_is_refused_and_unknown_agents_named(tmp_path, capsys):
    (tmp_path / "Hopper-v5" / "sb3-sac-seed0").mkdir(parents=True)
    assert se.main(["run", "--root", str(tmp_path), "--tasks", "Hopper-v5", "--agents",
                    "sb3-sac", "--seeds", "0"]) == 2
    assert "did not finish" in capsys.readouterr().err
    assert se.main(["run", "--root", str(tmp_path), "--agents", "nope"]) == 2
    assert "unknown agents ['nope']" in capsys.readouterr().err


def test_report_final_windows_evaluations_and_the_ratio_to_sac(tmp_path, monkeypatch):
    monkeypatch.setattr(se, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(se, "write", lambda name, payload: _write(tmp_path, name, payload))
    root = tmp_path / "runs"
    for seed, level in ((0, 100.0), (1, 300.0)):
        fake_run(root, "Hopper-v5", "sb3-sac", seed,
                 {2_000: 1.0, 9_000: level, 10_000: level + 100}, {10_000: 2 * level})
        fake_run(root, "Hopper-v5", "sac-er", seed, {4_000: 5.0, 10_000: level / 2},
                 {10_000: level})
    assert se.main(["report", "--root", str(root), "--name", "se", "--budgets",
                    "10000", "20000"]) == 0
    payload = json.loads((tmp_path / "se.json").read_text())
    table = payload["tasks"]["Hopper-v5"]["10000"]
    # the last window (5,001-10,000): seed 0 {100, 200} -> 150, seed 1 {300, 400} -> 350
    assert table["sb3-sac"]["return"] == pytest.approx(250.0)
    assert table["sb3-sac"]["eval"] == pytest.approx(400.0)
    assert table["sac-er"]["return"] == pytest.approx(100.0)
    assert table["sac-er"]["over_sac"] == pytest.approx(100.0 / 250.0)
    assert "20000" not in payload["tasks"]["Hopper-v5"], "no run reached 20,000 steps"
    assert payload["published_at_1e5"]["CrossQ"]["Hopper-v5"] == 2764
    md = (tmp_path / "results" / "se.md").read_text()
    assert "| Hopper-v5 | 10,000 | sac-er | 2 | 100 | 200 | 0.40 |" in md
    assert (tmp_path / "results" / "se.png").stat().st_size > 0


def _write(tmp_path: Path, name: str, payload: dict) -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(payload))
    return path


def test_the_expensive_preset_is_the_benchmarks_sac_er_relu_agent():
    """The evidence behind ``--preset expensive`` is the sac-er-relu agent's runs: the two
    resolve to the same config (but for the preset's name)."""
    import dataclasses

    from hpc_refer.run.main import parse_args

    agent = parse_args(se.HPC_AGENTS["sac-er-relu"])
    preset = parse_args(["--preset", "expensive"])
    assert dataclasses.replace(preset, run=dataclasses.replace(preset.run, preset="")) == agent
