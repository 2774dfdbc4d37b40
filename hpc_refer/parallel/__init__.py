"""Every mpi4py call of hpc_refer lives in this package
(``world``: MPI, world helpers, reducers, teams; ``channels``: actor <-> learner messages;
``solver_link``: the external-solver wire protocol).

Algorithms, networks, replay, environments, checkpoints and the prediction suite never import
this package; they receive the objects created here as arguments, typed by protocols defined
below it: :class:`MpiTeam` is a :class:`~hpc_refer.envs.interface.Team`, :class:`MpiLinks`
the :class:`~hpc_refer.envs.launch.Links` of external solvers, :class:`MpiReducer` a
:class:`~hpc_refer.collectives.Reducer`.

mpi4py is imported lazily, at the first call that needs it, so importing hpc_refer never
initialises MPI.
"""


from hpc_refer.parallel.channels import ActorChannel, Fabric, LearnerChannel, Reply
from hpc_refer.parallel.solver_link import MpiLinks, SolverLink
from hpc_refer.parallel.world import (
    MpiReducer,
    MpiTeam,
    abort_job,
    app_count,
    barrier,
    bcast_object,
    gather_object,
    world_rank_size,
    world_team,
)

__all__ = ["ActorChannel", "Fabric", "LearnerChannel", "MpiLinks", "MpiReducer", "MpiTeam",
           "Reply", "SolverLink", "abort_job", "app_count", "barrier", "bcast_object",
           "gather_object", "world_rank_size", "world_team"]
