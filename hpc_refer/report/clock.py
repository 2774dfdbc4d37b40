"""The run's clock: seconds since the run started, continued across restarts.

It gives ``wall_s`` of episodes.csv and eval.csv (when each episode ended, stamped by the actor
that ran it, where its record is built) and the elapsed time a checkpoint stores (the
manifest's ``meta.wall_s``), from which a resumed run's clock continues: a run's ``wall_s``
counts the time spent reaching each point along the history it kept (the time between its
last checkpoint and a kill, redone after the restart, and the time between jobs, are not in
it).

Clocks on different hosts (the choice)
--------------------------------------
Every process keeps its own :data:`CLOCK`. The entry point starts it on every rank just after
one barrier of all ranks (``hpc_refer.run.main.main``; in one process, when the run directory is
open), at the checkpoint's elapsed time (0 for a new run); from there each rank counts with its
own monotonic clock. So the ranks' clocks agree to the barrier's latency (microseconds to a
millisecond), wherever they run, without trusting the hosts' wall clocks to be synchronised
(a node whose NTP is off by seconds, or steps its clock, would shift or tear its episodes'
times), and each reads time intervals with the precision of its own oscillator (monotonic
clocks are not stepped; disciplined by NTP they drift by parts per million: well under a
second over a week).
"""

from __future__ import annotations

import time
from collections.abc import Callable


class RunClock:
    """Seconds since the run started (:meth:`start`), by ``source`` (a monotonic clock in
    seconds; tests give a clock of their own)."""

    def __init__(self, source: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        self._origin = source()

    def start(self, elapsed: float = 0.0) -> None:
        """The run starts (or resumes) now, ``elapsed`` seconds into it."""
        self._origin = self.source() - elapsed

    def now(self) -> float:
        """Seconds since the run started, the elapsed time it resumed at included."""
        return self.source() - self._origin


CLOCK = RunClock()
"""This process's clock of the run (see the module docstring)."""
