"""The actor and learner loops: who talks to whom, when, and the state each one owns.

- the learner side: :mod:`~hpc_refer.loop.learner` (the replay shard, the algorithm and the
  ReF-ER state of one learner rank), :mod:`~hpc_refer.loop.learner_loop` (serving actors,
  gradient steps, checkpoints), :mod:`~hpc_refer.loop.actor_book` (what it knows of each
  actor), :mod:`~hpc_refer.loop.intervals` (the interval records of metrics files);
- the actor side: :mod:`~hpc_refer.loop.actor` (a policy copy stepping its solver, a lane per
  agent of the simulation, chunks of episodes);
- :mod:`~hpc_refer.loop.local_channel`: one actor beside the learner in one process;
- checkpoint parts: :mod:`~hpc_refer.loop.learner_checkpoint`,
  :mod:`~hpc_refer.loop.actor_checkpoint`;
- :mod:`~hpc_refer.report.records`: the typed records that cross module and process boundaries
  (plain data, numpy only).
"""
