"""The run report's section on several agents in one simulation (``episodes.csv``'s
``agent`` column, the lanes of :mod:`hpc_refer.loop.actor`): each agent's return and the return
summed over the agents of each simulation, against environment steps.

A simulation's episodes are found from the rows alone: the rows of one actor (``rank``) in
the order they were written hold each agent once per simulation, so a simulation ends where
an agent index repeats (:class:`~hpc_refer.report.records.Simulations`). A simulation cut by a
solver fault records only the agents that finished before it, and its sum then counts fewer
agents (the caption says how many sums are incomplete).
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np

from hpc_refer.report.curves import window_means
from hpc_refer.report.figures import figure
from hpc_refer.report.records import Simulation, Simulations

Episodes = Sequence[dict[str, str]]
"""The rows of one run's episodes.csv."""


def agent_count(rows: Episodes) -> int:
    """The agents of the run's simulations (1 for a run directory without ``agent``)."""
    return 1 + max((int(r.get("agent") or 0) for r in rows), default=0)


def simulations(rows: Episodes) -> list[Simulation]:
    """Each simulation of the rows (per actor in the order of the rows, see
    :class:`~hpc_refer.report.records.Simulations`), by env step."""
    sims = Simulations()
    out = [done for r in rows if (done := sims.add(int(r["rank"]), int(r.get("agent") or 0),
                                                   float(r["return"]), int(r["env_step"])))]
    return sorted(out + sims.open())


def agents_section(runs: Sequence[tuple[str, Episodes]], window: int) -> str:
    """The section's HTML: per-agent and summed returns (mean per window of ``window``
    environment steps) of each run (name, episodes.csv rows) with several agents (the report
    has the section when at least one run has)."""
    multi = [(name, rows) for name, rows in runs if agent_count(rows) > 1]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    incomplete = 0
    for name, rows in multi:
        prefix = f"{name}: " if len(multi) > 1 else ""
        for agent in range(agent_count(rows)):
            mine = [r for r in rows if int(r["agent"]) == agent]
            x, y = window_means(np.array([int(r["env_step"]) for r in mine]),
                                np.array([float(r["return"]) for r in mine]), window)
            left.plot(x, y, lw=1.1, label=f"{prefix}agent {agent}")
        sims = simulations(rows)
        incomplete += sum(n < agent_count(rows) for *_, n in sims)
        x, y = window_means(np.array([s for s, _, _ in sims]),
                            np.array([t for _, t, _ in sims]), window)
        right.plot(x, y, lw=1.4, label=name if len(multi) > 1 else None)
    left.set_title("return of each agent", fontsize=10)
    right.set_title("return summed over the agents of a simulation", fontsize=10)
    for ax in (left, right):
        ax.set_xlabel("environment steps (transitions)")
        ax.grid(alpha=0.3)
    left.legend(fontsize=7)
    if len(multi) > 1:
        right.legend(fontsize=7)
    fig.tight_layout()
    return figure(fig, f"Several agents share one policy: each agent's episode return and "
                       f"the sum over a simulation's agents, mean per window of {window} "
                       f"environment steps; {incomplete} simulation(s) cut by a fault before "
                       f"all agents finished are summed over fewer agents.")
