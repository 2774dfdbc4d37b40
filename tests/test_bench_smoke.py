"""Every benchmark script in bench/ still runs: ``python bench/X.py --smoke --out DIR`` (the
smoke mode of bench/common.py: the script's own functions at a few hundred steps and its
smallest sizes) exits 0 and writes its results into DIR, with the expected top-level keys,
and writes nothing into bench/results or bench/runs.

The scripts are found by a glob, so a new script fails here until it has a smoke mode and a
row in :data:`EXPECTED`; the libraries beside them are listed in :data:`LIBRARIES` with the
reason. Scripts that need an optional package (stable-baselines3 for sb3_runner.py, the bench
extra) are skipped without it; sample_efficiency.py still runs hpc_refer's agents then. The
MPI-launching ones start at most 4 ranks, with mpi_launch.mpi_env's Open MPI settings.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_launch import mpi_env

BENCH = Path(__file__).resolve().parents[1] / "bench"
LIBRARIES = {
    "common.py": "the shared helpers (machine, write, and the --out/--smoke of every script)",
    "po_envs.py": "the partially observed tasks that partial_observation.py's runs load",
    "sleeping_solver.py": "the solver of slow_envs.py's runs and of tests/test_slow_envs.py",
}
"""bench/*.py that are no benchmark: imported by the scripts, never run."""

WRITE = {"command", "date", "machine", "smoke"}
"""Keys common.write adds to every JSON (``smoke`` in a smoke run)."""
EXPECTED: dict[str, dict[str, set[str]]] = {
    "ablation.py": {"ablation.json": WRITE | {"root", "window", "figure", "table", "groups"},
                    "ablation.md": set(), "ablation.png": set()},
    "bench_actor.py": {"actor.json": WRITE | {"steps_per_s", "samples", "numpy_over_torch",
                                              "numpy_actor_over_mujoco", "mujoco_step_us",
                                              "actor_overhead_us", "overhead_over_mujoco_step",
                                              "env_step_timeout_s", "load_avg_before",
                                              "load_avg_after"}},
    "bench_agents_actor.py": {"agents_actor.json": WRITE | {"steps", "repeats", "agents"}},
    "bench_grad_ratio.py": {"grad_ratio.json": WRITE | {"ceiling", "runs"}},
    "bench_learner.py": {"learner.json": WRITE | {"gradient", "end_to_end", "memory",
                                                  "targets"}},
    "bench_mpi.py": {"mpi.json": WRITE | {"learners", "training_2_ranks", "actors",
                                          "cost_model_64_ranks", "load_avg_1min_before"}},
    "bench_prediction.py": {"prediction.json": {"benchmark", "machine", "date", "runs"},
                            "prediction_n1.h5": set(), "prediction_n2.h5": set()},
    "bench_recurrent.py": {"recurrent_learner.json": WRITE | {"steps_per_s", "median",
                                                              "gru_over_mlp",
                                                              "replay_states"}},
    "checkpoint.py": {"checkpoint.json": WRITE | {"checkpoint_every", "filesystem", "results"}},
    "crossq_speed.py": {"crossq_speed.json": WRITE | {"env", "critic_width", "rates",
                                                      "median_steps_per_s",
                                                      "ratio_hpc_refer_over_sb3"}},
    "example_runs.py": {"example_runs.json": WRITE | {"ranks", "learners", "steps", "cases"}},
    "export_speed.py": {"export_speed.json": WRITE | {"network", "us_per_call", "samples_us",
                                                      "targets_us", "load_avg_before",
                                                      "load_avg_after"}},
    "cylinder_control.py": {"cylinder_control.json": WRITE | {"train_command", "layout", "eval",
                                                              "learning", "pngs"},
                            "cylinder_control-learning.png": set(),
                            "cylinder_control-series.png": set(),
                            "cylinder_control-vorticity.png": set()},
    "ks_agents.py": {"ks_agents.json": WRITE | {"steps_per_simulation", "settings",
                                                           "tests"},
                     "ks_agents.md": set(), "ks_agents.png": set()},
    "ks_control.py": {"ks_control.json": WRITE | {"steps", "settings", "runs", "energy"},
                      "ks_control.png": set()},
    "learning_evidence.py": {"learning_evidence.json": WRITE | {"runs", "curves", "window"},
                             "learning_evidence.png": set()},
    "partial_observation.py": {"partial_observation_cue.json": WRITE | {"task", "full",
                                                                        "settings", "tests"},
                               "partial_observation_cue.md": set(),
                               "partial_observation_cue.png": set()},
    "profile_learner.py": {"profile_vracer-eager.json": WRITE | {"ms_per_step", "fractions",
                                                                 "steps_per_s"}},
    "resting_terms.py": {"resting_terms.json": WRITE | {"critic_width_crossq", "compile",
                                                        "replay_states", "blocks",
                                                        "algorithms"}},
    "sample_efficiency.py": {"sample_efficiency.json": WRITE | {"window", "root", "tasks",
                                                                "published_at_1e5"},
                             "sample_efficiency.md": set(), "sample_efficiency.png": set()},
    "sb3_runner.py": {"sb3-sac/episodes.csv": set(), "sb3-sac/eval.csv": set(),
                      "sb3-sac/state.txt": set()},
    "slow_envs.py": {"slow_envs.json": WRITE | {"teams", "learners", "step_time_s",
                                                "slow_factor", "cases"}},
    "turek.py": {"turek.json": WRITE | {"ranks", "2D-1", "2D-2", "runs", "speed"},
                 "turek.md": set()},
}
"""Per script, the files its smoke run writes into --out (the keys a JSON must hold)."""
NEEDS = {"sb3_runner.py": "stable_baselines3", "crossq_speed.py": "sb3_contrib",
         "export_speed.py": "onnxruntime"}
"""Scripts that cannot run without an optional package."""
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py") if p.name not in LIBRARIES)


def _files(d: Path) -> dict[str, tuple[int, int]]:
    """(mtime, size) of every file under ``d``."""
    return {str(p): (p.stat().st_mtime_ns, p.stat().st_size) for p in d.rglob("*")
            if p.is_file()} if d.is_dir() else {}


def test_every_script_is_listed_and_the_libraries_exist():
    assert sorted(EXPECTED) == SCRIPTS, (
        "a bench script without a row in EXPECTED (give it a smoke mode, bench/common.py) or "
        "a row without its script")
    assert all((BENCH / name).is_file() for name in LIBRARIES)


@pytest.mark.parametrize("name", [pytest.param(n, id=n.removesuffix(".py")) for n in SCRIPTS])
def test_the_smoke_mode_runs_and_writes_its_results(name, tmp_path):
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])
    out = tmp_path / "out"
    before = {d: _files(BENCH / d) for d in ("results", "runs")}
    done = subprocess.run([sys.executable, str(BENCH / name), "--smoke", "--out", str(out)],
                          cwd=tmp_path, env=mpi_env(), capture_output=True, text=True,
                          timeout=600)
    log = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, f"{name} --smoke exited {done.returncode}:\n{log}"
    for file, keys in EXPECTED.get(name, {}).items():
        path = out / file
        assert path.is_file() and path.stat().st_size > 0, f"{name}: no {file} in --out\n{log}"
        if path.suffix == ".json":
            payload = json.loads(path.read_text())
            assert keys <= payload.keys(), f"{name}: {file} lacks {keys - payload.keys()}"
            if "smoke" in keys:
                assert payload["smoke"] is True
    assert {d: _files(BENCH / d) for d in ("results", "runs")} == before, \
        f"{name} --smoke wrote into bench/results or bench/runs"
    if name == "sample_efficiency.py":
        agents = json.loads((out / "sample_efficiency.json").read_text())["tasks"][
            "Pendulum-v1"]["400"]
        assert {"vracer", "sac-er"} <= agents.keys()
        assert ("sb3-sac" in agents) == (importlib.util.find_spec("stable_baselines3")
                                         is not None)


def test_smoke_refuses_bench_results_and_other_arguments(tmp_path):
    script = str(BENCH / "bench_prediction.py")  # the quickest to start (no torch)
    into = subprocess.run([sys.executable, script, "--smoke", "--out", str(BENCH / "results")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert into.returncode == 2 and "never writes into" in into.stderr
    other = subprocess.run([sys.executable, script, "--smoke", "--ranks", "3"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert other.returncode == 2 and "no other arguments than --out" in other.stderr
