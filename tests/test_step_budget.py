"""The per-release step budget (issue 14): under mpirun a run ends at exactly ``run.steps``
environment steps, not a chunk per actor beyond it (serial pass; mpirun as a subprocess),
and the grant rule that keeps the sum of the budgets within what remains."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mpi_launch import mpi_env, mpirun_exe

from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.loop.actor_book import SPEED_CAP, ActorBook, speed
from hpc_refer.loop.learner_loop import grant_steps
from hpc_refer.report.records import OPEN, Chunk, Incoming, MessageKind
from hpc_refer.report.schema import log_messages

pytestmark = pytest.mark.mpi_skip

KS = ["--env", "KS", "--chunk-len", "1000", "--log-every", "500", "--replay.learn-start",
      "500", "--replay.size", "4000", f"--{VRacer.name}.batch", "32",
      f"--{VRacer.name}.hidden", "16,16"]


def equal(remaining: int, waiting: tuple[int, ...], rank: int, chunk_len: int) -> list[int]:
    """The budgets where every actor weighs the same and none runs."""
    return grant_steps(remaining, waiting, 0, [1] * waiting[rank], rank, chunk_len)


def test_budgets_share_what_remains_and_never_exceed_it():
    # Plenty left: a whole chunk each, on every learner.
    assert equal(10_000, (2, 1), 0, 1000) == [1000, 1000]
    assert equal(10_000, (2, 1), 1, 1000) == [1000]
    # Near the end: equal shares, the odd steps to the first actors in learner order.
    assert equal(1502, (2, 1), 0, 1000) == [501, 501]
    assert equal(1502, (2, 1), 1, 1000) == [500]
    # Less left than actors wait: some get nothing (they keep waiting).
    assert equal(1, (1, 2), 1, 1000) == [0, 0]
    assert equal(1, (1, 2), 0, 1000) == [1]
    assert equal(0, (3,), 0, 1000) == [0, 0, 0]
    assert equal(-5, (1,), 0, 1000) == [0]
    assert equal(7, (0, 2), 0, 1000) == []
    for remaining in range(0, 40):
        for waiting in ((1,), (3,), (2, 0), (1, 4), (3, 2, 5)):
            grants = [g for rank in range(len(waiting))
                      for g in equal(remaining, waiting, rank, 4)]
            assert len(grants) == sum(waiting)
            assert sum(grants) == min(remaining, 4 * sum(waiting))
            assert max(grants) - min(grants) <= 1 or max(grants) == 4


def test_budgets_follow_the_speeds_and_leave_the_running_actors_their_part():
    # One learner, a slow and a 4x faster actor waiting, none running: 1 : 4.
    assert grant_steps(100, (5000,), 0, [1000, 4000], 0, 1000) == [20, 80]
    # Two learners: learner 1's waiting actor weighs 3000 of the 5000 waiting.
    assert grant_steps(100, (2000, 3000), 0, [1000, 1000], 0, 1000) == [20, 20]
    assert grant_steps(100, (2000, 3000), 0, [3000], 1, 1000) == [60]
    # Running actors of 3x the waiting one's speed keep 3/4 of the remainder for later.
    assert grant_steps(100, (1000,), 3000, [1000], 0, 1000) == [25]
    # A slow actor's grant shrinks before a fast one's does: at R = 200 beside one 4x
    # faster running actor, the slow one gets 40 steps (what it takes while the other
    # takes 160), the fast one (beside the slow running) its whole chunk.
    assert grant_steps(200, (1000,), 4000, [1000], 0, 50) == [40]
    assert grant_steps(200, (4000,), 1000, [4000], 0, 50) == [50]


@settings(max_examples=300, deadline=None)
@given(remaining=st.integers(-10, 5000), running=st.integers(0, 10**6),
       speeds=st.lists(st.lists(st.integers(1, 10**6), max_size=4), min_size=1, max_size=4),
       chunk_len=st.integers(1, 300))
def test_budgets_never_exceed_the_remainder_and_none_stall_the_run(remaining, running, speeds,
                                                                  chunk_len):
    """Over all learners the budgets sum to at most max(R, 0), each within [0, chunk_len];
    the waiting actors get floor(R V_w / (V_w + V_r)) unless the cap cuts it; and where none
    runs and steps remain, some waiting actor gets a step (the run goes on)."""
    waiting = tuple(sum(s) for s in speeds)
    grants = [g for rank, own in enumerate(speeds)
              for g in grant_steps(remaining, waiting, running, own, rank, chunk_len)]
    assert len(grants) == sum(len(s) for s in speeds)
    assert all(0 <= g <= chunk_len for g in grants)
    assert sum(grants) <= max(remaining, 0)
    if grants and remaining > 0:
        owed = remaining * sum(waiting) // (sum(waiting) + running)
        assert sum(grants) == owed or max(grants) == chunk_len
        if running == 0:
            assert sum(grants) >= 1


def end_game(step_s: list[float], steps: int, chunk_len: int, by_speed: bool) -> list[float]:
    """A learner granting ``steps`` to actors whose steps take ``step_s`` seconds (replies
    take no time): the time at which each actor took its last step. With ``by_speed``, the
    grants of :func:`grant_steps` from each actor's measured speed (the rule of the loop),
    else equal shares among the waiting actors (the rule before speeds)."""
    n = len(step_s)
    now, left, done_at = 0.0, steps, [0.0] * n
    speeds: list[int | None] = [None] * n
    running: dict[int, tuple[float, int]] = {}  # actor: (time its grant ends, its grant)
    waiting = list(range(n))
    while True:
        measured = by_speed and all(v is not None for v in speeds)
        weight = [(v if measured else 1) or 1 for v in speeds]
        grants = grant_steps(left, (sum(weight[a] for a in waiting),),
                             sum(weight[a] for a in running) if by_speed else 0,
                             [weight[a] for a in waiting], 0, chunk_len)
        for actor, grant in zip(list(waiting), grants, strict=True):
            if grant:
                waiting.remove(actor)
                running[actor] = (now + grant * step_s[actor], grant)
                left -= grant
        if not running:
            return done_at
        actor = min(running, key=lambda a: running[a][0])
        now, grant = running.pop(actor)
        done_at[actor] = now
        speeds[actor] = speed(grant, grant * step_s[actor])
        waiting.append(actor)


def test_near_the_end_no_actor_waits_for_a_slow_ones_last_chunk():
    """56 actors, one 4x slower (BENCHMARKS 23's slow case), chunks of 10 steps: granted by
    speed, every actor steps until the last steps are taken but for at most one slow step,
    and the run ends within one slow step of the ideal (the steps over the summed rates);
    with equal shares the slow actor's last chunk (40 s) held the run's end alone."""
    step_s = [4.0] + [1.0] * 55
    for steps in (6720, 6733, 20_000):
        done_at = end_game(step_s, steps, 10, by_speed=True)
        assert max(done_at) - min(done_at) <= 4.0, (steps, max(done_at) - min(done_at))
        ideal = steps / sum(1 / s for s in step_s)
        assert max(done_at) <= ideal + 4.0, (steps, max(done_at), ideal)
    held = end_game(step_s, 6720, 10, by_speed=False)
    assert max(held) - min(held) >= 30.0


def chunk_of(steps: int) -> Chunk:
    rows = np.zeros((steps, 1), np.float32)
    return Chunk(rows, rows, rows[:, 0], rows, rows, OPEN)


def test_an_actors_speed_is_its_latest_chunk_over_the_time_since_its_release():
    book = ActorBook.of([3, 4])
    assert book.unmeasured == 2
    book.waiting.clear()
    book.release(3, 10, now=100.0)
    book.release(4, None, now=100.0)  # an evaluation round: no budget, no speed
    assert book.note(Incoming(3, MessageKind.CHUNK, chunk=chunk_of(5)), now=102.5)
    assert book.speeds == {3: 2000}  # 5 steps in 2.5 s: 2000 steps per 1000 s
    assert book.unmeasured == 1
    book.note(Incoming(4, MessageKind.EVAL), now=103.0)
    assert book.speeds == {3: 2000} and book.speed_sum([3]) == 2000
    book.release(3, 10, now=110.0)
    book.note(Incoming(3, MessageKind.CHUNK, chunk=chunk_of(5)), now=110.5)
    assert book.speeds[3] == 10_000, "the latest chunk's speed, not an average"
    assert speed(1, 0.0) == SPEED_CAP and speed(1, 10**6) == 1


def last_record(run_dir: Path) -> dict:
    return json.loads((run_dir / "train.jsonl").read_text().splitlines()[-1])


def last_progress(run_dir: Path) -> str:
    return [x for x in log_messages(run_dir / "log.txt") if x.startswith("steps ")][-1]


def mpirun(n: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([mpirun_exe(), "-n", str(n), sys.executable, "-m", "hpc_refer.run",
                           *args], capture_output=True, text=True, timeout=400,
                          env=mpi_env(), check=False)


def test_two_actors_stop_at_exactly_the_steps_asked_for(in_tmp):
    """mpirun -n 3: 1 learner, 2 actors of 1000-step chunks, 3000 steps: without budgets
    the second actor's last chunk took the run to 4000."""
    done = mpirun(3, *KS, "--steps", "3000", "--run-dir", "r")
    assert done.returncode == 0, done.stderr[-3000:]
    assert last_record(in_tmp / "r")["env_step"] == 3000
    assert "steps 3000/3000 (100.0%)" in last_progress(in_tmp / "r")
    records = [json.loads(x) for x in (in_tmp / "r" / "train.jsonl").read_text().splitlines()]
    busy = [r["learner_busy"] for r in records]
    assert all(0.0 <= b <= 1.0 for b in busy), busy
    assert busy[0] < 1.0, f"before training starts the learner waits for its actors: {busy}"


def test_two_learners_stop_at_exactly_the_steps_asked_for_and_after_a_restart(in_tmp):
    """mpirun -n 4 (2 learners, one actor each): exact at 3000, and exact again when the
    run is continued from its checkpoint to 4700 (budgets are granted anew)."""
    done = mpirun(4, *KS, "--learners", "2", "--steps", "3000", "--run-dir", "r",
                  "--checkpoint-every", "1000")
    assert done.returncode == 0, done.stderr[-3000:]
    assert last_record(in_tmp / "r")["env_step"] == 3000
    assert "steps 3000/3000 (100.0%)" in last_progress(in_tmp / "r")
    assert (in_tmp / "r" / "checkpoints" / "step-000000003000").is_dir()
    more = mpirun(4, "--restart", "r", "--steps", "4700", "--learners", "2")
    assert more.returncode == 0, more.stderr[-3000:]
    assert last_record(in_tmp / "r")["env_step"] == 4700
    assert "steps 4700/4700 (100.0%)" in last_progress(in_tmp / "r")
