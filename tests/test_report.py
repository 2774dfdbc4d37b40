"""The run report (issue 14, point 1): one self-contained HTML page per run or per setting,
every section drawn from what the run directory holds, refreshed during a run by
``--report-every``; the fields a flow solver contributes (KS: u(x, t))."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from interval_records import interval_record
from output_lines import one_error_line

from hpc_refer.algorithms.ddpg import DDPG
from hpc_refer.config.resolve import build_config
from hpc_refer.envs.driver import TeamDriver
from hpc_refer.envs.ks import HORIZON, KuramotoSivashinsky, N
from hpc_refer.report.build import Run, main, render, write_run_report
from hpc_refer.report.metrics import RunDirectory, machine_info
from hpc_refer.report.records import LoggedEpisode
from hpc_refer.report.schema import RHO_EDGES
from hpc_refer.report.series import StepSeries

SECTIONS = ("Runs", "Learning curve", "ReF-ER", "Importance weights rho", "Losses",
            "Throughput", "Solver faults", "Episode metrics", "Per-step series", "Flow fields",
            "Configuration",
            "Machine")


def figures(page: str) -> list[int]:
    """The ``data-points`` of each figure of a page (each figure holds one inline SVG)."""
    return [int(n) for n in re.findall(r'<figure class="plot" data-points="(\d+)">', page)]


def assert_self_contained(page: str) -> None:
    """Nothing is fetched when the page is opened: no external src/href, script or link."""
    assert not re.search(r'(src|href)="(https?:|//)', page)
    assert "<script" not in page and "<link" not in page and "@import" not in page


def fake_run(path: Path, seed: int, *, steps: int = 4000, faults: int = 0,
             metric: bool = True) -> Path:
    """A run directory as a KS run writes it: config, episodes, interval records with the
    rho histogram, a log line about a fault, a field of environment 0, machine.json."""
    config = build_config({"run": {"env": "KS", "seed": seed, "steps": steps}})
    run = RunDirectory(path, config, ("energy",) if metric else ())
    rng = np.random.default_rng(seed)
    for step in range(200, steps + 1, 200):
        run.episode(LoggedEpisode(step, 1 + step // 200 % 2,
                                  float(-1 + step / steps + rng.normal(0, 0.1)), 100,
                                  (float(rng.uniform(0.5, 0.8)),) if metric else (),
                                  step / 500.0))
        hist = np.zeros(len(RHO_EDGES) - 1, int)
        hist[18:22] = rng.integers(10, 100, 4)
        run.interval(interval_record(
            step, grad_step=step // 2, env_steps_per_s=500.0, grad_steps_per_s=250.0,
            learner_busy=0.9, beta=step / steps, c_max=5 - step / steps, far_fraction=0.05,
            solver_faults=faults * step // steps, rho_hist=tuple(hist.tolist()),
            stats={"loss_pi": 1.0 / step, "loss_v": 2.0 / step, "kl": 0.01}))
    logging.getLogger("hpc_refer.loop.actor").warning(
        "env 0 (KuramotoSivashinsky) fault: step: state has shape (7,), expected (8,)")
    run.record_machine(machine_info(3, 1, 2, 1, 1))
    run.set_state("finished")
    run.close()
    fields = path / "fields"
    fields.mkdir()
    np.savez(fields / "env-0.npz", field=rng.normal(size=(HORIZON + 1, N)), label="u(x, t)",
             episode=20)
    series = StepSeries(path / "series" / "env-0.h5", ("cd", "cl"), 1)
    for _ in range(2):
        series.reset()
        for t in range(50):
            series.add(np.array([3.2 + np.sin(t / 5), np.cos(t / 5)]))
    series.flush()
    return path


def test_a_report_shows_every_section_with_data(tmp_path):
    run = fake_run(tmp_path / "r", 0, faults=3)
    assert main([str(run)]) == 0
    page = (run / "report.html").read_text()
    assert_self_contained(page)
    for heading in SECTIONS:
        assert f"<h2>{heading}</h2>" in page
    # learning curve, ReF-ER, rho, losses, throughput, faults, energy, cd/cl, u(x, t)
    points = figures(page)
    assert len(points) == 9 and min(points) > 0, points
    assert 'class="absent"' not in page
    assert "state has shape (7,), expected (8,)" in page  # the fault's log line
    assert "AMD" in page or "cores" in page  # the machine table
    assert "u(x, t) of its last episode" in page
    # text stays text: the far-policy target D and the log10 c_max band are labelled
    assert "target D = 0.1" in page and "log10 c_max" in page
    # per actor rank: the episodes came from ranks 1 and 2
    assert page.count('id="data-') >= sum(1 for p in points if p)


def test_missing_data_is_named_not_drawn_empty(tmp_path):
    config = build_config({"run": {"env": "KS"}})
    RunDirectory(tmp_path / "r", config, ("energy",)).close()
    page = render([Run(tmp_path / "r")])
    assert figures(page) == []
    for absent in ("No episode has ended yet", "No interval record yet", "no step metrics",
                   "no machine.json", "contributes no pictures"):
        assert absent in page


def test_seeds_of_one_setting_share_a_page_and_settings_get_their_own(tmp_path, capsys):
    runs = [fake_run(tmp_path / f"s{k}", k) for k in range(3)]
    other = fake_run(tmp_path / "er", 0)
    config = (other / "config.toml").read_text().replace('mode = "refer"', 'mode = "er"')
    (other / "config.toml").write_text(config)
    out = tmp_path / "pages"
    assert main([*map(str, runs), str(other), "--out-dir", str(out)]) == 0
    pages = sorted(p.name for p in out.iterdir())
    assert pages == ["report-KS_er.html", "report-KS_refer.html"]
    page = (out / "report-KS_refer.html").read_text()
    assert "KS refer (3 runs)" in page and "(3 runs)" in page
    assert all(str(r) in page for r in runs) and str(other) not in page
    # --out names one file: refused for two settings, with the settings named
    assert main([*map(str, runs), str(other), "--out", str(tmp_path / "x.html")]) == 2
    assert "KS refer, KS er" in capsys.readouterr().err


def test_not_a_run_directory_is_one_line(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "no config.toml" in one_error_line(capsys.readouterr().err, "hpc_refer.report: error:")


def test_the_driver_saves_the_last_field_of_each_environment(tmp_path):
    env = TeamDriver(KuramotoSivashinsky(), None, index=3, field_dir=tmp_path / "fields")
    for episode in (1, 2):
        env.reset(episode)
        for _ in range(5):
            env.step(np.zeros(4))
        assert len(env.end_episode()) == 1  # the energy
        with np.load(tmp_path / "fields" / "env-3.npz") as saved:
            np.testing.assert_array_equal(saved["field"], env.env.episode_field())
            assert str(saved["label"]) == "u(x, t)" and int(saved["episode"]) == episode
    assert [p.name for p in (tmp_path / "fields").iterdir()] == ["env-3.npz"]


def test_a_run_refreshes_its_report_and_shows_the_ks_field(tmp_path):
    run = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "hpc_refer.run", "--env", "KS", "--steps", "1200",
         "--replay.learn-start", "400", "--log-every", "200", "--report-every", "400",
         "--run-dir", str(run)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    page = (run / "report.html").read_text()
    assert_self_contained(page)
    assert len(figures(page)) == 7 and min(figures(page)) > 0  # one environment's u(x, t)
    assert "1200 / 1200" in page and "finished" in page
    with np.load(run / "fields" / "env-0.npz") as saved:
        assert saved["field"].shape == (HORIZON + 1, N)
    machine = json.loads((run / "machine.json").read_text())
    assert len(machine) == 1 and machine[0]["world"] == 1


@pytest.mark.parametrize("value", ["-1", "x"])
def test_report_every_is_validated(value, tmp_path):
    done = subprocess.run([sys.executable, "-m", "hpc_refer.run", "--report-every", value,
                           "--run-dir", str(tmp_path / "r")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "report_every" in done.stderr.replace("-", "_")
    assert not (tmp_path / "r").exists()


def test_the_report_is_rewritten_every_report_every_steps(tmp_path):
    config = build_config({"run": {"env": "KS", "steps": 2000, "report_every": 400}})
    run = RunDirectory(tmp_path / "r", config, ("energy",),
                       report=write_run_report)
    report = tmp_path / "r" / "report.html"
    shown = []
    for step in range(200, 1001, 200):
        run.interval(interval_record(step))
        text = report.read_text() if report.exists() else ""
        shown.append(re.search(r"<td>(\d+) / 2000</td>", text).group(1) if text else None)
    assert shown == [None, "400", "400", "800", "800"]
    run.close()  # and once more at the end
    assert "<td>1000 / 2000</td>" in report.read_text()


def test_report_every_needs_a_report_writer(tmp_path):
    config = build_config({"run": {"env": "KS", "report_every": 400}})
    with pytest.raises(ValueError, match="report writer"):
        RunDirectory(tmp_path / "r", config, ("energy",))
    assert not (tmp_path / "r").exists()


def test_an_episode_brings_one_value_per_episode_metric(tmp_path):
    run = RunDirectory(tmp_path / "r", build_config({"run": {"env": "KS"}}), ("energy",))
    run.episode(LoggedEpisode(100, 1, -1.0, 100, (0.7,), 1.0))
    with pytest.raises(ValueError, match=r"2 metric values.*\('energy',\)"):
        run.episode(LoggedEpisode(200, 1, -1.0, 100, (0.7, 0.1), 2.0))
    run.close()
    assert (tmp_path / "r" / "episodes.csv").read_text().splitlines()[0].endswith(",energy")


def section(page: str, heading: str) -> str:
    """The HTML of one section of a report page."""
    return page.split(f"<h2>{heading}</h2>", 1)[1].split("</section>", 1)[0]


def test_the_losses_panel_draws_every_statistic_of_the_algorithm(tmp_path):
    """The records' ``stats``, whatever the algorithm names them (DDPG: q and near_fraction
    beside its losses): one panel each, one line per run over the records that hold it."""
    config = build_config({"run": {"env": "Pendulum-v1", "algorithm": DDPG.name}})
    run = RunDirectory(tmp_path / "r", config)
    names = ("loss_mu", "loss_q", "near_fraction", "q")
    for step in (100, 200, 300):  # no gradient step in the first interval: no statistics
        stats = {n: k / step for k, n in enumerate(names, 1)} if step > 100 else {}
        run.interval(interval_record(step, stats=stats))
    run.close()
    losses = section(render([Run(tmp_path / "r")]), "Losses")
    assert figures(losses) == [len(names) * 2]
    for name in names:
        assert f">{name}</text>" in losses, name  # its panel's title
    # a run without gradient steps says so
    config = build_config({"run": {"env": "Pendulum-v1"}})
    run = RunDirectory(tmp_path / "none", config)
    run.interval(interval_record(100))
    run.close()
    losses = section(render([Run(tmp_path / "none")]), "Losses")
    assert figures(losses) == [] and "no statistics of the algorithm" in losses


@pytest.mark.parametrize("name", ["schema1", "schema1_ddpg"])
def test_an_old_run_directory_is_reported(name, tmp_path):
    """The run directories of tests/fixtures (written at 2299f67: train.jsonl without
    ``compiled``) are reported with their statistics, and labelled without ``compiled``."""
    fixture = Path(__file__).resolve().parent / "fixtures" / name
    out = tmp_path / "report.html"
    assert main([str(fixture), "--out", str(out)]) == 0
    page = out.read_text()
    assert "<title>hpc_refer report: Pendulum-v1 " in page and " compiled" not in page
    losses = section(page, "Losses")
    stats = ("kl", "loss_pi", "loss_v", "near_fraction") if name == "schema1" else (
        "kl", "loss_mu", "loss_q", "near_fraction", "q")
    assert figures(losses) == [2 * len(stats)]  # two records, each with every statistic
    assert all(f">{s}</text>" in losses for s in stats)
