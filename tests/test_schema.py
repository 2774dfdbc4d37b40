"""The run-file schema (issue 23, points 3 and 6): one module names the run directory's files
and the fields of their records; the interval record of ``train.jsonl`` is typed and reads
the lines today's and earlier runs wrote; the tools that read run files (report, plot)
import neither torch nor numba, nor anything above them, and the run directory's writer
(metrics) neither the environments nor the report."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from mpi_launch import run_snippet
from output_lines import one_line_with

from hpc_refer.report.schema import RHO_EDGES, TRAIN_FILE, IntervalRecord, read_intervals

FIXTURES = Path(__file__).resolve().parent / "fixtures"

HEAVY = ("torch", "numba", "mpi4py", "hpc_refer.loop.learner", "hpc_refer.algorithms")
"""What the report and the plot must not import: the learning stack and MPI."""


def test_report_and_plot_import_neither_torch_nor_numba():
    out = run_snippet("import sys\n"
                      "import hpc_refer.report.curves, hpc_refer.report, hpc_refer.report.schema\n"
                      f"print('loaded:', sorted(m for m in {HEAVY!r} if m in sys.modules))\n")
    assert one_line_with(out, "loaded: ") == "loaded: []", out


def test_the_run_directory_imports_neither_the_environments_nor_the_report():
    """Its creator hands RunDirectory the episode metric names and the report writer."""
    above = ("hpc_refer.envs", "hpc_refer.report.build", "hpc_refer.report.curves", "matplotlib",
             *HEAVY)
    out = run_snippet("import sys\n"
                      "import hpc_refer.report.metrics\n"
                      f"print('loaded:', sorted(m for m in {above!r} if m in sys.modules))\n")
    assert one_line_with(out, "loaded: ") == "loaded: []", out


def record(**stats: float) -> IntervalRecord:
    return IntervalRecord(env_step=600, grad_step=400, env_steps_per_s=275.0,
                          grad_steps_per_s=366.0, learner_busy=0.97, beta=0.04, c_max=4.9,
                          lr=1e-4, far_fraction=0.0, stored=509, reward_scale=0.2,
                          solver_faults=1, rho_hist=(0, 3, 5), compiled=True, stats=stats)


def test_a_record_goes_to_one_flat_json_line_and_back():
    rec = record(loss_pi=-25.8, kl=4.8e-4, near_fraction=1.0)
    line = rec.to_json()
    assert "\n" not in line
    data = json.loads(line)
    # flat: the statistics beside the fixed fields, as train.jsonl always held them
    assert data["loss_pi"] == -25.8 and data["compiled"] is True and data["rho_hist"] == [0, 3, 5]
    assert list(data)[:2] == ["env_step", "grad_step"] and "stats" not in data
    assert IntervalRecord.from_json(line) == rec
    assert rec.scalars()["beta"] == 0.04 and rec.scalars()["kl"] == 4.8e-4
    assert "rho_hist" not in rec.scalars() and "compiled" not in rec.scalars()


def test_the_record_holds_its_declared_types():
    rec = IntervalRecord(**{**record().__dict__, "rho_hist": [1.0, 2.0], "stored": 3.0,
                            "beta": 1, "stats": {"q": 2}})
    assert rec.rho_hist == (1, 2) and type(rec.stored) is int and type(rec.beta) is float
    assert type(rec.stats["q"]) is float
    with pytest.raises(ValueError, match="beta"):
        record(beta=1.0)  # a statistic may not take a fixed field's name


def test_an_old_line_is_read_compiled_false_and_its_other_keys_are_statistics():
    # a line of tests/fixtures/schema1 (written at 2299f67): flat, no "compiled"
    line = (FIXTURES / "schema1" / TRAIN_FILE).read_text().splitlines()[-1]
    rec = IntervalRecord.from_json(line)
    assert rec.compiled is False
    assert rec.env_step == 600 and rec.grad_step == 400 and rec.stored == 509
    assert set(rec.stats) == {"loss_pi", "loss_v", "kl", "near_fraction"}
    assert rec.stats["near_fraction"] == 1.0 and len(rec.rho_hist) == len(RHO_EDGES) - 1
    # read back, the old line's keys and values are all there (plus compiled)
    assert {**json.loads(line), "compiled": False} == json.loads(rec.to_json())
    ddpg = read_intervals(FIXTURES / "schema1_ddpg" / TRAIN_FILE)
    assert [r.env_step for r in ddpg] == [300, 600]
    assert {"loss_q", "loss_mu"} <= set(ddpg[-1].stats)


def test_lines_from_before_some_fields_existed_are_read():
    """The first runs wrote no learner_busy, solver_faults, rho_hist (nor compiled)."""
    line = json.dumps({"env_step": 200, "grad_step": 0, "env_steps_per_s": 9.0,
                       "grad_steps_per_s": 0.0, "beta": 0.0, "c_max": 5.0, "lr": 1e-4,
                       "far_fraction": 0.0, "stored": 200, "reward_scale": 1.0})
    rec = IntervalRecord.from_json(line)
    assert rec.rho_hist == () and rec.solver_faults == 0 and math.isnan(rec.learner_busy)
    assert rec.stats == {} and not rec.compiled


@pytest.mark.parametrize("line, match", [
    ('{"grad_step": 1}', "env_step"),
    ("[1, 2]", "JSON object"),
    ('{"env_step": 1, "grad_step": 0, "env_steps_per_s": 1, "grad_steps_per_s": 0, '
     '"beta": 0, "c_max": 5, "lr": 1, "far_fraction": 0, "stored": 1, "reward_scale": 1, '
     '"note": "x"}', "note"),
])
def test_a_line_that_is_no_record_says_what_is_wrong(line, match):
    with pytest.raises(ValueError, match=match):
        IntervalRecord.from_json(line)


def test_reading_skips_a_line_cut_by_a_killed_run(tmp_path):
    path = tmp_path / TRAIN_FILE
    path.write_text(record().to_json() + "\n" + record().to_json()[:40])
    assert read_intervals(path) == [record()]
    assert read_intervals(tmp_path / "absent.jsonl") == []
