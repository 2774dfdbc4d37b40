"""bench/bench_grad_ratio.py without training: the steady state of a run is the median of its
interval records after the first one with training (which holds the compile), and a run too
short to have one is refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))  # bench scripts import their siblings

import bench_grad_ratio as bgr  # noqa: E402


def records(run_dir: Path, rows: list[tuple[int, float]]) -> Path:
    run_dir.mkdir()
    (run_dir / "train.jsonl").write_text("".join(
        json.dumps({"grad_step": g, "env_steps_per_s": r, "grad_steps_per_s": 4 * r,
                    "learner_busy": r / 1000}) + "\n" for g, r in rows))
    return run_dir


def test_the_steady_state_leaves_out_acting_only_and_the_compile_interval(tmp_path):
    run = records(tmp_path / "r", [(0, 9000.0), (100, 50.0), (200, 300.0), (300, 200.0),
                                   (400, 250.0)])
    assert bgr.steady(run) == {"env_steps_per_s": 250.0, "grad_steps_per_s": 1000.0,
                               "learner_busy": 0.25}


def test_a_run_without_a_steady_interval_is_refused(tmp_path):
    run = records(tmp_path / "r", [(0, 9000.0), (100, 50.0)])
    with pytest.raises(SystemExit, match="too short a run"):
        bgr.steady(run)


def test_the_flags_train_at_the_ratio_from_the_learning_start(tmp_path):
    flags = bgr.flags(4.0, tmp_path / "r", 3000)
    assert flags[:2] == ["-m", "hpc_refer.run"]
    values = dict(zip(flags[2::2], flags[3::2], strict=False))
    assert values["--steps"] == str(bgr.LEARN_START + 3000)
    assert values["--replay.grad-ratio"] == "4.0" and values["--compile"] == "on"
