"""An external MPI solver: ``external`` (beside hpc_refer in one mpirun),
``external:[-n K] PROGRAM [ARGS...]`` (spawned by each actor) or ``external:--connect DIR``
(separate jobs). The id is parsed and its launch checked by :mod:`hpc_refer.envs.launch`; the
actor's side of the wire protocol is :class:`~hpc_refer.envs.external.ExternalEnv`, reached
through the :class:`~hpc_refer.envs.launch.Links` the entry points pass in.

The solver's ranks are its own, outside hpc_refer's (``run.ranks_per_env`` is 1); it
declares its sizes and episode metrics in its handshake (HELLO, METRICS), so the learners
learn them from the actors; and a run that fails aborts the MPI job, the one way to end the
solver's processes.
"""

from __future__ import annotations

import os
from typing import Any

from hpc_refer.config.layout import SeedRole, role_seed
from hpc_refer.envs.external import ExternalEnv
from hpc_refer.envs.interface import Team
from hpc_refer.envs.launch import (
    PREFIX,
    Links,
    check_apps,
    check_port_dir,
    check_spawn_launcher,
    parse_spec,
)
from hpc_refer.envs.registry import EnvKind, Factory, SolverSpec, register_kind


@register_kind
class ExternalSolver(EnvKind):
    """``external...``: the solver group reached as the id says."""

    name = "external"
    label = "an external MPI solver"
    form = ("an external MPI solver: external (beside hpc_refer in one mpirun), "
            "'external:[-n K] PROGRAM [ARGS]' (spawned) or 'external:--connect DIR' "
            "(solvers/README.md)")
    one_rank = "runs its solver outside hpc_refer's ranks"
    declares_sizes = True
    outside_ranks = True

    def claims(self, env_id: str) -> bool:
        return env_id == PREFIX or env_id.startswith(PREFIX + ":")

    def solver_dims(self, spec: SolverSpec) -> None:
        """None: the sizes arrive in the solver's HELLO (the id's form is checked here)."""
        parse_spec(spec.env_id)

    def check_launch(self, spec: SolverSpec, apps: int) -> None:
        """The launch in an mpirun of ``apps`` apps and the port directory of
        ``external:--connect DIR``."""
        check_apps(spec.env_id, apps)
        check_port_dir(spec.env_id)
        check_spawn_launcher(spec.env_id, os.environ)

    def start(self, spec: SolverSpec, team: Team | None, *, index: int, envs: int,
              timeout: float, links: Links | None) -> tuple[Any, Factory | None]:
        """The solver group started or reached as the id says, through ``links`` (which it
        needs), and sent the parameters; no factory: after a fault it is reset."""
        if links is None:
            raise TypeError(f"make_driver of run.env = {spec.env_id!r} needs the links to "
                            f"external solvers (hpc_refer.parallel.solver_link.MpiLinks)")
        return ExternalEnv(spec.env_id, index, envs, timeout, links=links, params=spec.params,
                           run_dir=spec.run_dir,
                           seed=role_seed(spec.seed, SeedRole.SOLVER, index)), None
