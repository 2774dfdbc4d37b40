"""Smoke tests of the entry points (python -m hpc_refer.run / .plot) and a learning test."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import tomllib

import numpy as np

from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.report.curves import main as plot_main
from hpc_refer.run.main import main as run_main

SMALL = ["--replay.size", "600", "--replay.learn-start", "300", f"--{VRacer.name}.batch", "32",
         f"--{VRacer.name}.hidden", "16,16", "--log-every", "200"]


def read_episodes(run_dir):
    with (run_dir / "episodes.csv").open() as f:
        return list(csv.DictReader(f))


def test_entry_point_writes_a_complete_run_directory(in_tmp):
    proc = subprocess.run(
        [sys.executable, "-m", "hpc_refer.run", "--env", "Pendulum-v1", "--steps", "800",
         "--seed", "2", *SMALL],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    run_dir = in_tmp / "runs" / f"Pendulum-v1-{VRacer.name}-refer-seed2"
    assert "steps 800/800 (100.0%)" in proc.stdout and "ETA" in proc.stdout
    cfg = tomllib.loads((run_dir / "config.toml").read_text())
    assert cfg["run"]["steps"] == 800 and cfg[VRacer.name]["hidden"] == [16, 16]
    episodes = read_episodes(run_dir)
    assert [int(e["length"]) for e in episodes] == [200] * 4  # Pendulum truncates at 200
    records = [json.loads(x) for x in (run_dir / "train.jsonl").read_text().splitlines()]
    assert [r["env_step"] for r in records] == [200, 400, 600, 800]
    last = records[-1]
    assert last["grad_step"] == 800 - 400  # training starts with the 2nd episode (400 states)
    for key in ("loss_pi", "loss_v", "beta", "c_max", "far_fraction", "lr", "grad_steps_per_s",
                "env_steps_per_s"):
        assert np.isfinite(last[key]), key
    log = (run_dir / "log.txt").read_text()
    assert log.count("steps ") == 4
    assert log.count("learner step: eager") == 1, "a short run's step is eager, said once"
    # A second identical command gets a fresh directory instead of touching the first.
    assert run_main(["--env", "Pendulum-v1", "--steps", "200", "--seed", "2", *SMALL]) == 0
    assert (in_tmp / "runs" / f"Pendulum-v1-{VRacer.name}-refer-seed2-2" / "episodes.csv").exists()
    assert len(read_episodes(run_dir)) == 4


def test_help_documents_every_flag(capsys):
    try:
        run_main(["--help"])
    except SystemExit as exc:
        assert exc.code == 0
    out = capsys.readouterr().out
    for flag in ("--env", "--steps", "--seed", "--run-dir", "--config", "--refer.mode",
                 "--refer.C", "--replay.size", f"--{VRacer.name}.lr", "(default: 0.995)"):
        assert flag in out


def test_plot_command_draws_mean_and_band(in_tmp):
    for seed in (0, 1):
        assert run_main(["--env", "Pendulum-v1", "--steps", "600", "--seed", str(seed),
                         *SMALL]) == 0
    runs = sorted((in_tmp / "runs").iterdir())
    out = in_tmp / "curves.png"
    assert plot_main([*map(str, runs), "--out", str(out), "--window", "200"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from hpc_refer.report.curves import plot_runs, windowed_returns

    summary = plot_runs(runs, in_tmp / "again.png", window=400)
    (label, curve), = summary.items()
    assert label == "Pendulum-v1 refer" and curve["runs"] == 2
    per_run = [windowed_returns(r, 400)[1] for r in runs]
    np.testing.assert_allclose(curve["mean"], np.mean(per_run, axis=0))
    assert plot_main(["nowhere", "--out", str(out)]) == 2


def test_vracer_refer_learns_inverted_pendulum(in_tmp):
    """Real improvement in CI time: a random policy balances InvertedPendulum-v5 for ~5-10
    steps; after 6,000 steps (5,000 gradient steps) V-RACER + ReF-ER holds it several times
    longer."""
    assert run_main(["--env", "InvertedPendulum-v5", "--steps", "6000", "--seed", "0",
                     "--replay.size", "8192", "--replay.learn-start", "1000",
                     "--log-every", "1000", "--run-dir", "ip"]) == 0
    rets = np.array([float(e["return"]) for e in read_episodes(in_tmp / "ip")])
    first, last = rets[:20].mean(), rets[-10:].mean()
    assert first < 12.0, "the untrained policy is near random"
    assert last > 3.0 * first and last > 25.0, (first, last)
