"""One writer per run directory (issue 25, point 7): a running job holds the lock of its run
directory; a second run, ``--restart`` or ``--run-dir`` on it is refused in one line naming the
holder; a lock left by a killed job is stale, and a run killed without a stop record is said
so by the next ``--restart`` and by the report.

The holders are real second processes (a Python snippet that takes the lock, a real run),
killed with SIGKILL where a test needs a lock left behind."""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import json
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from output_lines import one_error_line

from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.report.build import main as report_main
from hpc_refer.report.lock import Holder, RunLock, RunLockedError, _start_time, inspect
from hpc_refer.run.main import main as run_main

pytestmark = pytest.mark.mpi_skip

SMALL = ["--replay.size", "2000", "--replay.learn-start", "300", f"--{VRacer.name}.batch", "32",
         f"--{VRacer.name}.hidden", "16,16", "--log-every", "200", "--chunk-len", "100"]
HOLD = ("import sys\nfrom pathlib import Path\nfrom hpc_refer.report.lock import RunLock\n"
        "lock = RunLock.acquire(Path(sys.argv[1]))\nprint('held', flush=True)\n"
        "sys.stdin.read()\n")
"""A second process: hold the lock of RUN_DIR (argv[1]) until its standard input closes."""
WAIT = "import sys\nprint('up', flush=True)\nsys.stdin.read()\n"
"""A live process that holds nothing (until its standard input closes)."""


def start(script: str, *args: str) -> subprocess.Popen:
    """Run ``script`` in a second Python process; return once it printed its line ``held``
    or ``up`` (other output before it is passed over)."""
    proc = subprocess.Popen([sys.executable, "-c", script, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    seen = []
    while (line := proc.stdout.readline()) and line.strip() not in ("held", "up"):
        seen.append(line)
    assert line, (seen, proc.stderr.read() if proc.stderr else "")
    return proc


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def files(run_dir: Path) -> dict[str, bytes]:
    """Every file of ``run_dir`` (the lock file aside) and its bytes."""
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*"))
            if p.is_file() and p.name != "run.lock"}


def test_a_held_directory_is_refused_by_restart_and_run_dir_naming_the_holder(in_tmp, capsys):
    assert run_main(["--env", "Pendulum-v1", "--steps", "400", "--run-dir", "r", *SMALL]) == 0
    before = files(in_tmp / "r")
    holder = start(HOLD, "r")
    try:
        capsys.readouterr()
        for argv in (["--restart", "r", "--steps", "800"],
                     ["--env", "Pendulum-v1", "--steps", "400", "--run-dir", "r"]):
            assert run_main(argv) == 2
            line = one_error_line(capsys.readouterr().err)
            assert f"host {platform.node()}, pid {holder.pid}, since 20" in line, line
            assert "is in use by another run" in line
        assert files(in_tmp / "r") == before  # nothing of the held directory was touched
    finally:
        kill(holder)
    # Killed, its lock is stale at once: the restart takes the directory over.
    assert run_main(["--restart", "r", "--steps", "800"]) == 0
    assert (in_tmp / "r" / "state.txt").read_text() == "finished\n"
    assert "ended without a stop record" not in (in_tmp / "r" / "log.txt").read_text()


def test_a_live_process_recorded_on_this_host_holds_even_where_flock_let_us_in(tmp_path):
    """A file system whose flock does not lock: the record of a live process of this host
    still refuses; a record whose pid now belongs to another process (another start time)
    does not, nor does one whose process has ended."""
    waiting = start(WAIT)
    recorded = Holder(platform.node(), waiting.pid, "2026-01-01 00:00:00 +0000",
                      _start_time(waiting.pid))
    try:
        write_record(tmp_path, recorded)
        assert inspect(tmp_path).held
        with pytest.raises(RunLockedError, match=f"pid {waiting.pid}, since 2026-01-01"):
            RunLock.acquire(tmp_path)
        assert recorded.started is not None  # (Linux: /proc gives start times)
        reused = dataclasses.replace(recorded, started=recorded.started + 1)
        write_record(tmp_path, reused)
        assert not inspect(tmp_path).held
        write_record(tmp_path, recorded)
    finally:
        kill(waiting)
    lock = RunLock.acquire(tmp_path)
    assert lock.previous == recorded  # the record the killed process left
    now = Holder.parse((tmp_path / "run.lock").read_text())
    assert now is not None and now.pid == Holder.this_process().pid
    lock.release()
    assert (tmp_path / "run.lock").read_text() == "" and not inspect(tmp_path).held


def write_record(run_dir: Path, holder: Holder) -> None:
    """A lock file holding ``holder``'s record, its flock not taken."""
    (run_dir / "run.lock").write_text(json.dumps(dataclasses.asdict(holder)))


def test_a_record_of_another_host_yields_to_flock_and_holds_without_it(tmp_path, monkeypatch):
    """flock decides for another host's record (its processes cannot be seen from here);
    where the file system has no flock, such a record holds until the user removes it, and
    one of this host holds while its process lives."""
    other = Holder("node-that-is-not-this-one", 4242, "2026-01-01 00:00:00 +0000", 99)
    write_record(tmp_path, other)
    lock = RunLock.acquire(tmp_path)  # flock free: that job has ended
    assert lock.previous == other
    lock.release()

    def no_flock(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    write_record(tmp_path, other)
    assert inspect(tmp_path).held
    with pytest.raises(RunLockedError) as refused:
        RunLock.acquire(tmp_path)
    assert f"host {other.host}, pid 4242" in str(refused.value)
    assert f"remove {tmp_path / 'run.lock'}" in str(refused.value)
    waiting = start(WAIT)
    mine = Holder(platform.node(), waiting.pid, other.since, _start_time(waiting.pid))
    write_record(tmp_path, mine)
    with pytest.raises(RunLockedError, match=f"pid {waiting.pid}"):
        RunLock.acquire(tmp_path)
    kill(waiting)
    assert RunLock.acquire(tmp_path).previous == mine  # its process ended: stale


def wait_for_checkpoint(run_dir: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 240
    while not list((run_dir / "checkpoints").glob("step-*")):
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, "no checkpoint within 240 s"
        time.sleep(0.2)


def test_a_run_killed_by_sigkill_is_said_to_have_died_by_report_and_restart(in_tmp, capsys):
    """A real run holds its directory (a restart is refused naming it, the report says it
    runs); SIGKILL leaves state.txt at running and no stop record: the report says it died,
    in one line naming it, and the restart says so in log.txt and resumes."""
    run = subprocess.Popen(
        [sys.executable, "-m", "hpc_refer.run", "--env", "Pendulum-v1", "--steps", "200000",
         "--checkpoint-every", "400", "--run-dir", "r", *SMALL, "--compile", "off"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_checkpoint(in_tmp / "r", run)
        capsys.readouterr()
        assert run_main(["--restart", "r", "--steps", "800"]) == 2
        assert f"pid {run.pid}" in one_error_line(capsys.readouterr().err)
        assert report_main(["r"]) == 0
        assert "died" not in capsys.readouterr().out
        assert "<td>running</td>" in (in_tmp / "r" / "report.html").read_text()
    finally:
        kill(run)
    assert (in_tmp / "r" / "state.txt").read_text() == "running\n"
    assert report_main(["r"]) == 0
    said = [x for x in capsys.readouterr().out.splitlines() if "stop record" in x]
    assert len(said) == 1 and f"pid {run.pid}" in said[0], said
    assert "died without a stop record" in (in_tmp / "r" / "report.html").read_text()
    step = max(int(p.name.split("-")[1]) for p in (in_tmp / "r" / "checkpoints").glob("step-*"))
    assert run_main(["--restart", "r", "--steps", str(step + 400)]) == 0
    log = (in_tmp / "r" / "log.txt").read_text()
    died = [x for x in log.splitlines() if "ended without a stop record" in x]
    assert len(died) == 1 and f"the previous run (host {platform.node()}, pid {run.pid}" in died[0]
    assert (in_tmp / "r" / "state.txt").read_text() == "finished\n"
