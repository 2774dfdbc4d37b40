"""agents: a toy simulation of several agents coupled through :mod:`hpc_refer.client`
(protocol 3); ``agents.c`` and ``agents.f90`` are the same in C and Fortran.

K agents (``--agents``, default 3) share one policy. Agent k has the state (x_k, x_mean, t /
horizon), where x_mean is the mean position of all agents; each step it moves by DT a_k and
is pulled towards the others' mean, x_k <- x_k + DT (a_k + COUPLING (x_mean - x_k)), and
gets the reward -x_k^2. Agent k's episode is truncated after ``horizon - k`` steps
(``horizon``: solver parameter, default 20), or ends (terminal) when |x_k| > 2, so the
agents end at different steps; the simulation's episode ends with the last one. After RESET
with seed s, x_k = 0.5 (k + 1) / K + 0.01 (s mod 10). Step metric ``x_mean``; episode
metric ``steps`` (the agent steps of the episode; Python client only).

Every rank runs the same (tiny) simulation; rank 0 answers. An agent that has ended is left
out of later answers (``--send-done``: it sends its last state again, which hpc_refer
ignores). Test aid: ``--fault duplicate|missing`` answers the 2nd ACTION of every episode
with agent 1's state twice or without it (a solver fault that hpc_refer names; the client
itself refuses an agent index outside 0..K-1).

    python -m hpc_refer.run --env "external:python solvers/examples/agents/solver.py" ...
"""

from __future__ import annotations

import argparse

import numpy as np

from hpc_refer.client import CONTINUE, RESET, STOP, TERMINAL, TRUNCATED, Client

DT = 0.1
COUPLING = 0.5
OBS_DIM, ACT_DIM = 3, 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--send-done", action="store_true")
    parser.add_argument("--fault", choices=("duplicate", "missing"))
    args = parser.parse_args()
    n = args.agents
    with Client(OBS_DIM, ACT_DIM, [-1.0], [1.0], step_metrics=("x_mean",),
                episode_metrics=("steps",), uses_world=False, n_agents=n) as c:
        horizon = int(c.params.get("horizon", "20"))
        x = np.zeros(n)
        status = np.zeros(n, np.int64)
        t = steps = 0
        while True:
            cmd = c.recv_action()
            if cmd.kind == STOP:
                break
            if cmd.kind == RESET:
                x = 0.5 * (np.arange(n) + 1) / n + 0.01 * (max(cmd.seed, 0) % 10)
                status[:] = CONTINUE
                t = steps = 0
                reward = np.zeros(n)
            else:
                t += 1
                active = status == CONTINUE
                mean = x.mean()
                x = np.where(active, x + DT * (cmd.action[:, 0] + COUPLING * (mean - x)), x)
                steps += int(active.sum())
                reward = -(x**2)
                for k in np.flatnonzero(active):
                    if abs(x[k]) > 2.0:
                        status[k] = TERMINAL
                    elif t >= horizon - k:
                        status[k] = TRUNCATED
                ended_now = active
            mean = x.mean()
            for k in range(n):
                state = [x[k], mean, t / horizon]
                if cmd.kind == RESET or ended_now[k] or args.send_done:
                    if args.fault and t == 2 and k == 1:
                        if args.fault == "missing":
                            continue
                        c.send_state(state, reward[k], int(status[k]), agent=k)  # twice
                    c.send_state(state, reward[k], int(status[k]), agent=k)
            done = bool((status != CONTINUE).all())
            c.send_step_end([mean], [steps] if done else [])


if __name__ == "__main__":
    main()
