"""Reading runs: :mod:`~hpc_refer.report.build` (``python -m hpc_refer.report``, the run
report; ``__main__``), :mod:`~hpc_refer.report.figures` and :mod:`~hpc_refer.report.agents`
(its figures), :mod:`~hpc_refer.report.schema` (the run files' names and columns, which the
writers use too), :mod:`~hpc_refer.report.series` and :mod:`~hpc_refer.report.snapshots`
(the solver's time series and snapshots). No torch, numba or MPI.
"""
