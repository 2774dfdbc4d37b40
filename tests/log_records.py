"""hpc_refer's own log records in pytest's ``caplog``.

caplog's handler sits on the root logger, so it holds the records of every logger that
propagates there, not only hpc_refer's: on a busy machine torch (twelve empty DEBUG records
of ``torch.__trace``, say), MuJoCo or a library's warnings land in it too. A test asserts on
the records of the loggers it means; these helpers keep those of one logger and its children
(by default hpc_refer's, :data:`hpc_refer.report.logs.ROOT`), in the order they were logged, so
that a count or an exact list stays as strict as it was, over hpc_refer's records only.
"""

from __future__ import annotations

import logging

import pytest

from hpc_refer.report.logs import ROOT


def is_under(name: str, logger: str = ROOT) -> bool:
    """Whether a record's logger ``name`` is ``logger`` or one of its children."""
    return name == logger or name.startswith(f"{logger}.")


def own_records(caplog: pytest.LogCaptureFixture,
                logger: str = ROOT) -> list[logging.LogRecord]:
    """The records caplog holds of ``logger`` and its children (by default hpc_refer's)."""
    return [r for r in caplog.records if is_under(r.name, logger)]


def own_messages(caplog: pytest.LogCaptureFixture, logger: str = ROOT) -> list[str]:
    """The messages (``getMessage()``) of :func:`own_records`."""
    return [r.getMessage() for r in own_records(caplog, logger)]
