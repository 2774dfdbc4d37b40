"""Every mpi4py call of hpc_refer lives in this package: :mod:`~hpc_refer.parallel.world`
(MPI, world helpers, reducers, teams), :mod:`~hpc_refer.parallel.channels` (actor <-> learner
messages) and :mod:`~hpc_refer.parallel.solver_link` (the external-solver wire protocol).

Algorithms, networks, replay, environments and checkpoints never import this package; they
receive the objects created here as arguments, typed by protocols defined below it:
:class:`~hpc_refer.parallel.world.MpiTeam` is a :class:`~hpc_refer.envs.interface.Team`,
:class:`~hpc_refer.parallel.solver_link.MpiLinks` the :class:`~hpc_refer.envs.launch.Links`
of external solvers, :class:`~hpc_refer.parallel.world.MpiReducer` a
:class:`~hpc_refer.algorithms.kit.collectives.Reducer`.

mpi4py is imported lazily, at the first call that needs it, so importing hpc_refer never
initialises MPI.
"""
