"""One logging mechanism: Python's :mod:`logging`, configured once per rank by the entry
points (:func:`configure`); library modules only call ``logging.getLogger(__name__)``.

Every line names its rank (``[r]``, the rank in hpc_refer's communicator). Rank 0 writes its
INFO lines (progress, checkpoints, start and stop) to standard output and warnings and errors
to standard error; its run directory (:class:`~hpc_refer.report.metrics.RunDirectory`) adds a
handler writing all of them, time-stamped, to ``log.txt`` (:func:`open_log_file`). The other
ranks are quiet unless they warn (standard error, which mpirun forwards): a solver fault on an
actor rank, a failed compile on a learner. The loggers keep propagating to the root logger,
so an application (or pytest's capture) that configures logging itself sees hpc_refer's
records too. Any rank appends its stop record to log.txt in the same form
(:func:`append_record`), beside rank 0's handler.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TextIO

ROOT = "hpc_refer"
"""The logger every hpc_refer module logs under (``hpc_refer.<module>``)."""

_HANDLERS: list[logging.Handler] = []


class RankFormatter(logging.Formatter):
    """``[rank] message``, with ``warning: `` / ``error: `` before the message of those levels
    and, with ``stamp``, the time first."""

    def __init__(self, rank: int, stamp: bool) -> None:
        super().__init__("%(asctime)s %(message)s" if stamp else "%(message)s",
                         datefmt="%Y-%m-%d %H:%M:%S")
        self.rank = rank

    def formatMessage(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
        record.message = f"[{self.rank}] {level}{record.getMessage()}"
        return super().formatMessage(record)


class _Below(logging.Filter):
    """Passes records below ``level`` (INFO to stdout, warnings to stderr)."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < self.level


def configure(rank: int, out: TextIO | None = None, err: TextIO | None = None) -> None:
    """Set up this rank's console logging (again: the handlers of an earlier call are
    replaced). Rank 0: INFO lines to ``out`` (default standard output), warnings and errors
    to ``err`` (default standard error); other ranks: warnings and errors to ``err`` only."""
    logger = logging.getLogger(ROOT)
    for handler in _HANDLERS:
        logger.removeHandler(handler)
        handler.close()
    _HANDLERS.clear()
    logger.setLevel(logging.INFO)
    errors = logging.StreamHandler(err if err is not None else sys.stderr)
    errors.setLevel(logging.WARNING)
    _HANDLERS.append(errors)
    if rank == 0:
        lines = logging.StreamHandler(out if out is not None else sys.stdout)
        lines.addFilter(_Below(logging.WARNING))
        _HANDLERS.append(lines)
    for handler in _HANDLERS:
        handler.setFormatter(RankFormatter(rank, stamp=False))
        logger.addHandler(handler)


def open_log_file(path: Path) -> logging.Handler:
    """Also write every record of rank 0 (INFO and above, time-stamped) to ``path``
    (appended): the run directory's log.txt. Returns the handler for :func:`close_log_file`."""
    logger = logging.getLogger(ROOT)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    handler = logging.FileHandler(path, mode="a", encoding="utf-8")
    handler.setFormatter(RankFormatter(0, stamp=True))
    logger.addHandler(handler)
    return handler


def close_log_file(handler: logging.Handler) -> None:
    """Flush and close a log file of :func:`open_log_file`."""
    logging.getLogger(ROOT).removeHandler(handler)
    handler.close()


def append_record(path: Path, rank: int, level: int, message: str) -> None:
    """Append ``message`` to ``path`` as a record of rank ``rank`` at ``level``, formatted as
    log.txt's handler formats it (time, ``[rank]``, ``error: `` for an error), by one
    ``write`` on the file opened for appending: how a rank without that handler (any rank
    but 0) records why the run stopped. Lines appended so do not interleave with the
    handler's on a POSIX file system (a local disk, Lustre, GPFS); NFS does not promise it
    for writers on different nodes."""
    record = logging.LogRecord(ROOT, level, __file__, 0, message, None, None)
    data = (RankFormatter(rank, stamp=True).format(record) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
