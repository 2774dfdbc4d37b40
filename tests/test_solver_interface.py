"""The Python solver interface (issue 12, points 2-4): parameters from the ``[env]`` table
and ``--env.KEY VALUE`` checked against the constructor, the context keywords, per-step
series of ``step_metrics``, and interface mistakes named at the first reset and step."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest
from mpi_launch import HERE, mpi_env, mpirun_exe, run_snippet
from output_lines import one_error_line

from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.config.layout import SeedRole, role_seed
from hpc_refer.config.modes import ConfigError
from hpc_refer.config.resolve import build_config
from hpc_refer.envs.checks import all_finite, check_state
from hpc_refer.envs.diffusion import HORIZON
from hpc_refer.envs.driver import TeamDriver
from hpc_refer.envs.interface import SolverFault
from hpc_refer.envs.registry import SolverSpec, env_kind, make_driver
from hpc_refer.report.series import read_series
from hpc_refer.run.main import main as run_main
from hpc_refer.run.main import parse_args

SHORT = ["--steps", "300", "--replay.learn-start", "200", f"--{VRacer.name}.batch", "64",
         f"--{VRacer.name}.hidden", "16,16", "--log-every", "100"]


# --- 2. parameters -----------------------------------------------------------------------

def test_flags_and_toml_fill_the_env_table(tmp_path):
    (tmp_path / "c.toml").write_text('[env]\nre = 80\nlabel = "toml"\n')
    config = parse_args(["--config", str(tmp_path / "c.toml"), "--env.label", "flag",
                         "--env.nx=64", "--env.on", "true"])
    assert config.env == {"re": 80, "label": "flag", "nx": 64, "on": True}
    assert config.to_dict()["env"] == config.env


@pytest.mark.parametrize(("params", "message"), [
    ({"mach": 1}, "env.mach is not a parameter of Channel: its parameters are re, nx, label"),
    ({"seed": 3}, "env.seed is reserved: hpc_refer gives Channel its seed itself"),
    ({"re": "fast"}, "env.re = 'fast' is invalid for Channel: allowed values are of type float"),
    ({"nx": 2.5}, "env.nx = 2.5 is invalid for Channel: allowed values are of type int"),
    ({"nx": True}, "env.nx = True is invalid for Channel: allowed values are of type int"),
])
def test_parameters_are_checked_against_the_constructor(params, message):
    with pytest.raises(ConfigError) as err:
        env_kind("param_envs:Channel").params("param_envs:Channel", params)
    assert str(err.value).startswith(message)


def test_a_required_parameter_is_named_and_ints_become_floats():
    with pytest.raises(ConfigError, match=r"NeedsRe needs env.mach \(--env.mach VALUE\)"):
        env_kind("param_envs:NeedsRe").params("param_envs:NeedsRe", {"re": 1})
    params = env_kind("param_envs:Channel").params("param_envs:Channel", {"re": 100, "label": "a"})
    assert params == {"re": 100.0, "label": "a"} and isinstance(params["re"], float)


def test_gymnasium_takes_make_keywords_and_refuses_others():
    spec = SolverSpec("Pendulum-v1", params={"g": 3.5})
    env = make_driver(spec, None)
    assert env.env.env.unwrapped.g == 3.5
    env.close()
    with pytest.raises(ConfigError, match=r"refused by gymnasium.make\('Pendulum-v1'\)"):
        env_kind("Pendulum-v1").dims(SolverSpec("Pendulum-v1", params={"gravity": 3.5}))


def test_a_run_stores_the_parameters_and_gives_the_context(in_tmp):
    run = in_tmp / "run"
    assert run_main(["--env", "param_envs:Channel", "--env.re", "100", "--env.label",
                     "hello", "--run-dir", str(run), *SHORT]) == 0
    config = build_config(__import__("tomllib").loads((run / "config.toml").read_text()))
    assert config.env == {"re": 100.0, "label": "hello"}
    seen = json.loads((run / "seen" / "env-0-rank-0.json").read_text())
    assert seen == {"re": 100.0, "re_type": "float", "nx": 32, "label": "hello",
                    "env_index": 0, "run_dir": str(run),
                    "seed": role_seed(0, SeedRole.SOLVER, 0)}
    manifest = json.loads(next((run / "checkpoints").glob("step-*/manifest.json")).read_text())
    assert manifest["meta"]["config"]["env"] == {"re": 100.0, "label": "hello"}


@pytest.mark.parametrize("argv", [
    ["--env", "param_envs:Channel", "--env.mach", "2"],
    ["--env", "param_envs:NarrowBounds"],
    ["--env", "param_envs:EmptyBox"],
])
def test_bad_parameters_and_spaces_stop_before_anything_is_written(argv, in_tmp, capsys):
    assert run_main([*argv, "--run-dir", str(in_tmp / "run"), *SHORT]) == 2
    line = one_error_line(capsys.readouterr().err, "hpc_refer.run: error:")
    assert not (in_tmp / "run").exists()
    assert ("mach" in line or "NarrowBounds.low has shape (3,), expected (4,) (act_dim)" in line
            or "EmptyBox.low[2] = 1.0 is not below high[2] = 1.0" in line)


# --- 3. per-step series ------------------------------------------------------------------

def series_rows(run):
    return read_series(run / "series" / "env-0.h5")


@pytest.mark.parametrize("stride", [1, 10])
def test_step_metrics_are_written_per_step_at_the_stride(stride, in_tmp):
    run = in_tmp / "run"
    assert run_main(["--env", "param_envs:Channel", "--env.re", "3", "--series-stride",
                     str(stride), "--run-dir", str(run), *SHORT]) == 0
    s = series_rows(run)
    assert len(s["step"]) == 300 // stride
    assert set(s["step"] % stride) == {0} and s["step"].max() <= HORIZON
    np.testing.assert_array_equal(s["cd"], 3.0 * s["step"])
    np.testing.assert_array_equal(s["cl"], -s["step"])
    assert list(np.unique(s["episode"])) == list(range(1, 300 // HORIZON + 1))
    with h5py.File(run / "series" / "env-0.h5") as f:
        assert list(f.attrs["names"]) == ["cd", "cl"] and f.attrs["stride"] == stride


def test_no_step_metrics_write_nothing(in_tmp):
    run = in_tmp / "run"
    assert run_main(["--env", "Diffusion1D", "--run-dir", str(run), *SHORT]) == 0
    assert not (run / "series").exists()


def test_a_resumed_run_continues_the_series_without_repeating_a_row(in_tmp):
    run = in_tmp / "run"
    base = ["--env", "param_envs:Channel", "--run-dir", str(run), *SHORT]
    assert run_main([*base, "--checkpoint-every", "200"]) == 0
    # as if killed after step 300 but before its checkpoint: the resumed run continues from
    # step 200, and the 100 rows written after it move aside
    shutil.rmtree(max((run / "checkpoints").iterdir()))
    assert run_main(["--restart", str(run), "--steps", "400"]) == 0
    s = series_rows(run)
    keys = list(zip(s["episode"].tolist(), s["step"].tolist(), strict=True))
    assert len(keys) == len(set(keys)) == 400
    aside = read_series(run / "series" / "env-0.after-row-200.h5")
    assert len(aside["step"]) == 100
    assert run_main(["--restart", str(run), "--steps", "500", "--env.re", "7"]) == 2


def test_series_of_a_team_come_from_its_state_rank_under_mpirun(tmp_path):
    run = tmp_path / "run"
    done = subprocess.run(
        [mpirun_exe(), "-n", "5", sys.executable, "-m", "hpc_refer.run", "--env",
         "param_envs:Channel", "--ranks-per-env", "2", "--env.re", "2.5", "--run-dir",
         str(run), *SHORT], env=mpi_env(), capture_output=True, text=True, timeout=300,
        cwd=HERE)
    assert done.returncode == 0, done.stderr[-3000:]
    for index in (0, 1):
        for rank in (0, 1):
            seen = json.loads((run / "seen" / f"env-{index}-rank-{rank}.json").read_text())
            assert seen["env_index"] == index and seen["re"] == 2.5
            assert seen["seed"] == role_seed(0, SeedRole.SOLVER, index)
        s = read_series(run / "series" / f"env-{index}.h5")
        assert len(s["step"]) > 0
        np.testing.assert_array_equal(s["cd"], 2.5 * s["step"])


# --- 4. interface mistakes at the boundary -----------------------------------------------

@pytest.mark.parametrize(("env", "message"), [
    ("ShortState", "env 0 (ShortState).reset: state has shape (31,), expected (32,)"),
    ("ArrayReward", "env 0 (ArrayReward).step: reward has shape (2,), expected a scalar"),
    ("ThreeValues", "env 0 (ThreeValues).step: step_values() returned 3 values, expected 2 "
                    "(cd, cl)"),
])
def test_the_first_answers_probe_the_interface(env, message, in_tmp, capsys):
    assert run_main(["--env", f"param_envs:{env}", "--run-dir", str(in_tmp / "run"),
                     *SHORT]) == 1
    line = one_error_line(capsys.readouterr().err, "hpc_refer.run: error:")
    assert message in line, line
    assert "the solver interface is reset(seed) -> state of shape (obs_dim,)" in line
    assert not list((in_tmp / "run").glob("series/*"))


def test_after_the_probe_a_wrong_answer_is_a_counted_fault():
    from param_envs import ArrayReward

    class LateArrayReward(ArrayReward):
        def step(self, action):
            if self.t < 3:
                return super(ArrayReward, self).step(action)
            return super().step(action)

    env = TeamDriver(LateArrayReward(None), None)
    env.reset(0)
    for _ in range(3):
        env.step(np.zeros(4))
    from hpc_refer.envs import SolverFault
    with pytest.raises(SolverFault, match="reward has shape"):
        env.step(np.zeros(4))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("shape", [(17,), (3, 5)])
def test_a_non_finite_value_anywhere_in_a_state_is_found(bad, shape):
    """check_state's one-dot-product test: a state of float32's largest values is finite, and
    one nan or +-inf in any place of it (of one agent or several) is not."""
    agents, obs_dim = (1, *shape) if len(shape) == 1 else shape
    for k in range(int(np.prod(shape))):
        state = np.full(shape, np.finfo(np.float32).max, np.float32)
        state.reshape(-1)[k % 2] *= -1
        assert all_finite(state)
        state.reshape(-1)[k] = bad
        assert not all_finite(state)
        with pytest.raises(SolverFault, match=r"is not finite in float32 \(1 such values\)"):
            check_state(state, obs_dim, agents)
    assert all_finite(np.zeros(0, np.float32))


def test_the_interface_names_import_without_gymnasium():
    script = ("import sys\n"
              "from hpc_refer.envs import EnvironmentFinished, SolverFault, Status\n"
              "assert 'gymnasium' not in sys.modules, 'gymnasium was imported'\n"
              "assert Status.TRUNCATED == 2 and issubclass(SolverFault, ValueError)\n")
    run_snippet(script)


def test_a_solver_may_raise_solver_fault_for_a_step_it_cannot_make():
    from hpc_refer.envs import SolverFault
    from hpc_refer.envs.diffusion import Diffusion1D

    class Diverges(Diffusion1D):
        builds = 0

        def __init__(self, team=None):
            super().__init__(team)
            Diverges.builds += 1

        def step(self, action):
            if self.t == 2:
                raise SolverFault("CFL number 3.1 > 1: the field diverged")
            return super().step(action)

    env = TeamDriver(Diverges(None), None)
    env.reset(0)
    env.step(np.zeros(4))
    env.step(np.zeros(4))
    with pytest.raises(SolverFault) as fault:
        env.step(np.zeros(4))
    assert str(fault.value) == ("env 0 (Diverges).step: CFL number 3.1 > 1: the field "
                                "diverged")
    env.reset(0)
    assert Diverges.builds == 2, "the solver is built anew after its fault, before the reset"
