"""Faults never hang or poison a run (issue 10): Python solvers' answers are validated like an
external solver's messages, exceptions and timeouts are solver faults, the faulty solver is
rebuilt, ``max_env_failures`` faults in a row raise SolverFailure; the actor's state for
checkpoints (with and without the environment's state), cut and evaluation rounds; a team
whose rank stops answering fails within the timeout (MPI tests, mpirun -n 2 or more)."""

from __future__ import annotations

import copy
import math
import signal
import time
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
from log_records import own_messages, own_records
from tolerances import F32

from hpc_refer.algorithms.kit.networks import load_flat_state
from hpc_refer.algorithms.vracer import GaussianPolicyValueNet
from hpc_refer.config.modes import ActionBounds, ConfigError, Exploration
from hpc_refer.config.tables import NetworkShape
from hpc_refer.envs.calls import factory_label, start_solver
from hpc_refer.envs.checks import check_step
from hpc_refer.envs.driver import TeamDriver, serve_team
from hpc_refer.envs.gym_env import GymEnv, Status
from hpc_refer.envs.interface import SolverFailure, SolverFault, SolverStartError, TeamCommand
from hpc_refer.envs.registry import SolverSpec, make_driver
from hpc_refer.envs.timeouts import CallTimeout, call_with_alarm, deadline_after, poll_until
from hpc_refer.loop.actor import Actor
from hpc_refer.report.records import OPEN, TRUNCATED, Chunk, numpy_rng_state

TIMEOUT = 0.3


@dataclass
class Script:
    """The plan of a :class:`ScriptedSolver` and what happened, shared by every instance
    built for one driver (the plan survives a rebuild). Calls (resets and steps) are counted
    from 1 over all instances; ``faults`` maps a call number to the fault made there."""

    faults: dict[int, str] = field(default_factory=dict)
    horizon: int = 6
    calls: int = 0
    builds: int = 0
    closed: int = 0
    episodes: int = 0
    actions: list[np.ndarray] = field(default_factory=list)
    slow_builds: dict[int, float] = field(default_factory=dict)
    """Seconds the n-th construction (counted from 1, a failed one included) sleeps."""


class ScriptedSolver:
    """A Python solver whose state is (build, episode, step, 0.5) and whose step k earns k;
    episodes are truncated after ``script.horizon`` steps. It makes the fault its script
    plans for a call: a NaN state, a wrong shape, a NaN or array reward, an unknown
    status, an exception, or sleeping far past the timeout; and its constructor sleeps as
    ``script.slow_builds`` says."""

    obs_dim, act_dim = 4, 1
    low, high = np.array([-1.0]), np.array([1.0])

    def __init__(self, team: object, script: Script) -> None:
        script.builds += 1  # an attempt, whether or not it finishes
        time.sleep(script.slow_builds.get(script.builds, 0.0))
        self.script = script
        self.build = script.builds
        self.t = 0

    def _state(self) -> np.ndarray:
        return np.array([self.build, self.script.episodes, self.t, 0.5])

    def _planned(self) -> str:
        self.script.calls += 1
        kind = self.script.faults.get(self.script.calls, "")
        if kind == "raise":
            raise FloatingPointError("CFL condition violated")
        if kind == "sleep":
            time.sleep(30)
        return kind

    def reset(self, seed=None):
        self.script.episodes += 1  # a failed reset uses its episode number up
        self.t = 0
        self._planned()
        return self._state()

    def step(self, action):
        kind = self._planned()
        self.script.actions.append(np.array(action))
        self.t += 1
        state = self._state()
        reward: object = float(self.t)
        status: object = Status.TRUNCATED if self.t == self.script.horizon else Status.CONTINUE
        if kind == "nan state":
            state[1] = math.nan
        elif kind == "shape":
            state = state[:3]
        elif kind == "nan reward":
            reward = math.nan
        elif kind == "array reward":
            reward = np.array([1.0, 2.0])
        elif kind == "status":
            status = 7
        return state, reward, status

    def close(self):
        self.script.closed += 1


class RecoveringSolver(ScriptedSolver):
    """A :class:`ScriptedSolver` whose reset is enough after a fault."""

    rebuild_after_fault = False


def scripted_actor(script: Script, chunk_len: int = 4, max_failures: int = 20,
                   source: int = 0, index: int = 0, build_timeout: float = 0.0,
                   solver: type[ScriptedSolver] = ScriptedSolver) -> Actor:
    driver = TeamDriver(solver(None, script), None,
                        factory=lambda team: solver(team, script), index=index,
                        timeout=TIMEOUT, build_timeout=build_timeout)
    net = GaussianPolicyValueNet(4, 1, NetworkShape((8,)), 0.5)
    return Actor(driver, net.program(), ActionBounds.CLIP, seed=0, chunk_len=chunk_len,
                 source=source, max_failures=max_failures)


def run(actor: Actor, steps: int) -> tuple[list[Chunk], list]:
    """The chunks and episode records of ``steps`` actor steps, the records without their end
    time (``wall_s``, a reading of the run's clock that no two runs share)."""
    chunks, episodes = [], []
    for _ in range(steps):
        chunk, episode = actor.step()
        if chunk is not None:
            chunks.append(chunk)
        if episode is not None:
            episodes.append(episode._replace(wall_s=0.0))
    return chunks, episodes


# Calls: 1 = episode 1's reset, 2-7 its steps, 8 = episode 2's reset, 9-14 its steps.
@pytest.mark.parametrize(("kind", "call", "message"), [
    ("nan state", 11, "step: state[1] = nan is not finite in float32 (1 such values)"),
    ("shape", 11, "step: state has shape (3,), expected (4,)"),
    ("nan reward", 11, "step: reward = nan is not finite"),
    ("array reward", 11, "step: reward has shape (2,), expected a scalar"),
    ("status", 11, "step: status = 7 is unknown (0 continue, 1 terminal, 2 truncated)"),
    ("raise", 11, "step: raised FloatingPointError: CFL condition violated"),
    ("raise", 8, "reset: raised FloatingPointError: CFL condition violated"),
    ("sleep", 11, f"step: no answer within run.env_step_timeout = {TIMEOUT:g} s"),
    ("sleep", 8, f"reset: no answer within run.env_step_timeout = {TIMEOUT:g} s"),
])
def test_a_python_solver_fault_is_counted_never_stored_and_the_solver_rebuilt(
        kind, call, message, caplog):
    script = Script({call: kind})
    actor = scripted_actor(script)
    start = time.monotonic()
    chunks, episodes = run(actor, 6 + 3 + 6 * 3)
    assert time.monotonic() - start < 10, "a sleeping solver is interrupted at the timeout"
    assert actor.faults == 1
    assert (script.builds, script.closed) == (2, 1), "closed and constructed anew once"
    faults = [r for r in own_records(caplog) if "solver fault" in r.getMessage()]
    assert [r.getMessage() for r in faults] == [
        f"actor rank 0: solver fault 1, episode ended and environment reset: env 0 "
        f"(ScriptedSolver).{message}"]
    assert all(r.levelname == "WARNING" for r in faults)
    obs = np.concatenate([c.obs for c in chunks])
    assert np.isfinite(obs).all() and np.isfinite(np.concatenate([c.rew for c in chunks])).all()
    assert all(c.obs.shape[1] == 4 and c.rew.shape == (c.act.shape[0],) for c in chunks)
    # Nothing of the faulty call is stored: episode 2 ends at its last valid state (step 2)
    # when its third step failed, and has no state at all when its reset failed.
    steps_of_2 = sorted(int(t) for _, e, t, _ in obs if e == 2)
    assert steps_of_2 == ([0, 1, 2] if call == 11 else [])
    if call == 11:
        closing = next(c for c in chunks if c.obs[-1, 1] == 2)
        assert closing.end == TRUNCATED and closing.obs[-1].tolist() == [1, 2, 2, 0.5]
    # The run goes on with the rebuilt solver (build 2): every later episode is whole.
    assert [e.length for e in episodes] == [6] * len(episodes) and len(episodes) >= 3
    assert obs[-1, 0] == 2


def test_max_env_failures_faults_in_a_row_raise_solver_failure(caplog):
    script = Script({k: "raise" for k in range(2, 100)})  # every call after the first
    actor = scripted_actor(script, max_failures=3, source=7, index=2)
    for _ in range(2):
        assert actor.step() == (None, None)
    with pytest.raises(SolverFailure) as failure:
        actor.step()
    assert str(failure.value) == (
        "env 2 on actor rank 7: 3 consecutive solver faults (run.max_env_failures), the "
        "last: env 2 (ScriptedSolver).reset: raised FloatingPointError: CFL condition "
        "violated")
    # Each fault's rebuild comes with the next call: none follows the third, which failed.
    assert actor.faults == 3 and script.builds == 3
    assert len([m for m in own_messages(caplog) if "solver fault" in m]) == 3


def test_a_valid_step_between_faults_restarts_the_count():
    script = Script({k: "raise" for k in range(3, 200, 3)})  # reset, step, fault, ...
    actor = scripted_actor(script, max_failures=2)
    run(actor, 60)
    assert actor.faults == 30


def test_a_failure_interrupts_the_episode_which_the_next_step_closes():
    """max_failures 1: the fault at step 4 (steps 1-2 sent, step 3 pending) raises; the next
    step returns the closing truncated chunk (step 3 and the last valid state), then a new
    episode starts."""
    actor = scripted_actor(Script({5: "nan state"}), chunk_len=2, max_failures=1)
    chunks, _ = run(actor, 3)
    assert [(c.act.shape[0], c.end) for c in chunks] == [(2, OPEN)]
    with pytest.raises(SolverFailure, match="1 consecutive solver faults"):
        actor.step()
    closing, episode = actor.step()
    assert episode is None and closing is not None and closing.end == TRUNCATED
    assert closing.obs[:, 1:3].tolist() == [[1, 2], [1, 3]] and closing.act.shape[0] == 1
    assert actor.faults == 1
    assert actor.step() == (None, None) and actor._obs is not None and actor._obs[2] == 1


def test_a_first_reset_that_never_answers_is_a_start_up_error():
    actor = scripted_actor(Script({1: "sleep"}))
    start = time.monotonic()
    with pytest.raises(SolverStartError) as error:
        actor.step()
    assert time.monotonic() - start < 5
    assert str(error.value) == (f"env 0 (ScriptedSolver), an in-process solver: no answer to "
                                f"its first reset within run.env_step_timeout = {TIMEOUT:g} s")


def test_a_rebuild_is_timed_apart_from_the_call_it_precedes():
    """After a fault the solver is rebuilt at the start of the next call, as a call of its own
    (busy with "rebuild", which the watchdog holds to run.env_build_timeout): a constructor
    that takes longer than env_step_timeout does not make the reset after it a fault."""
    script = Script({3: "raise"}, slow_builds={2: 2 * TIMEOUT})
    actor = scripted_actor(script, build_timeout=60.0)
    seen: list[object] = []
    actor.env.factory = lambda team: (seen.append(actor.env.busy), ScriptedSolver(team, script))[1]
    run(actor, 2)
    assert actor.faults == 1 and script.builds == 1, "the fault comes before the rebuild"
    run(actor, 5)
    assert [getattr(b, "call", None) for b in seen] == ["rebuild"]
    assert actor.faults == 1 and script.builds == 2 and actor.env.busy is None
    assert actor._obs is not None and actor._obs[0] == 2, "the rebuilt solver goes on"


def test_a_rebuild_past_the_build_timeout_is_a_fault_and_is_tried_again(caplog):
    script = Script({3: "raise"}, slow_builds={2: 30.0})
    actor = scripted_actor(script, build_timeout=TIMEOUT)
    start = time.monotonic()
    run(actor, 2 + 6)  # fault 1; fault 2 (the rebuild); rebuild, reset and 5 steps
    assert time.monotonic() - start < 10, "the constructor is interrupted at the timeout"
    faults = [m for m in own_messages(caplog) if "solver fault" in m]
    assert faults[1] == (f"actor rank 0: solver fault 2, episode ended and environment reset: "
                         f"env 0 (ScriptedSolver): rebuilding it after a fault: no answer "
                         f"within run.env_build_timeout = {TIMEOUT:g} s")
    assert (actor.faults, script.builds, script.closed) == (2, 3, 1), (
        "the faulty solver is closed once, the third construction succeeds")
    assert actor._obs is not None and actor._obs[0] == 3


@pytest.mark.parametrize(("kind", "call"), [("raise", 3), ("shape", 4), ("sleep", 4),
                                            ("raise", 8)])
def test_a_solver_that_recovers_by_reset_is_not_rebuilt(kind, call):
    """rebuild_after_fault = False: a fault (of a step, a reset, a timeout) is followed by a
    reset of the same instance; the run goes on with whole episodes."""
    script = Script({call: kind})
    actor = scripted_actor(script, solver=RecoveringSolver)
    chunks, episodes = run(actor, 6 * 4)
    assert actor.faults == 1 and (script.builds, script.closed) == (1, 0)
    assert [e.length for e in episodes] == [6] * len(episodes) and len(episodes) >= 2
    assert np.concatenate([c.obs for c in chunks])[:, 0].tolist() == [1] * sum(
        c.obs.shape[0] for c in chunks)


def test_rebuild_after_fault_must_be_a_bool():
    solver = ScriptedSolver(None, Script())
    solver.rebuild_after_fault = "no"  # type: ignore[attr-defined]
    with pytest.raises(ConfigError) as error:
        TeamDriver(solver, None)
    assert str(error.value) == (
        "ScriptedSolver.rebuild_after_fault = 'no' is invalid: allowed are True (rebuild the "
        "solver after a fault, the default) and False (a reset after a fault is enough)")


def test_an_exception_from_the_first_reset_is_a_start_up_error_not_a_fault():
    script = Script({1: "raise"})
    actor = scripted_actor(script)
    with pytest.raises(SolverStartError) as error:
        actor.step()
    assert str(error.value) == ("env 0 (ScriptedSolver).reset: raised FloatingPointError: CFL "
                                "condition violated (its first reset: the solver cannot start)")
    assert "Traceback" in error.value.details and "in _planned" in error.value.details
    assert actor.faults == 0 and (script.builds, script.calls) == (1, 1), "not retried"


def test_a_first_call_that_is_a_step_is_a_fault_when_it_raises():
    """A restored episode's first call is a step: the solver started in the run before, and
    a failing step is a fault like any later one."""
    script = Script({1: "raise"})
    driver = scripted_actor(script).env
    with pytest.raises(SolverFault, match=r"^env 0 \(ScriptedSolver\).step: raised "):
        driver.step(np.zeros(1))


@dataclass
class OneSidedTeam:
    """Team rank ``rank`` of a team of two whose other rank is scripted: ``agree`` returns the
    larger of this rank's value and ``agreed``, ``receive_error`` returns ``error`` and
    ``receive_command`` pops ``commands``; what this rank sends is kept in ``sent``."""

    rank: int
    agreed: int = 0
    error: str = ""
    commands: list[TeamCommand] = field(default_factory=list)
    size: int = 2
    sent: list[object] = field(default_factory=list)

    def send_command(self, command, payload):
        self.sent.append(command)

    def receive_command(self):
        return self.commands.pop(0), np.array([-1.0])

    def agree(self, value, deadline=None):
        return max(value, self.agreed)

    def receive_error(self, source, deadline=None):
        return self.error

    def send_error(self, text):
        self.sent.append(text)


def test_a_team_rank_sends_its_error_with_the_traceback_for_a_start_up_error():
    """Team rank 1 (serve_team) whose first reset raises sends the error text and its
    traceback; team rank 0 raises the start-up error naming rank 1, the traceback as its
    details."""
    solver_rank = OneSidedTeam(1, commands=[TeamCommand.RESET, TeamCommand.STOP])
    serve_team(lambda team: ScriptedSolver(team, Script({1: "raise"})), solver_rank)
    [sent] = solver_rank.sent
    error, _, trace = sent.partition("\0")
    assert error == "raised FloatingPointError: CFL condition violated"
    assert trace.startswith("Traceback (most recent call last)") and "in _planned" in trace
    actor_rank = OneSidedTeam(0, agreed=2 * 2 + 1, error=sent)  # ERROR, on rank 1
    driver = TeamDriver(ScriptedSolver(actor_rank, Script()), actor_rank)
    with pytest.raises(SolverStartError) as start:
        driver.reset(None)
    assert str(start.value) == ("env 0 (ScriptedSolver).reset on team rank 1: raised "
                                "FloatingPointError: CFL condition violated (its first reset: "
                                "the solver cannot start)")
    assert start.value.details == trace


def inflow_factory(team):
    return {}["inflow_profile"]


def test_a_constructor_that_raises_or_does_not_return_is_a_start_up_error():
    with pytest.raises(SolverStartError) as error:
        start_solver(inflow_factory, None, "env 3 (Channel)", 60.0)
    assert str(error.value) == ("env 3 (Channel).__init__: raised KeyError: 'inflow_profile' "
                                "(the solver cannot start)")
    assert "in inflow_factory" in error.value.details
    start = time.monotonic()
    with pytest.raises(SolverStartError) as error:
        start_solver(lambda team: time.sleep(30), None, "env 0 (Channel)", TIMEOUT)
    assert time.monotonic() - start < 10
    assert str(error.value) == (f"env 0 (Channel).__init__: no answer within "
                                f"run.env_build_timeout = {TIMEOUT:g} s (the solver cannot "
                                f"start)")
    assert start_solver(lambda team: "built", None, "x", TIMEOUT) == "built"


def test_make_driver_builds_within_the_build_timeout_and_names_the_class(in_tmp):
    spec = SolverSpec("fault_envs:ConstructorNeedsInflow", run_dir=str(in_tmp),
                      build_timeout=60.0)
    with pytest.raises(SolverStartError, match=r"^env 0 \(ConstructorNeedsInflow\).__init__: "
                                               r"raised KeyError: 'inflow_profile' \(the "):
        make_driver(spec, None)
    driver = make_driver(spec._replace(env_id="Diffusion1D"), None, timeout=2.0)
    assert (driver.timeout, driver.build_timeout) == (2.0, 60.0)
    assert factory_label(driver.factory) == "Diffusion1D" and driver.rebuilds
    driver.close()


@pytest.mark.parametrize(("answer", "message"), [
    ((np.zeros(4), 1.0), "returned tuple, expected a tuple (state, reward, status)"),
    ((np.zeros((2, 2)), 1.0, 0), r"state has shape (2, 2), expected (4,)"),
    ((np.array(["a"] * 4), 1.0, 0), "state has dtype <U1, expected real numbers"),
    ((np.full(4, 1e39), 1.0, 0), "state[0] = 1e+39 is not finite in float32 (4 such values)"),
    ((np.zeros(4), "1", 0), "reward = '1' is not a real number"),
    ((np.zeros(4), math.inf, 0), "reward = inf is not finite"),
    ((np.zeros(4), 1.0, None), "status = None is unknown"),
])
def test_answers_are_checked_field_by_field(answer, message):
    with pytest.raises(SolverFault) as fault:
        check_step(answer, 4)
    assert str(fault.value).startswith(message)


def test_valid_answers_pass_as_float32_states():
    state, reward, status = check_step((np.arange(4.0), np.float64(2), 2), 4)
    assert state.dtype == np.float32 and reward == 2.0 and status is Status.TRUNCATED


def test_alarm_interrupts_restores_the_handler_and_is_not_swallowed():
    def mine(signum, frame):
        raise AssertionError("the previous handler must not run")

    previous = signal.signal(signal.SIGALRM, mine)
    try:
        def swallowing():
            try:
                time.sleep(10)
            except Exception:  # a solver's own handler cannot hide the timeout
                return "swallowed"
            return "slept"

        start = time.monotonic()
        with pytest.raises(CallTimeout):
            call_with_alarm(swallowing, deadline_after(0.2))
        assert time.monotonic() - start < 5  # the 10 s sleep cut (with room for a busy CPU)
        assert signal.getsignal(signal.SIGALRM) is mine
        assert call_with_alarm(lambda: 5, deadline_after(0.2)) == 5
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
        time.sleep(0.3)  # no alarm left armed: `mine` would raise
        with pytest.raises(KeyError):
            call_with_alarm(lambda: {}[1], deadline_after(5))
        assert signal.getsignal(signal.SIGALRM) is mine
        assert call_with_alarm(lambda: 6, None) == 6
    finally:
        signal.signal(signal.SIGALRM, previous)


def test_from_the_default_disposition_the_alarm_handler_stays_for_the_next_call(monkeypatch):
    """Where SIGALRM had its default disposition, hpc_refer's handler stays installed (an
    actor's step does not pay for installing it again) and still interrupts; the timer is
    never left armed."""
    previous = signal.signal(signal.SIGALRM, signal.SIG_DFL)
    try:
        assert call_with_alarm(lambda: 1, deadline_after(5)) == 1
        ours = signal.getsignal(signal.SIGALRM)
        assert ours not in (signal.SIG_DFL, None)
        installs = []
        real = signal.signal
        monkeypatch.setattr(signal, "signal", lambda *a: installs.append(a) or real(*a))
        assert call_with_alarm(lambda: 2, deadline_after(5)) == 2
        assert installs == [] and signal.getsignal(signal.SIGALRM) is ours
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
        with pytest.raises(CallTimeout):
            call_with_alarm(lambda: time.sleep(10), deadline_after(0.2))
        assert signal.getsignal(signal.SIGALRM) is ours
    finally:
        signal.signal(signal.SIGALRM, previous)


def test_poll_until_waits_for_the_answer_or_the_deadline():
    start = time.monotonic()
    assert not poll_until(lambda: False, deadline_after(0.2))
    assert 0.2 <= time.monotonic() - start < 3  # at the deadline (with room for a busy CPU)
    ready_at = time.monotonic() + 0.1
    assert poll_until(lambda: time.monotonic() >= ready_at, deadline_after(5))
    assert poll_until(lambda: True, None)


# Checkpoints of the actor and of gymnasium environments.

@pytest.mark.parametrize(("env_id", "k", "m"), [("HalfCheetah-v5", 30, 40),
                                                ("Pendulum-v1", 150, 80)])
def test_gym_env_state_continues_bit_for_bit(env_id, k, m, in_tmp):
    """k steps, save, m more steps (Pendulum crosses its 200-step limit): a fresh env given
    the saved state sees identical observations, rewards and statuses, and its generator
    continues (the next reset is the same)."""
    rng = np.random.default_rng(0)
    env = GymEnv(env_id)
    actions = [rng.uniform(env.low, env.high) for _ in range(k + m)]
    env.reset(3)
    for a in actions[:k]:
        env.step(a)
    state = env.get_state()
    assert state is not None
    want = [env.step(a) for a in actions[k:]]
    fresh = GymEnv(env_id)
    fresh.set_state(copy.deepcopy(state))
    got = [fresh.step(a) for a in actions[k:]]
    for (o1, r1, s1), (o2, r2, s2) in zip(want, got, strict=True):
        assert np.array_equal(o1, o2) and r1 == r2 and s1 == s2
    assert Status.TRUNCATED in [s for _, _, s in want] or env_id != "Pendulum-v1"
    assert np.array_equal(env.reset(), fresh.reset())


def assert_state_tree(tree: object) -> None:
    """Leaves of a StateTree: numpy arrays, Python scalars or None (no pickling)."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            assert isinstance(key, str)
            assert_state_tree(value)
    else:
        assert tree is None or isinstance(tree, np.ndarray | bool | int | float | str), tree


def gym_actor(env_id: str, seed: int, exploration: Exploration, chunk_len: int = 16) -> Actor:
    torch.manual_seed(seed)
    env = TeamDriver(GymEnv(env_id), None, timeout=60)
    net = GaussianPolicyValueNet(env.obs_dim, env.act_dim, NetworkShape((16,)), 0.5)
    return Actor(env, net.program(), ActionBounds.CLIP, seed=0, chunk_len=chunk_len,
                 exploration=exploration)


def assert_same_chunks(a: list[Chunk], b: list[Chunk]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.end == y.end and x.source == y.source
        for name in ("obs", "act", "rew", "mu_mean", "mu_std"):
            assert np.array_equal(getattr(x, name), getattr(y, name)), name


@pytest.mark.parametrize(("env_id", "exploration", "k", "m"), [
    ("Pendulum-v1", Exploration.GAUSSIAN, 37, 260),
    ("HalfCheetah-v5", Exploration.OU, 25, 40),
])
def test_actor_checkpoint_round_trip_gives_identical_chunks(env_id, exploration, k, m, in_tmp):
    """An actor stepped k times mid-chunk is saved; a fresh actor (other initial weights,
    fresh environment) given the state and the policy copy continues with the same chunks
    and episodes as the original."""
    actor = gym_actor(env_id, 0, exploration)
    run(actor, k)
    tree = copy.deepcopy(actor.checkpoint_state())
    assert_state_tree(tree)
    assert tree["env"] is not None and tree["lanes"]["0"]["pending"]["act"].shape == (
        k % 16, actor.env.act_dim)
    policy = actor.params.copy()
    want = run(actor, m)
    fresh = gym_actor(env_id, 1, exploration)
    fresh.load(policy)
    fresh.restore_state(tree)
    got = run(fresh, m)
    assert_same_chunks(want[0], got[0])
    assert want[1] == got[1] and (env_id != "Pendulum-v1" or len(want[1]) == 1)
    assert numpy_rng_state(actor.rng) == numpy_rng_state(fresh.rng)


@pytest.mark.parametrize("k", [10, 8])
def test_without_env_state_a_restored_episode_is_closed_like_a_fault(k):
    """A solver without get_state, saved after k steps: the restored actor's next step
    returns the closing truncated chunk that a fault at that point sends (k = 10: steps 9-10
    pending and the last state, step 10; k = 8: everything sent, the last state alone),
    counts no fault, and the step after it starts a new episode."""
    script = Script(horizon=20)
    actor = scripted_actor(script)
    chunks, _ = run(actor, k)
    assert [c.act.shape[0] for c in chunks] == [4, 4]
    tree = copy.deepcopy(actor.checkpoint_state())
    assert tree["env"] is None
    assert_state_tree(tree)
    script.faults[script.calls + 1] = "raise"  # the original faults at its next step
    closing_by_fault, _ = actor.step()
    fresh_script = Script(horizon=20)
    fresh = scripted_actor(fresh_script)
    fresh.load(actor.params)
    fresh.restore_state(tree)
    closing, episode = fresh.step()
    assert episode is None and closing is not None and closing_by_fault is not None
    assert_same_chunks([closing_by_fault], [closing])
    assert closing.end == TRUNCATED and closing.obs[:, 2].tolist() == list(range(8, k + 1))
    assert fresh.faults == 0 and actor.faults == 1
    assert fresh_script.calls == 0, "closing the episode takes no environment step"
    assert fresh.step() == (None, None) and fresh_script.episodes == 1


def test_cut_hands_over_the_pending_steps_and_the_episode_goes_on(in_tmp):
    """Cut after 5 steps (then nothing is pending: None): the chunks are those of an uncut
    actor with the same seed, split once more."""
    cut_actor = gym_actor("Pendulum-v1", 0, Exploration.GAUSSIAN, chunk_len=64)
    plain = gym_actor("Pendulum-v1", 0, Exploration.GAUSSIAN, chunk_len=64)
    assert cut_actor.cut() is None
    first, _ = run(cut_actor, 5)
    cut = cut_actor.cut()
    assert not first and cut is not None and cut.end == OPEN
    assert cut.act.shape[0] == 5 and cut.obs.shape[0] == 5
    assert cut_actor.cut() is None
    rest, episodes = run(cut_actor, 195)
    whole, plain_episodes = run(plain, 200)
    assert episodes == plain_episodes and [c.end for c in rest][-1] == TRUNCATED
    for name in ("obs", "act", "rew", "mu_mean", "mu_std"):
        assert np.array_equal(np.concatenate([getattr(c, name) for c in [cut, *rest]]),
                              np.concatenate([getattr(c, name) for c in whole])), name


def test_a_fault_after_a_cut_closes_the_episode_with_its_last_state_alone():
    """Everything pending went out with the cut: the fault's closing chunk is the last valid
    state alone, which closes the learner's open tail."""
    actor = scripted_actor(Script({5: "raise"}), chunk_len=8)
    run(actor, 3)
    cut = actor.cut()
    assert cut is not None and cut.act.shape[0] == 3
    closing, _ = actor.step()
    assert closing is not None and closing.end == TRUNCATED and closing.act.shape[0] == 0
    assert closing.obs.tolist() == [[1, 1, 3, 0.5]]


def test_an_environment_failure_interrupts_the_episode(monkeypatch):
    """A driver's SolverFailure (a team or external solver that stopped answering) passes
    with the actor's rank; the episode is interrupted: the next step closes it."""
    actor = scripted_actor(Script(), chunk_len=2, source=3)
    run(actor, 3)

    def lost(action):
        raise SolverFailure("env 0 (ScriptedSolver): lost")

    monkeypatch.setattr(actor.env, "step", lost)
    with pytest.raises(SolverFailure, match=r"^actor rank 3: env 0 \(ScriptedSolver\): lost$"):
        actor.step()
    assert actor.checkpoint_state()["interrupted"]
    monkeypatch.undo()
    closing, _ = actor.step()
    assert closing is not None and closing.end == TRUNCATED
    assert closing.obs[:, 2].tolist() == [2, 3] and actor.faults == 0


def test_evaluation_runs_the_mean_policy_between_episodes(caplog):
    """Evaluation acts with to_env(mean), leaves the actor's generator alone, records whole
    episodes only (a fault ends its episode without a record) and is refused mid-episode."""
    script = Script({9: "nan reward"})  # evaluation episode 2, step 1 (calls 8, 9)
    actor = scripted_actor(script)
    rng_before = numpy_rng_state(actor.rng)
    records = actor.evaluate(3, seed=4)
    assert [r.length for r in records] == [6, 6] and records[0].ret == 21.0
    assert actor.faults == 1 and numpy_rng_state(actor.rng) == rng_before
    assert any("solver fault 1, evaluation episode ended: env 0 (ScriptedSolver).step: reward"
               in m for m in own_messages(caplog))
    net = GaussianPolicyValueNet(4, 1, NetworkShape((8,)), 0.5)
    load_flat_state(net, actor.params)
    with torch.inference_mode():
        mean, _ = net.policy(torch.tensor([[1.0, 1.0, 0.0, 0.5]]))
    # The actor acts through the numpy forward, this is torch's: float32 round-off apart.
    np.testing.assert_allclose(script.actions[0], actor.to_env(mean[0].numpy()), **F32)
    run(actor, 2)
    with pytest.raises(RuntimeError, match="evaluate at an episode boundary"):
        actor.evaluate(1)
    # The round at the end of a run drops the training episode in progress instead.
    assert [r.length for r in actor.evaluate(1, final=True)] == [6]
    assert actor.between_episodes and numpy_rng_state(actor.rng) != rng_before


# MPI: a team of two ranks (the first two ranks of the job).

@dataclass
class TeamScript:
    """Per rank: faults planned for this rank's calls (counted from 1) and its builds."""

    faults: dict[int, str]
    calls: int = 0
    builds: int = 0


class TeamSolver:
    """A two-rank solver whose state lives on team rank 1 (``state_rank``): (build, step,
    reporting rank). A planned fault on a rank: 'nan' (a NaN state), 'raise', or 'sleep'
    (stops answering for 3 s)."""

    obs_dim, act_dim = 3, 1
    low, high = np.array([-1.0]), np.array([1.0])
    state_rank = 1

    def __init__(self, team, script: TeamScript) -> None:
        script.builds += 1
        self.team, self.script, self.t = team, script, 0

    def _answer(self) -> np.ndarray:
        self.script.calls += 1
        kind = self.script.faults.get(self.script.calls, "")
        if kind == "raise":
            raise RuntimeError(f"boom on rank {self.team.rank}")
        if kind == "sleep":
            time.sleep(3)
        nan = math.nan if kind == "nan" else 0.0
        return np.array([self.script.builds + nan, self.t, self.team.rank])

    def reset(self, seed=None):
        self.t = 0
        return self._answer()

    def step(self, action):
        self.t += 1
        return self._answer(), 1.0, Status.CONTINUE

    def close(self):
        pass


def two_rank_team(faults: dict[int, dict[int, str]]):
    """(driver, script) on team rank 0 of the first two ranks of COMM_WORLD; team rank 1
    serves the team until told to stop and returns (None, script); None on other ranks."""
    from mpi4py import MPI

    from hpc_refer.parallel.world import MpiTeam

    world = MPI.COMM_WORLD
    comm = world.Split(0 if world.Get_rank() < 2 else MPI.UNDEFINED, world.Get_rank())
    if comm == MPI.COMM_NULL:
        return None
    team = MpiTeam(comm)
    script = TeamScript(faults.get(team.rank, {}))

    def factory(t):
        return TeamSolver(t, script)

    if team.rank == 1:
        serve_team(factory, team)
        return None, script
    return TeamDriver(factory(team), team, factory=factory, timeout=1.0), script


@pytest.mark.mpi(min_size=2)
def test_team_faults_on_any_rank_are_faults_and_every_rank_rebuilds():
    made = two_rank_team({0: {4: "raise"}, 1: {2: "nan", 6: "raise"}})
    if made is None:
        return
    driver, script = made
    if driver is None:
        assert script.builds == 4, "rank 1 rebuilt after each of the three faults"
        return
    assert driver.reset(0).tolist() == [1, 0, 1]
    expected = ["env 0 (TeamSolver).step on team rank 1: state[0] = nan is not finite in "
                "float32 (1 such values)",
                "env 0 (TeamSolver).reset on team rank 0: raised RuntimeError: boom on rank 0",
                "env 0 (TeamSolver).step on team rank 1: raised RuntimeError: boom on rank 1"]
    calls = [lambda: driver.step(np.zeros(1)), lambda: driver.reset(None),
             lambda: driver.step(np.zeros(1))]
    for call, message in zip(calls, expected, strict=True):
        with pytest.raises(SolverFault) as fault:
            call()
        assert str(fault.value) == message
        state = driver.reset(None)
        assert state[0] == script.builds and state[2] == 1, "the state rank's answer"
    assert script.builds == 4 and driver.checkpoint_state() is None
    driver.close()


@pytest.mark.mpi(min_size=2)
def test_team_messages_that_never_come_time_out():
    """Team rank 0 polls for a result, an error text and the agreement until its deadline."""
    from mpi4py import MPI

    from hpc_refer.parallel.world import MpiTeam

    world = MPI.COMM_WORLD
    comm = world.Split(0 if world.Get_rank() < 2 else MPI.UNDEFINED, world.Get_rank())
    if comm == MPI.COMM_NULL:
        return
    team = MpiTeam(comm)
    if team.rank == 0:
        for receive in (team.receive_result, team.receive_error):
            start = time.monotonic()
            with pytest.raises(TimeoutError):
                receive(1, deadline_after(0.3))
            assert 0.3 <= time.monotonic() - start < 3  # room for a busy CPU
        with pytest.raises(TimeoutError):
            team.agree(5, deadline_after(0.3))
        comm.Send(np.zeros(1), dest=1, tag=99)  # rank 1 joins the agreement only now
        assert team.receive_error(1, deadline_after(10)) == "late"
    else:
        comm.Recv(np.zeros(1), source=0, tag=99)
        assert team.agree(7) == 7
        team.send_error("late")


@pytest.mark.mpi(min_size=2)
def test_a_team_rank_that_stops_answering_fails_within_the_timeout():
    made = two_rank_team({1: {3: "sleep"}})  # rank 1's second step
    if made is None:
        return
    driver, _ = made
    if driver is None:
        return
    driver.reset(0)
    driver.step(np.zeros(1))
    start = time.monotonic()
    with pytest.raises(SolverFailure) as failure:
        driver.step(np.zeros(1))
    assert time.monotonic() - start < 2.5
    assert str(failure.value) == (
        "env 0 (TeamSolver): a rank of the team did not answer step within "
        "run.env_step_timeout = 1 s; the team is out of step and no longer driven")
    with pytest.raises(SolverFailure, match="no longer driven"):
        driver.reset(None)
    driver.close()


@pytest.mark.mpi(min_size=2)
def test_a_team_that_never_answers_its_first_reset_is_a_start_up_error():
    made = two_rank_team({1: {1: "sleep"}})
    if made is None:
        return
    driver, _ = made
    if driver is None:
        return
    start = time.monotonic()
    with pytest.raises(SolverStartError) as error:
        driver.reset(0)
    assert time.monotonic() - start < 2.5
    assert str(error.value) == ("env 0 (TeamSolver), a team of 2 ranks: no answer to its "
                                "first reset within run.env_step_timeout = 1 s")
    driver.close()
