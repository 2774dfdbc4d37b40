"""Rough edges a new user hit (issue 14, point 4): each is refused or reported in one line,
before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest
from interval_records import interval_record
from mpi_launch import run_snippet
from output_lines import one_error_line

from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.config.modes import ConfigError
from hpc_refer.config.resolve import build_config, load_toml
from hpc_refer.report.schema import IntervalRecord
from hpc_refer.run.main import main as run_main
from hpc_refer.run.main import parse_args

# --- 1. one rule for integer and float values, from TOML and from flags ---------------------


@pytest.mark.parametrize("value", ["1e3", "1000", "1000.0", "1E3"])
def test_integer_key_takes_integral_values_as_a_flag(value):
    assert parse_args(["--steps", value]).run.steps == 1000


@pytest.mark.parametrize("value", ["1e3", "1000", "1000.0", "'1e3'", "'1000'"])
def test_integer_key_takes_integral_values_in_toml(value, tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(f"[run]\nsteps = {value}\n")
    assert build_config(load_toml(path)).run.steps == 1000


@pytest.mark.parametrize("value", ["1.5", "'1.5'", "true", "false", "inf", "nan"])
def test_integer_key_refuses_non_integral_and_booleans_in_toml(value, tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(f"[run]\nsteps = {value}\n")
    with pytest.raises(ConfigError, match=r"^run\.steps = .* is not a valid integer"):
        build_config(load_toml(path))


@pytest.mark.parametrize("value", ["1.5", "true", "abc", "inf"])
def test_integer_key_refuses_non_integral_and_booleans_as_a_flag(value):
    with pytest.raises(ConfigError, match=r"^run\.steps = .* is not a valid integer"):
        parse_args(["--steps", value])


def test_float_key_refuses_a_boolean_in_toml(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(f"[{VRacer.name}]\nlr = true\n")
    with pytest.raises(ConfigError, match=rf"^{VRacer.name}\.lr = True is not a valid float"):
        build_config(load_toml(path))
    path.write_text(f"[{VRacer.name}]\nlr = 1e-3\nsigma_init = 1\n")
    cfg = build_config(load_toml(path))
    assert cfg.algorithm.lr == 1e-3 and cfg.algorithm.sigma_init == 1.0


def test_list_of_integers_takes_the_same_rule():
    assert build_config({VRacer.name: {"hidden": [64, 3.2e1]}}).algorithm.hidden == (64, 32)
    assert parse_args([f"--{VRacer.name}.hidden", "1e2,50"]).algorithm.hidden == (100, 50)
    with pytest.raises(ConfigError, match=rf"^{VRacer.name}\.hidden = "):
        build_config({VRacer.name: {"hidden": [64, True]}})
    with pytest.raises(ConfigError, match=rf"^{VRacer.name}\.hidden = "):
        build_config({VRacer.name: {"hidden": [64, 1.5]}})


# --- 2. --env package.module:Class must name a solver class ---------------------------------


class HasNoStep:
    """A class missing parts of the solver protocol."""

    obs_dim = 2
    act_dim = 1
    low = (-1.0,)

    def reset(self, seed: int) -> None: ...

    def close(self) -> None: ...


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ("os:path", "run.env = 'os:path' is a module, not a class: a solver class needs class "
                    "attributes obs_dim, act_dim, low, high and methods reset, step, close"),
        ("os:sep", "run.env = 'os:sep' is a str, not a class"),
        ("collections:OrderedDict", "missing: obs_dim, act_dim, low, high, reset(), step()"),
        ("test_rough_edges:HasNoStep", "is not a solver class: a solver class needs class "
                                       "attributes obs_dim, act_dim, low, high and methods "
                                       "reset, step, close; missing: high, step()"),
    ],
)
def test_env_that_is_not_a_solver_class_is_one_line(env, needle, in_tmp, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    assert run_main(["--env", env, "--steps", "10"]) == 2
    assert needle in one_error_line(capsys.readouterr().err, "hpc_refer.run: error:")
    assert not (in_tmp / "runs").exists()


# --- 3. a replay larger than the memory is refused before anything is written --------------


def test_replay_larger_than_memory_is_one_line_and_writes_nothing(in_tmp, capsys):
    argv = ["--env", "Pendulum-v1", "--steps", "10", "--replay.size", "10000000000"]
    assert run_main(argv) == 2
    line = one_error_line(capsys.readouterr().err, "hpc_refer.run: error:")
    assert line.startswith("hpc_refer.run: error: replay.size = 10000000000 needs ")
    assert "GiB of memory for the replay, but " in line and "GiB is available" in line
    assert not (in_tmp / "runs").exists()
    assert run_main([*argv, "--run-dir", "mine"]) == 2
    assert not (in_tmp / "mine").exists()


def test_replay_memory_estimate_names_the_sizes(in_tmp, capsys, monkeypatch):
    import hpc_refer.run.main as run_module

    # Pendulum: obs 3, act 1: 4*3 + 12*1 + 33 + 8 (the int64 episode id) = 65 bytes per state
    monkeypatch.setattr(run_module, "available_memory", lambda: 2**30)
    argv = ["--env", "Pendulum-v1", "--steps", "10", "--run-dir", "r"]
    assert run_main([*argv, "--replay.size", str(2**30 // 65 + 1)]) == 2
    err = capsys.readouterr().err
    assert "needs 1.0 GiB of memory for the replay, but 1.0 GiB is available" in err
    assert not (in_tmp / "r").exists()
    config = run_module.parse_args(["--env", "Pendulum-v1", "--replay.size", "1000"])
    assert run_module.replay_bytes(config, (3, 1), 1) == 65_000
    assert run_module.replay_bytes(config, (3, 1), 2) == 32_500
    layout = run_module.compute_layout(1, 1, 1)
    fits = run_module.parse_args(["--env", "Pendulum-v1", "--replay.size", str(2**30 // 65)])
    run_module.check_replay_memory(run_module.Start(fits, layout, None, (3, 1)))
    run_module.check_replay_memory(run_module.Start(config, layout, None, None))  # external


# --- 4. a run too short to reach replay.learn_start says so ---------------------------------


def test_run_shorter_than_learn_start_warns_in_the_log(in_tmp):
    assert run_main(["--env", "Pendulum-v1", "--steps", "600", "--run-dir", "short",
                     "--replay.size", "4096"]) == 0
    log = (in_tmp / "short" / "log.txt").read_text()
    assert ("warning: run.steps = 600 < replay.learn_start = 2048 (states stored before the "
            "first gradient step): no gradient step will be made; set --replay.learn-start"
            in log)
    assert run_main(["--env", "Pendulum-v1", "--steps", "600", "--run-dir", "enough",
                     "--replay.size", "4096", "--replay.learn-start", "300"]) == 0
    assert "warning" not in (in_tmp / "enough" / "log.txt").read_text()


# --- 5. the ETA uses the speed since training started ---------------------------------------


def _record(step: int, grad: int, rate: float) -> IntervalRecord:
    return interval_record(step, grad_step=grad, env_steps_per_s=rate, beta=0.0,
                           far_fraction=0.0, c_max=5.0)


def test_eta_uses_the_speed_since_training_started(tmp_path, run_clock):
    from hpc_refer.config.resolve import Config
    from hpc_refer.report.metrics import RunDirectory

    run = RunDirectory(tmp_path / "r", Config())
    now = [10.0]
    run_clock(lambda: now[0])
    total = 1_000_000
    # acting alone: 2000 steps/s, the interval's speed (980000 steps left: 8 minutes)
    assert run.progress(_record(20_000, 0, 2000.0), total).endswith("| ETA 8m")
    # first record with gradient steps: its interval's speed (970000 / 1000 s: 16 minutes)
    now[0] = 20.0
    line = run.progress(_record(30_000, 100, 1000.0), total)
    assert line.endswith("| ETA 16m") and "| 1000 steps/s |" in line
    # then the speed since training started: 10000 steps in 100 s, 960000 left: 160 minutes,
    # even when the interval's speed (shown) is far higher
    now[0] = 120.0
    line = run.progress(_record(40_000, 10_100, 2000.0), total)
    assert line.endswith("| ETA 160m") and "| 2000 steps/s |" in line
    now[0] = 220.0
    line = run.progress(_record(60_000, 30_100, 300.0), total)
    assert line.endswith(f"| ETA {940_000 / (30_000 / 200) / 60:.0f}m")
    run.close()


def test_mujoco_warnings_become_python_warnings_and_the_asset_one_is_dropped():
    script = ("import warnings; warnings.simplefilter('always')\n"
              "from hpc_refer.envs.gym_env import GymEnv, mujoco_warning\n"
              "for _ in range(2):\n"
              "    GymEnv('HalfCheetah-v5').close()\n"
              "mujoco_warning('Nan, Inf or huge value in QACC at DOF 0')\n")
    out = run_snippet(script)
    assert "settotalmass" not in out
    assert "RuntimeWarning: MuJoCo: Nan, Inf or huge value in QACC" in out
