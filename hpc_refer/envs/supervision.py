"""Stopping a run cleanly: the stop signals (SIGTERM, SIGUSR1) and the watchdog thread that
notices a process stuck in a solver call (see ARCHITECTURE.md, "Preemption" and "Solver
faults")."""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

from hpc_refer.envs.calls import BUILD_TIMEOUT, STEP_TIMEOUT
from hpc_refer.envs.driver import TeamDriver
from hpc_refer.report.metrics import RunDirectory


class StopRequest:
    """Set by SIGTERM or SIGUSR1 (Slurm's time-limit warning): stop at the next safe point,
    checkpoint, and exit 0."""

    def __init__(self) -> None:
        self.signal = 0
        """The number of the first stop signal received (0: none)."""

    def __call__(self) -> bool:
        return self.signal != 0

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if not self.signal:
            self.signal = signum

    def install(self) -> None:
        """Catch SIGTERM and SIGUSR1 in this process (main thread)."""
        for sig in (signal.SIGTERM, signal.SIGUSR1):
            signal.signal(sig, self.handle)


STOP = StopRequest()


MARGIN = 5.0
"""Seconds the watchdog waits beyond twice a call's limit before it gives up on the call."""


class Watchdog:
    """A thread that notices a process stuck in a solver call.

    The limits are enforced inside the call: ``run.env_step_timeout`` (``timeout``) for a
    reset or step, ``run.env_build_timeout`` (the driver's ``build_timeout``) for a rebuild
    after a fault (SIGALRM for in-process solvers, polled deadlines for teams and external
    solvers). Nothing interrupts compiled code that never returns to Python: a solver blocked
    in its own MPI collective with a team rank that stopped, say. When the call in progress
    (``env.busy``, set by :class:`~hpc_refer.envs.TeamDriver`) is older than twice its own
    limit plus :data:`MARGIN` seconds, the watchdog calls ``on_stuck(message)`` once, from
    its thread; the message names the environment, the call (reset, step or rebuild), how
    long it has run and the limit. A call without a limit (its option 0) is never reported;
    the first construction of a solver, before the watchdog exists, is bounded by its alarm
    alone.
    """

    def __init__(self, env: TeamDriver, timeout: float, on_stuck: Callable[[str], None]) -> None:
        self.env = env
        self.limits = {"reset": (STEP_TIMEOUT, timeout), "step": (STEP_TIMEOUT, timeout),
                       "rebuild": (BUILD_TIMEOUT, env.build_timeout)}
        """Each call's option and its seconds (0: no limit)."""
        self.on_stuck = on_stuck
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="hpc_refer-watchdog",
                                        daemon=True)
        if any(seconds > 0 for _, seconds in self.limits.values()):
            self._thread.start()

    def limit(self, call: str) -> float:
        """Seconds after which ``call`` counts as stuck (inf for a call without a limit)."""
        seconds = self.limits[call][1]
        return 2.0 * seconds + MARGIN if seconds > 0 else math.inf

    def stuck(self) -> str:
        """What is stuck, if the call in progress has passed its limit ("" otherwise)."""
        busy = self.env.busy
        if busy is None:
            return ""
        elapsed = time.monotonic() - busy.since
        if elapsed <= self.limit(busy.call):
            return ""
        option, seconds = self.limits[busy.call]
        return (f"{self.env.name}: stuck in its {busy.call} for {elapsed:.0f} s, more than "
                f"2 x {option} ({seconds:g} s) + {MARGIN:g} s: the alarm could not interrupt "
                f"it (the solver is blocked outside Python, e.g. in an MPI call with a rank "
                f"that stopped)")

    def _watch(self) -> None:
        period = min(1.0, min(self.limit(call) for call in self.limits) / 10)
        while not self._stop.wait(period):
            text = self.stuck()
            if text:
                self.on_stuck(text)
                return

    def close(self) -> None:
        self._stop.set()


def end_stuck_process(text: str, run: RunDirectory | None) -> None:
    """End one process stuck in a solver call (called from the watchdog thread) with status
    1, after writing what is safe to write from this thread.

    Safe: the main thread is inside the solver call (:class:`~hpc_refer.envs.TeamDriver`'s,
    under the learner loop's poll) and touches none of the run's files meanwhile, so the
    metric files (episodes.csv, train.jsonl, eval.csv) are flushed here, keeping every
    episode and record made so far, and state.txt says ``failed`` with ``text``. Not done:
    a final checkpoint. Its actor part needs the stuck solver's state, and the learner's part
    would be written by this thread while the main thread may hold locks inside the stuck
    call (h5py's, a solver writing its own HDF5 file): the process could hang instead of
    ending. Nor is the main thread signalled: a call that could still return to Python has
    been interrupted by its alarm already. The last checkpoint stands. Under MPI the
    learners, which are not stuck, write the final checkpoint instead (the actor's watchdog
    reports to its learner)."""
    logging.getLogger(__name__).critical(
        "%s; stopping with the metric files flushed but without a final checkpoint (resume "
        "from the last one, if any, with --restart)", text)
    try:
        if run is not None:
            run.offsets()  # flushes the metric files
            run.set_state("failed", text)
    finally:
        os._exit(1)
