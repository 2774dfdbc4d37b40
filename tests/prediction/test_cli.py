"""Command-line checks that come before any sweep work, and report's one-line file errors."""

import os
from pathlib import Path

import h5py
import pytest

from hpc_refer.prediction import sweep
from hpc_refer.prediction.__main__ import main

PROG = "python -m hpc_refer.prediction"
#: A configuration that would run (the full protocol): it must never start in these tests.
FULL = ["--quiet"]


@pytest.fixture
def no_sweep(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """run_sweep fails the test if reached; Collective.world needs no MPI."""
    calls: list[object] = []

    def refuse(config: object, *args: object, **kwargs: object) -> None:
        calls.append(config)
        raise AssertionError("the sweep started before the --out checks")

    monkeypatch.setattr(sweep, "run_sweep", refuse)
    monkeypatch.setattr(sweep.Collective, "world", classmethod(lambda cls: cls()))
    return calls


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_sweep_out_missing_directory(tmp_path: Path, no_sweep: list[object],
                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "absent" / "r.h5"
    assert main(["sweep", "--out", str(out), *FULL]) == 2
    err = _one_line(capsys)
    assert err.startswith(f"{PROG} sweep: error: --out: directory {out.parent} does not exist")
    assert not no_sweep


def test_sweep_out_unwritable_directory(tmp_path: Path, no_sweep: list[object],
                                        monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # as if read-only (root or not)
    assert main(["sweep", "--out", str(tmp_path / "r.h5"), *FULL]) == 2
    assert f"--out: directory {tmp_path} is not writable" in _one_line(capsys)
    assert not no_sweep


def test_sweep_out_exists_needs_force(tmp_path: Path, no_sweep: list[object],
                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.h5"
    out.write_bytes(b"precious")
    assert main(["sweep", "--out", str(out), *FULL]) == 2
    err = _one_line(capsys)
    assert f"--out: {out} exists; pass --force" in err
    assert not no_sweep and out.read_bytes() == b"precious"
    # with --force the checks pass and the sweep is reached (here: the stub refusing it)
    with pytest.raises(AssertionError, match="sweep started"):
        main(["sweep", "--out", str(out), "--force", *FULL])
    assert len(no_sweep) == 1


def test_sweep_out_is_directory(tmp_path: Path, no_sweep: list[object],
                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--out", str(tmp_path), "--force", *FULL]) == 2
    assert f"--out: {tmp_path} is a directory" in _one_line(capsys)
    assert not no_sweep


def test_sweep_force_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    assert "--force" in capsys.readouterr().out


def _write(path: Path, content: bytes | None = None, /, **datasets: object) -> Path:
    if content is not None:
        path.write_bytes(content)
    else:
        with h5py.File(path, "w") as fh:
            for key, value in datasets.items():
                if key.startswith("attr_"):
                    fh.attrs[key[5:]] = value
                else:
                    fh[key] = value
    return path


@pytest.mark.parametrize(("make", "reason"), [
    (lambda d: d / "missing.h5", "no such file"),
    (lambda d: d, "not a regular file"),
    (lambda d: _write(d / "text.h5", b"not hdf5\n"), "not an HDF5 file"),
    (lambda d: _write(d / "other.h5", x=1), "format attribute is None"),
    (lambda d: _write(d / "noconfig.h5", attr_format="hpc_refer.prediction/1"),
     "no attribute config, ranks, seconds"),
    (lambda d: _write(d / "nogroup.h5", attr_format="hpc_refer.prediction/1", attr_ranks=1,
                      attr_seconds=1.0,
                      attr_config='{"placements": ["WHOLE"], "algorithms": ["td"]}'),
     "no group for algorithm 'td'"),
    (lambda d: _write(d / "noauc.h5", attr_format="hpc_refer.prediction/1", attr_ranks=1,
                      attr_seconds=1.0, **{"td/final": 1},
                      attr_config='{"placements": ["WHOLE"], "algorithms": ["td"]}'),
     "group 'td' lacks auc"),
    (lambda d: _write(d / "badjson.h5", attr_format="hpc_refer.prediction/1", attr_ranks=1,
                      attr_seconds=1.0,
                      attr_config="{"), "JSONDecodeError"),
])
def test_report_not_a_sweep_one_line(make: object, reason: str, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    assert main(["report", str(path), "--out-dir", str(tmp_path / "rep")]) == 2
    err = _one_line(capsys)
    assert err.startswith(f"{PROG} report: error: {path} is not a sweep result (")
    assert reason in err and err.endswith(")\n")
    assert not (tmp_path / "rep").exists()
