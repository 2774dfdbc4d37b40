"""The registry of environment kinds (issue 35, point 3): each id goes to the one kind whose
form it has, a bad id names the field and every allowed form, ``--help`` lists every kind's
form, a kind's launch needs (one rank or a team) are its own, and a fifth kind is one module:
tests/plugin_envkind.py, registered through ``--plugins``, trains and resumes without any
package file knowing it.

The plug-in runs in fresh interpreters (subprocesses): registering it here would add it to the
registry that the other tests ask.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_launch import HERE
from output_lines import one_error_line, one_line_with

from hpc_refer.config.modes import ConfigError
from hpc_refer.envs.registry import SolverSpec, env_kind, env_kinds
from hpc_refer.run.main import main as run_main

BUILT_IN = {"solver_class", "gymnasium", "pettingzoo", "external"}


@pytest.mark.parametrize(("env_id", "kind"), [
    ("Pendulum-v1", "gymnasium"),
    ("HalfCheetah-v5", "gymnasium"),
    ("externally-v0", "gymnasium"),
    ("KS", "solver_class"),
    ("Diffusion1D", "solver_class"),
    ("param_envs:Channel", "solver_class"),
    ("pettingzoo:test_pettingzoo_env:point_masses", "pettingzoo"),
    ("external", "external"),
    ("external:-n 2 ./heat1d", "external"),
    ("external:--connect ports", "external"),
])
def test_each_id_has_one_kind(env_id, kind):
    assert env_kind(env_id).name == kind


def test_the_built_in_kinds_are_asked_specific_forms_first():
    kinds = env_kinds()
    assert {k.name for k in kinds} >= BUILT_IN
    assert [k.name for k in kinds][-2:] == ["solver_class", "gymnasium"]
    assert [k.order for k in kinds] == sorted(k.order for k in kinds)


def forms_in(text: str) -> list[str]:
    """The registered kinds' forms missing from ``text`` (whitespace-insensitive)."""
    flat = " ".join(text.split())
    return [k.form for k in env_kinds() if " ".join(k.form.split()) not in flat]


@pytest.mark.parametrize("env_id", ["NoSuchEnv-v9", "no_such_module_xyz:Solver"])
def test_a_bad_id_names_the_field_and_every_allowed_form(env_id, in_tmp, capsys):
    assert run_main(["--env", env_id, "--steps", "10"]) == 2
    line = one_error_line(capsys.readouterr().err, "hpc_refer.run: error:")
    assert f"run.env = {env_id!r}" in line
    assert forms_in(line) == [], line
    assert not (in_tmp / "runs").exists()


def test_help_lists_every_kind(capsys):
    with pytest.raises(SystemExit):
        run_main(["--help"])
    out = capsys.readouterr().out
    assert "environments (--env, run.env), one form per kind:" in out
    assert forms_in(out) == []


@pytest.mark.parametrize(("env_id", "needle"), [
    ("Pendulum-v1", "run.env = 'Pendulum-v1' is a gymnasium environment and runs on one rank: "
                    "run.ranks_per_env = 2 is invalid, allowed is 1"),
    ("external:true", "run.env = 'external:true' is an external MPI solver and runs its solver "
                      "outside hpc_refer's ranks: run.ranks_per_env = 2 is invalid, allowed "
                      "is 1"),
])
def test_kinds_that_run_on_one_rank_refuse_a_team(env_id, needle):
    with pytest.raises(ConfigError) as err:
        env_kind(env_id).dims(SolverSpec(env_id, ranks_per_env=2))
    assert str(err.value) == needle


def test_a_solver_class_and_a_team_factory_may_span_a_team():
    assert env_kind("Diffusion1D").dims(SolverSpec("Diffusion1D", ranks_per_env=2)) == (32, 4)
    team_id = "pettingzoo:test_pettingzoo_env:split_point_masses"
    assert env_kind(team_id).dims(SolverSpec(team_id, ranks_per_env=2)) == (4, 2)


def python(args: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


OVERLAP = """\
from hpc_refer.envs.registry import EnvKind, env_kind, register_kind
import plugin_envkind

@register_kind
class Twin(EnvKind):
    name, label, form = "twin", "a twin", "drift:ANYTHING"
    def claims(self, env_id):
        return env_id.startswith("drift:")

try:
    env_kind("drift:3")
except ValueError as err:
    print("overlap:", err)
try:
    register_kind(type("Other", (Twin,), {}))
except ValueError as err:
    print("taken:", err)
register_kind(Twin)
print("again: fine")
"""


def test_kinds_of_one_order_that_share_a_form_and_a_taken_name_are_refused(tmp_path):
    done = python(["-c", OVERLAP], tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert one_line_with(out, "overlap: ") == (
        "overlap: run.env = 'drift:3' is claimed by the environment kinds drift, twin: their "
        "forms overlap")
    assert one_line_with(out, "taken: ") == (
        "taken: environment kind 'twin' is registered already (by __main__.Twin)")
    assert "again: fine" in out


SMALL = ["--replay.size", "1000", "--replay.learn-start", "100", "--vracer.batch", "16",
         "--vracer.hidden", "8,8", "--log-every", "100", "--compile", "off"]


@pytest.mark.mpi_skip
def test_a_kind_of_ones_own_is_one_module_registered_as_a_plugin(tmp_path):
    """``--plugins plugin_envkind --env drift:20`` trains 300 steps and resumes to 400 (the
    restart imports the plug-in from config.toml): its episodes have its length and its
    declared metric; its [env] check and its id's check are start-up errors, and without the
    plug-in the id is refused naming every allowed form."""
    run = ["-m", "hpc_refer.run"]
    plugin = ["--plugins", "plugin_envkind"]
    proc = python([*run, *plugin, "--env", "drift:20", "--env.start", "0.5", "--steps", "300",
                   *SMALL, "--run-dir", "r"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = python([*run, "--restart", "r", "--steps", "400"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    with (tmp_path / "r" / "episodes.csv").open() as f:
        episodes = list(csv.DictReader(f))
    assert len(episodes) == 20 and {e["length"] for e in episodes} == {"20"}
    assert all(float(e["distance"]) >= 0 for e in episodes)
    assert (tmp_path / "r" / "state.txt").read_text().strip() == "finished"
    assert "resumed" in (tmp_path / "r" / "log.txt").read_text()
    helped = python([*run, *plugin, "--help"], tmp_path)
    assert "drift:LENGTH (a test plug-in" in helped.stdout
    for args, needle in (
            ([*plugin, "--env", "drift:x"], "run.env = 'drift:x' is invalid: allowed is "
                                            "drift:LENGTH"),
            ([*plugin, "--env", "drift:5", "--env.speed", "2"],
             "env.speed is not a parameter of drift:5: its parameters are start"),
            (["--env", "drift:5"], "run.env = 'drift:5' cannot be loaded (No module named "
                                   "'drift'): allowed are ")):
        bad = python([*run, *args, "--steps", "10"], tmp_path)
        assert bad.returncode == 2
        assert needle in one_error_line(bad.stderr, "hpc_refer.run: error:"), bad.stderr
    assert "drift:LENGTH" not in bad.stderr  # unknown without the plug-in
