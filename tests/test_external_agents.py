"""Several agents in one external simulation (protocol 3): the HELLO's n_agents, ACTION of
all agents' rows, AGENT_STATE messages closed by STEP_END, and their checks (scripted
messages, no MPI); the Python client's agent calls (no MPI); the example of
``solvers/examples/agents`` in Python (hpc_refer.client), C and Fortran driven through
ExternalEnv and TeamDriver, giving the arrays of a reference implementation; faults of a
real solver (an agent's state twice, or missing) named and followed by a working reset."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi_launch import mpi_env
from output_lines import last_json
from system_mpi import FORTRAN, fortran_openmpi, needs_fortran
from test_external import ScriptedLink

from hpc_refer.client import (
    CONTINUE,
    STEP,
    TAG_ACTION,
    TAG_AGENT_STATE,
    TAG_BOUNDS,
    TAG_HELLO,
    TAG_METRICS,
    TAG_STATE,
    TAG_STEP_END,
    TERMINAL,
    TRUNCATED,
    Client,
)
from hpc_refer.envs.driver import TeamDriver
from hpc_refer.envs.external import ExternalEnv, ExternalSolverError, SolverFault
from hpc_refer.envs.interface import SolverStartError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "solvers/examples/agents"
BIN = Path(sys.executable).parent
MPICC = shutil.which("mpicc", path=str(BIN)) or shutil.which("mpicc")
MPIRUN = shutil.which("mpirun", path=str(BIN)) or shutil.which("mpirun")
NAME = "external env 3 (spawned rank 0 of true)"


class Links:
    def __init__(self, link: ScriptedLink) -> None:
        self.link = link

    def app_count(self) -> int:
        return 1

    def spawn(self, *args: object) -> ScriptedLink:
        return self.link


def hello(*fields: float, dtype: type = np.int32) -> tuple[int, np.ndarray]:
    return TAG_HELLO, np.array(fields, dtype)


def handshake(agents: int = 3, metrics: bytes = b"x\n\nsteps") -> list[tuple[int, np.ndarray]]:
    """HELLO of protocol 3 (obs_dim 2, act_dim 1, ``agents``), BOUNDS, METRICS."""
    return [hello(3, 2, 1, 1, agents), (TAG_BOUNDS, np.array([-1.0, 1.0])),
            (TAG_METRICS, np.frombuffer(metrics, np.uint8))]


def agent(k: float, status: float, step: float, reward: float, *state: float
          ) -> tuple[int, np.ndarray]:
    return TAG_AGENT_STATE, np.array([k, status, step, reward, *state], np.float64)


def end(step: float, *values: float) -> tuple[int, np.ndarray]:
    return TAG_STEP_END, np.array([step, *values], np.float64)


def scripted(messages: list[tuple[int, np.ndarray]]) -> tuple[ExternalEnv, ScriptedLink]:
    link = ScriptedLink(messages)
    env = ExternalEnv("external:true", 3, 4, links=Links(link))  # type: ignore[arg-type]
    return env, link


RESET3 = [agent(2, 0, 0, 0, 2.0, 2.5), agent(0, 0, 0, 0, 0.0, 0.5),
          agent(1, 0, 0, 0, 1.0, 1.5), end(0, 7.0)]


def test_three_agents_give_arrays_with_an_agent_axis():
    """Reset and steps of 3 agents through TeamDriver: states in agent order whatever the
    order of the AGENT_STATEs, all actions in one ACTION; agent 1 ends at step 1 and is left
    out after (its row repeats its last state, reward 0, its status), agent 2 sends after
    its end too (ignored); the STEP_END that ends every agent carries the episode value."""
    env, link = scripted([*handshake(), *RESET3])
    assert env.n_agents == 3 and (env.obs_dim, env.act_dim) == (2, 1)
    driver = TeamDriver(env, None)
    assert driver.n_agents == 3 and driver.metric_names == ("steps",)
    states = driver.reset(5)
    assert states.dtype == np.float32 and states.tolist() == [[0, 0.5], [1, 1.5], [2, 2.5]]
    assert env.step_values.tolist() == [7.0]
    link.messages += [agent(1, TERMINAL, 1, -1.0, 1.25, 1.75), agent(0, 0, 1, -0.5, 0.25, 0.75),
                      agent(2, 0, 1, -2.0, 2.25, 2.75), end(1, 8.0)]
    states, rewards, statuses = driver.step_agents(np.array([[0.1], [0.2], [0.3]]))
    assert link.sent[-1][0] == "action"
    assert link.sent[-1][1].tolist() == [0.1, 0.2, 0.3]  # type: ignore[union-attr]
    assert states.tolist() == [[0.25, 0.75], [1.25, 1.75], [2.25, 2.75]]
    assert rewards.tolist() == [-0.5, -1.0, -2.0] and statuses.tolist() == [0, 1, 0]
    link.messages += [agent(2, TRUNCATED, 2, -3.0, 2.5, 3.0), agent(0, 0, 2, -0.25, 0.5, 1.0),
                      end(2, 9.0)]
    states, rewards, statuses = driver.step_agents(np.zeros((3, 1)))
    assert states.tolist() == [[0.5, 1.0], [1.25, 1.75], [2.5, 3.0]]
    assert rewards.tolist() == [-0.25, 0.0, -3.0] and statuses.tolist() == [0, 1, 2]
    assert np.isnan(env.episode_values()[0])  # agent 0 goes on
    link.messages += [agent(2, CONTINUE, 3, -9.0, 9.0, 9.0), agent(0, TERMINAL, 3, -4.0, 0.0, 0.0),
                      end(3, 10.0, 12.0)]
    states, rewards, statuses = driver.step_agents(np.zeros((3, 1)))
    assert states.tolist() == [[0.0, 0.0], [1.25, 1.75], [2.5, 3.0]]  # 2's late row ignored
    assert rewards.tolist() == [-4.0, 0.0, 0.0] and statuses.tolist() == [1, 1, 2]
    assert env.step_values.tolist() == [10.0] and env.episode_values() == (12.0,)
    link.messages += RESET3
    assert driver.reset(6).tolist() == [[0, 0.5], [1, 1.5], [2, 2.5]]  # a new episode
    link.messages += [agent(1, 0, 1, 0, 0, 0), agent(0, 0, 1, 0, 0, 0),
                      agent(2, 0, 1, 0, 0, 0), end(1, 0)]
    assert driver.step_agents(np.zeros((3, 1)))[2].tolist() == [0, 0, 0]


def test_protocol_2_and_one_agent_of_protocol_3_keep_the_state_message():
    """A version-2 HELLO (int32[4]) and a version-3 one with n_agents 1: one agent, the
    STATE messages of protocol 2, a scalar reward and a Status."""
    state = (TAG_STATE, np.array([0.0, 0.0, 0.0, 0.5, 0.25]))
    step = (TAG_STATE, np.array([2.0, 1.0, -1.0, 0.5, 0.5]))
    for first in (hello(2, 2, 1, 1), hello(3, 2, 1, 1, 1)):
        env, link = scripted([first, *handshake()[1:2],
                              (TAG_METRICS, np.empty(0, np.uint8)), state, step])
        assert env.n_agents == 1
        driver = TeamDriver(env, None)
        assert driver.n_agents == 1 and driver.reset(1).tolist() == [0.5, 0.25]
        _, reward, status = driver.step(np.zeros(1))
        assert reward == -1.0 and status == 2
        assert link.sent[-1][1].tolist() == [0.0]  # type: ignore[union-attr]


@pytest.mark.parametrize(("first", "needle"), [
    (hello(3, 2, 1, 1, 0), "field 'n_agents' = 0 in HELLO is invalid: allowed are integers >= 1"),
    (hello(3, 2, 1, 1, -2), "field 'n_agents' = -2 in HELLO is invalid"),
    (hello(3, 2, 1, 1, 2.5, dtype=np.float64), "field 'n_agents' = 2.5 in HELLO is invalid"),
    (hello(2, 2, 1, 1, 3), "field 'n_agents' = 3 in a HELLO of protocol 2, which has no agents"),
    (hello(3, 2, 1, 1), "field 'n_agents' is missing: a HELLO of protocol 3 is int32[5]"),
    (hello(4, 2, 1, 1, 1), "HELLO declares protocol 4, obs_dim 2, act_dim 1; allowed: protocol 2 "
                           "or 3"),
])
def test_bad_agent_declarations_stop_the_start(first, needle):
    with pytest.raises(ExternalSolverError) as exc:
        scripted([first, *handshake()[1:]])
    text = str(exc.value)
    assert isinstance(exc.value, SolverStartError) and "\n" not in text
    assert text.startswith(f"{NAME}: ") and needle in text, text


def bad(row: tuple[int, np.ndarray]) -> list[tuple[int, np.ndarray]]:
    """An answer to RESET whose first AGENT_STATE is ``row``, then the rest of RESET3."""
    return [row, *RESET3[1:]]


BAD_RESETS = [
    (bad(agent(3, 0, 0, 0, 0, 0)), "field 'agent' = 3 is unknown: allowed are the agent "
                                "indices 0..2 (n_agents = 3)"),
    (bad(agent(-1, 0, 0, 0, 0, 0)), "field 'agent' = -1 is unknown"),
    (bad(agent(0.5, 0, 0, 0, 0, 0)), "field 'agent' = 0.5 is unknown"),
    ([agent(1, 0, 0, 0, 0, 0), agent(0, 0, 0, 0, 0, 0), agent(1, 0, 0, 0, 0, 0), *RESET3],
     "field 'agent' = 1: its state came twice in the answer to RESET (step 0)"),
    ([agent(0, 0, 0, 0, 0, 0), agent(2, 0, 0, 0, 0, 0), end(0, 1.0)],
     "field 'agent' = 1: no state in the answer to RESET (step 0), which STEP_END closed"),
    ([end(0, 1.0)], "field 'agent' = 0, 1, 2: no state in the answer to RESET"),
    (bad(agent(0, 1, 0, 0, 0, 0)), "field 'status of agent 0' = 1 after RESET, expected 0"),
    (bad(agent(0, 5, 0, 0, 0, 0)), "field 'status of agent 0' = 5.0 is unknown"),
    (bad(agent(0, 0, 1, 0, 0, 0)), "field 'step of agent 0' = 1.0, expected 0"),
    (bad(agent(0, 0, 0, np.nan, 0, 0)), "field 'reward of agent 0' = nan is not finite"),
    (bad(agent(0, 0, 0, 0, 0, np.inf)), "field 'state of agent 0[1]' = inf is not finite"),
    (bad(agent(0, 0, 0, 0, 0)), "field 'size' = 5 values of an AGENT_STATE, expected 4 + obs_dim "
                             "= 6"),
    ([(TAG_STATE, np.array([0.0, 0, 0, 0, 0, 0]))],
     "field 'tag' = 104, expected AGENT_STATE (110) or STEP_END (111) from a solver of "
     "n_agents = 3"),
    ([*RESET3[:3], end(0)], "field 'size' = 1 values of STEP_END, expected 1 + step metrics = 2"),
    ([*RESET3[:3], end(1, 0.0)], "field 'step' = 1.0 in STEP_END, expected 0"),
    ([*RESET3[:3], end(0, np.nan)], "field 'step value x' = nan is not finite"),
]


@pytest.mark.parametrize(("answer", "field"), BAD_RESETS)
def test_bad_agent_answers_are_solver_faults_naming_the_field(answer, field):
    """Each a fault naming the field; the rest of the answer, up to its STEP_END, is read
    (the next RESET gets a fresh answer)."""
    env, link = scripted([*handshake(), *answer])
    with pytest.raises(SolverFault) as exc:
        env.reset(1)
    assert str(exc.value).startswith(f"{NAME}: {field}"), str(exc.value)
    assert link.messages == []


def test_the_episode_values_come_when_every_agent_has_ended():
    """STEP_END has the episode values exactly when the last agents end; a done agent may
    not send twice either."""
    def stepped(*answer: tuple[int, np.ndarray]) -> ExternalEnv:
        env, _ = scripted([*handshake(), *RESET3, *answer])
        env.reset(1)
        return env
    env = stepped(agent(0, 1, 1, 0, 0, 0), agent(1, 1, 1, 0, 0, 0), agent(2, 0, 1, 0, 0, 0),
                  end(1, 1.0, 5.0))
    with pytest.raises(SolverFault, match=r"field 'size' = 3 values of STEP_END, expected 1 "
                                          r"\+ step metrics = 2$"):
        env.step(np.zeros((3, 1)))
    env = stepped(agent(0, 1, 1, 0, 0, 0), agent(1, 2, 1, 0, 0, 0), agent(2, 1, 1, 0, 0, 0),
                  end(1, 1.0))
    with pytest.raises(SolverFault, match=r"field 'size' = 2 values of STEP_END, expected 1 "
                                          r"\+ step metrics \+ episode metrics \(every agent "
                                          r"has ended\) = 3"):
        env.step(np.zeros((3, 1)))
    env = stepped(agent(0, 1, 1, 0, 0, 0), agent(1, 0, 1, 0, 0, 0), agent(2, 0, 1, 0, 0, 0),
                  end(1, 1.0), agent(0, 1, 2, 0, 0, 0), agent(0, 1, 2, 0, 0, 0), end(2, 1.0))
    env.step(np.zeros((3, 1)))
    with pytest.raises(SolverFault, match="field 'agent' = 0: its state came twice in the "
                                          "answer to ACTION"):
        env.step(np.zeros((3, 1)))
    env = stepped(agent(0, 1, 1, 0, 0, 0), agent(1, 0, 1, 0, 0, 0), agent(2, 0, 1, 0, 0, 0),
                  end(1, 1.0), agent(2, 0, 2, 0, 0, 0), end(2, 1.0))
    env.step(np.zeros((3, 1)))
    with pytest.raises(SolverFault, match="field 'agent' = 1: no state in the answer to "
                                          "ACTION"):
        env.step(np.zeros((3, 1)))


@pytest.mark.parametrize("first", [hello(2, 2, 1, 1), hello(3, 2, 1, 1, 1)])
@pytest.mark.parametrize("message", [agent(0, 0, 0, 0, 0, 0), end(0)])
def test_agent_messages_from_a_solver_of_one_agent_are_faults(first, message):
    env, _ = scripted([first, *handshake()[1:], message])
    with pytest.raises(SolverFault) as exc:
        env.reset(1)
    assert str(exc.value) == (f"{NAME}: field 'tag' = {message[0]}, an agent's message, from "
                              f"a solver of one agent (n_agents = 1 in its HELLO): expected "
                              f"STATE ({TAG_STATE})")


class Peer:
    """What the client sends to the actor (no MPI)."""

    def __init__(self) -> None:
        self.sent: list[tuple[list[float], int]] = []

    def Send(self, message, dest: int, tag: int) -> None:  # mpi4py's name
        self.sent.append((message.tolist(), tag))


def client(agents: int, step: int = 2) -> tuple[Client, Peer]:
    """A client of rank 0 (obs_dim 2, step metric cd, episode metric cd_mean) of ``agents``
    agents at ``step``, without MPI."""
    c = Client.__new__(Client)
    peer = Peer()
    c.rank, c.actor, c.peer, c.step, c.n_agents, c._done = 0, 0, peer, step, agents, set()
    c.obs_dim, c.step_metrics, c.episode_metrics = 2, ("cd",), ("cd_mean",)
    c._reset_answer()
    return c, peer


def test_the_python_client_sends_agent_states_and_the_step_end():
    c, peer = client(3)
    c.send_state([0.5, 0.25], -1.0, TERMINAL, agent=2)
    c.send_state(np.array([1.0, 2.0]), -2.0, agent=0)
    c.send_step_end([1.5])
    assert peer.sent == [([2.0, 1.0, 2.0, -1.0, 0.5, 0.25], TAG_AGENT_STATE),
                         ([0.0, 0.0, 2.0, -2.0, 1.0, 2.0], TAG_AGENT_STATE),
                         ([2.0, 1.5], TAG_STEP_END)]
    with pytest.raises(ValueError, match=r"send_step_end: episode_values has 1 values with 1 "
                                         r"of 3 agents ended, expected 0"):
        c.send_step_end([1.5], [3.0])
    c.send_states([[0, 0], [1, 1], [2, 2]], [0.0, -1.0, -2.0], [TRUNCATED, TERMINAL, 0],
                  [1.0], [4.0])  # agent 2 ended before: left out; now all have ended
    assert peer.sent[3:] == [([0.0, 2.0, 2.0, 0.0, 0.0, 0.0], TAG_AGENT_STATE),
                             ([1.0, 1.0, 2.0, -1.0, 1.0, 1.0], TAG_AGENT_STATE),
                             ([2.0, 1.0, 4.0], TAG_STEP_END)]
    for bad in (3, -1):
        with pytest.raises(ValueError, match=rf"send_state: agent = {bad} is outside 0..2 "
                                             r"\(n_agents = 3\)"):
            c.send_state([0, 0], 0.0, agent=bad)
    with pytest.raises(ValueError, match="this client has n_agents = 3: give each agent's "
                                         "state with agent=k"):
        c.send_state([0, 0], 0.0)
    with pytest.raises(ValueError, match="with agent=k the step and episode values go to "
                                         "send_step_end"):
        c.send_state([0, 0], 0.0, 0, (1.0,), agent=0)
    with pytest.raises(ValueError, match="state of agent 1 has 3 values, expected obs_dim"):
        c.send_state([0, 0, 0], 0.0, agent=1)


def test_one_agent_through_the_agent_calls_sends_the_state_message():
    """With n_agents 1, send_state(agent=0) + send_step_end make protocol 2's STATE."""
    c, peer = client(1, step=4)
    c.send_state([0.5, 0.25], -1.0, TRUNCATED, agent=0)
    with pytest.raises(ValueError, match="agent 0 was given twice"):
        c.send_state([0.5, 0.25], -1.0, TRUNCATED, agent=0)
    c.send_step_end([1.5], [2.5])
    c.send_state([0.5, 0.25], -1.0, CONTINUE, [1.5])  # today's call, unchanged
    assert peer.sent == [([2.0, 4.0, -1.0, 0.5, 0.25, 1.5, 2.5], TAG_STATE),
                         ([0.0, 4.0, -1.0, 0.5, 0.25, 1.5], TAG_STATE)]
    with pytest.raises(ValueError, match="no send_state"):
        c.send_step_end([1.5])


def test_the_client_refuses_a_bad_agent_count():
    for bad in (0, -1, 2.0, True, "3"):
        with pytest.raises(ValueError, match=r"Client needs n_agents an integer >= 1"):
            Client(2, 1, [-1.0], [1.0], n_agents=bad)  # type: ignore[arg-type]


class FakeMpi:
    """The parts of mpi4py's MPI that :meth:`Client.recv_action` uses on rank 0: an ACTION
    of 0, 1, 2, ... is waiting."""

    ANY_TAG = -1

    class Status:
        def Get_tag(self) -> int:
            return TAG_ACTION


class ActionPeer:
    def Probe(self, source: int, tag: int, status: object) -> None:
        pass

    def Recv(self, buffer: np.ndarray, source: int, tag: int) -> None:
        buffer[:] = np.arange(buffer.size)


class Group:
    def Bcast(self, buffer: np.ndarray, root: int) -> None:
        pass


def test_a_step_gives_each_agent_its_row_of_the_action():
    """ACTION float64[K a]: agent k's action at [k a, (k+1) a), row k of Command.action."""
    for agents, shape in ((3, (3, 2)), (1, (2,))):
        c, _ = client(agents)
        c._mpi, c.peer, c.comm, c.act_dim = FakeMpi, ActionPeer(), Group(), 2
        cmd = c.recv_action()
        assert cmd.kind == STEP and cmd.action.shape == shape and c.step == 3
        assert cmd.action.reshape(-1).tolist() == list(range(2 * agents))
        if agents == 3:
            assert cmd.action[1].tolist() == [2.0, 3.0]

# --- the examples, spawned ------------------------------------------------------------

DRIVER = """
import json, sys
import numpy as np
from hpc_refer.envs.driver import TeamDriver
from hpc_refer.envs.interface import SolverFault
from hpc_refer.envs.external import ExternalEnv
from hpc_refer.parallel.solver_link import MpiLinks

env = ExternalEnv(sys.argv[1], 0, 1, timeout=60.0, links=MpiLinks(), params={"horizon": 5})
driver = TeamDriver(env, None)
out = {"n_agents": [env.n_agents, driver.n_agents], "dims": [env.obs_dim, env.act_dim],
       "names": [env.step_metric_names, env.episode_metrics], "episodes": []}
for episode in range(2):
    run = {"states": [driver.reset(3 + episode).tolist()], "rewards": [], "statuses": [],
           "values": [env.step_values.tolist()], "actions": []}
    for k in range(1, 20):
        actions = np.array([[0.5], [-1.0], [1.0]]) * (k % 3 - 1)
        try:
            states, rewards, statuses = driver.step_agents(actions)
        except SolverFault as fault:
            run["fault"] = str(fault)
            break
        run["actions"].append(actions.tolist())
        run["states"].append(states.tolist())
        run["rewards"].append(rewards.tolist())
        run["statuses"].append(statuses.tolist())
        run["values"].append(env.step_values.tolist())
        if (statuses != 0).all():
            run["episode"] = list(env.episode_values())
            break
    out["episodes"].append(run)
env.close()
print(json.dumps(out))
"""


def reference(seed: int, actions: list, horizon: int = 5, n: int = 3) -> dict[str, list]:
    """The example's dynamics, as hpc_refer reports them: an agent's rows after its end
    repeat its last state with reward 0 and its final status."""
    x = 0.5 * (np.arange(n) + 1) / n + 0.01 * (seed % 10)
    status = np.zeros(n, np.int64)
    rows = np.stack([x, np.full(n, x.mean()), np.zeros(n)], axis=1)
    out: dict[str, list] = {"states": [rows.copy()], "rewards": [], "statuses": [],
                            "values": [[x.mean()]]}
    for t, a in enumerate(actions, start=1):
        active = status == 0
        mean = x.mean()
        x = np.where(active, x + 0.1 * (np.asarray(a)[:, 0] + 0.5 * (mean - x)), x)
        reward = np.where(active, -(x * x), 0.0)
        for k in np.flatnonzero(active):
            if abs(x[k]) > 2.0:
                status[k] = TERMINAL
            elif t >= horizon - k:
                status[k] = TRUNCATED
        rows[active] = np.stack([x, np.full(n, x.mean()), np.full(n, t / horizon)],
                                axis=1)[active]
        out["states"].append(rows.copy())
        out["rewards"].append(reward)
        out["statuses"].append(status.copy())
        out["values"].append([x.mean()])
    return out


def drive(spec: str, tmp_path: Path, env: dict[str, str] | None = None,
          mpirun: list[str] | None = None) -> dict:
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    proc = subprocess.run([*(mpirun or []), sys.executable, str(driver), spec], cwd=tmp_path,
                          env=env or mpi_env(), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return last_json(proc.stdout)


def check_example(out: dict, episode_metric: bool) -> None:
    """Three agents, obs_dim 3, act_dim 1; two episodes of 5 steps, agent 2 truncated after
    3, agent 1 after 4, agent 0 after 5: the reference's arrays (states in float32)."""
    assert out["n_agents"] == [3, 3] and out["dims"] == [3, 1]
    assert out["names"] == [["x_mean"], ["steps"] if episode_metric else []]
    for seed, run in zip((3, 4), out["episodes"], strict=True):
        assert "fault" not in run
        want = reference(seed, run["actions"])
        assert len(run["actions"]) == 5
        assert run["statuses"] == [s.tolist() for s in want["statuses"]]
        assert run["statuses"][2:] == [[0, 0, 2], [0, 2, 2], [2, 2, 2]]
        for got, ref in zip(run["states"], want["states"], strict=True):
            assert got == ref.astype(np.float32).tolist()
        for got, ref in zip(run["rewards"], want["rewards"], strict=True):
            assert got == pytest.approx(ref.tolist(), rel=1e-12, abs=0)
        assert [v[0] for v in run["values"]] == pytest.approx(
            [float(v[0]) for v in want["values"]], rel=1e-12)
        assert run["episode"] == ([12.0] if episode_metric else [])  # 5 + 4 + 3 agent steps


needs_mpirun = pytest.mark.skipif(MPIRUN is None, reason="no mpirun (spawn needs its runtime)")


@needs_mpirun
def test_python_client_solver_of_three_agents(tmp_path):
    """solver.py, 2 spawned ranks, leaving ended agents out of its answers."""
    out = drive(f"external:-n 2 {sys.executable} {EXAMPLE / 'solver.py'}", tmp_path)
    check_example(out, episode_metric=True)


@needs_mpirun
@pytest.mark.parametrize(("fault", "field"), [
    ("duplicate", "field 'agent' = 1: its state came twice in the answer to ACTION (step 2)"),
    ("missing", "field 'agent' = 1: no state in the answer to ACTION (step 2), which "
                "STEP_END closed"),
])
def test_faults_of_a_python_solver_of_agents_are_named(fault, field, tmp_path):
    """The example answers the 2nd ACTION with agent 1 twice or without it: a fault naming
    the field, and the next reset starts a good episode (the answer was drained)."""
    out = drive(f"external:-n 1 {sys.executable} {EXAMPLE / 'solver.py'} --fault {fault}",
                tmp_path)
    first, second = out["episodes"]
    assert first["fault"].startswith(f"external env 0 (spawned rank 0 of "
                                     f"{Path(sys.executable).name}): {field}"), first["fault"]
    assert second["fault"] == first["fault"] and len(second["actions"]) == 1


@pytest.fixture(scope="module")
def agents_c(tmp_path_factory) -> Path:
    assert MPICC is not None
    out = tmp_path_factory.mktemp("bin") / "agents"
    subprocess.run([MPICC, "-O2", "-Wall", "-Wextra", "-Werror",
                    f"-I{ROOT / 'solvers/coupling'}", str(EXAMPLE / "agents.c"), "-o",
                    str(out), "-lm"], check=True, timeout=120)
    return out


@pytest.mark.skipif(MPICC is None or MPIRUN is None, reason="no mpicc/mpirun")
@pytest.mark.parametrize(("ranks", "send_done"), [(2, ""), (1, " --send-done")])
def test_c_client_solver_of_three_agents(agents_c, ranks, send_done, tmp_path):
    """agents.c: hpc_refer_init_agents, hpc_refer_recv_action_agent,
    hpc_refer_send_state_agent, hpc_refer_send_step_end; ended agents left out or sent
    again (ignored): the same arrays as the reference (and the Python client)."""
    out = drive(f"external:-n {ranks} {agents_c}{send_done}", tmp_path)
    check_example(out, episode_metric=False)


@needs_fortran
def test_fortran_client_solver_of_three_agents(tmp_path):
    """agents.f90 with the Fortran module, compiled (f2008, warnings are errors) and spawned
    under the Open MPI of the Fortran wrapper (hpc_refer on it through MPI4PY_LIBMPI)."""
    from test_external import _jobs

    assert FORTRAN is not None
    mpi = fortran_openmpi()
    subprocess.run([FORTRAN, "-O2", "-Wall", "-Wextra", "-std=f2008", "-Werror",
                    str(ROOT / "solvers/coupling/hpc_refer_client.f90"),
                    str(EXAMPLE / "agents.f90"), "-o", "agents_f"], cwd=tmp_path, check=True,
                   timeout=180)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    proc = _jobs([([str(mpi.bin / "mpirun"), "-n", "1", sys.executable, str(driver),
                    f"external:-n 2 {tmp_path / 'agents_f'}"], mpi.env())], tmp_path,
                 timeout=180)[0]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    check_example(last_json(proc.stdout), episode_metric=False)
