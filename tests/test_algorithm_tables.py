"""The algorithm config tables and the algorithm registry refuse what they must, accept their
boundary values, and say why in one exact line.

Guards (1) every validated field of every algorithm table of the package (the settings shared
through :class:`~hpc_refer.config.tables.AlgorithmConfig` and each table's own): each refused value
is a ConfigError whose message is exactly ``section.field = value is invalid: allowed values
are ...`` and each accepted boundary value constructs, so that a bound moved by one (``<``
for ``<=``, ``0`` for ``1``) or a changed message is caught; a new algorithm of the package
without a row here fails :func:`test_every_package_algorithm_has_a_table_row`. And (2)
:func:`~hpc_refer.algorithms.registry.register`,
:func:`~hpc_refer.algorithms.registry.algorithm_class` and
:func:`~hpc_refer.config.resolve.register_table`: their refusals with exact messages,
re-registration as a no-op, the default algorithm, and both decorator forms. The registry
tests run on copies of the module-level registries (monkeypatch), so nothing they register
outlives them.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from algorithm_traits import BUILT_IN, RECURRENT

from hpc_refer.algorithms import registry
from hpc_refer.config import resolve as config
from hpc_refer.config.modes import ConfigError
from hpc_refer.config.tables import AlgorithmConfig


def package_algorithms() -> dict[str, type]:
    """The registered algorithms that the package itself defines (not a test's plug-ins)."""
    return dict(BUILT_IN)


# (field, refused values, accepted boundary values, the allowed values the message names)
Row = tuple[str, tuple[Any, ...], tuple[Any, ...], str]

SHARED_ROWS: tuple[Row, ...] = (
    ("hidden", ((), (0,), (8, -1), (8, 0)), ((1,), (1, 1)),
     "a non-empty list of positive integers"),
    ("lr", (0, 0.0, 1, 1.0, -1e-3, 1.5), (1e-9, 0.999), "0 < lr < 1"),
    ("batch", (0, -1), (1,), "integers > 0"),
    ("gamma", (0, 0.0, -0.5, 1.0001, 2), (1e-6, 1, 1.0), "0 < gamma <= 1"),
    ("replay_size", (1, 0, -2), (2, 3), "integers >= 2"),
)
"""The fields every table has (AlgorithmConfig.__post_init__)."""

RECURRENT_ROWS: tuple[Row, ...] = (
    ("cell", ("GRU", "rnn", ""), ("none", "gru", "lstm"), "none, gru, lstm"),
    ("cell_width", (0, -1), (1, 64), "integers > 0"),
    ("bptt", (0, -4), (1, 16), "integers > 0"),
    ("burn_in", (-1, -8), (0, 8), "integers >= 0"),
    ("sequences", (-1, -64), (0, 64), "integers >= 0 (0: batch / bptt)"),
)
"""The fields of a table with recurrent networks (RecurrentConfig.__post_init__): every table
that offers them (algorithm_traits.RECURRENT) has these rows."""

TAU_ROW: Row = ("tau", (0, 0.0, -0.1, 1.0001, 1.5, 2, 2.5), (1e-6, 0.5, 1, 1.0), "0 < tau <= 1")

OWN_ROWS: dict[str, tuple[Row, ...]] = {
    "vracer": (
        ("sigma_init", (0, 0.0, -0.1), (1e-6, 0.5, 1, 5.0), "values > 0"),
    ),
    "ddpg": (
        ("critic_lr_factor", (0, 0.0, -1.0), (1e-6, 0.5, 1, 1.5, 10.0), "values > 0"),
        ("critic_l2", (-1e-9, -1.0), (0, 0.0, 1e-6, 1.0), "values >= 0"),
        TAU_ROW,
        ("sigma", (0, 0.0, -0.1), (1e-6, 0.5, 1, 2.0), "values > 0"),
        ("exploration", ("OU", "Gaussian", "none", ""), ("gaussian", "ou"), "gaussian, ou"),
    ),
    "naf": (
        TAU_ROW,
        ("sigma", (0, 0.0, -0.1), (1e-6, 0.5, 1, 2.0), "values > 0"),
    ),
    "sac": (
        TAU_ROW,
        ("alpha_init", (0, 0.0, -0.1), (1e-6, 0.5, 1, 2.0), "values > 0"),
        ("activation", ("ReLU", "tanh", ""), ("softsign", "relu"), "softsign, relu"),
    ),
    "crossq": (
        ("critic_hidden", ((), (0,), (64, -1)), ((1,), (256, 256), (1024, 1024)),
         "a non-empty list of positive integers"),
        ("adam_beta1", (-0.1, 1, 1.0, 1.5), (0, 0.0, 0.5, 0.9, 0.999), "0 <= beta1 < 1"),
        ("policy_delay", (0, -1), (1, 3, 5), "integers >= 1"),
        ("alpha_init", (0, 0.0, -0.1), (1e-6, 0.5, 1, 2.0), "values > 0"),
        ("renorm_momentum", (0, 0.0, -0.1, 1.0001, 2), (1e-6, 0.01, 1, 1.0), "0 < m <= 1"),
        ("renorm_eps", (0, 0.0, -1e-3), (1e-9, 1e-3, 1), "values > 0"),
        ("renorm_warmup", (-1, -100), (0, 1, 100_000), "integers >= 0"),
    ),
    "td3": (
        ("activation", ("ReLU", "tanh", ""), ("softsign", "relu"), "softsign, relu"),
        TAU_ROW,
        ("sigma", (0, 0.0, -0.1), (1e-6, 0.5, 1, 2.0), "values > 0"),
        ("target_noise", (-1e-9, -1.0), (0, 0.0, 0.2, 1.0), "values >= 0"),
        ("noise_clip", (-1e-9, -1.0), (0, 0.0, 0.5, 2.0), "values >= 0"),
        ("policy_delay", (0, -1), (1, 2, 5), "integers >= 1"),
    ),
}
"""Each algorithm's own validated fields, by algorithm name (the recurrent ones' cell fields
are RECURRENT_ROWS, added by :func:`own_rows`)."""


def own_rows(name: str) -> tuple[Row, ...]:
    """The rows of the fields of ``name``'s table beyond the shared ones."""
    return (*(RECURRENT_ROWS if name in RECURRENT else ()), *OWN_ROWS[name])

UNCHECKED: dict[str, frozenset[str]] = {"sac": frozenset({"target_entropy", "critic_layer_norm"}),
                                        "td3": frozenset({"critic_layer_norm"}),
                                        "crossq": frozenset({"target_entropy"})}
"""Own fields a table declares without a bound (any float is a valid target entropy)."""

SHARED_FIELDS = frozenset(f.name for f in dataclasses.fields(AlgorithmConfig))


def message(section: str, field: str, value: Any, allowed: str) -> str:
    """The one line :func:`hpc_refer.config.modes.require` gives for a refused value."""
    return f"{section}.{field} = {value!r} is invalid: allowed values are {allowed}"


def cases(refused: bool) -> list[Any]:
    """One pytest param per (algorithm, field, value): the refused or the accepted ones."""
    params = []
    for name, cls in sorted(package_algorithms().items()):
        for field, bad, good, allowed in (*SHARED_ROWS, *own_rows(name)):
            for value in bad if refused else good:
                params.append(pytest.param(cls, field, value, allowed,
                                           id=f"{name}.{field}={value!r}"))
    return params


def test_every_package_algorithm_has_a_table_row():
    assert set(package_algorithms()) == set(OWN_ROWS)
    for name, cls in package_algorithms().items():
        assert cls.Config.section == name
        own = {f.name for f in dataclasses.fields(cls.Config)} - SHARED_FIELDS
        rows = {row[0] for row in own_rows(name)}
        assert rows <= {f.name for f in dataclasses.fields(cls.Config)}, name
        assert own == rows | UNCHECKED.get(name, frozenset()), (
            f"{name}: a field of its table has no row here (add its bounds to OWN_ROWS, or "
            "to UNCHECKED if it has none)")


def test_the_default_tables_construct():
    for cls in package_algorithms().values():
        table = cls.Config()
        assert type(table).section == cls.name


@pytest.mark.parametrize(("cls", "field", "value", "allowed"), cases(refused=True))
def test_a_refused_value_names_key_value_and_allowed_values(cls, field, value, allowed):
    section = cls.Config.section
    expected = message(section, field, value, allowed)
    with pytest.raises(ConfigError, match=re.escape(expected)) as excinfo:
        cls.Config(**{field: value})
    assert str(excinfo.value) == expected
    with pytest.raises(ConfigError) as excinfo:
        dataclasses.replace(cls.Config(), **{field: value})
    assert str(excinfo.value) == expected


@pytest.mark.parametrize(("cls", "field", "value", "allowed"), cases(refused=False))
def test_a_boundary_value_is_accepted(cls, field, value, allowed):
    table = cls.Config(**{field: value})
    assert getattr(table, field) == value
    assert dataclasses.replace(cls.Config(), **{field: value}) == table


# --- the registry --------------------------------------------------------------------------


@pytest.fixture
def registries(monkeypatch):
    """The registries as copies, restored after the test; the real ones left untouched."""
    real = registry._ALGORITHMS, config._TABLES, config._DEFAULT
    before = dict(real[0]), dict(real[1]), list(real[2])
    monkeypatch.setattr(registry, "_ALGORITHMS", dict(real[0]))
    monkeypatch.setattr(config, "_TABLES", dict(real[1]))
    monkeypatch.setattr(config, "_DEFAULT", list(real[2]))
    yield
    assert (dict(real[0]), dict(real[1]), list(real[2])) == before, "the real ones unchanged"


PACKAGE_DEFAULT = registry.algorithm_class(config.default_algorithm())
"""The package's default algorithm (before any test patches the registries)."""


def default_class() -> type:
    """The package's default algorithm, parent of the throwaway ones."""
    return PACKAGE_DEFAULT


def throwaway_table(section_name: str, parent: type | None = None) -> type:
    """A new config table deriving from ``parent`` (the default algorithm's table)."""
    base = (parent or default_class()).Config

    @dataclass(frozen=True)
    class ProbeConfig(base):  # type: ignore[misc, valid-type]
        section: ClassVar[str] = section_name

    return ProbeConfig


def throwaway(algo_name: str, section_name: str | None = None) -> type:
    """A new algorithm class ``algo_name`` (the default one's subclass), not registered, with a
    table of section ``section_name`` (default: its name)."""
    parent = default_class()
    table = throwaway_table(algo_name if section_name is None else section_name)

    class Probe(parent):  # type: ignore[misc, valid-type]
        name = algo_name
        Config = table

    return Probe


def snapshot() -> tuple[dict[str, type], dict[str, type], list[str]]:
    return dict(registry._ALGORITHMS), dict(config._TABLES), list(config._DEFAULT)


def assert_refused(error: type[Exception], expected: str, call, before) -> None:
    """``call()`` raises ``error`` with exactly the message ``expected`` and leaves the
    registries as ``before``."""
    with pytest.raises(error, match=re.escape(expected)) as excinfo:
        call()
    assert str(excinfo.value) == expected
    assert snapshot() == before


def test_the_package_registry_is_consistent():
    names = package_algorithms()
    assert names, "the package registers algorithms"
    for name, cls in names.items():
        assert registry.algorithm_class(name) is cls
        assert config.algorithm_tables()[name] is cls.Config
    assert config.default_algorithm() in names


def test_register_returns_the_class_and_registers_name_and_table(registries):
    probe = throwaway("probe")
    before = snapshot()
    assert registry.register(probe) is probe
    assert dict(registry._ALGORITHMS) == {**before[0], "probe": probe}
    assert registry.algorithm_class("probe") is probe
    assert dict(config._TABLES) == {**before[1], "probe": probe.Config}
    assert config.algorithm_tables()["probe"] is probe.Config
    assert list(config._DEFAULT) == before[2], "register does not make the default by default"


def test_both_decorator_forms_return_the_class(registries):
    before = snapshot()

    @registry.register
    class Bare(throwaway("probe_bare")):
        pass

    @registry.register(default=False)
    class Called(throwaway("probe_called")):
        pass

    assert isinstance(Bare, type) and Bare.name == "probe_bare"
    assert isinstance(Called, type) and Called.name == "probe_called"
    assert registry.algorithm_class("probe_bare") is Bare
    assert registry.algorithm_class("probe_called") is Called
    assert config._TABLES["probe_bare"] is Bare.Config
    assert config._TABLES["probe_called"] is Called.Config
    assert list(config._DEFAULT) == before[2]
    decorator = registry.register(default=False)
    assert callable(decorator) and not isinstance(decorator, type)
    probe = throwaway("probe_later")
    assert decorator(probe) is probe
    assert registry.algorithm_class("probe_later") is probe


def test_registering_the_same_class_again_changes_nothing(registries):
    probe = throwaway("probe")
    registry.register(probe)
    before = snapshot()
    assert registry.register(probe) is probe
    assert registry.register(default=False)(probe) is probe
    assert snapshot() == before
    parent = default_class()
    assert registry.register(parent, default=True) is parent, "the default re-registers"
    assert snapshot() == before


def test_a_config_section_other_than_the_name_is_refused(registries):
    probe = throwaway("probe", section_name="probe_table")
    before = snapshot()
    expected = ("algorithm 'probe': its Config table's section is 'probe_table'; it must be "
                "the algorithm's name")
    assert_refused(ValueError, expected, lambda: registry.register(probe), before)


def test_another_class_under_a_taken_name_is_refused_naming_the_registered_one(registries):
    first = throwaway("probe")
    registry.register(first)
    before = snapshot()
    expected = (f"algorithm 'probe' is registered already (by {first.__module__}."
                f"{first.__qualname__})")
    assert first.__module__ == __name__
    assert first.__qualname__ == "throwaway.<locals>.Probe"
    for second in (throwaway("probe"), type("Same", (first,), {})):
        with pytest.raises(ValueError, match=re.escape(expected)) as excinfo:
            registry.register(second)
        assert str(excinfo.value) == expected
        assert snapshot() == before
    # a package algorithm's name, taken by a throwaway class with a table of that section
    parent = default_class()
    impostor = throwaway(parent.name)
    expected = (f"algorithm {parent.name!r} is registered already (by "
                f"{parent.__module__}.{parent.__qualname__})")
    assert parent.__module__.startswith("hpc_refer.algorithms.")
    assert_refused(ValueError, expected, lambda: registry.register(impostor), before)


def test_register_default_makes_the_default_algorithm(registries, monkeypatch):
    monkeypatch.setattr(config, "_DEFAULT", [])
    probe = throwaway("probe")
    assert registry.register(probe, default=True) is probe
    assert config._DEFAULT == ["probe"]
    assert config.default_algorithm() == "probe"
    other = throwaway("probe_other")
    assert registry.register(other) is other
    assert config._DEFAULT == ["probe"]
    assert registry.register(probe, default=True) is probe, "the default registers again"
    assert config._DEFAULT == ["probe"]


def test_a_second_default_is_refused(registries):
    default = config.default_algorithm()
    probe = throwaway("probe")
    before = snapshot()
    expected = f"[probe] cannot be the default algorithm: {default!r} is"
    assert_refused(ValueError, expected, lambda: registry.register(probe, default=True), before)
    assert_refused(ValueError, expected, lambda: registry.register(default=True)(probe), before)


def test_algorithm_class_of_an_unknown_name_lists_the_registered_ones_sorted(
        registries, monkeypatch):
    expected = "no algorithm 'nope' is registered: registered are " + ", ".join(
        sorted(registry._ALGORITHMS))
    with pytest.raises(KeyError, match=re.escape(expected)) as excinfo:
        registry.algorithm_class("nope")
    assert excinfo.value.args == (expected,)
    assert excinfo.value.__cause__ is None and excinfo.value.__suppress_context__
    a, b, c = throwaway("probe_a"), throwaway("probe_b"), throwaway("probe_c")
    monkeypatch.setattr(registry, "_ALGORITHMS", {"probe_c": c, "probe_a": a, "probe_b": b})
    expected = "no algorithm 'probe' is registered: registered are probe_a, probe_b, probe_c"
    with pytest.raises(KeyError, match=re.escape(expected)) as excinfo:
        registry.algorithm_class("probe")
    assert excinfo.value.args == (expected,)
    assert registry.algorithm_class("probe_b") is b


# --- register_table -------------------------------------------------------------------------


LAZY_MODULE = """\
from hpc_refer.algorithms import registry
from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.config import resolve


class Probe(VRacer):
    name = "probe_lazy"
    Config = resolve.algorithm_tables()["probe_lazy"]


registry.register(Probe)
"""


def test_an_algorithm_is_imported_from_the_module_its_table_names(registries, monkeypatch,
                                                                  tmp_path):
    """A table registered alone that names its module (``implementation``): the registry
    lists the algorithm at once and imports the module when the class is first asked for."""
    (tmp_path / "probe_lazy_algo.py").write_text(LAZY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    table = throwaway_table("probe_lazy")
    table.implementation = "probe_lazy_algo"  # its own, not inherited
    config.register_table(table)
    try:
        assert "probe_lazy" in registry.ALGORITHMS and "probe_lazy_algo" not in sys.modules
        cls = registry.algorithm_class("probe_lazy")
        assert "probe_lazy_algo" in sys.modules and cls.__module__ == "probe_lazy_algo"
        assert cls.Config is table and registry.ALGORITHMS["probe_lazy"] is cls
    finally:
        sys.modules.pop("probe_lazy_algo", None)


def test_a_table_whose_module_registers_nothing_is_a_clear_key_error(registries):
    table = throwaway_table("probe_none")
    table.implementation = "json"  # importable, registers no algorithm
    config.register_table(table)
    expected = "no algorithm 'probe_none' is registered: registered are " + ", ".join(
        sorted(registry._ALGORITHMS))
    with pytest.raises(KeyError, match=re.escape(expected)):
        registry.algorithm_class("probe_none")


def test_a_derived_table_does_not_inherit_its_parents_module(registries):
    """A table derived from V-RACER's is another algorithm's: without a module of its own and
    without a registered class it is no algorithm of the registry."""
    table = throwaway_table("probe_derived")
    assert registry.implementation(default_class().Config) == "hpc_refer.algorithms.vracer"
    assert registry.implementation(table) == ""
    config.register_table(table)
    assert "probe_derived" not in registry.ALGORITHMS
    assert "probe_derived" not in list(registry.ALGORITHMS)


def test_register_table_registers_and_accepts_the_same_table_again(registries):
    table = throwaway_table("probe")
    before = snapshot()
    assert config.register_table(table) is None
    assert dict(config._TABLES) == {**before[1], "probe": table}
    assert config.register_table(table) is None
    assert dict(config._TABLES) == {**before[1], "probe": table}
    assert list(config._DEFAULT) == before[2]
    assert dict(registry._ALGORITHMS) == before[0], "a table alone registers no algorithm"


def test_register_table_refuses_what_is_not_an_algorithm_dataclass(registries):
    class NotATable:
        section: ClassVar[str] = "probe"

    @dataclass(frozen=True)
    class Unrelated:
        section: ClassVar[str] = "probe"

    before = snapshot()
    for table in (NotATable, Unrelated):
        expected = (f"algorithm table {table!r} is not a dataclass deriving from "
                    "AlgorithmConfig")
        with pytest.raises(TypeError, match=re.escape(expected)) as excinfo:
            config.register_table(table)  # type: ignore[arg-type]
        assert str(excinfo.value) == expected
        assert snapshot() == before


@pytest.mark.parametrize("section", ["run", "refer", "replay", "env", "not an id", "", "1st",
                                     "a-b"])
def test_register_table_refuses_an_invalid_section(registries, section):
    table = throwaway_table(section)
    before = snapshot()
    expected = (f"algorithm table section {section!r} is invalid: an identifier other than "
                "run, refer, replay, env")
    assert_refused(ValueError, expected, lambda: config.register_table(table), before)


def test_register_table_refuses_a_second_table_of_a_section(registries):
    first = throwaway_table("probe")
    config.register_table(first)
    before = snapshot()
    expected = "an algorithm table [probe] is registered already"
    assert_refused(ValueError, expected,
                   lambda: config.register_table(throwaway_table("probe")), before)
    parent = default_class()
    expected = f"an algorithm table [{parent.name}] is registered already"
    assert_refused(ValueError, expected,
                   lambda: config.register_table(throwaway_table(parent.name)), before)


def test_register_table_default(registries, monkeypatch):
    default = config.default_algorithm()
    table = throwaway_table("probe")
    before = snapshot()
    expected = f"[probe] cannot be the default algorithm: {default!r} is"
    assert_refused(ValueError, expected, lambda: config.register_table(table, default=True), before)
    config.register_table(config._TABLES[default], default=True)
    assert snapshot() == before, "the default table registers as the default again"
    monkeypatch.setattr(config, "_DEFAULT", [])
    config.register_table(table, default=True)
    assert config._DEFAULT == ["probe"]
    assert config.default_algorithm() == "probe"
    config.register_table(throwaway_table("probe_second"))
    assert config._DEFAULT == ["probe"]
