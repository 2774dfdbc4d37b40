"""``--mpi-expect N``: a pass of the MPI tests under mpirun fails unless exactly N tests marked
``mpi`` pass on each rank, so that a broken marker, a skip or a collection error cannot pass
silently as pytest's "no tests collected" (exit 5) or as a shorter green run. The Makefile
states N per rank count (``MPI_TESTS``); N = 0 states a pass that runs none by design, whose
exit 5 is then a success. Loaded by tests/conftest.py."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--mpi-expect", type=int, default=None, metavar="N",
        help="fail unless exactly N tests marked mpi pass on this rank (0: the pass runs none "
             "by design, and pytest's 'no tests collected' is then a success); the Makefile "
             "states N for each rank count (MPI_TESTS)")


class MpiCount:
    """Counts the passed calls of tests marked ``mpi`` and checks them against the stated N."""

    def __init__(self, expected: int) -> None:
        self.expected, self.passed = expected, 0

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" and report.passed and "mpi" in report.keywords:
            self.passed += 1

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.passed != self.expected:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        elif self.expected == 0 and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
            session.exitstatus = pytest.ExitCode.OK

    def pytest_terminal_summary(self, terminalreporter) -> None:
        verdict = "as stated" if self.passed == self.expected else "FAILED: a marker, a " \
            "skip or the collection changed; update MPI_TESTS in the Makefile if on purpose"
        terminalreporter.write_line(f"MPI tests passed on this rank: {self.passed}, "
                                    f"expected {self.expected} ({verdict})")


def pytest_configure(config: pytest.Config) -> None:
    expected = config.getoption("--mpi-expect")
    if expected is not None:
        config.pluginmanager.register(MpiCount(expected), "mpi-expect")
