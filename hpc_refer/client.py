"""The solver side of the external-solver wire protocol, for Python codes (mpi4py).

``hpc_refer_client.h`` and ``hpc_refer_client.f90`` in Python: a solver that runs as its own
MPI program (its own ``python solver.py`` processes) couples to hpc_refer with the same
messages and the same collectives, so a code that hard-codes ``MPI.COMM_WORLD`` (for its
halo exchange, its reductions, its parallel I/O) can be trained against without touching
it. Every rank of the solver makes the same calls::

    from hpc_refer.client import Client, RESET, STOP, TRUNCATED, CONTINUE

    with Client(obs_dim, act_dim, low, high, step_metrics=("cd",),
                episode_metrics=("cd_mean",)) as c:        # init, handshake
        horizon = int(c.params.get("horizon", "100"))     # the run's solver parameters
        while True:
            cmd = c.recv_action()                          # on every rank of the group
            if cmd.kind == STOP:
                break
            if cmd.kind == RESET:
                ...new initial condition from cmd.seed...
            else:
                ...advance with cmd.action...
            c.send_state(state, reward, status, step_values=(cd,),   # read on c.rank 0
                         episode_values=(cd_mean,) if status != CONTINUE else ())
                                                                     # c.finalize() at exit

``c.comm`` holds this environment's ranks. Launch forms (``solvers/README.md``):

- **spawn** ``--env "external:-n K python solver.py ARGS"``: each actor starts K processes;
  their ``COMM_WORLD`` is their own, exactly the group (``c.comm`` is a duplicate of it),
  so code that communicates on ``MPI.COMM_WORLD`` works unchanged.
- **connect** ``--env "external:--connect DIR"`` and a separate job per environment e,
  started with ``HPC_REFER_PORT=DIR/env-<e>.port``: the same, its ``COMM_WORLD`` is the
  group.
- **MPMD** ``mpirun -n N python -m hpc_refer.run --env external ... : -n M python solver.py``:
  ``COMM_WORLD`` also holds hpc_refer's ranks and the other environments' groups, so the
  code must use ``c.comm`` for all its traffic. A code that hard-codes ``COMM_WORLD`` says
  so with ``Client(..., uses_world=True)``: under MPMD the client then stops the job with
  a one-line error naming spawn and connect, instead of letting it deadlock.

Protocol version 3 (version 2, the same without agents, is still accepted), between the
actor (A) and the group's rank 0 (the leader, S); the leader broadcasts what it receives to
the group. d = obs_dim, a = act_dim (both per agent), K = n_agents, m = number of step
metrics, q = number of episode metrics, x = q in a STATE that ends an episode (status 1 or
2), else 0:

==== ========= ================ =========================================================
tag  direction type[count]      content
==== ========= ================ =========================================================
101  A -> S    int32[2]         ASSIGN: environment index e, number of environments E
102  S -> A    int32[5]         HELLO: protocol version (3), obs_dim, act_dim, group ranks,
                                n_agents K >= 1 (protocol 2: int32[4], no n_agents)
103  S -> A    float64[2 a]     BOUNDS: action low[a], then high[a]
108  S -> A    char[n]          METRICS: the step metrics' names, UTF-8, one per line
                                (n = 0: none); identifiers, distinct. Optionally an
                                empty line, then the episode metrics' names, one per
                                line (at least one; clients without episode metrics,
                                the C and Fortran ones, send no empty line)
109  A -> S    char[n]          PARAMS: UTF-8 text, one ``key=value`` per line: the run's
                                solver parameters and ``env_index``, ``run_dir``, ``seed``
106  A -> S    int32[1]         RESET: seed (-1: none); S answers with a STATE
105  A -> S    float64[K a]     ACTION: one step, agent k's action at [k a, (k+1) a); S
                                answers with a STATE (K = 1) or agent states (K > 1)
104  S -> A    float64[3+d+m+x] STATE (K = 1): status, step index, reward, state[d], step
                                values[m], then, ending an episode, its episode values[q]
110  S -> A    float64[4+d]     AGENT_STATE (K > 1): agent index k, status, step index,
                                reward, state[d]: one per agent, in any order
111  S -> A    float64[1+m+y]   STEP_END (K > 1): step index, step values[m], then, when
                                every agent has ended (y = q, else 0), the episode values
107  A -> S    int32[0]         STOP: no more work; the solver finalises
==== ========= ================ =========================================================

Order: ASSIGN; HELLO, BOUNDS, METRICS; PARAMS; then RESET/ACTION each answered by a STATE
(K = 1) or by AGENT_STATEs closed by one STEP_END (K > 1); STOP. status: 0 continue, 1
terminal, 2 truncated; step index 0 after RESET, k after the k-th ACTION of the episode.
With K > 1 each answer has one AGENT_STATE of every agent that has not ended (status 0
after RESET); an agent that ended (status 1 or 2) is done until the next RESET: its rows of
later ACTIONs are to be ignored and its later AGENT_STATEs may be left out (hpc_refer
ignores them and repeats its last state). The simulation's episode ends when every agent
has ended; the STEP_END of that answer carries the episode values. See
:mod:`hpc_refer.envs.external` for the checks. The episode values of an ending STATE
become the episode's columns of ``episodes.csv`` (and ``eval.csv``), as a Python solver's
``episode_values()`` do. Start-up under MPMD: every process of the job makes
``Allgather(APPNUM)`` (int32) on ``COMM_WORLD`` and then, with several apps,
``Split(COMM_WORLD, appnum, world rank)``; the solver app's rank 0 receives the E ASSIGN
messages and the app splits into E equal groups (group e = app rank // (ranks / E)).

This module imports mpi4py only inside :class:`Client` (importing it never initialises MPI;
hpc_refer's actor side imports the protocol constants from here).
"""

from __future__ import annotations

import logging
import os
import re
import time
import traceback
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

PROTOCOL_VERSION = 3
"""The wire protocol's version, sent in HELLO (int32[5], with n_agents)."""
PROTOCOL_VERSIONS = (2, 3)
"""The versions hpc_refer accepts: 2 is 3 without agents (HELLO int32[4], n_agents 1)."""
TAG_ASSIGN, TAG_HELLO, TAG_BOUNDS, TAG_STATE, TAG_ACTION, TAG_RESET, TAG_STOP = range(101, 108)
TAG_METRICS, TAG_PARAMS, TAG_AGENT_STATE, TAG_STEP_END = 108, 109, 110, 111
"""Tags of the wire protocol (see the module docstring)."""

CONTINUE, TERMINAL, TRUNCATED = 0, 1, 2
"""A STATE's status."""
RESET, STEP, STOP = 0, 1, 2
"""What :meth:`Client.recv_action` returns (:attr:`Command.kind`)."""

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""What a step or episode metric's name must be."""
PORT_WAIT = 600.0
"""Default of ``HPC_REFER_PORT_WAIT``: seconds rank 0 waits for the port file (connect)."""


def app_number(appnum: int | None, environ: Mapping[str, str]) -> int:
    """The app of this process in an MPMD launch, what hpc_refer and every client gather to
    split COMM_WORLD: ``HPC_REFER_APP`` when set (``srun --multi-prog`` gives every line
    MPI_APPNUM 0, so its lines set it: 0 for hpc_refer, 1 for the solver), else MPI_APPNUM
    (0 when the MPI has none). A value that is not an integer is a RuntimeError naming it."""
    text = environ.get("HPC_REFER_APP")
    if text is None:
        return 0 if appnum is None else int(appnum)
    if not text.strip().lstrip("-").isdigit():
        raise RuntimeError(f"HPC_REFER_APP = {text!r} is invalid: allowed are integers (0 for "
                           f"hpc_refer's ranks, 1 for the solver's, in srun --multi-prog)")
    return int(text)


class Command(NamedTuple):
    """The actor's next command, on every rank of the group."""

    kind: int
    """RESET, STEP or STOP."""
    seed: int = -1
    """RESET: the episode's seed (-1: none)."""
    action: np.ndarray = np.empty(0)
    """STEP: the action, float64[act_dim]; with n_agents K > 1 float64[K, act_dim], agent k's
    in row k (empty otherwise)."""


def _check_names(names: Sequence[str], what: str) -> tuple[str, ...]:
    names = tuple(names)
    bad = [n for n in names if not (isinstance(n, str) and IDENTIFIER.fullmatch(n))]
    if bad or len(set(names)) != len(names):
        raise ValueError(f"{what} = {names!r} is invalid: allowed are distinct "
                         f"identifiers ([A-Za-z_][A-Za-z0-9_]*)")
    return names


def metric_names_text(step: Sequence[str], episode: Sequence[str] = ()) -> bytes:
    """METRICS payload of the ``step`` metrics' names and, after an empty line when there
    are any, the ``episode`` metrics' names; ValueError unless each list holds distinct
    identifiers."""
    lines = list(_check_names(step, "step_metrics"))
    episode = _check_names(episode, "episode_metrics")
    if episode:
        lines += ["", *episode]
    return "\n".join(lines).encode()


def _parse_names(lines: list[str], what: str) -> tuple[str, ...]:
    seen: set[str] = set()
    for name in lines:
        if not IDENTIFIER.fullmatch(name):
            raise ValueError(f"holds {name!r} among the {what}, not an identifier "
                             f"([A-Za-z_][A-Za-z0-9_]*)")
        if name in seen:
            raise ValueError(f"holds {name!r} twice among the {what}")
        seen.add(name)
    return tuple(lines)


def parse_metric_names(data: bytes) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The (step, episode) metric names of a METRICS payload; ValueError naming the first
    bad name (or an empty line followed by no episode metric name)."""
    try:
        text = data.decode()
    except UnicodeDecodeError as err:
        raise ValueError(f"is not UTF-8 text ({err.reason} at byte {err.start})") from None
    lines = text.split("\n") if text else []
    if "" not in lines:
        return _parse_names(lines, "step metrics"), ()
    cut = lines.index("")
    if cut == len(lines) - 1:
        raise ValueError("ends with an empty line: after it come the episode metric names "
                         "(at least one)")
    return (_parse_names(lines[:cut], "step metrics"),
            _parse_names(lines[cut + 1 :], "episode metrics"))


def params_text(params: Mapping[str, bool | int | float | str]) -> bytes:
    """PARAMS payload: one ``key=value`` line per parameter (bool as ``true``/``false``,
    numbers as Python writes them, strings as they are). ValueError for a key that is
    empty or holds ``=`` or a line break, or a value with a line break."""
    lines = []
    for key, value in params.items():
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        if not key or "=" in key or "\n" in key or "\r" in key:
            raise ValueError(f"solver parameter name {key!r} is invalid: allowed is a "
                             f"non-empty name without '=' or line breaks")
        if "\n" in text or "\r" in text:
            raise ValueError(f"solver parameter {key} = {text!r} is invalid: allowed is a "
                             f"value without line breaks")
        lines.append(f"{key}={text}")
    return "\n".join(lines).encode()


def parse_params(data: bytes) -> dict[str, str]:
    """The parameters of a PARAMS payload (every value a str)."""
    out = {}
    for line in data.decode().split("\n"):
        if line:
            key, _, value = line.partition("=")
            out[key] = value
    return out


def world_note(uses_world: bool | None, world_size: int, group_size: int) -> str:
    """The line an MPMD-launched solver group's rank 0 logs at start-up when the code did not
    say which communicator it uses (``uses_world`` None): its ``MPI.COMM_WORLD`` is not its
    group, so a code that communicates on COMM_WORLD would wait forever. Empty when the code
    declared it (False: it uses :attr:`Client.comm`; True is refused before this)."""
    if uses_world is not None:
        return ""
    return (f"hpc_refer_client: MPMD launch: MPI.COMM_WORLD has {world_size} ranks "
            f"(hpc_refer's and every environment's), this environment's group has "
            f"{group_size}: communicate on Client.comm, not MPI.COMM_WORLD, or the solver "
            f"hangs; launch with spawn or connect for a code tied to COMM_WORLD "
            f"(Client(..., uses_world=False) silences this line)")


def _fail(message: str) -> None:
    """Log ``hpc_refer_client: error on world rank R: message`` (critical: it reaches stderr
    also where the solver configured no logging) and abort the whole job (both apps under
    MPMD): used where only some ranks know of the error, so that none is left waiting in a
    collective."""
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    logging.getLogger(__name__).critical("hpc_refer_client: error on world rank %d: %s",
                                         world.Get_rank(), message)
    world.Abort(2)


def _connect(path: str) -> Any:
    """Every rank of COMM_WORLD: MPI_Comm_connect to the port whose name the actor writes
    to ``path`` (rank 0 polls for the file up to ``HPC_REFER_PORT_WAIT`` seconds)."""
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    port = ""
    if world.Get_rank() == 0:
        limit = float(os.environ.get("HPC_REFER_PORT_WAIT") or PORT_WAIT)
        start = time.monotonic()
        while not os.path.exists(path):
            if time.monotonic() - start > limit:
                _fail(f"HPC_REFER_PORT={path}: no port file after {limit:g} s (start "
                      f"hpc_refer with --env \"external:--connect DIR\" and DIR/env-<e>.port)")
            time.sleep(0.02)
        with open(path) as handle:
            port = handle.readline().strip()
    return world.Connect(port, root=0)


class Client:
    """One environment's solver group, joined to its hpc_refer actor (every rank).

    ``Client(obs_dim, act_dim, low, high, step_metrics=(), episode_metrics=(),
    uses_world=None, n_agents=1)`` joins (collective over the solver's ranks; under MPMD
    also the Allgather and Split that hpc_refer makes), declares the sizes, the action
    bounds, the names of the per-step series (``step_metrics``) and of the per-episode
    values (``episode_metrics``: columns of ``episodes.csv`` and the progress line; each
    list of distinct identifiers, possibly none) and receives the run's parameters.
    ``uses_world``: True when the code communicates on ``MPI.COMM_WORLD`` itself, so that an
    MPMD launch (where COMM_WORLD holds hpc_refer's ranks too) is refused with an error;
    False when it uses :attr:`comm`; None (not said): under MPMD the group's rank 0 logs one
    line at start-up saying that COMM_WORLD is not the group (:func:`world_note`), the usual
    cause of a solver that hangs there.

    ``n_agents``: the agents of the simulation (an integer >= 1), which share ``obs_dim``,
    ``act_dim`` and the bounds (given per agent) and one policy. With K > 1 agents a STEP's
    :attr:`Command.action` has shape (K, act_dim), and each answer is one
    ``send_state(..., agent=k)`` per agent not yet ended, then :meth:`send_step_end` with
    the step values (or :meth:`send_states` with all rows at once).

    Attributes: ``comm`` (this environment's ranks: use it, or in spawn/connect mode COMM_WORLD,
    for the solver's own traffic), ``rank``, ``size`` (in ``comm``), ``env``, ``envs``
    (environment index e of E), ``obs_dim``, ``act_dim``, ``n_agents``, ``step_metrics``,
    ``episode_metrics``,
    ``params`` (dict of str, on every rank: the run's solver parameters plus ``env_index``,
    ``run_dir``, ``seed``), ``mode`` (``"mpmd"``, ``"spawn"`` or ``"connect"``).
    """

    def __init__(self, obs_dim: int, act_dim: int, low: Iterable[float],
                 high: Iterable[float], step_metrics: Sequence[str] = (),
                 episode_metrics: Sequence[str] = (), *,
                 uses_world: bool | None = None, n_agents: int = 1) -> None:
        from mpi4py import MPI

        self._mpi = MPI
        if isinstance(n_agents, bool) or not isinstance(n_agents, int | np.integer) or (
                n_agents < 1):
            raise ValueError(f"Client needs n_agents an integer >= 1 (the agents of the "
                             f"simulation), got {n_agents!r}")
        self.n_agents = int(n_agents)
        self._reset_answer()
        self._done: set[int] = set()
        """The agents that ended in this episode (rank 0)."""
        bounds = np.concatenate([np.asarray(low, np.float64).reshape(-1),
                                 np.asarray(high, np.float64).reshape(-1)])
        if obs_dim < 1 or act_dim < 1 or bounds.size != 2 * act_dim:
            raise ValueError(f"Client needs obs_dim >= 1, act_dim >= 1 and act_dim values "
                             f"in each of low and high; got obs_dim {obs_dim}, act_dim "
                             f"{act_dim} and {bounds.size} bound values")
        names = metric_names_text(step_metrics, episode_metrics)
        self.obs_dim, self.act_dim = int(obs_dim), int(act_dim)
        self.step_metrics = tuple(step_metrics)
        self.episode_metrics = tuple(episode_metrics)
        world = MPI.COMM_WORLD
        port_file = os.environ.get("HPC_REFER_PORT", "")
        parent = MPI.Comm.Get_parent()
        self._app: Any = None
        """This program's ranks under MPMD (split from COMM_WORLD), freed at the end."""
        if port_file:
            self.mode, self.peer = "connect", _connect(port_file)
        elif parent != MPI.COMM_NULL:
            self.mode, self.peer = "spawn", parent
        else:
            self.mode, self.peer = "mpmd", world
        if self.mode == "mpmd":
            self._join_mpmd(uses_world)
        else:  # the actor is rank 0 of the remote group; ASSIGN comes to our rank 0
            head = np.array([0, 1], np.int32)
            if world.Get_rank() == 0:
                self.peer.Recv(head, source=0, tag=TAG_ASSIGN)
            world.Bcast(head, root=0)
            self.env, self.envs, self.actor = int(head[0]), int(head[1]), 0
            self.comm = world.Dup()
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.step = 0
        """The step index of the next STATE (0 after RESET, k after the k-th ACTION)."""
        text = np.empty(0, np.uint8)
        if self.rank == 0:
            hello = np.array([PROTOCOL_VERSION, obs_dim, act_dim, self.size,
                              self.n_agents], np.int32)
            self.peer.Send(hello, dest=self.actor, tag=TAG_HELLO)
            self.peer.Send(bounds, dest=self.actor, tag=TAG_BOUNDS)
            self.peer.Send(np.frombuffer(names, np.uint8), dest=self.actor, tag=TAG_METRICS)
            status = MPI.Status()
            self.peer.Probe(source=self.actor, tag=TAG_PARAMS, status=status)
            text = np.empty(status.Get_count(MPI.BYTE), np.uint8)
            self.peer.Recv(text, source=self.actor, tag=TAG_PARAMS)
        self.params = parse_params(self.comm.bcast(text.tobytes(), root=0))

    def _join_mpmd(self, uses_world: bool | None) -> None:
        """MPMD start-up: the Allgather of APPNUM and the Split that hpc_refer makes, the E
        ASSIGN messages (to the app's rank 0), the split into E equal groups."""
        mpi = self._mpi
        world = mpi.COMM_WORLD
        wrank = world.Get_rank()
        mine = app_number(world.Get_attr(mpi.APPNUM), os.environ)
        apps = np.empty(world.Get_size(), np.int32)
        world.Allgather(np.array([mine], np.int32), apps)
        if len(set(apps.tolist())) == 1:
            raise RuntimeError(
                "hpc_refer.client: not started by hpc_refer: launch it beside hpc_refer in "
                "one mpirun (mpirun -n N python -m hpc_refer.run --env external ... : -n M "
                "python solver.py), let hpc_refer spawn it (--env \"external:-n M python "
                "solver.py\") or set HPC_REFER_PORT=DIR/env-<e>.port (--env "
                "\"external:--connect DIR\")")
        if uses_world and wrank == int(np.flatnonzero(apps == mine)[0]):
            _fail("this solver communicates on MPI.COMM_WORLD (Client(uses_world=True)), "
                  "which under MPMD also holds hpc_refer's ranks: launch it with spawn "
                  "(--env \"external:-n K python solver.py\") or connect (--env "
                  "\"external:--connect DIR\"), or make it use Client.comm")
        self._app = world.Split(mine, wrank)
        arank, asize = self._app.Get_rank(), self._app.Get_size()
        actors = None
        if arank == 0:
            actors = self._assign_mpmd()
        actors = self._app.bcast(actors, root=0)
        self.envs = len(actors)
        if asize % self.envs:
            if arank == 0:
                _fail(f"{asize} solver ranks cannot be split into {self.envs} environments "
                      f"of equal size: launch a multiple of {self.envs} solver ranks")
            self._app.Barrier()  # never returns: rank 0 aborts the job
        self.env = arank // (asize // self.envs)
        self.actor = actors[self.env]
        self.comm = self._app.Split(self.env, arank)
        note = world_note(uses_world, world.Get_size(), self.comm.Get_size())
        if note and self.comm.Get_rank() == 0:
            logging.getLogger(__name__).warning(note)

    def _assign_mpmd(self) -> list[int]:
        """The E actors' world ranks, from their ASSIGN messages (the app's rank 0)."""
        mpi = self._mpi
        msg, status = np.empty(2, np.int32), mpi.Status()
        actors: list[int] = []
        while True:
            mpi.COMM_WORLD.Recv(msg, source=mpi.ANY_SOURCE, tag=TAG_ASSIGN, status=status)
            env, envs = int(msg[0]), int(msg[1])
            if not actors and envs > 0:
                actors = [-1] * envs
            if not actors or envs != len(actors) or not 0 <= env < envs or actors[env] >= 0:
                _fail(f"bad ASSIGN (env {env} of {envs}) from world rank "
                      f"{status.Get_source()}")
            actors[env] = status.Get_source()
            if min(actors) >= 0:
                return actors

    def _reset_answer(self) -> None:
        """Rank 0: no answer in progress (no agent's state sent since the last one)."""
        self._sent: list[int] = []
        """The agents whose state this answer sent (in order)."""
        self._row: np.ndarray | None = None
        """One agent (K = 1): its [status, step, reward, state] until :meth:`send_step_end`."""

    def recv_action(self) -> Command:
        """The actor's next command (collective over ``comm``): RESET with its seed, STEP
        with the action on every rank (shape (act_dim,), or (n_agents, act_dim) with several
        agents), or STOP."""
        mpi = self._mpi
        head = np.array([STOP, -1], np.int64)
        action = np.empty(self.n_agents * self.act_dim, np.float64)
        if self.rank == 0:
            if self._sent or self._row is not None:
                _fail(f"send_state(..., agent=k) gave the states of agent(s) "
                      f"{sorted(self._sent) or [0]} but no send_step_end closed the answer "
                      f"before recv_action")
            status = mpi.Status()
            self.peer.Probe(source=self.actor, tag=mpi.ANY_TAG, status=status)
            tag = status.Get_tag()
            if tag == TAG_ACTION:
                self.peer.Recv(action, source=self.actor, tag=tag)
                head[0] = STEP
            elif tag == TAG_RESET:
                seed = np.empty(1, np.int32)
                self.peer.Recv(seed, source=self.actor, tag=tag)
                head[:] = RESET, seed[0]
            elif tag == TAG_STOP:
                self.peer.Recv(np.empty(0, np.int32), source=self.actor, tag=tag)
            else:
                _fail(f"unexpected message tag {tag} from the actor")
        self.comm.Bcast(head, root=0)
        kind = int(head[0])
        if kind == STEP:
            self.comm.Bcast(action, root=0)
            self.step += 1
            return Command(STEP, -1, action if self.n_agents == 1
                           else action.reshape(self.n_agents, self.act_dim))
        if kind == RESET:
            self.step = 0
            self._done = set()
            return Command(RESET, int(head[1]))
        return Command(STOP)

    def _vectors(self, state: Any, step_values: Iterable[float], episode_values:
                 Iterable[float], what: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        state = np.asarray(state, np.float64).reshape(-1)
        values = np.asarray(tuple(step_values), np.float64).reshape(-1)
        ending = np.asarray(tuple(episode_values), np.float64).reshape(-1)
        if state.size != self.obs_dim or values.size != len(self.step_metrics):
            raise ValueError(f"{what}: state has {state.size} values and step_values "
                             f"{values.size}, expected obs_dim = {self.obs_dim} and one per "
                             f"step metric {self.step_metrics}")
        return state, values, ending

    def _check_ending(self, ending: np.ndarray, ends: bool, what: str, status: str) -> None:
        expected = len(self.episode_metrics) if ends else 0
        if ending.size != expected:
            raise ValueError(f"{what}: episode_values has {ending.size} values {status}, "
                             f"expected {expected}: one per episode metric "
                             f"{self.episode_metrics} with a status that ends the episode "
                             f"(TERMINAL, TRUNCATED), none with CONTINUE")

    def send_state(self, state: Any, reward: float, status: int = CONTINUE,
                   step_values: Iterable[float] = (),
                   episode_values: Iterable[float] = (), *, agent: int | None = None) -> None:
        """Answer the last RESET or ACTION; called on every rank, the arguments are read on
        ``rank`` 0 only (the others may pass None). ``state``: obs_dim values;
        ``step_values``: one value per name of ``step_metrics``; ``episode_values``: with a
        status that ends the episode (TERMINAL, TRUNCATED) one value per name of
        ``episode_metrics``, with CONTINUE none; the step index is kept by the client.
        ValueError (on rank 0) naming the argument of another size.

        ``agent=k`` (0 <= k < n_agents; required with several agents): the state, reward and
        status of agent k alone, part of an answer that :meth:`send_step_end` closes (with
        the step and episode values, which are then not given here). Every agent that has
        not ended in this episode sends one per answer; an agent that ended may be left out.
        ValueError for an agent index outside 0..n_agents-1."""
        if self.rank != 0:
            return
        if agent is not None:
            self._send_agent(int(agent), state, reward, status, step_values, episode_values)
            return
        if self.n_agents > 1:
            raise ValueError(f"send_state: this client has n_agents = {self.n_agents}: give "
                             f"each agent's state with agent=k, then call send_step_end (or "
                             f"send_states)")
        state, values, ending = self._vectors(state, step_values, episode_values,
                                              "send_state")
        self._check_ending(ending, status in (TERMINAL, TRUNCATED), "send_state",
                           f"with status {status}")
        message = np.concatenate([[status, self.step, reward], state, values, ending])
        self.peer.Send(message, dest=self.actor, tag=TAG_STATE)

    def _send_agent(self, agent: int, state: Any, reward: float, status: int,
                    step_values: Iterable[float], episode_values: Iterable[float]) -> None:
        """Rank 0: agent ``agent``'s part of the answer (see :meth:`send_state`)."""
        if not 0 <= agent < self.n_agents:
            raise ValueError(f"send_state: agent = {agent} is outside 0..{self.n_agents - 1} "
                             f"(n_agents = {self.n_agents})")
        if tuple(step_values) or tuple(episode_values):
            raise ValueError("send_state: with agent=k the step and episode values go to "
                             "send_step_end, which closes the answer")
        state = np.asarray(state, np.float64).reshape(-1)
        if state.size != self.obs_dim:
            raise ValueError(f"send_state: state of agent {agent} has {state.size} values, "
                             f"expected obs_dim = {self.obs_dim}")
        if status in (TERMINAL, TRUNCATED):
            self._done.add(agent)
        if self.n_agents == 1:  # the wire's STATE, sent by send_step_end
            if self._row is not None:
                raise ValueError("send_state: the state of agent 0 was given twice in one "
                                 "answer")
            self._row = np.concatenate([[status, self.step, reward], state])
            return
        self._sent.append(agent)
        self.peer.Send(np.concatenate([[agent, status, self.step, reward], state]),
                       dest=self.actor, tag=TAG_AGENT_STATE)

    def send_step_end(self, step_values: Iterable[float] = (),
                      episode_values: Iterable[float] = ()) -> None:
        """Close the answer begun by ``send_state(..., agent=k)`` calls (every rank, read on
        rank 0): ``step_values`` one per name of ``step_metrics``; ``episode_values``, when
        every agent has ended in this episode (the simulation's episode ends), one per name
        of ``episode_metrics``, else none. ValueError (on rank 0) naming the argument of
        another size."""
        if self.rank != 0:
            return
        if self.n_agents == 1 and self._row is None:
            raise ValueError("send_step_end: no send_state(..., agent=0) came before it")
        _, values, ending = self._vectors(np.zeros(self.obs_dim), step_values,
                                          episode_values, "send_step_end")
        ends = len(self._done) == self.n_agents
        self._check_ending(ending, ends, "send_step_end",
                           f"with {len(self._done)} of {self.n_agents} agents ended")
        if self.n_agents == 1:
            assert self._row is not None
            message = np.concatenate([self._row, values, ending])
            self.peer.Send(message, dest=self.actor, tag=TAG_STATE)
        else:
            self.peer.Send(np.concatenate([[self.step], values, ending]), dest=self.actor,
                           tag=TAG_STEP_END)
        self._reset_answer()

    def send_states(self, states: Any, rewards: Iterable[float], statuses: Iterable[int],
                    step_values: Iterable[float] = (),
                    episode_values: Iterable[float] = ()) -> None:
        """The whole answer at once (every rank, read on rank 0): ``states`` of shape
        (n_agents, obs_dim), ``rewards`` and ``statuses`` one per agent, then
        :meth:`send_step_end` with the step and episode values. Agents that ended earlier
        in the episode are left out."""
        if self.rank != 0:
            return
        rows = np.asarray(states, np.float64).reshape(self.n_agents, -1)
        done = set(self._done)
        for k, (row, reward, status) in enumerate(zip(rows, tuple(rewards), tuple(statuses),
                                                      strict=True)):
            if k not in done:
                self.send_state(row, float(reward), int(status), agent=k)
        self.send_step_end(step_values, episode_values)

    def finalize(self) -> None:
        """After STOP: free the communicators and disconnect from a spawning or accepting
        actor (collective). MPI itself is finalised by mpi4py at exit."""
        self.comm.Free()
        if self.mode != "mpmd":
            self.peer.Disconnect()
        if self._app is not None:
            self._app.Free()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        """Finalise after a normal exit; after an exception, print it and abort the job
        instead (the other ranks, and hpc_refer, would wait for this one forever)."""
        if kind is None:
            self.finalize()
            return
        traceback.print_exc()
        _fail(f"{kind.__name__} in the solver (traceback above)")
