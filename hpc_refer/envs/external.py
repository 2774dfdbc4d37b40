"""External solvers: an environment whose dynamics run in another MPI program.

``--env`` selects one of three ways to reach it (the program uses
``solvers/coupling/hpc_refer_client.h``, ``hpc_refer_client.f90`` or, in Python,
:mod:`hpc_refer.client`; guide and launch lines in ``solvers/README.md``)::

    --env external                       the solver runs in the same mpirun (MPMD):
        mpirun -n 3 python -m hpc_refer.run --env external ... : -n 4 ./heat1d
        (E actors; the solver's ranks split into E equal groups, one per actor)
    --env "external:[-n K] PROGRAM [ARGS...]"
        each actor starts K ranks of PROGRAM with MPI_Comm_spawn (default K = 1)
    --env "external:--connect DIR"
        the solvers are separate MPI jobs: actor e opens an MPI port, writes its name to
        DIR/env-<e>.port and accepts the one job started with HPC_REFER_PORT=DIR/env-<e>.port
        (MPI_Comm_connect over that job's COMM_WORLD). All jobs need one name server; with
        Open MPI 4 (the name server is ompi-server):
            ompi-server --report-uri uri.txt &
            mpirun --ompi-server file:uri.txt -n 2 python -m hpc_refer.run \\
                --env "external:--connect ports" ... &
            HPC_REFER_PORT=ports/env-0.port mpirun --ompi-server file:uri.txt -n 4 ./heat1d
        Open MPI 5 needs a PRRTE DVM instead (prte --daemonize --report-uri uri.txt, then
        mpirun --dvm file:uri.txt ...); the 5.0.11 pip wheel's mpirun --dvm crashes (see
        solvers/README.md).

All need ``--ranks-per-env 1``: an environment's ranks are the solver's, not hpc_refer's.

This module makes no MPI call: the actor's end of the connection is a :class:`Link`, made by
the :class:`Links` that hpc_refer's entry points create in :mod:`hpc_refer.parallel`
(:class:`~hpc_refer.parallel.solver_link.MpiLinks`, whose links are
:class:`~hpc_refer.parallel.solver_link.SolverLink`) and pass in, and the number of apps in the
mpirun is given to :func:`check_apps` by the caller.

The wire protocol (version 3, and version 2 without agents; tags, layouts) is in
:mod:`hpc_refer.client` (the solver side in Python) and
:class:`hpc_refer.parallel.solver_link.SolverLink`. At start-up the solver declares its sizes and
bounds (HELLO, BOUNDS) and the names of its per-step series and, optionally, of its per-episode
values (METRICS, possibly none: :attr:`ExternalEnv.step_metric_names` and
:attr:`ExternalEnv.episode_metrics`, the extra columns of episodes.csv); the actor answers
with PARAMS, the run's solver parameters and ``env_index``, ``run_dir``, ``seed`` as
``key=value`` lines. A bad HELLO, BOUNDS or METRICS is an :class:`ExternalSolverError` (one
line at start-up). Every STATE message is checked here: size 3 + obs_dim + number of step
metrics (+ number of episode metrics when its status ends the episode), status 0/1/2, the
expected step index, finite reward, state, step values and episode values. A failed check
raises :class:`SolverFault`, which names the environment, the solver's rank and the field;
the actor then drops the faulty step, counts and logs the fault, and resets the environment.

Several agents (protocol 3). HELLO is int32[5]: version 3, obs_dim, act_dim (per agent),
group ranks, n_agents K >= 1; a version-2 HELLO is int32[4] (K = 1). With K = 1 every message
is protocol 2's. With K > 1 (:attr:`ExternalEnv.n_agents`; reset and step then return arrays
with a leading agent axis, as a Python solver of several agents does, see
:func:`hpc_refer.envs.checks.check_agents_step`):

- ACTION is float64[K a], agent k's action at [k a, (k+1) a) (the rows of agents that ended
  are their policy mean, to be ignored by the solver);
- the answer to RESET or ACTION is one AGENT_STATE (tag 110) per agent, float64[4 + d]:
  agent index, status, step index, reward, state[d], in any order, closed by one STEP_END
  (tag 111), float64[1 + m + y]: step index, the step values[m] and, when every agent has
  ended in this episode (y = q, else 0), the episode values[q].

An agent whose status was 1 or 2 is done until the next RESET: it may send later
AGENT_STATEs or not; either way its rows of later answers repeat its last state with reward
0 and its final status (hpc_refer ignores them). The answer is checked as a whole: each
AGENT_STATE as a STATE is (size, status, step, finite reward and state) plus its agent
index (an integer in 0..K-1, at most once per answer), and at STEP_END every agent not done
must have sent its state, all with status 0 after RESET; STEP_END's size, step and values
as a STATE's. The whole answer shares one deadline. A HELLO with n_agents < 1 or not an
integer, a protocol-2 HELLO with an n_agents field, or a protocol-3 one without it is an
:class:`ExternalSolverError`; an AGENT_STATE or STEP_END from a solver of one agent (any
protocol), or a STATE from one of several, is a fault naming the field 'tag'. A bad answer
is a :class:`SolverFault` (a :class:`SolverStartError` at the first RESET, via
:class:`~hpc_refer.envs.TeamDriver`'s rules, as for one agent).

Timeouts (``run.env_step_timeout`` seconds, 0: none): the actor polls for each answer. No
HELLO in time is a start-up error (:class:`SolverStartError`, naming the environment, the
launch mode and the timeout). No STATE in time makes the environment fail for good
(:class:`SolverFailure`): the solver cannot be told to abandon its step, and an answer that
came late would be taken for the answer to the next message, so it is not driven further
(at close it gets STOP without ``MPI_Comm_disconnect``, which a stuck group would never
join). Under MPMD no answer to the *first* RESET is a start-up error instead, whose message
names the usual cause: the solver communicates on ``MPI_COMM_WORLD``, which there holds
hpc_refer's ranks too (the Python client also says so at start-up, see
:mod:`hpc_refer.client`). ``MPI_Comm_spawn`` itself returns only once the spawned program
has initialised MPI, and ``MPI_Comm_accept`` only once a solver job connects: neither can be
interrupted, so the time limit starts when the group is there (a separate job may
legitimately wait in a queue). A failed spawn is a start-up error that names, for root, the
variables Open MPI needs (:func:`hpc_refer.parallel.solver_link.spawn_failure`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from hpc_refer.client import (
    PROTOCOL_VERSION,
    PROTOCOL_VERSIONS,
    TAG_AGENT_STATE,
    TAG_BOUNDS,
    TAG_HELLO,
    TAG_METRICS,
    TAG_STATE,
    TAG_STEP_END,
    params_text,
    parse_metric_names,
)
from hpc_refer.config.modes import ConfigError
from hpc_refer.envs.interface import SolverFailure, SolverFault, SolverStartError, Status
from hpc_refer.envs.launch import MPMD, SPAWN, Link, Links, check_apps, parse_spec, port_file
from hpc_refer.envs.timeouts import deadline_after
from hpc_refer.report.schema import EPISODE_FIELDS

RESERVED_PARAMS = ("env_index", "run_dir", "seed")
"""The PARAMS keys hpc_refer sets itself (a solver parameter may not take these names)."""


class ExternalSolverError(SolverStartError):
    """The solver's HELLO, BOUNDS or METRICS is unusable (protocol version, sizes, bounds,
    step or episode metric names): training stops."""


class ExternalEnv:
    """Environment ``index`` of ``envs``, run by an external solver group (actor side).

    ``links`` makes the connection to the group (:class:`Links`; over MPI
    :class:`hpc_refer.parallel.solver_link.MpiLinks`) as ``env_id`` says (see :func:`parse_spec` and
    :func:`check_apps`); ``timeout``: seconds to wait for each answer (0: no limit);
    ``params``: the run's solver parameters, sent in PARAMS with ``env_index`` (=
    ``index``), ``run_dir`` and ``seed`` (this environment's seed) added; a parameter named
    like one of these is a ConfigError.
    After the handshake ``step_metric_names`` holds the names the solver declared and, after
    each STATE, ``step_values`` their values (float64, shape (m,), finite);
    ``episode_metrics`` holds the names of its per-episode values and
    :meth:`episode_values` those of the last STATE that ended an episode, as a Python
    solver class declares and returns them (:class:`~hpc_refer.envs.TeamDriver` records
    them in episodes.csv). ``n_agents`` (from HELLO; 1 for protocol 2): with more than one,
    :meth:`reset` returns states of shape (n_agents, obs_dim) and :meth:`step` takes actions
    of shape (n_agents, act_dim) and returns (states, rewards (n_agents,), statuses
    (n_agents,) int64).
    """

    def __init__(self, env_id: str, index: int, envs: int, timeout: float = 0.0, *,
                 links: Links, params: Mapping[str, bool | int | float | str] | None = None,
                 run_dir: str = "", seed: int = 0) -> None:
        params = dict(params or {})
        taken = sorted(set(params) & set(RESERVED_PARAMS))
        if taken:
            raise ConfigError(f"solver parameter(s) {', '.join(taken)} of run.env = "
                              f"{env_id!r} are set by hpc_refer itself: rename them")
        text = params_text({**params, "env_index": index, "run_dir": run_dir, "seed": seed})
        launch = parse_spec(env_id)
        self.timeout = timeout
        self.broken = False
        """Whether the solver stopped answering (it is no longer driven)."""
        self.link: Link
        if launch.how == MPMD:
            check_apps(env_id, links.app_count())
            self.link = links.mpmd(index, envs)
            where = "the solver app"
        elif launch.how == SPAWN:
            self.link = links.spawn(launch.program, list(launch.args), launch.ranks, index,
                                    envs)
            where = f"spawned rank 0 of {os.path.basename(launch.program)}"
        else:
            os.makedirs(launch.ports, exist_ok=True)
            path = port_file(launch.ports, index)
            self.link = links.accept(path, index, envs)
            where = f"rank 0 of the job connected through {path}"
        self.name = f"external env {index} ({where})"
        self.how = launch.how
        self.obs_dim, self.act_dim, self.n_agents = self._hello()
        if launch.how == MPMD:
            self.name = f"external env {index} (world rank {self.link.peer})"
        self.low, self.high = self._bounds()
        self.step_metric_names, self.episode_metrics = self._metrics()
        self.step_values = np.zeros(len(self.step_metric_names))
        """The step metrics' values in the last valid STATE (float64)."""
        self._episode_values = np.full(len(self.episode_metrics), np.nan)
        """The episode metrics' values in the last valid STATE that ended an episode."""
        self.link.send_params(text)
        self.t = 0
        self._done = np.zeros(self.n_agents, bool)
        """With several agents: which have ended in this episode."""
        self._last: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        """With several agents: the last answer's (states, rewards, statuses)."""
        self.answered = False
        """Whether a STATE came yet: under MPMD, no first one in time is a start-up error
        that names the likely cause (a solver communicating on MPI_COMM_WORLD)."""

    def _recv(self, what: str, start: bool = False, deadline: float | None = None
              ) -> tuple[int, np.ndarray]:
        """The next message, expected as ``what``: a timeout is a start-up error while
        ``start`` (HELLO, BOUNDS), later a failure of the environment. ``deadline``: that of
        the whole answer (several agents' messages), else ``timeout`` from now."""
        try:
            return self.link.recv(deadline if deadline is not None
                                  else deadline_after(self.timeout))
        except TimeoutError:
            if start:
                raise SolverStartError(
                    f"{self.name}, launched by {self.how}: no {what} within "
                    f"run.env_step_timeout = {self.timeout:g} s; does the program call "
                    f"hpc_refer_init?") from None
            self.broken = True
            if self.how == MPMD and not self.answered:
                raise SolverStartError(
                    f"{self.name}: no answer to its first {what} within "
                    f"run.env_step_timeout = {self.timeout:g} s. Under MPMD (--env external) "
                    f"MPI_COMM_WORLD also holds hpc_refer's ranks and the other "
                    f"environments' groups, so a solver that communicates on MPI_COMM_WORLD "
                    f"(a collective, a halo exchange) waits forever: make it use the "
                    f"client's communicator (Client.comm in Python, c.comm in C and Fortran), or "
                    f"launch it with spawn (--env \"external:-n K PROGRAM\") or connect "
                    f"(--env \"external:--connect DIR\")") from None
            raise SolverFailure(f"{self.name}: no answer to {what} within "
                                f"run.env_step_timeout = {self.timeout:g} s; the solver is "
                                f"no longer driven") from None

    def _hello(self) -> tuple[int, int, int]:
        """(obs_dim, act_dim, n_agents) of the HELLO (protocol 2: int32[4], n_agents 1;
        protocol 3: int32[5], the last n_agents)."""
        tag, hello = self._recv("HELLO", start=True)
        if tag != TAG_HELLO or hello.size not in (4, 5):
            raise ExternalSolverError(f"{self.name}: first message must be HELLO (tag "
                                      f"{TAG_HELLO}, int32[5]: protocol, obs_dim, act_dim, "
                                      f"ranks, n_agents; protocol 2: int32[4]), got tag {tag} "
                                      f"with {hello.size} values")
        version, obs_dim, act_dim = (int(x) for x in hello[:3])
        if version not in PROTOCOL_VERSIONS or obs_dim < 1 or act_dim < 1:
            raise ExternalSolverError(f"{self.name}: HELLO declares protocol {version}, "
                                      f"obs_dim {obs_dim}, act_dim {act_dim}; allowed: "
                                      f"protocol {' or '.join(map(str, PROTOCOL_VERSIONS))}, "
                                      f"sizes >= 1")
        if version == 2:
            if hello.size != 4:
                raise ExternalSolverError(
                    f"{self.name}: field 'n_agents' = {hello[4]} in a HELLO of protocol 2, "
                    f"which has no agents (int32[4]): a solver of several agents declares "
                    f"protocol {PROTOCOL_VERSION}")
            return obs_dim, act_dim, 1
        if hello.size != 5:
            raise ExternalSolverError(f"{self.name}: field 'n_agents' is missing: a HELLO of "
                                      f"protocol {version} is int32[5] (protocol, obs_dim, "
                                      f"act_dim, ranks, n_agents), got 4 values")
        agents = hello[4]
        if agents != np.floor(agents) or agents < 1:
            raise ExternalSolverError(f"{self.name}: field 'n_agents' = {agents} in HELLO is "
                                      f"invalid: allowed are integers >= 1 (the agents of the "
                                      f"simulation, sharing obs_dim and act_dim)")
        return obs_dim, act_dim, int(agents)

    def _bounds(self) -> tuple[np.ndarray, np.ndarray]:
        tag, bounds = self._recv("BOUNDS", start=True)
        a = self.act_dim
        if tag != TAG_BOUNDS or bounds.size != 2 * a:
            raise ExternalSolverError(f"{self.name}: second message must be BOUNDS (tag "
                                      f"{TAG_BOUNDS}, float64[{2 * a}]), got tag {tag} with "
                                      f"{bounds.size} values")
        low, high = bounds[:a], bounds[a:]
        if np.isnan(bounds).any() or not (low < high).all():
            raise ExternalSolverError(f"{self.name}: BOUNDS need low < high (+-inf allowed), "
                                      f"got low {low}, high {high}")
        return low, high

    def _metrics(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        tag, data = self._recv("METRICS", start=True)
        if tag != TAG_METRICS:
            raise ExternalSolverError(f"{self.name}: third message must be METRICS (tag "
                                      f"{TAG_METRICS}, the step metric names), got tag {tag}")
        try:
            step, episode = parse_metric_names(data.tobytes())
        except ValueError as err:
            raise ExternalSolverError(f"{self.name}: field 'METRICS' {err}; allowed are "
                                      f"distinct identifiers, one per line (the step metrics, "
                                      f"then an empty line and the episode metrics)") from None
        clash = sorted(set(episode) & set(EPISODE_FIELDS))
        if clash:
            raise ExternalSolverError(f"{self.name}: field 'METRICS' names the episode "
                                      f"metric(s) {', '.join(clash)}, taken by episodes.csv's "
                                      f"columns {', '.join(EPISODE_FIELDS)}: rename them")
        return step, episode

    def _fault(self, field: str, problem: str) -> SolverFault:
        return SolverFault(f"{self.name}: field '{field}' {problem}")

    def _receive(self, what: str) -> tuple[np.ndarray, float, Status]:
        """The next STATE (the answer to ``what``), validated: (state, reward, status);
        ``step_values`` takes its step values and, when it ends an episode, its episode
        values are kept for :meth:`episode_values`."""
        tag, msg = self._recv(what)
        if tag in (TAG_AGENT_STATE, TAG_STEP_END):
            raise self._fault("tag", f"= {tag}, an agent's message, from a solver of one "
                                     f"agent (n_agents = 1 in its HELLO): expected STATE "
                                     f"({TAG_STATE})")
        if tag != TAG_STATE:
            raise self._fault("tag", f"= {tag}, expected STATE ({TAG_STATE})")
        d, m = self.obs_dim, len(self.step_metric_names)
        q = len(self.episode_metrics)
        ends = msg.size > 0 and msg[0] in (1, 2)
        if ends and q:
            if msg.size != 3 + d + m + q:
                raise self._fault("size", f"= {msg.size} values with status {msg[0]:g} (the "
                                          f"episode ends), expected 3 + obs_dim + step "
                                          f"metrics + episode metrics = {3 + d + m + q}")
        elif msg.size != 3 + d + m:
            raise self._fault("size", f"= {msg.size} values, expected 3 + obs_dim + step "
                                      f"metrics = {3 + d + m}")
        status, step, reward = msg[:3]
        if status not in (0, 1, 2):
            raise self._fault("status", f"= {status} is unknown (0 continue, 1 terminal, "
                                        f"2 truncated)")
        if step != self.t:
            raise self._fault("step", f"= {step}, expected {self.t}")
        if not np.isfinite(reward):
            raise self._fault("reward", f"= {reward} is not finite")
        state, values, ending = msg[3 : 3 + d], msg[3 + d : 3 + d + m], msg[3 + d + m :]
        bad = np.flatnonzero(~np.isfinite(state))
        if bad.size:
            raise self._fault(f"state[{bad[0]}]", f"= {state[bad[0]]} is not finite "
                                                  f"({bad.size} such values)")
        self._take_values(values, ending, ends and what == "ACTION")
        self.answered = True
        return state, float(reward), Status(int(status))

    def _take_values(self, values: np.ndarray, ending: np.ndarray, episode_end: bool) -> None:
        """An answer's step metric values and (``episode_end``: it ends an episode after an
        ACTION) episode metric values, checked finite, kept for the driver."""
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            raise self._fault(f"step value {self.step_metric_names[bad[0]]}",
                              f"= {values[bad[0]]} is not finite")
        bad = np.flatnonzero(~np.isfinite(ending))
        if bad.size:
            raise self._fault(f"episode value {self.episode_metrics[bad[0]]}",
                              f"= {ending[bad[0]]} is not finite")
        self.step_values = values
        if episode_end:
            self._episode_values = ending

    def _check_alive(self) -> None:
        if self.broken:
            raise SolverFailure(f"{self.name} stopped answering earlier; it is no longer "
                                f"driven")

    def _finite(self, field: str, values: np.ndarray) -> None:
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            raise self._fault(f"{field}[{bad[0]}]", f"= {values[bad[0]]} is not finite "
                                                    f"({bad.size} such values)")

    def _receive_agents(self, what: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The answer of a solver of several agents (the answer to ``what``): AGENT_STATEs
        closed by a STEP_END, validated; (states (K, d), rewards (K,), statuses (K,) int64),
        agents done earlier in the episode repeating their last row."""
        n, d, m = self.n_agents, self.obs_dim, len(self.step_metric_names)
        q = len(self.episode_metrics)
        deadline = deadline_after(self.timeout)
        if what == "RESET" or self._last is None:
            states, rewards = np.zeros((n, d)), np.zeros(n)
            statuses = np.zeros(n, np.int64)
        else:
            states, rewards, statuses = (a.copy() for a in self._last)
            rewards[self._done] = 0.0
        came = np.zeros(n, bool)
        ended = self._done.copy()
        while True:
            tag, msg = self._recv(what, deadline=deadline)
            if tag == TAG_STEP_END:
                break
            if tag != TAG_AGENT_STATE:
                raise self._fault("tag", f"= {tag}, expected AGENT_STATE ({TAG_AGENT_STATE}) "
                                         f"or STEP_END ({TAG_STEP_END}) from a solver of "
                                         f"n_agents = {n}")
            try:
                k = self._agent_row(msg, what, came)
            except SolverFault:
                self._drain(what, deadline)
                raise
            if not self._done[k]:  # a done agent's rows are ignored
                states[k], rewards[k], statuses[k] = msg[4:], msg[3], int(msg[1])
                ended[k] = msg[1] != 0
        missing = np.flatnonzero(~came & ~self._done)
        if missing.size:
            raise self._fault("agent", f"= {', '.join(map(str, missing.tolist()))}: no state "
                                       f"in the answer to {what} (step {self.t}), which "
                                       f"STEP_END closed; every agent not done sends one")
        ends = bool(ended.all())
        size = 1 + m + (q if ends else 0)
        if msg.size != size:
            raise self._fault("size", f"= {msg.size} values of STEP_END, expected 1 + step "
                                      f"metrics" + (" + episode metrics (every agent has "
                                                    "ended)" if ends and q else "")
                              + f" = {size}")
        if msg[0] != self.t:
            raise self._fault("step", f"= {msg[0]} in STEP_END, expected {self.t}")
        values, ending = msg[1 : 1 + m], msg[1 + m :]
        self._take_values(values, ending, ends and what == "ACTION")
        self._done = ended
        self._last = (states, rewards, statuses)
        self.answered = True
        return states.copy(), rewards.copy(), statuses.copy()

    def _agent_row(self, msg: np.ndarray, what: str, came: np.ndarray) -> int:
        """One AGENT_STATE of the answer to ``what`` validated; its agent index, marked in
        ``came``."""
        n, d = self.n_agents, self.obs_dim
        if msg.size != 4 + d:
            raise self._fault("size", f"= {msg.size} values of an AGENT_STATE, expected "
                                      f"4 + obs_dim = {4 + d}")
        agent, status, step, reward = msg[:4]
        if agent != np.floor(agent) or not 0 <= agent < n:
            raise self._fault("agent", f"= {agent:g} is unknown: allowed are the agent "
                                       f"indices 0..{n - 1} (n_agents = {n})")
        k = int(agent)
        if came[k]:
            raise self._fault("agent", f"= {k}: its state came twice in the answer to "
                                       f"{what} (step {self.t})")
        came[k] = True
        if status not in (0, 1, 2):
            raise self._fault(f"status of agent {k}", f"= {status} is unknown (0 continue, "
                                                       f"1 terminal, 2 truncated)")
        if step != self.t:
            raise self._fault(f"step of agent {k}", f"= {step}, expected {self.t}")
        if not np.isfinite(reward):
            raise self._fault(f"reward of agent {k}", f"= {reward} is not finite")
        self._finite(f"state of agent {k}", msg[4:])
        if what == "RESET" and status != 0:
            raise self._fault(f"status of agent {k}", f"= {int(status)} after RESET, "
                                                      f"expected 0 (continue)")
        return k

    def _drain(self, what: str, deadline: float | None) -> None:
        """After a fault in an AGENT_STATE: the rest of the answer, up to its STEP_END, so
        that the next RESET is answered by fresh messages (a message of another tag ends
        it too)."""
        while True:
            tag, _ = self._recv(what, deadline=deadline)
            if tag != TAG_AGENT_STATE:
                return

    def reset(self, seed: int | None = None) -> np.ndarray:
        self.t = 0
        self._check_alive()
        self.link.send_reset(-1 if seed is None else seed % 2**31)
        if self.n_agents > 1:
            self._done = np.zeros(self.n_agents, bool)
            self._last = None
            return self._receive_agents("RESET")[0]
        state, _, status = self._receive("RESET")
        if status != Status.CONTINUE:
            raise self._fault("status", f"= {int(status)} after RESET, expected 0 (continue)")
        return state

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, Status] | tuple[
            np.ndarray, np.ndarray, np.ndarray]:
        """One step: (state, reward, Status); with several agents ``action`` of shape
        (n_agents, act_dim) and (states, rewards, statuses) arrays of n_agents rows."""
        self._check_alive()
        self.t += 1
        self.link.send_action(np.asarray(action, np.float64).reshape(-1))
        if self.n_agents > 1:
            return self._receive_agents("ACTION")
        return self._receive("ACTION")

    def episode_values(self) -> tuple[float, ...]:
        """The episode metrics' values of the episode that ended last (one per name of
        :attr:`episode_metrics`; NaN before any episode ended)."""
        return tuple(float(v) for v in self._episode_values)

    def close(self) -> None:
        self.link.close(disconnect=not self.broken)
