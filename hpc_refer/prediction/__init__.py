"""Off-policy prediction on the Collision task: ten TD algorithms, WHOLE vs TARGET IS placement.

Entry points: ``python -m hpc_refer.prediction {sweep,report}``; in Python,
:class:`~hpc_refer.prediction.sweep.SweepConfig` and :func:`~hpc_refer.prediction.sweep.run_sweep`.
See ``README.md`` in this directory for the design and the findings.
"""
