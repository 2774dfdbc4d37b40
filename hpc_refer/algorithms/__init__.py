"""The off-policy algorithms: plug-ins behind one contract
(:class:`~hpc_refer.algorithms.kit.base.Algorithm`), each in its own module with its table in
:mod:`hpc_refer.algorithms.tables`, registered by name (:mod:`hpc_refer.algorithms.registry`);
``run.algorithm`` picks one.

Importing this package imports nothing else: the tables are registered when a config is
resolved (light modules), and an algorithm's module, with torch, when the algorithm is first
asked for (:func:`~hpc_refer.algorithms.registry.algorithm_class`).
"""
