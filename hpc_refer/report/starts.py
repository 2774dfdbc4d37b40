"""The run report's section on a run's starts and stops (log.txt): when each start of the run
directory began and from which checkpoint, how it ended (finished, stopped with the reason of
its stop record, or killed without one), and the gap before the next start: the hours the run
stood still and the environment steps it took again (those after the checkpoint it resumed
from, lost with the start that took them).

A start is the line of :data:`~hpc_refer.report.schema.START_LINE`, a stop the line of
:data:`~hpc_refer.report.schema.STOP_LINE` (both written by learner 0); the last step a
start reached is that of its last progress line (:data:`~hpc_refer.report.schema.STEP_LINE`)
or of its stop.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import datetime

from hpc_refer.report.figures import absent
from hpc_refer.report.schema import (
    LOG_LINE,
    START_LINE,
    STEP_LINE,
    STOP_LINE,
    RunState,
    parse_log_time,
)

FINISHED = f"run {RunState.of('finished').line()}"
"""The stop record's line of a finished start in log.txt (:func:`~hpc_refer.report.metrics
.record_stop`)."""


@dataclass
class Start:
    """One start of a run directory, as its log lines tell it."""

    began: datetime
    from_step: int
    """The step of the checkpoint it resumed from (0 for the first start)."""
    last: datetime
    """The time of its last log line."""
    last_step: int
    ended: str = ""
    """'finished', 'stopped: <why>', or '' (no stop record: killed, or still running)."""


def starts(lines: list[str]) -> list[Start]:
    """The starts of log.txt's ``lines``, in order."""
    out: list[Start] = []
    for line in lines:
        match = LOG_LINE.match(line)
        if match is None or match["rank"] != "0":
            continue
        when, message = parse_log_time(match["time"]), match["message"]
        if (start := START_LINE.match(message)) is not None:
            step = int(start["step"] or 0)
            out.append(Start(when, step, when, step))
            continue
        if not out:
            continue
        current = out[-1]
        current.last = when
        if (stop := STOP_LINE.match(message)) is not None:
            current.last_step, current.ended = int(stop["step"]), f"stopped: {stop['why']}"
        elif (progress := STEP_LINE.match(message)) is not None:
            current.last_step = int(progress["step"])
        elif message == FINISHED:
            current.ended = "finished"
    return out


def starts_section(names: list[str], logs: list[list[str]]) -> str:
    """A table of each run's starts, the gap before each restart in wall-clock time and in
    environment steps taken again; a line where no run was restarted."""
    rows = []
    for name, lines in zip(names, logs, strict=True):
        runs = starts(lines)
        for i, start in enumerate(runs):
            after = runs[i + 1] if i + 1 < len(runs) else None
            ended = start.ended or ("no stop record (killed)" if after else "running or killed")
            gap = ("-" if after is None else
                   f"{(after.began - start.last).total_seconds():.0f} s down, "
                   f"{max(start.last_step - after.from_step, 0)} steps taken again")
            rows.append("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
                name, start.began, start.from_step, start.last_step, ended, gap)) + "</tr>")
    if len(rows) == len(names):
        return absent("Each run started once (no restart).")
    return ("<table><tr><th>run</th><th>start</th><th>from step</th><th>last step</th>"
            "<th>how it ended</th><th>gap to the next start</th></tr>" + "".join(rows)
            + "</table><p>The gap: wall-clock time from a start's last log line to the next "
            "start, and the environment steps after the checkpoint the next start resumed "
            "from, which it took again.</p>")
