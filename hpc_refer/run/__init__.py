"""Running a training: the entry point and what it owns for the whole run.

- :mod:`~hpc_refer.run.main`: ``python -m hpc_refer.run`` (``__main__``), the command line,
  fresh start or restart, the rank layout's launch;
- :mod:`~hpc_refer.run.roles`: each rank's role (learner, actor, solver) and the factories of
  learners and actors; :mod:`~hpc_refer.config.layout`: which world rank is what;
- :mod:`~hpc_refer.envs.supervision`: building the solvers under deadlines, faults that stop
  the run in one line;
- the run directory: :mod:`~hpc_refer.report.lock` (one writer), :mod:`~hpc_refer.report.clock`
  (the run's time over restarts), :mod:`~hpc_refer.report.metrics` (metrics files, progress),
  :mod:`~hpc_refer.report.logs` (logging), :mod:`~hpc_refer.loop.checkpoint` (HDF5 checkpoints)
  and :mod:`~hpc_refer.loop.policy_file` (the saved policy ``python -m hpc_refer.evaluate``
  runs).
"""
