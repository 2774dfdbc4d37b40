"""The MPI passes' count check (mpi_expect.py): a pass that runs another number of MPI tests
than the Makefile states fails, also when pytest collected none (its exit 5)."""

from __future__ import annotations

import pytest
from mpi_launch import HERE

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.mpi_skip  # pytester runs a serial pytest of its own

TESTS = """
import pytest

@pytest.mark.mpi
def test_marked():
    pass

@pytest.mark.mpi(min_size=2)
def test_needs_two_ranks():
    pass

def test_serial():
    pass
"""


@pytest.fixture
def tiny(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTHONPATH", str(HERE))
    pytester.makepyfile(test_tiny=TESTS)
    return pytester


@pytest.mark.parametrize(("args", "code", "line"), [
    (["--mpi-expect", "1"], 0, "passed on this rank: 1, expected 1 (as stated)"),
    (["--mpi-expect", "2"], 1, "passed on this rank: 1, expected 2 (FAILED"),
    (["--mpi-expect", "0"], 1, "passed on this rank: 1, expected 0 (FAILED"),
    (["--mpi-expect", "0", "-k", "nothing"], 0, "passed on this rank: 0, expected 0"),
    (["--mpi-expect", "1", "-k", "nothing"], 1, "passed on this rank: 0, expected 1 (FAILED"),
    (["-k", "nothing"], 5, None),
])
def test_the_pass_fails_unless_the_stated_number_passed(tiny, args, code, line):
    """One rank (a singleton MPI world): one MPI test passes, one needs two ranks (skipped)."""
    result = tiny.runpytest_subprocess("-p", "mpi_expect", "--only-mpi", *args)
    assert result.ret == code, result.stdout.str()
    if line is not None:
        result.stdout.fnmatch_lines([f"*MPI tests {line}*"])
