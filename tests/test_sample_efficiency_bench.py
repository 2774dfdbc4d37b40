"""bench/sample_efficiency.py without training: the command lines of both kinds of agent, the
refusal of an unfinished run directory, and the report (final windows, evaluations, the ratio
to SB3 SAC, the files) on fake runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
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
    # a short task's learning start, for both kinds (the last flag wins in hpc_refer.run)
    sb3 = se.command(se.RunKey("Pendulum-v1", "sb3-sac", 0), 1000, tmp_path / "r", 500, 300)
    hpc = se.command(se.RunKey("Pendulum-v1", "sac-er", 0), 1000, tmp_path / "r", 500, 300)
    assert sb3[-2:] == ["--learning-starts", "300"] and hpc[-2:] == ["--replay.learn-start",
                                                                     "300"]
    from hpc_refer.run.main import parse_args

    assert parse_args(hpc[3:]).replay.learn_start == 300


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
    # two seeds (100 and 300 over the last window): 250 -/+ t_0.975,1 * sqrt(5000) / sqrt(2)
    lo, hi = table["sb3-sac"]["return_ci95"]
    assert (lo + hi) / 2 == pytest.approx(250.0) and hi - lo == pytest.approx(2 * 12.7062 * 100.0,
                                                                          rel=1e-4)
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


def _three_seeds(root: Path, task: str, agent: str, finals: list[float]) -> None:
    for seed, level in enumerate(finals):
        fake_run(root, task, agent, seed, {9_000: level, 10_000: level}, {10_000: 2 * level})


def test_aggregate_is_the_iqm_of_returns_over_sb3_sac_with_a_bootstrap_interval(tmp_path):
    """x = R / mean R_SAC per task; the IQM over all runs of all tasks (the mean of the middle
    half, scipy's trimmed mean at 25 %); the 95 % interval from resampling the runs of each
    task holds the point and lies inside the range of the scores; an agent without runs on
    every task is left out; a task without sb3-sac runs takes the reference's mean."""
    from scipy.stats import trim_mean

    root = tmp_path / "runs"
    _three_seeds(root, "Hopper-v5", "sb3-sac", [100.0, 200.0, 300.0])
    _three_seeds(root, "Hopper-v5", "crossq", [150.0, 400.0, 800.0])
    _three_seeds(root, "Ant-v5", "crossq", [1000.0, 1500.0, 2600.0])
    _three_seeds(root, "Hopper-v5", "vracer", [10.0, 20.0, 30.0])  # no Ant run: left out
    found = se.collect([root])
    agg = se.aggregate(found, 10_000, 5_000, {"Ant-v5": 500.0, "Hopper-v5": 1.0}, reps=2_000)
    assert agg["tasks"] == ["Ant-v5", "Hopper-v5"]
    assert agg["sac_means"] == {"Ant-v5": 500.0, "Hopper-v5": 200.0}, "the runs' own SAC first"
    assert set(agg["agents"]) == {"crossq"}
    x = [1000 / 500, 1500 / 500, 2600 / 500, 150 / 200, 400 / 200, 800 / 200]
    crossq = agg["agents"]["crossq"]
    assert crossq["seeds"] == 3
    assert crossq["return"]["iqm"] == pytest.approx(trim_mean(x, 0.25))
    assert crossq["eval"]["iqm"] == pytest.approx(2 * trim_mean(x, 0.25))
    lo, hi = crossq["return"]["ci95"]
    assert min(x) <= lo < crossq["return"]["iqm"] < hi <= max(x)


def test_a_run_in_two_roots_is_refused_and_archive_copies_text_files_only(tmp_path, capsys):
    root = tmp_path / "runs"
    d = fake_run(root, "Hopper-v5", "crossq", 0, {10_000: 1.0}, {10_000: 1.0})
    (d / "policy.h5").write_bytes(b"\x89HDF")
    (d / "run.lock").write_text("pid")
    (d / "config.toml").write_text(f'[run]\nenv = "Hopper-v5"\nrun_dir = "{d}"\nseed = 0\n')
    fake_run(root, "Hopper-v5", "crossq", 1, {10_000: 1.0}, {})
    (root / "Hopper-v5" / "crossq-seed1" / "state.txt").write_text("running\n")
    assert se.main(["archive", "--root", str(root), "--to", str(tmp_path / "kept")]) == 0
    kept = tmp_path / "kept" / "Hopper-v5"
    assert [p.name for p in kept.iterdir()] == ["crossq-seed0"], "only finished runs"
    assert sorted(p.name for p in (kept / "crossq-seed0").iterdir()) == [
        "config.toml", "episodes.csv", "eval.csv", "state.txt"]
    config = (kept / "crossq-seed0" / "config.toml").read_text()
    assert config == (f'[run]\nenv = "Hopper-v5"\nrun_dir = "{kept / "crossq-seed0"}"\n'
                      'seed = 0\n'), "the archived copy's own path"
    inside = se.ARCHIVE.parent / "x" / "T" / "a-seed0"  # under bench/results/seeds
    assert se.archived_config(config, inside).count('run_dir = "bench/results/seeds/x/T/') == 1
    assert se.main(["report", "--root", str(root), str(tmp_path / "kept")]) == 2
    assert "are the same run" in capsys.readouterr().err


def test_step_ms_is_the_median_after_the_first_training_interval(tmp_path):
    from hpc_refer.report.schema import TRAIN_FILE

    d = fake_run(tmp_path, "Pendulum-v1", "crossq-er-sb3-256-utd8", 0, {1000: -1.0}, {})
    assert np.isnan(se.step_ms(d)), "no train.jsonl (an SB3 run): no figure"
    rates = [(0, 900.0), (100, 2.0), (900, 20.0), (1700, 10.0), (2500, 40.0)]
    (d / TRAIN_FILE).write_text("".join(json.dumps(
        {"env_step": 1000 * (i + 1), "grad_step": g, "env_steps_per_s": r, "grad_steps_per_s": 1.0,
         "learner_busy": 1.0, "beta": 1.0, "c_max": 5.0, "lr": 1e-3, "far_fraction": 0.0,
         "stored": 1000 * (i + 1), "reward_scale": 1.0, "solver_faults": 0, "rho_hist": []})
        + "\n" for i, (g, r) in enumerate(rates)))
    # before learning (900/s) and the first interval with steps (2/s: the compile) left out
    assert se.step_ms(d) == pytest.approx(50.0)  # median of 50, 100, 25 ms
    s = se.summary([d], 1000, 1000)
    assert s["ms_per_step"] == pytest.approx(50.0) and s["return_by_seed"] == [-1.0]


def test_the_high_ratio_agents_parse_to_their_ratio_resets_and_rules():
    from hpc_refer.config.modes import ReferMode, Scaling, Warmup
    from hpc_refer.run.main import parse_args

    cfg = parse_args(se.HPC_AGENTS["crossq-er-sb3-256-utd8-reset"])
    assert cfg.replay.grad_ratio == 8 and cfg.replay.reset_every == int(se.RESET_EVERY)
    assert cfg.refer.mode is ReferMode.ER and cfg.replay.scaling is Scaling.NONE
    assert cfg.replay.warmup is Warmup.UNIFORM and cfg.run.chunk_len == 1
    cfg = parse_args(se.HPC_AGENTS["crossq-sb3-256-utd4"])
    assert cfg.refer.mode is ReferMode.REFER and cfg.replay.grad_ratio == 4
    assert cfg.replay.reset_every == 0
    assert not parse_args(se.HPC_AGENTS["crossq-sb3-actor1-256"]).refer.rule1_critics
    assert parse_args(se.HPC_AGENTS["sac-er-sb3-ln-utd4"]).algorithm.critic_layer_norm
    assert "crossq-er-sb3-256-reset" not in se.HPC_AGENTS, "no reset at ratio 1"
