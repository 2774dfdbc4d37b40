"""The watchdog of a process stuck in a solver call, and how such a process ends: one
critical log line (log.txt and stderr), the metric files flushed, the run marked failed with
the reason, exit status 1. Each call is held to its own limit: a reset or step to
run.env_step_timeout, a rebuild after a fault to run.env_build_timeout."""

from __future__ import annotations

import logging
import re
import threading
import time
from types import SimpleNamespace

import pytest
from log_records import own_records

from hpc_refer.envs import supervision
from hpc_refer.envs.driver import Busy
from hpc_refer.envs.supervision import MARGIN, Watchdog, end_stuck_process


class Calls:
    """``on_stuck``: keeps the messages and wakes the test."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.event = threading.Event()

    def __call__(self, message: str) -> None:
        self.messages.append(message)
        self.event.set()


def driver(call: str = "step", age: float = 0.0, build_timeout: float = 600.0
           ) -> SimpleNamespace:
    """What the watchdog reads of a TeamDriver: busy with ``call`` for ``age`` seconds."""
    busy = Busy(call, time.monotonic() - age) if call else None
    return SimpleNamespace(name="env 0 (Slow)", busy=busy, build_timeout=build_timeout)


def test_a_call_older_than_twice_its_limit_plus_the_margin_is_reported_once():
    env = driver("step", age=100.0)
    calls = Calls()
    dog = Watchdog(env, 0.01, calls)  # type: ignore[arg-type]
    assert dog.limit("step") == pytest.approx(0.02 + MARGIN)
    assert calls.event.wait(30), "the watchdog reports a call busy for 100 s"
    dog._thread.join(30)
    assert not dog._thread.is_alive(), "it reports once, then its thread ends"
    [message] = calls.messages
    assert re.fullmatch(
        r"env 0 \(Slow\): stuck in its step for 10\d s, more than 2 x run.env_step_timeout "
        r"\(0.01 s\) \+ 5 s: the alarm could not interrupt it \(the solver is blocked outside "
        r"Python, e.g. in an MPI call with a rank that stopped\)", message), message


def test_a_rebuild_is_held_to_the_build_timeout_not_to_the_step_timeout():
    """A rebuild 30 s old under a 2-s step timeout is not stuck (its limit is 2 x 60 s +
    5 s); one of 200 s is, and the message names the rebuild and its option."""
    dog = Watchdog(driver("rebuild", age=30.0, build_timeout=60.0), 2.0,  # type: ignore[arg-type]
                   Calls())
    dog.close()
    assert dog.limit("rebuild") == 125.0 and dog.limit("reset") == 9.0
    assert dog.stuck() == ""
    dog.env = driver("rebuild", age=200.0, build_timeout=60.0)
    assert dog.stuck().startswith("env 0 (Slow): stuck in its rebuild for 200 s, more than "
                                  "2 x run.env_build_timeout (60 s) + 5 s: ")
    dog.env = driver("reset", age=10.0)
    assert dog.stuck().startswith("env 0 (Slow): stuck in its reset for 10 s, more than "
                                  "2 x run.env_step_timeout (2 s) + 5 s")


def test_calls_within_their_limit_idle_drivers_and_unlimited_calls_are_not_stuck():
    dog = Watchdog(driver("step", age=1.0, build_timeout=0.0), 100.0,  # type: ignore[arg-type]
                   Calls())
    dog.close()
    assert dog.stuck() == ""
    dog.env = driver("")
    assert dog.stuck() == ""
    dog.env = driver("rebuild", age=1e6, build_timeout=0.0)
    assert dog.stuck() == "", "run.env_build_timeout = 0: a rebuild has no limit"


@pytest.mark.parametrize(("step", "build", "watching"), [(0.0, 0.0, False), (0.0, 5.0, True),
                                                          (5.0, 0.0, True)])
def test_the_thread_runs_when_a_call_has_a_limit(step, build, watching):
    dog = Watchdog(driver("", build_timeout=build), step, Calls())  # type: ignore[arg-type]
    assert dog._thread.is_alive() == watching
    dog.close()


def test_a_stuck_process_flushes_the_metric_files_marks_the_run_failed_and_exits_1(
        monkeypatch, caplog):
    done: list[tuple[str, ...]] = []
    run = SimpleNamespace(offsets=lambda: done.append(("flushed",)),
                          set_state=lambda state, reason="": done.append((state, reason)))

    def exit_(code: int) -> None:
        raise SystemExit(code)

    monkeypatch.setattr(supervision.os, "_exit", exit_)
    with caplog.at_level(logging.CRITICAL), pytest.raises(SystemExit) as stop:
        end_stuck_process("Hopper-v5: stuck", run)  # type: ignore[arg-type]
    assert stop.value.code == 1
    assert done == [("flushed",), ("failed", "Hopper-v5: stuck")]
    [record] = own_records(caplog)
    assert record.levelno == logging.CRITICAL
    assert record.getMessage() == (
        "Hopper-v5: stuck; stopping with the metric files flushed but without a final "
        "checkpoint (resume from the last one, if any, with --restart)")


def test_a_stuck_process_ends_even_when_recording_fails(monkeypatch):
    def refuse(state: str, reason: str = "") -> None:
        raise OSError("disk full")

    exits: list[int] = []
    monkeypatch.setattr(supervision.os, "_exit", exits.append)
    with pytest.raises(OSError, match="disk full"):
        end_stuck_process("x", SimpleNamespace(offsets=dict, set_state=refuse))  # type: ignore[arg-type]
    assert exits == [1]
