"""One writer per run directory: the advisory lock a running job holds on ``RUN_DIR/run.lock``.

The rank that writes the run directory (rank 0) takes the lock before it touches anything in
it (:meth:`RunLock.acquire`: before a restart verifies, prunes or cuts anything) and holds it
until the run ends. A second run, ``--restart`` or ``--run-dir`` on a held directory is
refused in one line naming the holder: its host, pid and since when, the record the holder
wrote into the file (:class:`Holder`, JSON).

How a holder is told from a lock left behind (the choices)
----------------------------------------------------------
* ``flock(2)`` (exclusive, non-blocking) on the file decides first. The kernel drops it when
  the holding process ends, however it ends (SIGKILL, an out-of-memory kill), so a lock left
  by a killed job is free at once, with nothing to clean up. It is coherent across nodes on a
  local file system, on NFS (Linux emulates flock with POSIX locks, which NFS takes on the
  server), on Lustre mounted with ``-o flock``, on GPFS (Spectrum Scale) and on BeeGFS with
  global file locks.
* The record covers what flock cannot. A record of *this* host whose process is alive (same
  pid, and the same start time where ``/proc`` tells, so a reused pid is not taken for it) is
  a holder even where flock let us in: a file system whose flock does not lock. Where flock
  is not supported at all (``ENOLCK``: NFS without a lock daemon; ``ENOSYS``,
  ``EOPNOTSUPP``: Lustre mounted without ``flock``), a record of this host is judged by its
  process alone, and one of another host, whose processes cannot be seen from here, is taken
  as a holder: the refusal says to remove the file once that job is known to have ended.
* The limit: where flock succeeds but locks within one node only (Lustre's
  ``-o localflock``), a run on another node is not seen; its record is taken for one left by
  a killed job. Mount with ``flock``, or keep the runs of one directory on one node.

The holder empties the record when it releases the lock; a record that stays (its process
was killed) is :attr:`RunLock.previous` for the next holder, which names it when the run it
continues ended without a stop record (:func:`died_message`). The file itself is never
removed: a process that opened it just before an unlink could lock the removed file while
another locks a new one, and both would believe they hold the directory.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

from hpc_refer.report.schema import LOCK_FILE

NO_FLOCK = frozenset({errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP,
                      errno.EINVAL})
"""The errors of a file system that does not support flock (the record alone decides)."""


class RunLockedError(OSError):
    """Another run holds the run directory (the message names it)."""


def _start_time(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks after boot, ``/proc/<pid>/stat``
    field 22); None where it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


@dataclass(frozen=True)
class Holder:
    """Who holds (or last held) a run directory, as the lock file records it."""

    host: str
    pid: int
    since: str
    """Local time the lock was taken, ``YYYY-MM-DD HH:MM:SS +ZZZZ``."""
    started: int | None = None
    """The process's start time (:func:`_start_time`), to tell it from a later process that
    got the same pid; None where the host has no ``/proc``."""

    def __str__(self) -> str:
        return f"host {self.host}, pid {self.pid}, since {self.since}"

    @classmethod
    def this_process(cls) -> Holder:
        pid = os.getpid()
        return cls(platform.node(), pid, time.strftime("%Y-%m-%d %H:%M:%S %z"),
                   _start_time(pid))

    def on_this_host(self) -> bool:
        return self.host == platform.node()

    def alive(self) -> bool:
        """Whether this host still runs the recorded process (this one included)."""
        if self.pid <= 0:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # it exists, under another user
            pass
        now = _start_time(self.pid)
        return self.started is None or now is None or now == self.started

    @classmethod
    def parse(cls, text: str) -> Holder | None:
        """The record of a lock file; None when it is empty or not a record (a file being
        written, or emptied by a release)."""
        try:
            data = json.loads(text)
            holder = cls(str(data["host"]), int(data["pid"]), str(data["since"]),
                         None if data.get("started") is None else int(data["started"]))
        except (ValueError, KeyError, TypeError):
            return None
        return holder


class LockState(NamedTuple):
    """What a run directory's lock says now."""

    held: bool
    """Whether a live process holds it."""
    record: Holder | None
    """The record in the file: the holder's, or the one a killed holder left; None: none."""


def _flock(fd: int, mode: int) -> bool | None:
    """``flock(fd, mode | LOCK_NB)``: True when taken, False when another process holds it,
    None where the file system does not support flock."""
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as err:
        if err.errno in NO_FLOCK:
            return None
        raise
    return True


def _record(fd: int) -> Holder | None:
    os.lseek(fd, 0, os.SEEK_SET)
    return Holder.parse(os.read(fd, 4096).decode("utf-8", "replace"))


def _judge(flocked: bool | None, record: Holder | None) -> LockState:
    """The lock's state from the flock test (:func:`_flock`) and the record (the module's
    docstring: flock first, then a live process of this host, then, without flock, any
    record of another host)."""
    if flocked is False:
        return LockState(True, record)
    if record is None:
        return LockState(False, None)
    if record.on_this_host():
        return LockState(record.alive(), record)
    return LockState(flocked is None, record)


def _describe(state: LockState) -> str:
    return str(state.record) if state.record is not None else (
        "a process that has not written its record yet")


def inspect(run_dir: Path) -> LockState:
    """Whether ``run_dir`` is held, and its lock file's record (for readers: a new run's
    check of ``--run-dir``, the report). Takes a shared lock for the test and drops it;
    writes nothing (a directory without a lock file is not held)."""
    try:
        fd = os.open(run_dir / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return LockState(False, None)
    try:
        flocked = _flock(fd, fcntl.LOCK_SH)
        return _judge(flocked, _record(fd))
    finally:
        os.close(fd)  # (drops the shared lock)


def busy_message(run_dir: Path, state: LockState) -> str:
    """The one-line refusal of a held run directory, naming the holder."""
    hint = ""
    if state.record is not None and not state.record.on_this_host():
        hint = (f"; if that job has ended (this file system's locks could not tell), remove "
                f"{run_dir / LOCK_FILE}")
    return (f"{run_dir} is in use by another run ({_describe(state)}): one run writes a "
            f"run directory at a time; wait for it to end or stop it (SIGUSR1 checkpoints "
            f"and stops it){hint}")


def died_message(record: Holder | None, subject: str = "the run") -> str:
    """The one line that says a run (``subject``) ended without a stop record:
    ``state.txt`` still says running and no process holds its lock; ``record``: the holder
    it left in the lock file, if any."""
    who = f" ({record})" if record is not None else ""
    return (f"{subject}{who} ended without a stop record: state.txt still says running but "
            f"no process holds its lock, so it was killed (SIGKILL, out of memory, a node "
            f"failure or a time limit without a warning signal); its last checkpoint stands")


class RunLock:
    """The held lock of one run directory (see the module docstring): take it with
    :meth:`acquire`, give it back with :meth:`release` (or let the process end)."""

    def __init__(self, path: Path, fd: int, previous: Holder | None) -> None:
        self.path = path
        self._fd: int | None = fd
        self.previous = previous
        """The record a holder that did not release the lock left (a killed run), if any."""

    @classmethod
    def acquire(cls, run_dir: Path) -> RunLock:
        """Hold ``run_dir`` (an existing directory) for this process, or raise
        :class:`RunLockedError` naming the live holder."""
        path = run_dir / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            flocked = _flock(fd, fcntl.LOCK_EX)
            state = _judge(flocked, _record(fd))
            if state.held:
                raise RunLockedError(busy_message(run_dir, state))
            record = json.dumps(asdict(Holder.this_process())).encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, record, 0)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, state.record)

    def release(self) -> None:
        """Empty the record and drop the lock (again: nothing)."""
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
        finally:
            os.close(self._fd)  # (drops the flock)
            self._fd = None
