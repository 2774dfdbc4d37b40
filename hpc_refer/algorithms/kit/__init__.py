"""The kit the algorithms are built from: the contract every algorithm answers
(:mod:`~hpc_refer.algorithms.kit.base`), its gradient step, eager
(:mod:`~hpc_refer.algorithms.kit.step`) or compiled (:mod:`~hpc_refer.algorithms.kit.compiled`),
the networks (:mod:`~hpc_refer.algorithms.kit.networks`; the feed-forward or recurrent bodies
every head is written over, :mod:`~hpc_refer.algorithms.kit.bodies`, with the recurrent cell
of :mod:`~hpc_refer.algorithms.kit.recurrent`), the actors and critics of the actor-critic
algorithms (:mod:`~hpc_refer.algorithms.kit.actors`, :mod:`~hpc_refer.algorithms.kit.critics`),
the ReF-ER terms of every loss
(:mod:`~hpc_refer.algorithms.kit.refer`), parts several algorithms share
(:mod:`~hpc_refer.algorithms.kit.shared`) and the reductions over learners the step sees
(:mod:`~hpc_refer.algorithms.kit.collectives`). An algorithm module imports the kit, never
another algorithm.
"""
