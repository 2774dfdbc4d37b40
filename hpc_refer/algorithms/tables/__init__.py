"""The built-in algorithms' tables, one light module per algorithm (named after it, beside its
module in :mod:`hpc_refer.algorithms`): importing this package registers every one of them
with the configuration (:func:`hpc_refer.config.resolve.register_table`), without torch.

A new algorithm adds its table here and its module one level up; nothing else names it.
"""

from __future__ import annotations

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
