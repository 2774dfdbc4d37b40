"""Environments behind one interface, and the driver that runs them over a team of ranks.

The interface (what the actor calls; a Python solver class provides it)::

    obs_dim, act_dim, low, high                        class attributes (sizes, action box)
    __init__(team, **params)                           team: interface.Team or None
    reset(seed) -> state                               state: float array of shape (obs_dim,)
    step(action) -> (state, reward, Status)            reward: a finite real scalar
    close()
    get_state() -> dict[str, np.ndarray] | None        optional: the solver's whole state
    set_state(state: dict[str, np.ndarray])            optional: continue from such a state
    episode_metrics, episode_values() -> floats        optional: values per episode
    step_metrics, step_values() -> floats              optional: values per step
    episode_field() -> 2-D array, field_label          optional: a picture of the episode
    rebuild_after_fault: bool                          optional class attribute (default True):
                                                       False says reset() after a fault is enough
    n_agents: int                                      optional (default 1): agents of one
                                                       simulation, sharing the spaces and policy

Several agents in one simulation. A solver whose ``n_agents`` (an attribute, read after each
construction: it may come from a constructor parameter, and must never change) is K > 1
declares K agents with the same spaces (``obs_dim``, ``act_dim``, ``low``, ``high`` are one
agent's): ``reset`` returns states of shape (K, obs_dim), ``step`` receives actions of shape
(K, act_dim) and returns (states (K, obs_dim), rewards (K,), statuses (K,)). An agent whose
status is TERMINAL or TRUNCATED has finished its episode; it takes no further part in the
simulation's episode (its rows of later actions are its policy mean, to be ignored; its rows of
later answers are ignored, but checked to be finite: repeat its last state). The simulation's
episode ends when every agent has finished; the next call is ``reset``. ``episode_values()``
and ``episode_field()`` belong to the simulation. One policy is shared by all agents of all
environments; each agent's trajectory is an episode of its own in the replay
(:class:`hpc_refer.loop.actor.Actor`, a lane per agent), and ``episodes.csv`` names its
``agent``. The answers are checked as one agent's are, naming the field and the agent
(``statuses[2] = 7 is unknown``); a count that is not an integer >= 1 is a start-up error, one
that changes in a rebuild fails the environment. A PettingZoo ``ParallelEnv`` of homogeneous
agents is such a solver through :class:`~hpc_refer.envs.pettingzoo_env.PettingZooEnv`.

Parameters. The run's ``[env]`` table (``--env.KEY VALUE``) is given to the constructor as
keyword arguments, checked at start-up against its signature by its kind
(:meth:`~hpc_refer.envs.kinds.solver_class.SolverClass.solver_params`: an unknown key, a
missing required parameter or a value of the wrong annotated type is one line naming the
solver and its parameters) and stored in ``config.toml`` and every checkpoint. The
constructor also receives, when it names them, the keywords of
:data:`~hpc_refer.envs.kinds.solver_class.CONTEXT_KEYWORDS`:
``env_index`` (0..E-1), ``run_dir`` (a string) and ``seed`` (its own, derived from
``run.seed`` and the index). The solver's module is imported on every rank, learners
included (they read the class attributes): keep its import cheap and free of side effects.
The keys ``history`` and ``history_actions`` are hpc_refer's own (stacked observations,
:mod:`hpc_refer.envs.history`): never passed to the solver, and reserved in its signature.

The declared spaces are checked at start-up
(:func:`~hpc_refer.envs.kinds.solver_class.check_spaces`), and the first reset and
step probe the answers' form: a state of another shape or dtype, a reward that is not a real
scalar, an unknown status or step values of the wrong count is then a
:class:`SolverStartError` naming the field, the solver class and what was expected, before
any training (later the same answer is a fault, see below).

Step metrics. A solver may name values it reports after every step (drag and lift, say) in a
class attribute ``step_metrics`` and return them from ``step_values()``, called on the state
rank right after each ``step`` (not collectively); they travel with the step's answer and the
actor records them (every ``run.series_stride`` steps) to ``RUN_DIR/series/env-<k>.h5``
(:mod:`hpc_refer.report.series`). External solvers declare theirs in their handshake, and a solver
on the Python client (:mod:`hpc_refer.client`) its episode metrics too, whose values come
with the state that ends each episode.

``get_state``/``set_state`` (optional) let a checkpoint continue an episode bit for bit: the
actor saves ``get_state()`` (None: nothing to save at this moment) and, on resume,
``set_state`` gives it to a freshly constructed solver, which must then behave exactly as the
one that was saved (including its random generator). Without them, or for a team of K > 1
ranks (whose state is spread over its ranks), a resumed run ends the interrupted episode as
truncated at its last state and starts a new one. :class:`~hpc_refer.envs.gym_env.GymEnv`
implements them for MuJoCo and classic-control gymnasium environments.

Faults. :class:`TeamDriver` checks every answer of a Python solver (built-in, user's class or
gymnasium) as an external solver's messages are checked: the state has the declared shape
(obs_dim,) and is finite (as float32), the reward is a finite real scalar, the status one of
:class:`~hpc_refer.envs.gym_env.Status`. A failed check, an exception raised by ``reset`` or
``step`` (other than :class:`EnvironmentFinished`) or no answer within ``run.env_step_timeout``
seconds is a :class:`~hpc_refer.envs.external.SolverFault` naming the environment, the solver
class, the call and the field, e.g. ``env 0 (KuramotoSivashinsky).step: state has shape (7,),
expected (8,)``; the actor ends the episode (nothing of the faulty step is stored) and counts
it, and the driver closes the solver and constructs it anew (on every rank of its team) at the
start of the next call, so a solver left in a bad state cannot poison the next episodes.
Timeouts: see :meth:`TeamDriver.step`; a construction is timed apart, by
``run.env_build_timeout`` (at start-up and in every rebuild, never within a call's
``run.env_step_timeout``): a rebuild that raises or takes longer is a fault of the call it
precedes, and is tried again at the next one.

Recovering without a rebuild. A solver whose ``reset`` brings it back to a sound state after
any fault (it re-initialises its whole field, say, and holds nothing a failed step could
leave broken) may declare the class attribute ``rebuild_after_fault = False``: after a fault
the same instance goes on with the next ``reset``, on every rank of its team, and its
constructor runs once per run. The default (True) rebuilds, the safe choice for a solver that
keeps state across episodes (caches, linear-solver setups, open files).

Start-up. A constructor that raises (or does not return within ``run.env_build_timeout``)
and an exception from the first ``reset`` are not faults but a
:class:`~hpc_refer.envs.interface.SolverStartError`: the run stops at once, on every rank,
with one line naming the environment, the solver class and the exception, e.g.
``env 0 (MySolver).reset: raised KeyError: 'inflow_profile' (its first reset: the solver
cannot start)``; the traceback travels with it (its ``details``) for the run's log.

The team is a :class:`~hpc_refer.envs.interface.Team` (a protocol: what a solver may call);
hpc_refer's entry points build its MPI implementation (:class:`hpc_refer.parallel.world.MpiTeam`)
and pass it in, as they pass an external solver's :class:`~hpc_refer.envs.launch.Links`
to :func:`~hpc_refer.envs.registry.make_driver`: nothing in this package imports
:mod:`hpc_refer.parallel`.

``--env`` selects an environment of one of the kinds of :mod:`hpc_refer.envs.registry`, one
module each in :mod:`hpc_refer.envs.kinds`, which brings its id form, factory, sizes, checks
and launch: a built-in solver by name (``Diffusion1D``) or a user's class as
``package.module:Class`` (constructed with the team: it may span ``run.ranks_per_env``
ranks; :mod:`~hpc_refer.envs.kinds.solver_class`), any gymnasium id with a continuous action
space (one rank per environment; :mod:`~hpc_refer.envs.kinds.gymnasium_id` says why), a
PettingZoo ParallelEnv of homogeneous agents as ``pettingzoo:package.module:factory`` (the
factory is called with the ``[env]`` table as keyword arguments, and with the team when it
names ``team``, so that it may span ranks too; the multi-agent interface, arrays of shape
(n_agents, ...), is :mod:`hpc_refer.envs.pettingzoo_env`'s), or an external MPI program
(``external``, ``external:[-n K] PROGRAM``, ``external:--connect DIR``, see
:mod:`hpc_refer.envs.external`). A kind of one's own is a module of ``run.plugins`` that
registers it (:func:`~hpc_refer.envs.registry.register_kind`).
A solver spanning K ranks is called collectively: team rank 0 (the actor) drives it through
:class:`TeamDriver`, the other ranks follow in :func:`serve_team`. The state, reward and
status are taken from the return values of team rank ``state_rank``, an optional attribute of
the solver (default 0, the actor): a solver whose state is gathered on another rank sets it,
and that rank's results travel to the actor in one message per call (the other ranks' return
values are ignored). A solver may also report values of its own per episode (a physical
quantity, say): it names them in a class attribute ``episode_metrics`` (a tuple of identifiers)
and returns them, in that order, from ``episode_values()``, which the actor calls on team rank 0
(not collectively) when an episode ends; they become columns of ``episodes.csv``. A flow solver
may also show its field: ``episode_field()`` (team rank 0, not collective) returns a 2-D array
(rows: the control steps of the episode that just ended, columns: grid points), named by an
optional class attribute ``field_label``; the actor saves the last episode's field of each
environment to ``RUN_DIR/fields/env-<index>.npz`` (arrays ``field``, ``label``, ``episode``),
which the run report draws (KS: u(x, t)).
"""

from __future__ import annotations

# The solver writer's names (solvers/README.md: ``from hpc_refer.envs import SolverFault,
# Status``): the one facade of the package, kept for users' solvers; hpc_refer's own modules
# import them from hpc_refer.envs.interface, their address.
from hpc_refer.envs.interface import (
    EnvironmentFinished,
    SolverFailure,
    SolverFault,
    SolverStartError,
    Status,
    Team,
)

__all__ = [
    "EnvironmentFinished",
    "SolverFailure",
    "SolverFault",
    "SolverStartError",
    "Status",
    "Team",
]
