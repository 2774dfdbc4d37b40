"""The replay memory of one learner: :mod:`~hpc_refer.replay.shard` (the shard over numpy
columns: episodes, far-policy counts, sampling, forgetting), :mod:`~hpc_refer.replay.kernels`
(its numba kernels), :mod:`~hpc_refer.replay.sequences` (windows for recurrent learners),
:mod:`~hpc_refer.replay.sumtree` (prioritized sampling) and :mod:`~hpc_refer.replay.near`
(ReF-ER's near-policy rule, shared with the losses).
"""
