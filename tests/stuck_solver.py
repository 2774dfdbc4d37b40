"""A spawned external solver in Python (mpi4py) that stops answering, for the timeout tests.

    stuck_solver.py PIDFILE silent      initialises MPI and never says HELLO
    stuck_solver.py PIDFILE stall K     speaks the wire protocol (obs_dim 2, act_dim 1), answers
                                        RESET and the first K ACTIONs, then stops answering

Either way it then sleeps (at most a minute); the test kills it through PIDFILE.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
from mpi4py import MPI

ASSIGN, HELLO, BOUNDS, STATE, ACTION, RESET, STOP = range(101, 108)


def main() -> None:
    pidfile, mode = sys.argv[1], sys.argv[2]
    with open(pidfile, "w") as out:
        out.write(f"{os.getpid()}\n")
    parent = MPI.Comm.Get_parent()
    if mode == "stall":
        answers, answered, step = int(sys.argv[3]), 0, 0
        parent.Recv(np.empty(2, np.int32), source=0, tag=ASSIGN)
        parent.Send(np.array([1, 2, 1, 1], np.int32), dest=0, tag=HELLO)
        parent.Send(np.array([-1.0, 1.0]), dest=0, tag=BOUNDS)
        status = MPI.Status()
        while True:
            parent.Probe(source=0, tag=MPI.ANY_TAG, status=status)
            tag = status.Get_tag()
            message = (np.empty(status.Get_count(MPI.DOUBLE)) if tag == ACTION
                       else np.empty(status.Get_count(MPI.INT32_T), np.int32))
            parent.Recv(message, source=0, tag=tag)
            if tag == STOP:
                return
            if tag == ACTION:
                if answered == answers:
                    break
                answered, step = answered + 1, step + 1
            else:
                step = 0
            parent.Send(np.array([0.0, step, 1.0, 0.5, 0.5]), dest=0, tag=STATE)
    time.sleep(60)


if __name__ == "__main__":
    main()
