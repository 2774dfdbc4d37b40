"""A spawned external solver in Python (mpi4py) that stops answering, for the timeout tests.

    stuck_solver.py PIDFILE silent      initialises MPI and never says HELLO
    stuck_solver.py PIDFILE stall K     couples through hpc_refer.client (obs_dim 2, act_dim 1),
                                        answers RESET and the first K ACTIONs, then stops
                                        answering

Either way it then sleeps (at most a minute); the test kills it through PIDFILE.
"""

from __future__ import annotations

import os
import sys
import time

from mpi4py import MPI

from hpc_refer.client import STEP, STOP, Client


def main() -> None:
    pidfile, mode = sys.argv[1], sys.argv[2]
    with open(pidfile, "w") as out:
        out.write(f"{os.getpid()}\n")
    if mode == "stall":
        answers, answered = int(sys.argv[3]), 0
        client = Client(2, 1, [-1.0], [1.0])
        while True:
            command = client.recv_action()
            if command.kind == STOP:
                client.finalize()
                return
            if command.kind == STEP:
                if answered == answers:
                    break
                answered += 1
            client.send_state([0.5, 0.5], 1.0)
    else:
        MPI.Comm.Get_parent()  # MPI is initialised, but no HELLO ever comes
    time.sleep(60)


if __name__ == "__main__":
    main()
