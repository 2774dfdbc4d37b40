"""bench/ablation.py without training: command lines, skip/refuse of run directories, the
scheduler on stand-in commands, and the report (windows, seed statistics, files) on fake runs."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from hpc_refer.algorithms.ddpg import DDPG
from hpc_refer.algorithms.naf import NAF
from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.config.resolve import build_config
from hpc_refer.report.curves import window_means

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _load_ablation():
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))  # bench scripts import their sibling `common`
    spec = importlib.util.spec_from_file_location("ablation", BENCH / "ablation.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["ablation"] = module
    spec.loader.exec_module(module)
    return module


ablation = _load_ablation()
ENV = "Pendulum-v1"


def fake_run(root: Path, algorithm: str, mode: str, seed: int,
             episodes: list[tuple[int, float]], logged: list[int], sampling: str = "uniform",
             steps: int = 300, env: str = ENV, name: str | None = None) -> Path:
    """A run directory as hpc_refer.run writes it: config.toml, episodes.csv, train.jsonl."""
    label = "per" if sampling == "per" else mode
    d = root / env / (name or f"{algorithm}-{label}-seed{seed}")
    d.mkdir(parents=True)
    build_config({"run": {"algorithm": algorithm, "env": env, "seed": seed, "steps": steps},
                  "refer": {"mode": mode}, "replay": {"sampling": sampling}}
                 ).write_toml(d / "config.toml")
    lines = ["env_step,rank,return,length,wall_s"]
    lines += [f"{s},0,{r},10,0.1" for s, r in episodes]
    (d / "episodes.csv").write_text("\n".join(lines) + "\n")
    (d / "train.jsonl").write_text("".join(
        json.dumps({"env_step": s, "beta": 0.5 + s / 1000, "far_fraction": s / 10000}) + "\n"
        for s in logged))
    return d


# ------------------------------------------------------------------------------ run side


def test_commands_of_every_mode():
    d = Path("r/Hopper-v5/ddpg-per-seed3")
    argv = ablation.run_command(ablation.Combo(DDPG.name, "per", 3), "Hopper-v5", 5000, d,
                                ["--log-every", "100"], python="py")
    assert argv == ["py", "-m", "hpc_refer.run", "--algorithm", DDPG.name, "--refer.mode", "er",
                    "--replay.sampling", "per", "--env", "Hopper-v5", "--steps", "5000",
                    "--seed", "3", "--run-dir", str(d), "--log-every", "100"]
    for mode in ("er", "refer1", "refer2", "refer"):
        argv = ablation.run_command(ablation.Combo(NAF.name, mode, 0), "Hopper-v5", 10, d, [],
                                    python="py")
        assert argv[3:8] == ["--algorithm", NAF.name, "--refer.mode", mode, "--env"]
        assert "--replay.sampling" not in argv
    with pytest.raises(ValueError):
        ablation.mode_flags("bogus")
    assert ablation.run_dir_of(Path("r"), "external:-n 2 ./heat1d",
                               ablation.Combo(VRacer.name, "er", 1)) == \
        Path(f"r/external_-n_2_._heat1d/{VRacer.name}-er-seed1")


def test_extra_flags_may_not_override_the_combination():
    ablation.check_extra(["--replay.size", "4096", "--log-every=10"])
    for bad in (["--seed", "3"], ["--refer.mode=er"], ["--replay.sampling", "per"],
                ["--run-dir", "x"], ["--algorithm", NAF.name], ["--env", "X"], ["--steps", "9"]):
        with pytest.raises(ablation.AblationError, match="set by the ablation"):
            ablation.check_extra(bad)


def test_finished_runs_are_skipped_and_unfinished_ones_refused(tmp_path):
    root = tmp_path / "runs"
    C = ablation.Combo
    fake_run(root, VRacer.name, "refer", 0, [(50, 1.0)], [100, 200, 300])  # finished
    fake_run(root, VRacer.name, "er", 0, [(50, 1.0)], [100, 200])  # killed at 200 of 300
    fake_run(root, DDPG.name, "er", 1, [(50, 1.0)], [300], sampling="per")  # finished, mode per
    (root / ENV / "naf-refer-seed0").mkdir()  # empty: hpc_refer accepts it
    state = ablation.run_state
    assert state(root / ENV / f"{VRacer.name}-refer-seed0", C(VRacer.name, "refer", 0), ENV,
                 300) == "done"
    assert state(root / ENV / "ddpg-per-seed1", C(DDPG.name, "per", 1), ENV, 300) == "done"
    assert state(root / ENV / "naf-refer-seed0", C(NAF.name, "refer", 0), ENV, 300) == "new"
    assert state(root / ENV / "absent", C(NAF.name, "er", 0), ENV, 300) == "new"
    with pytest.raises(ablation.AblationError, match=r"unfinished run \(200/300 steps"):
        state(root / ENV / f"{VRacer.name}-er-seed0", C(VRacer.name, "er", 0), ENV, 300)
    with pytest.raises(ablation.AblationError, match="finished at 300 steps, fewer than"):
        state(root / ENV / f"{VRacer.name}-refer-seed0", C(VRacer.name, "refer", 0), ENV, 600)
    with pytest.raises(ablation.AblationError, match="holds a run of"):
        state(root / ENV / "ddpg-per-seed1", C(DDPG.name, "er", 1), ENV, 300)
    other = root / ENV / "junk"
    other.mkdir()
    (other / "notes.txt").write_text("x")
    with pytest.raises(ablation.AblationError, match="not a run directory"):
        state(other, C(VRacer.name, "er", 0), ENV, 300)

    combos = [C(VRacer.name, m, 0) for m in ("refer", "refer2")] + [C(DDPG.name, "per", 1)]
    jobs, skipped = ablation.plan(combos, ENV, 300, root, ["--log-every", "50"])
    assert skipped == [f"{VRacer.name}-refer-seed0", "ddpg-per-seed1"]
    (job,) = jobs
    assert job.name == f"{VRacer.name}-refer2-seed0"
    assert job.log == root / ENV / f"{VRacer.name}-refer2-seed0.log"
    assert job.argv[-4:] == ["--run-dir", str(root / ENV / f"{VRacer.name}-refer2-seed0"),
                             "--log-every", "50"]
    # Every refusal is reported at once, before anything starts; the command exits 2.
    with pytest.raises(ablation.AblationError) as err:
        ablation.plan([*combos, C(VRacer.name, "er", 0)], ENV, 600, root, [])
    assert str(err.value).count("\n") == 2  # refer seed0, ddpg per, er seed0: three lines
    rc = ablation.main(["run", "--algorithms", VRacer.name, "--modes", "er", "--env", ENV,
                        "--steps", "300", "--root", str(root)])
    assert rc == 2 and not (root / ENV / f"{VRacer.name}-er-seed0.log").exists()


def test_scheduler_runs_logs_and_reports_failures(tmp_path, capsys):
    py = sys.executable
    jobs = [ablation.Job("ok", [py, "-c", "print('hello')"], tmp_path / "a" / "ok.log"),
            ablation.Job("bad", [py, "-c", "import sys; sys.exit(3)"], tmp_path / "bad.log"),
            ablation.Job("ok2", [py, "-c", "import sys; print('err', file=sys.stderr)"],
                         tmp_path / "ok2.log")]
    assert ablation.execute(jobs, 2) == [0, 3, 0]
    assert "hello" in (tmp_path / "a" / "ok.log").read_text()
    assert "err" in (tmp_path / "ok2.log").read_text()
    out = capsys.readouterr().out
    assert out.count("start ") == 3 and "end   bad  exit 3" in out and "FAILED" in out


# ---------------------------------------------------------------------------- report side


def test_windows_follow_hpc_refer_plot():
    ends, means = window_means(np.array([50, 100, 101, 350]), np.array([1.0, 3.0, 5.0, 7.0]),
                               100)
    # window k holds steps k*100+1 .. (k+1)*100: an episode logged at step 100 is in window 0
    np.testing.assert_array_equal(ends, [100, 200, 300, 400])
    np.testing.assert_array_equal(means[[0, 1, 3]], [2.0, 5.0, 7.0])
    assert np.isnan(means[2])


@pytest.fixture
def fake_ablation(tmp_path):
    root = tmp_path / "runs"
    # vracer refer, two seeds; windows of 100 steps:
    # seed 0: w0 {1, 3} -> 2, w1 {10} -> 10, w2 {20, 30} -> 25
    fake_run(root, VRacer.name, "refer", 0, [(50, 1), (100, 3), (150, 10), (250, 20), (260, 30)],
             [100, 200, 300])
    # seed 1: w0 4, w1 {6, 8} -> 7, w2 40; the episode at 310 is past the last complete window
    fake_run(root, VRacer.name, "refer", 1, [(20, 4), (120, 6), (180, 8), (290, 40), (310, 99)],
             [100, 200, 310])
    # vracer er, one seed, only 200 steps: w0 {1, 2} -> 1.5, w1 5
    fake_run(root, VRacer.name, "er", 0, [(10, 1), (90, 2), (199, 5)], [100, 200])
    # ddpg per (ER + prioritized replay): w0 7, w1 no episode (NaN); w2 incomplete
    fake_run(root, DDPG.name, "er", 0, [(100, 7), (201, 9)], [100, 210], sampling="per")
    return root


def test_groups_windows_and_seed_statistics(fake_ablation):
    groups = {(g.algorithm, g.mode): g
              for g in ablation.make_groups(ablation.find_runs(fake_ablation), 100)}
    # in the registry's order of algorithms (sorted names), then the modes'
    assert list(groups) == [(DDPG.name, "per"), (VRacer.name, "er"), (VRacer.name, "refer")]
    refer = groups[(VRacer.name, "refer")]
    assert [r.seed for r in refer.runs] == [0, 1] and [r.steps for r in refer.runs] == [300, 310]
    np.testing.assert_allclose(refer.centres, [50, 150, 250])
    np.testing.assert_allclose(refer.mean, [3.0, 8.5, 32.5])
    # numpy's linear percentile of two values a < b: a + q (b - a)
    np.testing.assert_allclose(refer.p20, [2 + 0.2 * 2, 7 + 0.2 * 3, 25 + 0.2 * 15])
    np.testing.assert_allclose(refer.p80, [2 + 0.8 * 2, 7 + 0.8 * 3, 25 + 0.8 * 15])
    assert refer.final == pytest.approx(32.5)
    er = groups[(VRacer.name, "er")]
    np.testing.assert_allclose(er.mean, [1.5, 5.0])
    np.testing.assert_allclose(er.p20, er.mean)  # one seed: the band is the line
    np.testing.assert_allclose(er.p80, er.mean)
    per = groups[(DDPG.name, "per")]
    assert per.mode == "per" and per.mean[0] == 7.0 and np.isnan(per.mean[1])
    assert per.final is None
    summary = per.summary()
    assert summary["mean"] == [7.0, None] and summary["final_window_return"] is None
    assert summary["beta"] == [pytest.approx(0.71)]
    assert summary["far_fraction"] == [pytest.approx(0.021)]


def test_report_writes_figure_json_and_table(fake_ablation, tmp_path, capsys):
    out = tmp_path / "out"
    assert ablation.main(["report", str(fake_ablation), "--name", "abl", "--window", "100",
                          "--out", str(out)]) == 0
    assert (out / "abl.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((out / "abl.json").read_text())
    assert data["window"] == 100 and data["figure"] == "abl.png" and "machine" in data
    by = {(g["algorithm"], g["mode"]): g for g in data["groups"]}
    refer = by[(VRacer.name, "refer")]
    assert refer["seeds"] == [0, 1] and refer["steps_reached"] == [300, 310]
    assert refer["windows"] == [50.0, 150.0, 250.0]
    assert refer["mean"] == pytest.approx([3.0, 8.5, 32.5])
    assert refer["p20"] == pytest.approx([2.4, 7.6, 28.0])
    assert refer["p80"] == pytest.approx([3.6, 9.4, 37.0])
    assert refer["final_window_end"] == 300 and refer["final_window_return"] == 32.5
    assert refer["beta"] == [pytest.approx(0.8), pytest.approx(0.81)]
    assert refer["far_fraction"] == [pytest.approx(0.03), pytest.approx(0.031)]
    assert sorted(refer["final_by_seed"]) == pytest.approx([25.0, 40.0])
    assert data["tests"] == []  # er has one seed: no test
    assert by[(VRacer.name, "er")]["final_window_end"] == 200
    assert by[(VRacer.name, "er")]["final_window_return"] == 5.0
    md = (out / "abl.md").read_text()
    assert "| algorithm | er | refer | per |" in md
    assert f"| {VRacer.name} | 5.0 (n=1) | 32.5 (n=2) |  |" in md
    assert "| ddpg |  |  | - (n=1) |" in md
    assert md in capsys.readouterr().out
    assert not list(BENCH.glob("results/abl.*"))  # nothing written into the repository


def test_report_refuses_an_empty_root(tmp_path):
    assert ablation.main(["report", str(tmp_path), "--name", "x", "--out", str(tmp_path)]) == 2


def test_a_run_still_running_is_left_out_of_the_report(fake_ablation, tmp_path, capsys):
    running = fake_run(fake_ablation, "naf", "er", 7, [(10, -99.0), (120, -99.0)], [100])
    (running / "state.txt").write_text("running\n")
    out = tmp_path / "out"
    assert ablation.main(["report", str(fake_ablation), "--name", "abl", "--window", "100",
                          "--out", str(out)]) == 0
    assert f"skip  {running}  (still running" in capsys.readouterr().out
    groups = json.loads((out / "abl.json").read_text())["groups"]
    assert not [g for g in groups if g["algorithm"] == "naf" and g["mode"] == "er"]
    (running / "state.txt").write_text("finished\n")
    assert ablation.main(["report", str(fake_ablation), "--name", "abl", "--window", "100",
                          "--out", str(out)]) == 0
    groups = json.loads((out / "abl.json").read_text())["groups"]
    assert [g["seeds"] for g in groups if (g["algorithm"], g["mode"]) == ("naf", "er")] == [[7]]


@given(st.lists(st.floats(-1e4, 1e4), min_size=3, max_size=3))
def test_three_seeds_come_back_from_their_mean_and_band(values):
    xs = np.array(values)
    got = ablation.seeds_from_band(float(xs.mean()), *np.percentile(xs, [20, 80]))
    np.testing.assert_allclose(got, np.sort(xs), atol=1e-6 * (1 + np.abs(xs).max()))


def test_a_mean_and_band_no_three_values_give_is_refused():
    with pytest.raises(ValueError, match="no three values"):
        ablation.seeds_from_band(10.0, 20.0, 30.0)  # the mean below both percentiles


def test_each_mode_is_tested_against_plain_er_of_its_algorithm(tmp_path, capsys):
    """Welch's test (scipy's, unequal variances) of each mode against er, from a report's
    per-seed finals, or from the band of a three-seed report without them."""
    er, refer = [1198.0, 830.0, 1091.0], [1362.0, 1595.0, 1639.0]
    band = {"mean": [0.0, float(np.mean(refer))],
            "p20": [0.0, float(np.percentile(refer, 20))],
            "p80": [0.0, float(np.percentile(refer, 80))]}
    report = {"groups": [
        {"env": "E", "algorithm": "ddpg", "mode": "er", "seeds": [0, 1, 2],
         "final_by_seed": er},
        {"env": "E", "algorithm": "ddpg", "mode": "refer", "seeds": [0, 1, 2], **band},
        {"env": "E", "algorithm": "naf", "mode": "refer", "seeds": [0, 1, 2],
         "final_by_seed": [1.0, 2.0, 3.0]}]}
    (tmp_path / "r.json").write_text(json.dumps(report))
    assert ablation.main(["tests", str(tmp_path / "r.json"), "--name", "t",
                          "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "t.json").read_text())
    assert data["recovered_from_band"] == ["E/ddpg/refer"]
    (test,) = data["tests"]  # naf has no er to be tested against
    expected = stats.ttest_ind(refer, er, equal_var=False)
    assert (test["algorithm"], test["mode"], test["against"]) == ("ddpg", "refer", "er")
    assert test["p"] == pytest.approx(expected.pvalue) and test["t"] == pytest.approx(
        expected.statistic)
    assert "p = 0.0" in capsys.readouterr().out
