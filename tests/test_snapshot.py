"""``run.snapshot`` (``--snapshot``, issue 13 point 4): the rule's errors and meaning, a
one-rank CylinderJets run that writes the vorticity snapshot (HDF5 and PNG) at the end of the
chosen episode only, the same snapshot from a team of two ranks under mpirun equal to the
one-rank one to round-off, the run report's picture of it, and ``python -m hpc_refer.evaluate
--snapshot``. At N = 20 (N = 10
is unstable at Re = 100), from a start state of 6 time units; episodes of 80 control steps,
so a run of 170 steps ends episodes 1 and 2 of its environment."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from mpi_launch import mpi_env, mpirun_exe

import hpc_refer.envs.cylinder_jets as cj
from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.config.modes import ConfigError
from hpc_refer.config.resolve import build_config
from hpc_refer.config.tables import RunConfig
from hpc_refer.evaluate import main as evaluate_main
from hpc_refer.report.build import write_report
from hpc_refer.run.main import main as run_main

N = 20
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("rule", ["0", "x", "every:0", "every:", "every:2.5", "-1", "1;2",
                                  "every:3:4", "last"])
def test_an_invalid_rule_names_the_field_and_the_allowed_values(rule):
    with pytest.raises(ConfigError) as err:
        build_config({"run": {"snapshot": rule}})
    text = str(err.value)
    assert text.startswith(f"run.snapshot = {rule!r} is invalid")
    assert "episode numbers >= 1 or every:K" in text


def test_a_snapshot_rule_that_is_not_a_string_is_refused():
    with pytest.raises(ConfigError, match=r"run\.snapshot = 3 is not a valid str"):
        build_config({"run": {"snapshot": 3}})


def test_the_rule_chooses_listed_episodes_and_every_kth():
    run = RunConfig(snapshot=" 2, every:5 ,7")
    assert [n for n in range(1, 21) if run.snapshot_due(n)] == [2, 5, 7, 10, 15, 20]
    assert RunConfig.snapshot_rule("") == (frozenset(), ())
    assert not any(RunConfig().snapshot_due(n) for n in range(1, 50))


@pytest.fixture(scope="module")
def start(tmp_path_factory) -> Path:
    return cj.make_start(tmp_path_factory.mktemp("snap") / "start.h5", N, duration=6.0)


def run_flags(start: Path, run_dir: Path) -> list[str]:
    return ["--env", "CylinderJets", "--env.start_file", str(start), "--steps", "170",
            "--snapshot", "2", "--run-dir", str(run_dir), "--log-every", "85", "--seed", "4",
            "--replay.learn-start", "100", f"--{VRacer.name}.batch", "32"]


@pytest.fixture(scope="module")
def one_rank(start, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("one") / "run"
    assert run_main(run_flags(start, run_dir)) == 0
    return run_dir


def read(path: Path) -> tuple[dict[str, np.ndarray], dict[str, object]]:
    with h5py.File(path, "r") as h5:
        return {k: h5[k][()] for k in h5}, dict(h5.attrs)


def test_one_rank_run_writes_the_chosen_episode_only(one_rank):
    files = sorted(p.name for p in (one_rank / "snapshots").iterdir())
    assert files == ["env-0-episode-2.h5", "env-0-episode-2.png"]
    arrays, attrs = read(one_rank / "snapshots" / "env-0-episode-2.h5")
    assert attrs["episode"] == 2 and attrs["env"] == 0 and attrs["solver"] == "CylinderJets"
    assert attrs["image"] == "vorticity"
    np.testing.assert_array_equal(attrs["extent"], [0, 2.2, 0, 0.41])
    np.testing.assert_array_equal(attrs["circles"], [[0.2, 0.2, 0.05]])
    assert sorted(arrays) == ["ux", "uy", "vorticity"]
    vort = arrays["vorticity"]
    assert vort.shape == (22 * N, 41 * N // 10)
    # NaN exactly inside the cylinder (centre (2N, 2N) in nodes, radius N / 2)
    x, y = np.meshgrid(np.arange(22 * N) + 0.5, np.arange(41 * N // 10) + 0.5, indexing="ij")
    np.testing.assert_array_equal(np.isnan(vort), (x - 2 * N) ** 2 + (y - 2 * N) ** 2
                                  < (N / 2) ** 2)
    # a shedding wake: vorticity of both signs behind the cylinder, the inflow at U_mean
    wake = vort[3 * N:10 * N]
    assert np.nanmax(wake) > 1 and np.nanmin(wake) < -1
    assert np.nanmean(arrays["ux"][0]) == pytest.approx(1.0, rel=0.02)
    png = (one_rank / "snapshots" / "env-0-episode-2.png").read_bytes()
    assert png.startswith(PNG) and len(png) > 20_000


def test_a_two_rank_team_writes_the_same_snapshot(start, one_rank, tmp_path):
    """mpirun -n 3: one learner and a CylinderJets team of two ranks; the snapshot is taken
    by both ranks (the command to the solver rank) and equals the one-rank one."""
    run_dir = tmp_path / "run"
    done = subprocess.run([mpirun_exe(), "-n", "3", sys.executable, "-m", "hpc_refer.run",
                           *run_flags(start, run_dir), "--ranks-per-env", "2"],
                          capture_output=True, text=True, timeout=400, env=mpi_env(),
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    files = sorted(p.name for p in (run_dir / "snapshots").iterdir())
    assert files == ["env-0-episode-2.h5", "env-0-episode-2.png"]
    one, _ = read(one_rank / "snapshots" / "env-0-episode-2.h5")
    two, attrs = read(run_dir / "snapshots" / "env-0-episode-2.h5")
    assert attrs["episode"] == 2
    for name in ("vorticity", "ux", "uy"):
        scale = np.nanmax(np.abs(one[name]))
        np.testing.assert_allclose(two[name], one[name], rtol=0, atol=1e-12 * scale,
                                   equal_nan=True, err_msg=name)


def test_evaluate_writes_snapshots_of_the_chosen_evaluation_episodes(one_rank, capsys):
    out = one_rank / "evaluation.json"
    assert evaluate_main([str(one_rank), "--episodes", "2", "--snapshot", "every:2",
                          "--out", str(out)]) == 0
    files = sorted(p.name for p in (one_rank / "evaluation-snapshots").iterdir())
    assert files == ["env-0-episode-2.h5", "env-0-episode-2.png"]
    arrays, attrs = read(one_rank / "evaluation-snapshots" / "env-0-episode-2.h5")
    assert attrs["episode"] == 2 and np.isfinite(arrays["vorticity"]).sum() > 0
    assert evaluate_main([str(one_rank), "--snapshot", "every:0"]) == 2
    assert "run.snapshot = 'every:0' is invalid" in capsys.readouterr().err


def test_the_report_draws_the_newest_snapshot(one_rank, tmp_path):
    page = write_report([one_rank], tmp_path / "report.html").read_text()
    caption = "env-0-episode-2: CylinderJets&#x27;s vorticity at the end of episode 2"
    assert caption in page
    figure = page[:page.index(caption)].rsplit('<figure class="plot"', 1)[1]
    # the image's finite values (the fluid nodes) are the figure's data, the cylinder is not
    arrays, _ = read(one_rank / "snapshots" / "env-0-episode-2.h5")
    fluid = int(np.isfinite(arrays["vorticity"]).sum())
    assert 0 < fluid < arrays["vorticity"].size
    assert figure.startswith(f' data-points="{fluid}"')
