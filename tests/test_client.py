"""The Python client of external solvers (``hpc_refer.client``) and its example,
``solvers/examples/halo_python/solver.py`` (a 2-rank Python MPI code with its own halo
exchange): the PARAMS and METRICS payloads, a 2-rank solver against a 1-rank reference
through ``ExternalEnv``, and training against it spawned per environment (its halo exchange on
``MPI.COMM_WORLD``) and under MPMD (on ``Client.comm``; ``uses_world`` refused there)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_launch import mpi_env, mpirun_exe
from output_lines import last_json, lines_with

from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.client import (
    CONTINUE,
    TAG_STATE,
    TERMINAL,
    TRUNCATED,
    Client,
    metric_names_text,
    params_text,
    parse_metric_names,
    parse_params,
    world_note,
)
from hpc_refer.report.schema import EPISODE_FIELDS

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ",".join(EPISODE_FIELDS)
"""The fixed columns of episodes.csv (the solver's episode metrics follow them)."""
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
    assert parse_metric_names(b"cd\ncl") == (("cd", "cl"), ())
    assert parse_metric_names(b"") == ((), ())
    for bad in (("cd", "cd"), ("c d",), ("1cd",), ("",)):
        with pytest.raises(ValueError, match=r"step_metrics = .* distinct identifiers"):
            metric_names_text(bad)
        with pytest.raises(ValueError, match=r"episode_metrics = .* distinct identifiers"):
            metric_names_text(("cd",), bad)
    with pytest.raises(ValueError, match="holds 'cd' twice among the step metrics"):
        parse_metric_names(b"cd\ncd")
    with pytest.raises(ValueError, match="holds 'c-d' among the step metrics, not an "
                                         "identifier"):
        parse_metric_names(b"cd\nc-d")
    with pytest.raises(ValueError, match="is not UTF-8 text"):
        parse_metric_names(b"\xff")


@pytest.mark.parametrize(("step", "episode", "payload"), [
    (("cd", "cl"), ("cd_mean",), b"cd\ncl\n\ncd_mean"),
    ((), ("cd_mean", "work"), b"\ncd_mean\nwork"),
    (("cd",), (), b"cd"),
    ((), (), b""),
    (("cd",), ("cd",), b"cd\n\ncd"),  # a step series and an episode value may share a name
])
def test_metrics_payload_holds_episode_names_after_an_empty_line(step, episode, payload):
    """Step names, an empty line, episode names (none: no empty line, as the C and Fortran
    clients send it); the payload reads back as both lists."""
    assert metric_names_text(step, episode) == payload
    assert parse_metric_names(payload) == (step, episode)


def test_bad_episode_names_in_a_metrics_payload():
    with pytest.raises(ValueError, match="holds 'w-k' among the episode metrics, not an "
                                         "identifier"):
        parse_metric_names(b"cd\n\nw-k")
    with pytest.raises(ValueError, match="holds '' among the episode metrics"):
        parse_metric_names(b"cd\n\nwork\n\nmore")
    with pytest.raises(ValueError, match="holds 'work' twice among the episode metrics"):
        parse_metric_names(b"\nwork\nwork")
    with pytest.raises(ValueError, match="ends with an empty line"):
        parse_metric_names(b"cd\n")


class Peer:
    """What the client sends to the actor (no MPI)."""

    def __init__(self) -> None:
        self.sent: list[tuple[list[float], int]] = []

    def Send(self, message, dest: int, tag: int) -> None:  # mpi4py's name
        self.sent.append((message.tolist(), tag))


def _client(step: int, agents: int = 1) -> tuple[Client, Peer]:
    """A client of rank 0 (obs_dim 2, step metric cd, episode metric cd_mean, ``agents``
    agents) at ``step``, without MPI."""
    client = Client.__new__(Client)
    peer = Peer()
    client.rank, client.actor, client.peer, client.step = 0, 0, peer, step
    client.obs_dim, client.step_metrics, client.episode_metrics = 2, ("cd",), ("cd_mean",)
    client.n_agents, client._done = agents, set()
    client._reset_answer()
    return client, peer


def test_a_state_that_ends_an_episode_carries_the_episode_values():
    """STATE: status, step, reward, state, step values, then (ending) the episode values;
    a CONTINUE state carries none; a wrong count is a ValueError naming episode_values."""
    client, peer = _client(3)
    client.send_state([0.5, 0.25], -1.0, CONTINUE, (1.5,))
    client.send_state([0.5, 0.25], -1.0, TRUNCATED, (1.5,), (0.75,))
    client.send_state([0.5, 0.25], -1.0, TERMINAL, (1.5,), episode_values=[2.0])
    assert peer.sent == [([0.0, 3.0, -1.0, 0.5, 0.25, 1.5], TAG_STATE),
                         ([2.0, 3.0, -1.0, 0.5, 0.25, 1.5, 0.75], TAG_STATE),
                         ([1.0, 3.0, -1.0, 0.5, 0.25, 1.5, 2.0], TAG_STATE)]
    for status, values in ((TRUNCATED, ()), (TERMINAL, (1.0, 2.0)), (CONTINUE, (1.0,))):
        with pytest.raises(ValueError, match=rf"send_state: episode_values has "
                                             rf"{len(values)} values with status {status}"):
            client.send_state([0.5, 0.25], -1.0, status, (1.5,), values)
    with pytest.raises(ValueError, match="send_state: state has 2 values and step_values 0"):
        client.send_state([0.5, 0.25], -1.0, TRUNCATED, (), (0.75,))
    assert len(peer.sent) == 3


def test_importing_the_client_does_not_initialise_mpi():
    code = ("import sys, hpc_refer.client, hpc_refer.envs.external; "
            "print('mpi4py.MPI' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert lines_with(out, "False") == ["False"] and not lines_with(out, "True"), out


REFERENCE_DRIVER = """
import json, sys
import numpy as np
from hpc_refer.envs.external import ExternalEnv
from hpc_refer.parallel.solver_link import MpiLinks

solver, out = sys.argv[1], {}
for ranks in (1, 2):
    env = ExternalEnv(f"external:-n {ranks} {sys.executable} {solver} --world --cells 12", 0,
                      1, timeout=60.0, links=MpiLinks(), params={"horizon": 4,
                      "velocity": 0.25}, run_dir=sys.argv[2], seed=5)
    run = {"names": env.step_metric_names, "episode_names": env.episode_metrics,
           "states": [env.reset(7).tolist()],
           "values": [env.step_values.tolist()], "rewards": [], "status": []}
    for k in range(4):
        state, reward, status = env.step(np.array([0.5, -1.0 + k / 2]))
        run["states"].append(state.tolist())
        run["values"].append(env.step_values.tolist())
        run["rewards"].append(reward)
        run["status"].append(int(status))
    run["episode"] = env.episode_values()
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
    one, two = last_json(proc.stdout).values()
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
    energy_mean = sum(v[0] for v in two["values"][1:]) / 4  # over the episode's 4 steps
    assert summary == {"env": 0, "ranks": 2, "world_ranks": 2, "halo_exchanges": 8,
                       "steps": 4, "energy_means": [pytest.approx(energy_mean, rel=1e-12)]}
    assert one["episode"] == two["episode"] == [pytest.approx(energy_mean, rel=1e-12)]
    assert one["episode_names"] == two["episode_names"] == ["energy_mean"]


def _train(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([mpirun_exe(), *args], cwd=tmp_path, env=mpi_env(),
                          capture_output=True, text=True, timeout=240)


def _check_training(proc: subprocess.CompletedProcess, run_dir: Path, world: int) -> None:
    """300 steps in episodes of 40, and the 2-rank solver's halo exchanges: one per rank
    and step, among ``world`` COMM_WORLD ranks; the solver's episode metric energy_mean is
    a column of episodes.csv, holding the values the solver computed, episode by episode."""
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (run_dir / "state.txt").read_text() == "finished\n"
    last = json.loads((run_dir / "train.jsonl").read_text().splitlines()[-1])
    assert last["env_step"] == 300 and last["solver_faults"] == 0 and last["grad_step"] > 0
    header, *episodes = (run_dir / "episodes.csv").read_text().splitlines()
    assert header == f"{COLUMNS},energy_mean"
    assert len(episodes) == 7 and all(line.split(",")[3] == "40" for line in episodes)
    summary = json.loads((run_dir / "halo-env0.json").read_text())
    means = summary.pop("energy_means")
    assert summary == {"env": 0, "ranks": 2, "world_ranks": world,
                       "halo_exchanges": 2 * summary["steps"], "steps": summary["steps"]}
    assert summary["steps"] >= 300
    column = [float(line.split(",")[len(EPISODE_FIELDS)]) for line in episodes]
    assert all(math.isfinite(v) and v > 0 for v in column)
    assert column == pytest.approx(means[: len(column)], rel=1e-5)  # written with 6 digits


def test_training_against_a_spawned_two_rank_python_solver(tmp_path):
    """mpirun -n 2 (learner, actor) --env "external:-n 2 python solver.py --world": the
    solver's own COMM_WORLD is its 2 ranks, its halo exchange runs on it."""
    spec = f"external:-n 2 {sys.executable} {SOLVER} --world"
    proc = _train(["-n", "2", sys.executable, "-m", "hpc_refer.run", "--env", spec,
                   "--steps", "300", *SMALL, "--run-dir", "run"], tmp_path)
    _check_training(proc, tmp_path / "run", world=2)


def _energy_means(run_dir: Path) -> list[float]:
    """The energy_mean column of episodes.csv."""
    return [float(line.split(",")[len(EPISODE_FIELDS)])
            for line in (run_dir / "episodes.csv").read_text().splitlines()[1:]]


def test_training_in_one_process_against_a_spawned_python_solver(tmp_path):
    """One process (learner and actor, no mpirun) spawning the 2-rank solver: the episode
    metric is declared by the driver built before the learner loop; a restart keeps the
    column and records the restarted solver's values after the earlier ones."""
    spec = f"external:-n 2 {sys.executable} {SOLVER} --world"
    run = [sys.executable, "-m", "hpc_refer.run"]
    proc = subprocess.run([*run, "--env", spec, "--steps", "300", *SMALL, "--run-dir", "run"],
                          cwd=tmp_path, env=mpi_env(), capture_output=True, text=True,
                          timeout=240)
    _check_training(proc, tmp_path / "run", world=2)
    before = _energy_means(tmp_path / "run")
    proc = subprocess.run([*run, "--restart", "run", "--steps", "400"], cwd=tmp_path,
                          env=mpi_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    header = (tmp_path / "run/episodes.csv").read_text().splitlines()[0]
    assert header == f"{COLUMNS},energy_mean"
    after = _energy_means(tmp_path / "run")
    means = json.loads((tmp_path / "run/halo-env0.json").read_text())["energy_means"]
    assert after[: len(before)] == before and len(after) > len(before)
    assert after[len(before) :] == pytest.approx(means[: len(after) - len(before)], rel=1e-5)


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
