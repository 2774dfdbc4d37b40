"""Every mpi4py call of hpc_refer lives in this package
(``world``: MPI, world helpers, reducers, teams; ``channels``: actor <-> learner messages;
``solver_link``: the external-solver wire protocol).

Algorithms, networks, replay, checkpoints and the prediction suite never import mpi4py; they
receive the helpers below (or communicator objects created here) as arguments.

mpi4py is imported lazily, at the first call that needs it, so importing hpc_refer never
initialises MPI.
"""


from hpc_refer.parallel.channels import ActorChannel, Fabric, LearnerChannel, Reply
from hpc_refer.parallel.solver_link import MpiLinks, SolverLink
from hpc_refer.parallel.world import (
    MpiReducer,
    Team,
    TeamCommand,
    abort_job,
    app_count,
    barrier,
    bcast_object,
    gather_object,
    world_rank_size,
    world_team,
)

__all__ = ["ActorChannel", "Fabric", "LearnerChannel", "MpiLinks", "MpiReducer", "Reply",
           "SolverLink", "Team", "TeamCommand", "abort_job", "app_count",
           "barrier", "bcast_object", "gather_object", "world_rank_size", "world_team"]
