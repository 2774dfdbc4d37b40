"""The report's starts and stops (hpc_refer/report/starts.py): each start of a run directory
from log.txt, how it ended and the gap before the next start."""

from __future__ import annotations

from hpc_refer.report.starts import starts, starts_section

LOG = """\
2026-01-01 10:00:00 [0] run directory r (1 learners, 2 environment teams of 1 ranks)
2026-01-01 10:05:00 [0] steps 500/2000 (25.0%) | 10 steps/s
2026-01-01 10:06:00 [1] steps 900/2000 (45.0%) | a line of another rank
2026-01-01 10:09:00 [0] checkpoint at step 1000: r/checkpoints
2026-01-01 10:10:00 [0] steps 1200/2000 (60.0%) | 10 steps/s
2026-01-01 11:00:00 [0] run directory r (1 learners, 2 environment teams of 1 ranks), \
resumed from r/checkpoints/step-000000001000
2026-01-01 11:01:00 [0] steps 1300/2000 (65.0%) | 10 steps/s
2026-01-01 11:02:00 [0] stopped at step 1350 (MPI ranks lost: 2 (b)); resume with: mpirun ...
2026-01-01 11:02:00 [0] error: run failed: MPI ranks lost: 2 (b)
2026-01-01 11:30:30 [0] run directory r (1 learners, 1 environment teams of 1 ranks), \
resumed from r/checkpoints/step-000000001350
2026-01-01 11:40:00 [0] steps 2000/2000 (100.0%) | 10 steps/s
2026-01-01 11:40:00 [0] run finished
"""


def test_each_start_its_end_and_the_gap_to_the_next():
    runs = starts(LOG.splitlines())
    assert [(s.from_step, s.last_step, s.ended) for s in runs] == [
        (0, 1200, ""), (1000, 1350, "stopped: MPI ranks lost: 2 (b)"), (1350, 2000, "finished")]
    table = starts_section(["r"], [LOG.splitlines()])
    assert "no stop record (killed)" in table
    assert "3000 s down, 200 steps taken again" in table  # 10:10 to 11:00; 1200 - 1000
    assert "1710 s down, 0 steps taken again" in table  # 11:02:00 to 11:30:30
    assert table.count("<tr>") == 4


def test_a_run_started_once_has_no_table():
    lines = LOG.splitlines()[:5]
    assert "started once" in starts_section(["r"], [lines])
