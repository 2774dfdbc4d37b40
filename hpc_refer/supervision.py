"""Stopping a run cleanly: the stop signals (SIGTERM, SIGUSR1) and the watchdog thread that
notices a process stuck in a solver call (see ARCHITECTURE.md, "Preemption" and "Solver
faults")."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

from hpc_refer.envs import TeamDriver
from hpc_refer.metrics import RunDirectory


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


class Watchdog:
    """A thread that notices a process stuck in a solver call.

    ``run.env_step_timeout`` is enforced inside the call (SIGALRM for in-process solvers,
    polled deadlines for teams and external solvers), but nothing interrupts compiled code
    that never returns to Python: a solver blocked in its own MPI collective with a team rank
    that stopped, say. When ``env.busy_since`` (set by :class:`~hpc_refer.envs.TeamDriver`
    during each call) is older than ``2 * timeout + 5`` seconds, the watchdog calls
    ``on_stuck(message)`` once, from its thread.
    """

    def __init__(self, env: TeamDriver, timeout: float, on_stuck: Callable[[str], None]) -> None:
        self.env = env
        self.limit = 2.0 * timeout + 5.0
        self.on_stuck = on_stuck
        self.timeout = timeout
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="hpc_refer-watchdog",
                                        daemon=True)
        if timeout > 0:
            self._thread.start()

    def _watch(self) -> None:
        period = min(1.0, self.limit / 10)
        while not self._stop.wait(period):
            since = self.env.busy_since
            if since is not None and time.monotonic() - since > self.limit:
                self.on_stuck(
                    f"{self.env.name}: stuck in a solver call for more than {self.limit:g} s "
                    f"(run.env_step_timeout = {self.timeout:g} s could not interrupt it: the "
                    f"solver is blocked outside Python, e.g. in an MPI call with a rank that "
                    f"stopped)")
                return

    def close(self) -> None:
        self._stop.set()


def end_stuck_process(text: str, run: RunDirectory | None) -> None:
    """One process stuck in a solver call (from the watchdog thread): nothing can run a
    checkpoint any more; record the failure and end the process (the last checkpoint
    stands)."""
    logging.getLogger(__name__).critical(
        "%s; stopping without a final checkpoint (resume from the last one with --restart)",
        text)
    if run is not None:
        run.set_state("failed")
    os._exit(1)
