"""halo_python: a Python MPI solver that runs as its own MPI job and couples to hpc_refer
through :mod:`hpc_refer.client` (the Python counterpart of ``heat1d``).

1-D advection-diffusion on a periodic ring of ``--cells`` cells (default 32), split in
blocks over the ranks of one environment; each step every rank exchanges one halo cell with
each neighbour (``Sendrecv``), then

    u_i <- u_i - C (u_i - u_{i-1}) + D (u_{i-1} - 2 u_i + u_{i+1}) + DT sum_j a_j g_j(x_i)

with two Gaussian actuators g_j driven by the action a in [-1, 1]^2. Reward: minus the
energy mean_i u_i^2 (an Allreduce); state: the whole field, gathered on rank 0; step
metrics: ``energy`` and ``u_max`` (max_i |u_i|); episode metric: ``energy_mean``, the mean
energy after the episode's steps (a column of ``episodes.csv``). Solver parameters
(``[env]`` table or PARAMS): ``horizon`` (steps per episode, default 40) and ``velocity``
(C, default 0.5).

``Ring`` stands for the user's CFD code: all its MPI goes through the communicator it is
given. With ``--world`` it is given ``MPI.COMM_WORLD`` itself, as a code that hard-codes it
would use: that runs when hpc_refer spawns the solver or it connects as its own job (its
COMM_WORLD is then exactly its ranks); the client refuses MPMD with ``uses_world=True``.
Without ``--world`` it uses ``Client.comm`` and runs in every launch form::

    mpirun -n 2 python -m hpc_refer.run --steps 2000 \\
        --env "external:-n 2 python solvers/examples/halo_python/solver.py --world"   # spawn
    mpirun -n 2 python -m hpc_refer.run --env external --steps 2000 \\
        : -n 2 python solvers/examples/halo_python/solver.py                           # MPMD

At the end, rank 0 writes ``halo-env<e>.json`` to the run directory (the ``run_dir``
parameter; the working directory if empty): the group's ranks, COMM_WORLD's size, the halo
exchanges made by all ranks together, the steps taken and the ``energy_mean`` of every
episode that ended, in order.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import numpy as np
from mpi4py import MPI

from hpc_refer.client import CONTINUE, RESET, STOP, TRUNCATED, Client

N_ACT = 2
DIFFUSION = 0.2
DT = 0.1


class Ring:
    """A periodic ring of ``cells`` cells, split in blocks over the ranks of ``comm``."""

    def __init__(self, comm: Any, cells: int, velocity: float) -> None:
        self.comm, self.rank, self.size = comm, comm.Get_rank(), comm.Get_size()
        if cells < self.size:
            raise ValueError(f"--cells {cells} < {self.size} ranks")
        self.counts = [cells // self.size + (r < cells % self.size) for r in range(self.size)]
        self.first = sum(self.counts[: self.rank])
        self.cells, self.velocity = cells, velocity
        x = 2 * np.pi * (self.first + np.arange(self.counts[self.rank])) / cells
        centres = 2 * np.pi * (np.arange(N_ACT) + 0.5) / N_ACT
        gap = np.angle(np.exp(1j * (x[:, None] - centres[None, :])))
        self.actuators = np.exp(-0.5 * (gap / 0.5) ** 2)
        self.x = x
        self.u = np.zeros(self.counts[self.rank] + 2)
        """This rank's cells with one halo cell on each side."""
        self.halo_exchanges = 0

    def reset(self, seed: int) -> None:
        modes = np.random.default_rng(seed).uniform(-1.0, 1.0, 3)
        self.u[1:-1] = sum(0.5 * a * np.sin((k + 1) * self.x + k) for k, a in enumerate(modes))

    def step(self, action: np.ndarray) -> None:
        left, right = (self.rank - 1) % self.size, (self.rank + 1) % self.size
        u = self.u
        self.comm.Sendrecv(u[-2:-1], dest=right, recvbuf=u[:1], source=left)
        self.comm.Sendrecv(u[1:2], dest=left, recvbuf=u[-1:], source=right)
        self.halo_exchanges += 1
        inner = u[1:-1]
        u[1:-1] = (inner - self.velocity * (inner - u[:-2])
                   + DIFFUSION * (u[:-2] - 2 * inner + u[2:]) + DT * self.actuators @ action)

    def energy(self) -> float:
        return float(self.comm.allreduce(float(np.sum(self.u[1:-1] ** 2)))) / self.cells

    def u_max(self) -> float:
        return float(self.comm.allreduce(float(np.max(np.abs(self.u[1:-1]))), op=MPI.MAX))

    def field(self) -> np.ndarray | None:
        """The whole field on rank 0 (None elsewhere)."""
        out = np.empty(self.cells) if self.rank == 0 else None
        self.comm.Gatherv(np.ascontiguousarray(self.u[1:-1]),
                          [out, self.counts] if self.rank == 0 else None, root=0)
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=32)
    parser.add_argument("--world", action="store_true",
                        help="the solver's own MPI goes through MPI.COMM_WORLD")
    args = parser.parse_args()
    with Client(args.cells, N_ACT, -np.ones(N_ACT), np.ones(N_ACT),
                step_metrics=("energy", "u_max"), episode_metrics=("energy_mean",),
                uses_world=args.world) as client:
        ring = Ring(MPI.COMM_WORLD if args.world else client.comm, args.cells,
                    float(client.params.get("velocity", "0.5")))
        horizon = int(client.params.get("horizon", "40"))
        steps = episodes = 0
        energy_sum = 0.0  # over the episode's steps
        energy_means: list[float] = []
        while True:
            command = client.recv_action()
            if command.kind == STOP:
                break
            if command.kind == RESET:
                ring.reset(command.seed if command.seed >= 0 else episodes)
                episodes += 1
            else:
                ring.step(command.action)
                steps += 1
            energy = ring.energy()  # one reduction per control step, shared by three uses
            reward = 0.0 if command.kind == RESET else -energy
            energy_sum = 0.0 if command.kind == RESET else energy_sum + energy
            status = TRUNCATED if client.step >= horizon else CONTINUE
            ending: tuple[float, ...] = ()
            if status != CONTINUE:
                ending = (energy_sum / max(client.step, 1),)
                energy_means.append(ending[0])
            client.send_state(ring.field(), reward, status, (energy, ring.u_max()), ending)
        exchanges = client.comm.reduce(ring.halo_exchanges, root=0)
        if client.rank == 0:
            where = client.params.get("run_dir") or "."
            with open(os.path.join(where, f"halo-env{client.env}.json"), "w") as out:
                json.dump({"env": client.env, "ranks": client.size,
                           "world_ranks": MPI.COMM_WORLD.Get_size(),
                           "halo_exchanges": exchanges, "steps": steps,
                           "energy_means": energy_means}, out)


if __name__ == "__main__":
    main()
