"""Deadlines for the answers of solvers (``run.env_step_timeout``), without MPI.

Two ways to stop waiting:

- :func:`poll_until` for answers that arrive as messages (a team's result, an external
  solver's STATE): the caller passes a non-blocking test (an ``Iprobe``, a request's
  ``Test``) and this loop retries it until it holds or the deadline passes. Between tries it
  sleeps for a tenth of the time waited so far (at most ``MAX_SLEEP``): a prompt answer is
  seen at once, a slow one costs little CPU (a blocking MPI Probe spins on its core), and
  the answer is seen at most ~10 % (or ``MAX_SLEEP``) after it came.
- :func:`call_with_alarm` for a solver that runs in this process (a Python class, a
  gymnasium env): ``signal.setitimer(ITIMER_REAL)`` raises :class:`CallTimeout` inside the
  call when the deadline passes. Python runs a signal handler only between bytecodes, so a
  call stuck in compiled code that never returns to the interpreter (a blocking MPI call, a
  C extension's loop) cannot be interrupted; sleeping (``time.sleep``) and Python loops can.
  Only the main thread receives signals: elsewhere the call runs without a limit.

A deadline is a :func:`time.monotonic` time, or None for no limit (timeout 0).
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # (no stub: see call_with_alarm)
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")

MAX_SLEEP = 0.01
"""Longest sleep (s) between two tries of :func:`poll_until`."""


class CallTimeout(BaseException):
    """Raised inside an in-process solver call whose deadline passed.

    A BaseException, like KeyboardInterrupt, so that a solver's own ``except Exception``
    cannot swallow it."""


def deadline_after(seconds: float) -> float | None:
    """The deadline ``seconds`` from now; None (no limit) when ``seconds`` is 0."""
    return time.monotonic() + seconds if seconds > 0 else None


def poll_until(ready: Callable[[], bool], deadline: float | None) -> bool:
    """Call ``ready`` until it returns True (then True) or ``deadline`` passes (then False).

    ``ready`` is tried once more at the deadline, so an answer that came while this loop slept
    is never reported as missing.
    """
    start = time.monotonic()
    while not ready():
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return ready()
        pause = min(MAX_SLEEP, 0.1 * (now - start))
        time.sleep(pause if deadline is None else min(pause, deadline - now))
    return True


def _expire(signum: int, frame: FrameType | None) -> None:
    """hpc_refer's SIGALRM handler: the deadline of :func:`call_with_alarm` passed."""
    raise CallTimeout


def call_with_alarm(call: Callable[..., T], deadline: float | None, *args: Any) -> T:
    """``call(*args)``, interrupted by :class:`CallTimeout` if it is still running at
    ``deadline``.

    Uses SIGALRM (``ITIMER_REAL``, one shot) in the main thread; a timer the caller had set
    on ITIMER_REAL is cancelled. A handler of the caller's is restored afterwards, whatever
    happens; where SIGALRM had the default disposition, :func:`_expire` stays installed for
    the next call (it acts only when the one-shot timer set here fires, and installing and
    restoring a handler cost 7 us of every step of an actor, about a tenth of a MuJoCo
    step). No limit when ``deadline`` is None or off the main thread. A call that returns in
    the instant the timer fires may still be reported as timed out.

    The handler in place is read from ``_signal``, the C module that :mod:`signal` wraps:
    ``signal.getsignal`` converts what it returns into an enum member where it can, and for
    a Python handler such as :func:`_expire` that costs a raised and caught ValueError, 2 us
    of every actor step.
    """
    if deadline is None or threading.current_thread() is not threading.main_thread():
        return call(*args)
    previous = _signal.getsignal(signal.SIGALRM)
    if previous is not _expire:
        signal.signal(signal.SIGALRM, _expire)
    try:
        signal.setitimer(signal.ITIMER_REAL, max(deadline - time.monotonic(), 1e-6))
        try:
            return call(*args)
        finally:
            # One shot: once fired it cannot fire again, so CallTimeout is raised at most
            # once, and the outer finally always puts a caller's handler back.
            signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        if previous is not None and previous is not _expire and previous != signal.SIG_DFL:
            signal.signal(signal.SIGALRM, previous)
