"""The watchdog of a process stuck in a solver call, and how such a process ends: one
critical log line (log.txt and stderr), the run marked failed, exit status 1."""

from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace

import pytest

from hpc_refer import supervision
from hpc_refer.supervision import Watchdog, end_stuck_process


class Calls:
    """``on_stuck``: keeps the messages and wakes the test."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.event = threading.Event()

    def __call__(self, message: str) -> None:
        self.messages.append(message)
        self.event.set()


def test_a_call_older_than_twice_the_timeout_plus_5_s_is_reported_once():
    env = SimpleNamespace(name="Pendulum-v1", busy_since=time.monotonic() - 100.0)
    calls = Calls()
    dog = Watchdog(env, 0.01, calls)  # type: ignore[arg-type]
    assert dog.limit == pytest.approx(5.02)
    assert calls.event.wait(30), "the watchdog reports a call busy for 100 s"
    dog._thread.join(30)
    assert not dog._thread.is_alive(), "it reports once, then its thread ends"
    assert len(calls.messages) == 1
    assert "Pendulum-v1: stuck in a solver call for more than 5.02 s" in calls.messages[0]
    assert "run.env_step_timeout = 0.01 s" in calls.messages[0]


def test_a_call_within_the_limit_is_not_reported():
    env = SimpleNamespace(name="Pendulum-v1", busy_since=time.monotonic())
    calls = Calls()
    dog = Watchdog(env, 100.0, calls)  # type: ignore[arg-type]
    assert not calls.event.wait(1.0)
    dog.close()
    dog._thread.join(30)
    assert calls.messages == []


def test_no_thread_without_a_timeout():
    dog = Watchdog(SimpleNamespace(name="x", busy_since=0.0), 0.0, Calls())  # type: ignore[arg-type]
    assert not dog._thread.is_alive()


def test_a_stuck_process_logs_marks_the_run_failed_and_exits_1(monkeypatch, caplog):
    states: list[str] = []
    run = SimpleNamespace(set_state=states.append)

    def exit_(code: int) -> None:
        raise SystemExit(code)

    monkeypatch.setattr(supervision.os, "_exit", exit_)
    with caplog.at_level(logging.CRITICAL), pytest.raises(SystemExit) as stop:
        end_stuck_process("Hopper-v5: stuck", run)  # type: ignore[arg-type]
    assert stop.value.code == 1
    assert states == ["failed"]
    [record] = caplog.records
    assert record.levelno == logging.CRITICAL
    assert record.getMessage() == ("Hopper-v5: stuck; stopping without a final checkpoint "
                                   "(resume from the last one with --restart)")
