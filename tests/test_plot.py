"""The plot command's averaging window adapts to the runs' length (issue 14: a short run
drew one invisible dot with the paper's 2e5-step window)."""

from __future__ import annotations

from pathlib import Path

import pytest
from interval_records import interval_record

from hpc_refer.config.resolve import Config
from hpc_refer.report.curves import PAPER_WINDOW, auto_window, main, plot_runs, run_label


def fake_run(path: Path, last_step: int, every: int = 200) -> Path:
    """A run directory with one episode (return = its step) every ``every`` steps."""
    path.mkdir()
    Config().write_toml(path / "config.toml")
    lines = ["env_step,rank,return,length,wall_s"]
    lines += [f"{s},1,{s},{every},0.0" for s in range(every, last_step + 1, every)]
    (path / "episodes.csv").write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("last_step, window", [
    (4_000, 200), (25_000, 1_000), (100_000, 5_000), (1_000_000, 50_000),
    (4_000_000, PAPER_WINDOW), (10_000_000, PAPER_WINDOW),
])
def test_window_is_the_papers_or_a_twentieth_of_the_run(tmp_path, last_step, window):
    assert auto_window([fake_run(tmp_path / "r", last_step, every=last_step // 40)]) == window


def test_a_short_run_draws_a_curve_not_a_dot(tmp_path, capsys):
    run = fake_run(tmp_path / "r", 4_000)
    out = tmp_path / "curves.png"
    assert main([str(run), "--out", str(out)]) == 0
    assert "per window of 200 environment steps" in capsys.readouterr().out
    (curve,) = plot_runs([run], out, auto_window([run])).values()
    assert len(curve["steps"]) == 20 and curve["mean"][-1] == pytest.approx(4_000)
    assert main([str(run), "--out", str(out), "--window", "0"]) == 2


def test_sparse_episodes_get_windows_that_hold_one(tmp_path):
    # 10 episodes over 4000 steps: a twentieth (200) would leave every other window empty
    assert auto_window([fake_run(tmp_path / "r", 4_000, every=400)]) == 500


def test_a_run_is_labelled_compiled_by_its_records_not_its_config(tmp_path):
    """``compiled`` where a record of train.jsonl says the learner's step ran compiled (a
    run asking for it whose compile failed stepped eagerly); none for runs written before
    the field (tests/fixtures: flat lines without it)."""
    run = fake_run(tmp_path / "r", 4_000)
    assert run_label(run) == "HalfCheetah-v5 refer"  # no train.jsonl yet
    lines = [interval_record(200), interval_record(400, grad_step=100)]
    (run / "train.jsonl").write_text("".join(r.to_json() + "\n" for r in lines))
    assert run_label(run) == "HalfCheetah-v5 refer"
    lines.append(interval_record(600, grad_step=300, compiled=True))
    (run / "train.jsonl").write_text("".join(r.to_json() + "\n" for r in lines))
    assert run_label(run) == "HalfCheetah-v5 refer compiled"
    fixtures = Path(__file__).resolve().parent / "fixtures"
    assert run_label(fixtures / "schema1") == "Pendulum-v1 refer"
    assert run_label(fixtures / "schema1_ddpg") == "Pendulum-v1 er"
