"""A trained policy outside the run: the deployed controller in Python
(:mod:`hpc_refer.export.controller`, ``hpc_refer.load_policy``)."""
