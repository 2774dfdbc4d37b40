"""Bad input gets one clear line naming the key and the allowed values, exit code 2, and no
run directory is created."""

from __future__ import annotations

import pytest
from output_lines import one_error_line

from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.config.modes import ConfigError
from hpc_refer.config.resolve import build_config
from hpc_refer.run.main import main


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--refer.C", "0"], "refer.C = 0.0 is invalid: allowed values are C > 0"),
        (["--refer.D", "1.5"], "refer.D = 1.5 is invalid: allowed values are 0 < D < 1"),
        ([f"--{VRacer.name}.batch", "512", "--replay.size", "600"],
         f"{VRacer.name}.batch = 512 is invalid"),
        (["--steps", "-3"], "run.steps = -3 is invalid"),
        ([f"--{VRacer.name}.lr", "abc"], f"{VRacer.name}.lr = 'abc' is not a valid float"),
        (["--env", "NoSuchEnv-v9"], "run.env = 'NoSuchEnv-v9' is not a registered gymnasium id"),
        (["--env", "CartPole-v1"], "Discrete action space: allowed are environments with a "
                                   "continuous (Box) action space"),
    ],
)
def test_bad_values_are_one_clear_line(argv, needle, in_tmp, capsys):
    assert main(argv) == 2
    assert needle in one_error_line(capsys.readouterr().err, "hpc_refer.run: error:")
    assert not (in_tmp / "runs").exists(), "nothing is written for a rejected config"


def test_unknown_keys_in_toml_name_the_allowed_ones(in_tmp, capsys):
    (in_tmp / "c.toml").write_text("[refer]\nmode = 'refer'\ncmax = 3\n")
    assert main(["--config", "c.toml"]) == 2
    err = capsys.readouterr().err
    assert "unknown config key refer.cmax: allowed keys are mode, C, D, A" in err
    (in_tmp / "d.toml").write_text("[optimizer]\nlr = 3\n")
    assert main(["--config", "d.toml"]) == 2
    from hpc_refer.algorithms.registry import ALGORITHMS

    assert ("unknown config section [optimizer]: allowed are run, refer, replay, env and the "
            f"algorithms' tables {', '.join(sorted(ALGORITHMS))}" in capsys.readouterr().err)


def test_mode_choices_are_listed(in_tmp, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--refer.mode", "per"])
    assert exc.value.code == 2
    assert "choose from 'refer', 'er', 'refer1', 'refer2'" in capsys.readouterr().err


def test_toml_then_flags_override_defaults(tmp_path):
    from hpc_refer.config.resolve import load_toml

    path = tmp_path / "c.toml"
    path.write_text(f"[run]\nsteps = 500\nseed = 4\n[{VRacer.name}]\nhidden = [32, 16]\n")
    cfg = build_config(load_toml(path))
    assert cfg.run.steps == 500 and cfg.run.seed == 4 and cfg.algorithm.hidden == (32, 16)
    assert cfg.run.env == "HalfCheetah-v5"
    with pytest.raises(ConfigError, match=r"run\.seed"):
        build_config({"run": {"seed": 1.5}})


def test_existing_run_dir_is_never_overwritten(in_tmp, capsys):
    d = in_tmp / "old"
    d.mkdir()
    (d / "episodes.csv").write_text("precious\n")
    assert main(["--env", "Pendulum-v1", "--run-dir", str(d), "--steps", "10"]) == 2
    assert "already holds files" in capsys.readouterr().err
    assert (d / "episodes.csv").read_text() == "precious\n"


def test_every_algorithm_has_a_table_and_a_class():
    from hpc_refer.algorithms.registry import ALGORITHMS
    from hpc_refer.config.resolve import algorithm_tables

    assert set(ALGORITHMS) == set(algorithm_tables()) and ALGORITHMS
    for name, cls in ALGORITHMS.items():
        config = build_config({"run": {"algorithm": name}})
        assert cls.name == name and cls.Config is algorithm_tables()[name]
        assert type(config.algorithm) is cls.Config and config.algorithm.section == name
        assert set(config.to_dict()) == {"run", name, "refer", "replay", "env"}


@pytest.mark.parametrize(("steps", "every"), [(10, 1), (2_000, 40), (100_000, 2_000),
                                              (10**6, 10_000), (10**7, 10_000)])
def test_log_every_defaults_to_a_fiftieth_of_the_run(steps, every, tmp_path):
    """run.log_every 0 (the default) is resolved to steps / 50 within [1, 10,000], and the
    resolved interval is what config.toml keeps (a restart logs as the run did)."""
    cfg = build_config({"run": {"steps": steps}})
    assert cfg.run.log_every == every
    cfg.write_toml(tmp_path / "config.toml")
    from hpc_refer.config.resolve import load_toml

    assert load_toml(tmp_path / "config.toml")["run"]["log_every"] == every
    assert build_config({"run": {"steps": steps, "log_every": 7}}).run.log_every == 7
    with pytest.raises(ConfigError, match=r"run.log_every = -1 is invalid: allowed values "
                                          r"are integers > 0, or 0 for steps / 50"):
        build_config({"run": {"steps": steps, "log_every": -1}})
