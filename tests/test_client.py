"""The Python client of external solvers (``hpc_refer.client``) and its example,
``solvers/examples/halo_python/solver.py`` (a 2-rank Python MPI code with its own halo
exchange): the PARAMS and METRICS payloads, a 2-rank solver against a 1-rank reference
through ``ExternalEnv``, and training against it spawned per environment (its halo exchange on
``MPI.COMM_WORLD``) and under MPMD (on ``Client.comm``; ``uses_world`` refused there)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_launch import mpi_env, mpirun_exe

from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.client import (
    metric_names_text,
    params_text,
    parse_metric_names,
    parse_params,
    world_note,
)

ROOT = Path(__file__).resolve().parents[1]
SOLVER = ROOT / "solvers/examples/halo_python/solver.py"
SMALL = ["--chunk-len", "20", "--log-every", "100", f"--{VRacer.name}.hidden", "16,16",
         f"--{VRacer.name}.batch", "16", "--replay.learn-start", "100", "--replay.size", "4096"]


def test_params_round_trip_as_key_value_lines():
    text = params_text({"re": 100.0, "grid": 64, "les": True, "name": "a b=c", "off": False})
    assert text == b"re=100.0\ngrid=64\nles=true\nname=a b=c\noff=false"
    assert parse_params(text) == {"re": "100.0", "grid": "64", "les": "true",
                                  "name": "a b=c", "off": "false"}
    assert parse_params(b"") == {}
    with pytest.raises(ValueError, match="solver parameter name 'a=b' is invalid"):
        params_text({"a=b": 1})
    with pytest.raises(ValueError, match=r"solver parameter path = 'x\\ny' is invalid"):
        params_text({"path": "x\ny"})


def test_an_undeclared_communicator_is_named_at_start_up_under_mpmd():
    """A code that did not say which communicator it uses gets one line naming COMM_WORLD's
    size against its group's and what to do; one that said so gets none."""
    note = world_note(None, 6, 2)
    assert note.startswith("hpc_refer_client: MPMD launch: MPI.COMM_WORLD has 6 ranks")
    assert "this environment's group has 2: communicate on Client.comm" in note
    assert "\n" not in note
    assert world_note(False, 6, 2) == "" and world_note(True, 6, 2) == ""


def test_metric_names_are_distinct_identifiers():
    assert metric_names_text(("cd", "cl")) == b"cd\ncl"
    assert metric_names_text(()) == b""
    assert parse_metric_names(b"cd\ncl") == ("cd", "cl")
    assert parse_metric_names(b"") == ()
    for bad in (("cd", "cd"), ("c d",), ("1cd",), ("",)):
        with pytest.raises(ValueError, match="distinct identifiers"):
            metric_names_text(bad)
    with pytest.raises(ValueError, match="holds 'cd' twice"):
        parse_metric_names(b"cd\ncd")
    with pytest.raises(ValueError, match="holds 'c-d', not an identifier"):
        parse_metric_names(b"cd\nc-d")
    with pytest.raises(ValueError, match="is not UTF-8 text"):
        parse_metric_names(b"\xff")


def test_importing_the_client_does_not_initialise_mpi():
    code = ("import sys, hpc_refer.client, hpc_refer.envs.external; "
            "print('mpi4py.MPI' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert out.strip() == "False"


REFERENCE_DRIVER = """
import json, sys
import numpy as np
from hpc_refer.envs.external import ExternalEnv
from hpc_refer.parallel import MpiLinks

solver, out = sys.argv[1], {}
for ranks in (1, 2):
    env = ExternalEnv(f"external:-n {ranks} {sys.executable} {solver} --world --cells 12", 0,
                      1, timeout=60.0, links=MpiLinks(), params={"horizon": 4,
                      "velocity": 0.25}, run_dir=sys.argv[2], seed=5)
    run = {"names": env.step_metric_names, "states": [env.reset(7).tolist()],
           "values": [env.step_values.tolist()], "rewards": [], "status": []}
    for k in range(4):
        state, reward, status = env.step(np.array([0.5, -1.0 + k / 2]))
        run["states"].append(state.tolist())
        run["values"].append(env.step_values.tolist())
        run["rewards"].append(reward)
        run["status"].append(int(status))
    env.close()
    out[ranks] = run
print(json.dumps(out))
"""


def test_two_ranks_with_halo_exchange_match_one_rank(tmp_path):
    """The example spawned with 1 and with 2 ranks (halo exchange on COMM_WORLD), driven by
    the same actions: the same fields (bit for bit) and rewards; the PARAMS reached the
    solver (horizon 4: the 4th step is truncated), the step values are those of the field."""
    driver = tmp_path / "driver.py"
    driver.write_text(REFERENCE_DRIVER)
    proc = subprocess.run([sys.executable, str(driver), str(SOLVER), str(tmp_path)],
                          cwd=tmp_path, env=mpi_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    one, two = json.loads(proc.stdout.splitlines()[-1]).values()
    assert one["names"] == two["names"] == ["energy", "u_max"]
    assert one["states"] == two["states"]
    assert one["rewards"] == pytest.approx(two["rewards"], rel=1e-12)
    assert one["status"] == two["status"] == [0, 0, 0, 2]
    for state, (energy, u_max) in zip(two["states"], two["values"], strict=True):
        field = [float(x) for x in state]
        assert energy == pytest.approx(sum(x * x for x in field) / 12, rel=1e-12)
        assert u_max == max(abs(x) for x in field)
    assert two["rewards"] == pytest.approx([-v[0] for v in two["values"][1:]], rel=1e-12)
    summary = json.loads((tmp_path / "halo-env0.json").read_text())  # the 2-rank run's
    assert summary == {"env": 0, "ranks": 2, "world_ranks": 2, "halo_exchanges": 8,
                       "steps": 4}


def _train(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([mpirun_exe(), *args], cwd=tmp_path, env=mpi_env(),
                          capture_output=True, text=True, timeout=240)


def _check_training(proc: subprocess.CompletedProcess, run_dir: Path, world: int) -> None:
    """300 steps in episodes of 40, and the 2-rank solver's halo exchanges: one per rank
    and step, among ``world`` COMM_WORLD ranks."""
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (run_dir / "state.txt").read_text() == "finished\n"
    last = json.loads((run_dir / "train.jsonl").read_text().splitlines()[-1])
    assert last["env_step"] == 300 and last["solver_faults"] == 0 and last["grad_step"] > 0
    episodes = (run_dir / "episodes.csv").read_text().splitlines()[1:]
    assert len(episodes) == 7 and all(line.split(",")[3] == "40" for line in episodes)
    summary = json.loads((run_dir / "halo-env0.json").read_text())
    assert summary == {"env": 0, "ranks": 2, "world_ranks": world,
                       "halo_exchanges": 2 * summary["steps"], "steps": summary["steps"]}
    assert summary["steps"] >= 300


def test_training_against_a_spawned_two_rank_python_solver(tmp_path):
    """mpirun -n 2 (learner, actor) --env "external:-n 2 python solver.py --world": the
    solver's own COMM_WORLD is its 2 ranks, its halo exchange runs on it."""
    spec = f"external:-n 2 {sys.executable} {SOLVER} --world"
    proc = _train(["-n", "2", sys.executable, "-m", "hpc_refer.run", "--env", spec,
                   "--steps", "300", *SMALL, "--run-dir", "run"], tmp_path)
    _check_training(proc, tmp_path / "run", world=2)


def test_training_against_a_python_solver_in_the_same_mpirun(tmp_path):
    """MPMD: mpirun -n 2 hpc_refer : -n 2 python solver.py, halo exchange on Client.comm
    (COMM_WORLD has 4 ranks). Before it, the solver with --world (uses_world=True) is
    refused with one line naming spawn and connect, instead of deadlocking."""
    head = ["-n", "2", sys.executable, "-m", "hpc_refer.run", "--env", "external",
            "--steps", "300", *SMALL]
    proc = _train([*head, "--run-dir", "refused", ":", "-n", "2", sys.executable,
                   str(SOLVER), "--world"], tmp_path)
    assert proc.returncode != 0
    assert ("this solver communicates on MPI.COMM_WORLD (Client(uses_world=True)), which "
            "under MPMD also holds hpc_refer's ranks: launch it with spawn") in proc.stderr
    proc = _train([*head, "--run-dir", "run", ":", "-n", "2", sys.executable, str(SOLVER)],
                  tmp_path)
    _check_training(proc, tmp_path / "run", world=4)
    assert "hpc_refer_client: MPMD launch" not in proc.stderr, "uses_world=False said it"
