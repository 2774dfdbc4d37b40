"""Named presets (issue 24, point 4): ``--preset`` puts its tables over the defaults and under
the config file and the flags; ``paper`` pins the paper's settings per algorithm; the
resolved values are what config.toml keeps, so a restart continues with them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import pytest

from hpc_refer.config.modes import ConfigError
from hpc_refer.config.presets import PAPER_LEARN_START, PRESETS
from hpc_refer.config.resolve import algorithm_tables, build_config, load_toml, register_table
from hpc_refer.config.tables import AlgorithmConfig
from hpc_refer.run.main import main, parse_args


def test_expensive_is_sac_with_plain_er_learning_from_10k_steps() -> None:
    cfg = parse_args(["--preset", "expensive"])
    assert cfg.run.algorithm == "sac" and cfg.run.preset == "expensive"
    assert cfg.refer.mode == "er"
    assert cfg.replay.learn_start == 10_000 and cfg.replay.grad_ratio == 1.0
    assert cfg.algorithm.hidden == (256, 256) and cfg.algorithm.activation == "relu"


def test_flags_and_config_files_win_over_the_preset(tmp_path) -> None:
    cfg = parse_args(["--preset", "expensive", "--replay.learn-start", "500", "--algorithm",
                      "vracer"])
    assert cfg.run.algorithm == "vracer" and cfg.replay.learn_start == 500
    assert cfg.refer.mode == "er", "what is not overridden still comes from the preset"
    path = tmp_path / "c.toml"
    path.write_text('[run]\npreset = "paper"\n[replay]\ngrad_ratio = 4.0\n')
    cfg = parse_args(["--config", str(path), "--refer.C", "2"])
    assert cfg.run.preset == "paper" and cfg.replay.grad_ratio == 4.0 and cfg.refer.C == 2.0
    assert cfg.replay.learn_start == PAPER_LEARN_START


@pytest.mark.parametrize(("algorithm", "forget", "size"),
                         [("vracer", "oldest", 2**18), ("ddpg", "far_policy", 2**19),
                          ("naf", "far_policy", 2**19)])
def test_paper_pins_the_papers_settings_per_algorithm(algorithm: str, forget: str,
                                                      size: int) -> None:
    cfg = build_config({"run": {"preset": "paper", "algorithm": algorithm}})
    refer, replay = cfg.refer, cfg.replay
    assert (refer.mode, refer.C, refer.D, refer.A) == ("refer", 4.0, 0.1, 5e-7)
    assert (refer.beta_init, refer.beta_rate, refer.kl_direction) == (0.0, 1e-4, "mu_pi")
    assert replay.learn_start == 2**18 and replay.grad_ratio == 1.0
    assert replay.sampling == "uniform" and replay.forget == forget
    assert cfg.algorithm.replay_size == size and replay.size == size
    assert cfg.algorithm.hidden == (128, 128) and cfg.algorithm.gamma == 0.995


def test_the_resolved_config_restores_without_the_preset_moving_it(tmp_path,
                                                                  monkeypatch) -> None:
    """config.toml holds every resolved value: rebuilt after the preset's tables changed, the
    run's config is the one it started with."""
    cfg = parse_args(["--preset", "expensive", "--steps", "5000"])
    path = tmp_path / "config.toml"
    cfg.write_toml(path)
    changed = PRESETS["expensive"]._replace(tables={"replay": {"learn_start": 777}})
    monkeypatch.setitem(PRESETS, "expensive", changed)
    assert build_config(load_toml(path)) == cfg
    assert parse_args(["--preset", "expensive"]).replay.learn_start == 777


def test_an_unknown_preset_names_the_allowed_ones(in_tmp, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--preset", "fast"])
    assert exc.value.code == 2
    assert "choose from 'paper', 'expensive'" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"run\.preset = 'fast' is invalid: allowed values are "
                                          "paper, expensive or empty"):
        build_config({"run": {"preset": "fast"}})


def test_a_table_that_sets_an_unknown_preset_is_refused_naming_it() -> None:
    """An algorithm declares its preset values in its table; a preset name there that does
    not exist (a typo would otherwise be ignored) fails its registration."""

    @dataclasses.dataclass(frozen=True)
    class Typo(AlgorithmConfig):
        section: ClassVar[str] = "typo_preset_algorithm"
        presets: ClassVar[Mapping[str, Mapping[str, Mapping[str, Any]]]] = {
            "papr": {"typo_preset_algorithm": {"lr": 1e-3}}}

    with pytest.raises(ValueError, match=r"^algorithm table \[typo_preset_algorithm\] sets "
                                         r"presets \['papr'\]: the presets are paper, "
                                         r"expensive$"):
        register_table(Typo)
    assert "typo_preset_algorithm" not in algorithm_tables()
