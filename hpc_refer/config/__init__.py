"""Configuration: plain data, resolved without torch, numba or MPI.

- :mod:`~hpc_refer.config.tables`: the ``[run]``, ``[refer]`` and ``[replay]`` tables and the
  settings every algorithm's table starts from (each algorithm's table is a light module of
  :mod:`hpc_refer.algorithms.tables`);
- :mod:`~hpc_refer.config.modes`: the modes (enums) and
  :class:`~hpc_refer.config.modes.ConfigError`;
- :mod:`~hpc_refer.config.values`: how TOML and flag values are read;
- :mod:`~hpc_refer.config.presets`: the named presets (``--preset``);
- :mod:`~hpc_refer.config.resolve`: the resolved :class:`~hpc_refer.config.resolve.Config`,
  the registry of algorithm tables, TOML files;
- :mod:`~hpc_refer.config.cli`: the command line.
"""
