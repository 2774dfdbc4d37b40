"""Rough edges a new user hit (issue 14, point 4): each is refused or reported in one line,
before anything is written."""

from __future__ import annotations

import pytest

from hpc_refer.config import ConfigError, build_config, load_toml
from hpc_refer.run import parse_args

# --- 1. one rule for integer and float values, from TOML and from flags ---------------------


@pytest.mark.parametrize("value", ["1e3", "1000", "1000.0", "1E3"])
def test_integer_key_takes_integral_values_as_a_flag(value):
    assert parse_args(["--steps", value]).run.steps == 1000


@pytest.mark.parametrize("value", ["1e3", "1000", "1000.0", "'1e3'", "'1000'"])
def test_integer_key_takes_integral_values_in_toml(value, tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(f"[run]\nsteps = {value}\n")
    assert build_config(load_toml(path)).run.steps == 1000


@pytest.mark.parametrize("value", ["1.5", "'1.5'", "true", "false", "inf", "nan"])
def test_integer_key_refuses_non_integral_and_booleans_in_toml(value, tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(f"[run]\nsteps = {value}\n")
    with pytest.raises(ConfigError, match=r"^run\.steps = .* is not a valid integer"):
        build_config(load_toml(path))


@pytest.mark.parametrize("value", ["1.5", "true", "abc", "inf"])
def test_integer_key_refuses_non_integral_and_booleans_as_a_flag(value):
    with pytest.raises(ConfigError, match=r"^run\.steps = .* is not a valid integer"):
        parse_args(["--steps", value])


def test_float_key_refuses_a_boolean_in_toml(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[vracer]\nlr = true\n")
    with pytest.raises(ConfigError, match=r"^vracer\.lr = True is not a valid float"):
        build_config(load_toml(path))
    path.write_text("[vracer]\nlr = 1e-3\nsigma_init = 1\n")
    cfg = build_config(load_toml(path))
    assert cfg.vracer.lr == 1e-3 and cfg.vracer.sigma_init == 1.0


def test_list_of_integers_takes_the_same_rule():
    assert build_config({"vracer": {"hidden": [64, 3.2e1]}}).vracer.hidden == (64, 32)
    assert parse_args(["--vracer.hidden", "1e2,50"]).vracer.hidden == (100, 50)
    with pytest.raises(ConfigError, match=r"^vracer\.hidden = "):
        build_config({"vracer": {"hidden": [64, True]}})
    with pytest.raises(ConfigError, match=r"^vracer\.hidden = "):
        build_config({"vracer": {"hidden": [64, 1.5]}})
