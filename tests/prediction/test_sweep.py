"""The sweep, its selection rule, the HDF5 file, the report and the command line (serial)."""

from pathlib import Path

import h5py
import numpy as np
import pytest

from hpc_refer.prediction import results
from hpc_refer.prediction.__main__ import main
from hpc_refer.prediction.algorithms import Placement, learner_class
from hpc_refer.prediction.analysis import DIVERGED, replace_diverged, select_best
from hpc_refer.prediction.engine import make_batch, run_learner
from hpc_refer.prediction.sweep import Collective, SweepConfig, SweepResult, run_sweep
from hpc_refer.prediction.task import state_weighting

SMALL = SweepConfig(algorithms=("td", "gtd", "etdlb", "abtd"), runs=3, steps=300,
                    alpha_exponents=(1, 3, 5), eta_exponents=(-1, 2), betas=(0.0, 0.6),
                    zetas=(0.0, 0.5, 1.0))
SMALL_ARGS = ["--algorithms", "td,gtd,etdlb,abtd", "--runs", "3", "--steps", "300",
              "--alpha-exponents", "1,3,5", "--eta-exponents=-1,2", "--betas", "0,0.6",
              "--zetas", "0,0.5,1", "--quiet"]


@pytest.fixture(scope="module")
def small_result() -> SweepResult:
    result = run_sweep(SMALL)
    assert result is not None
    return result


def test_replace_diverged() -> None:
    mean = np.array([0.1, np.nan, np.inf, 0.68911, 0.68910, 0.69])
    np.testing.assert_array_equal(replace_diverged(mean), [0.1, DIVERGED, DIVERGED, DIVERGED,
                                                           0.68910, DIVERGED])


def test_select_best_rule() -> None:
    auc = np.full((2, 3, 4), 0.5)  # (extra, alpha, run)
    auc[1, 2] = 0.3
    assert select_best(auc) == (1, 2)
    auc[0, 0, 0] = np.inf  # one diverged run makes the whole setting diverged
    auc[0, 0, 1:] = -10.0
    assert select_best(auc) == (1, 2)
    auc[0, 1] = 0.3  # tie: the smaller alpha index wins, then the smaller extra index
    assert select_best(auc) == (0, 1)
    auc[1, 1] = 0.3
    assert select_best(auc) == (0, 1)


def test_sweep_lanes_match_direct_runs(small_result: SweepResult) -> None:
    """auc[placement, extra, alpha, run] is the run of exactly that setting."""
    res = small_result.algorithms["gtd"]
    assert res.auc.shape == (2, 2, 3, 3)
    alphas, etas = SMALL.alphas(), SMALL.extra_values(learner_class("gtd"))
    assert etas is not None
    assert alphas.tolist() == [2.0**-5, 2.0**-3, 2.0**-1] and etas.tolist() == [0.5, 4.0]
    k, e, a, r = 1, 1, 0, 2
    learner = learner_class("gtd")(1, 6, alphas[[a]], np.array([float(Placement.TARGET)]),
                                   etas[[e]])
    direct = run_learner(learner, make_batch([r], SMALL.steps), state_weighting())
    assert res.auc[k, e, a, r] == pytest.approx(direct.auc[0, 0], rel=1e-12)
    assert res.final[k, e, a, r] == pytest.approx(direct.final[0, 0], rel=1e-12)


def test_rerun_uses_best_and_fresh_seeds(small_result: SweepResult) -> None:
    for name, res in small_result.algorithms.items():
        rerun = res.rerun
        assert rerun is not None
        for k in range(2):
            e, a = select_best(res.auc[k])
            assert tuple(rerun.best[k]) == (e, a)
            assert not np.array_equal(rerun.auc[k], res.auc[k, e, a]), name
        assert rerun.curve_mean.shape == (2, SMALL.steps)
        np.testing.assert_allclose(rerun.curve_mean.mean(axis=1), rerun.auc.mean(axis=1))


@pytest.mark.parametrize(("change", "field"), [
    ({"algorithms": ("td", "sarsa")}, "algorithm"), ({"alpha_exponents": ()}, "alpha-exponents"),
    ({"betas": (0.0, 1.5)}, "betas"), ({"zetas": (0.5, 0.5)}, "zetas"), ({"runs": 51}, "runs"),
    ({"steps": 0}, "steps"), ({"lam": -0.1}, "lambda"), ({"placements": ()}, "placements"),
    ({"target_corrections": "drop"}, "target-corrections"),
    ({"followon_discount": "gamma"}, "followon-discount"),
])
def test_config_errors_name_the_field(change: dict, field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}"):
        SweepConfig(**change)


def test_more_ranks_than_runs_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"^runs"):
        run_sweep(SweepConfig(runs=2, steps=10), Collective(rank=0, size=3))


@pytest.mark.parametrize(("args", "field"), [
    (["--algorithms", "td,q"], "algorithm: unknown 'q'; allowed: td, gtd"),
    (["--placements", "whole,both"], "placement: unknown 'both'; allowed: WHOLE, TARGET"),
    (["--alpha-exponents", "5:1"], "alpha-exponents"),
    (["--betas", "0,x"], "betas"),
    (["--target-corrections", "drop"],
     "target-corrections: unknown 'drop'; allowed: keep-rho, target-only, no-rho"),
    (["--followon-discount", "gamma"], "followon-discount: unknown 'gamma'; allowed: beta, beta-"),
])
def test_cli_bad_input_one_line(args: list[str], field: str, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--out", str(tmp_path / "r.h5"), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and field in err
    assert not (tmp_path / "r.h5").exists()


def test_ambiguity_options_stored_and_used(small_result: SweepResult, tmp_path: Path) -> None:
    """A1 / A5 alternatives reach the learners and the HDF5 metadata; WHOLE lanes and the other
    algorithms are unchanged, TARGET lanes of HTD and Emphatic TD(lambda, beta) change."""
    config = SweepConfig(**{**SMALL.__dict__, "algorithms": ("htd", "etdlb"), "rerun": False,
                            "target_corrections": "target-only",
                            "followon_discount": "beta-gamma"})
    default = run_sweep(SweepConfig(**{**config.__dict__, "target_corrections": "keep-rho",
                                       "followon_discount": "beta"}))
    result = run_sweep(config)
    assert result is not None and default is not None
    htd, htd0 = result.algorithms["htd"].auc, default.algorithms["htd"].auc
    np.testing.assert_array_equal(htd[0], htd0[0])  # same lanes, same code: exact
    assert not np.array_equal(htd[1], htd0[1])
    etd, etd0 = result.algorithms["etdlb"].auc, default.algorithms["etdlb"].auc
    np.testing.assert_array_equal(etd[:, 0], etd0[:, 0])  # beta = 0: F = 1 either way
    assert not np.array_equal(etd[:, 1], etd0[:, 1])
    results.write(result, tmp_path / "r.h5")
    assert results.read(tmp_path / "r.h5").config == config
    with h5py.File(tmp_path / "r.h5") as fh:
        assert fh.attrs["target_corrections"] == "target-only"
        assert fh.attrs["followon_discount"] == "beta-gamma"
    assert results.config_from_json('{"placements": ["WHOLE"]}').target_corrections == "keep-rho"


def test_cli_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "sweep" in out and "report" in out and "mpirun" in out
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    out = capsys.readouterr().out
    assert "--target-corrections" in out and "--followon-discount" in out


@pytest.mark.mpi_skip  # the CLI sweep is collective under mpirun: see test_mpi.py
def test_cli_sweep_and_report(small_result: SweepResult, tmp_path: Path) -> None:
    out = tmp_path / "r.h5"
    assert main(["sweep", "--out", str(out), *SMALL_ARGS]) == 0
    stored = results.read(out)
    assert stored.config == SMALL
    for name, res in small_result.algorithms.items():
        np.testing.assert_array_equal(stored.algorithms[name].auc, res.auc)
        stored_rerun, rerun = stored.algorithms[name].rerun, res.rerun
        assert stored_rerun is not None and rerun is not None
        np.testing.assert_array_equal(stored_rerun.curve_se, rerun.curve_se)
    with h5py.File(out) as fh:
        assert fh["abtd/extra_values"][:].tolist() == [0.0, 0.5, 1.0]
    assert main(["report", str(out), "--out-dir", str(tmp_path / "rep")]) == 0
    for png in ("learning_curves.png", "sensitivity.png"):
        assert (tmp_path / "rep" / png).read_bytes().startswith(b"\x89PNG")
    cells = [line.split(" | ") for line in (tmp_path / "rep" / "table.md").read_text().splitlines()
             if line.startswith("| ") and not line.startswith("| algorithm")]
    placements = [row[1] for row in cells if len(row) == 9]
    assert placements == ["WHOLE", "TARGET"] * len(SMALL.algorithms)
    assert len([row for row in cells if len(row) == 7]) == len(SMALL.algorithms)


def test_report_rejects_other_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "other.h5"
    with h5py.File(path, "w") as fh:
        fh["x"] = 1
    assert main(["report", str(path)]) == 2
    assert f"{path} is not a sweep result (format attribute" in capsys.readouterr().err
