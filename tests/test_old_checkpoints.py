"""Run directories written by an older hpc_refer still resume and evaluate (issue 23).

The fixtures in ``tests/fixtures/`` are two tiny one-process run directories in the format of
checkpoint schema version 1, written by ``python -m hpc_refer.run`` at commit
2299f677357ec998662003ddf48f7e825744db4c (``tests/fixtures/make_schema1.py`` holds the exact
commands, ``tests/fixtures/PROVENANCE.txt`` the versions and every file's SHA-256):

- ``schema1``: V-RACER with ReF-ER on Pendulum-v1 (hidden 16,16, an evaluation round, so
  ``eval.csv`` and the loop's pending evaluations are in it);
- ``schema1_ddpg``: DDPG on Pendulum-v1 with its extra fields away from the defaults (OU
  exploration with ``refer.mode er``, ``critic_lr_factor`` 5).

Each holds ``config.toml``, its newest complete checkpoint (step 600: a full, wrapped replay
ring of 512 rows and 300 gradient steps), ``policy.h5`` and the metric files whose lengths
the manifest records; nothing else.

**Never regenerate them with a later version**: they are the old format by definition, and
these tests prove that today's code still reads what that commit wrote. If a change breaks
them, the change must come with a documented migration that converts such directories (and
these tests must then run it), not with new fixtures.

Every test works on a copy in ``tmp_path`` named like the fixture: a restart compares
``run.run_dir`` (relative, the fixture's name) with the checkpoint's, so the copy resumes from
the directory above it under the same name.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import tomllib
from pathlib import Path

import h5py
import pytest

from hpc_refer.algorithms.ddpg import DDPG
from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.evaluate import main as evaluate_main
from hpc_refer.loop import checkpoint, policy_file
from hpc_refer.report.build import main as report_main
from hpc_refer.report.schema import read_intervals
from hpc_refer.run.main import main as run_main

pytestmark = pytest.mark.mpi_skip

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SCHEMA = 1
"""The schema version the fixtures were written in (not checkpoint.SCHEMA_VERSION, which a
later version raises)."""
STEP = 600
"""The step of each fixture's (only) checkpoint; also where its run ended."""
MORE = 900
"""Where the resumed runs go."""
REPLAY_COLUMNS = ("obs", "act", "rew", "mu_mean", "mu_std", "log_mu", "value", "rho", "vtbc",
                  "prev", "next", "flags")
"""The datasets of a replay shard in schema 1 (``/state/learner/replay``), one row each."""

CASES = {
    "schema1": (VRacer.name, {f"{VRacer.name}.hidden": [16, 16], f"{VRacer.name}.batch": 32,
                           "refer.mode": "refer", "run.eval_every": 300}),
    "schema1_ddpg": (DDPG.name, {f"{DDPG.name}.hidden": [16, 16], f"{DDPG.name}.batch": 32,
                              f"{DDPG.name}.exploration": "ou",
                              f"{DDPG.name}.critic_lr_factor": 5.0,
                              "refer.mode": "er"}),
}
"""Fixture name -> (algorithm, config values that must survive, dotted keys)."""


def copy_fixture(name: str, where: Path) -> Path:
    run_dir = where / name
    shutil.copytree(FIXTURES / name, run_dir)
    return run_dir


def config_value(config: dict, dotted: str) -> object:
    section, key = dotted.split(".")
    return config[section][key]


def check_config(config: dict, name: str) -> None:
    algorithm, expected = CASES[name]
    assert config["run"]["env"] == "Pendulum-v1"
    assert config["run"]["algorithm"] == algorithm
    for key, value in expected.items():
        assert config_value(config, key) == value, key


@pytest.mark.parametrize("name", sorted(CASES))
def test_old_checkpoint_reads_as_schema_1(name, tmp_path):
    run_dir = copy_fixture(name, tmp_path)
    ckpt = checkpoint.latest(run_dir)
    assert ckpt is not None and ckpt.name == f"step-{STEP:012d}"
    manifest = checkpoint.verify(ckpt)  # every part's size and SHA-256
    assert manifest["schema_version"] == SCHEMA
    assert manifest["env_step"] == manifest["meta"]["env_step"] == STEP
    assert sorted(e["name"] for e in manifest["files"]) == ["actor-0.h5", "learner-0.h5"]
    check_config(manifest["meta"]["config"], name)
    check_config(tomllib.loads((run_dir / "config.toml").read_text()), name)
    algorithm = CASES[name][0]
    for part in ("learner-0.h5", "actor-0.h5"):
        with h5py.File(ckpt / part, "r") as f:
            assert int(f.attrs["schema_version"]) == SCHEMA, part
    with h5py.File(ckpt / "learner-0.h5", "r") as f:
        assert f.attrs["env_id"].decode() == "Pendulum-v1"
        assert f.attrs["algorithm"].decode() == algorithm
    learner = checkpoint.read_tree(ckpt / "learner-0.h5")
    replay = learner["learner"]["replay"]
    missing = [c for c in REPLAY_COLUMNS if c not in replay]
    assert not missing, f"{ckpt / 'learner-0.h5'}: replay datasets {missing} missing"
    assert all(len(replay[c]) == replay["capacity"] for c in REPLAY_COLUMNS)
    assert replay["size"] == replay["capacity"] == 512 and replay["head"] > 0
    assert learner["learner"]["grad_steps"] > 0
    assert learner["learner"]["algorithm"]["name"] == algorithm
    assert learner["loop"]["env_steps"] == STEP
    actor = checkpoint.read_tree(ckpt / "actor-0.h5")
    assert actor["policy"].size > 0 and "rng" in actor["actor"]
    policy = policy_file.load_policy(run_dir / "policy.h5")
    assert policy.env_step == STEP and policy.grad_step > 0
    check_config(policy.config, name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_old_run_directory_resumes(name, in_tmp, capsys):
    run_dir = copy_fixture(name, in_tmp)
    code = run_main(["--restart", name, "--steps", str(MORE)])
    assert code == 0, f"--restart of the schema-1 fixture {name} failed:\n" \
                      f"{capsys.readouterr().err}"
    records = [json.loads(line) for line in (run_dir / "train.jsonl").read_text().splitlines()]
    steps = [r["env_step"] for r in records]
    assert steps[-1] == MORE and steps == sorted(set(steps)), steps
    assert records[-1]["grad_step"] > records[0]["grad_step"]
    ckpt = checkpoint.latest(run_dir)
    assert ckpt is not None and ckpt.name == f"step-{MORE:012d}"
    manifest = checkpoint.verify(ckpt)
    assert manifest["meta"]["grad_step"] > 300
    assert (run_dir / "checkpoints" / f"step-{STEP:012d}").is_dir()  # kept (keep = 2)
    log = (run_dir / "log.txt").read_text()
    stored = re.search(r"resumed (\d+) stored transitions of 1 learner", log)
    assert stored is not None and int(stored.group(1)) > 0, log
    assert (run_dir / "state.txt").read_text().strip() == "finished"
    check_config(tomllib.loads((run_dir / "config.toml").read_text()), name)
    check_config(manifest["meta"]["config"], name)
    # the old lines (no "compiled") and the resumed run's read as one list, and are reported
    assert "compiled" not in records[0] and records[-1]["compiled"] is False  # --compile off
    assert [r.env_step for r in read_intervals(run_dir / "train.jsonl")] == steps
    assert report_main([name]) == 0
    assert "<h2>Losses</h2><figure" in (run_dir / "report.html").read_text()


@pytest.mark.parametrize("name", sorted(CASES))
def test_old_policy_evaluates(name, in_tmp, capsys):
    run_dir = copy_fixture(name, in_tmp)
    code = evaluate_main([name, "--episodes", "1"])
    out, err = capsys.readouterr()
    assert code == 0, f"evaluate of the schema-1 fixture {name} failed:\n{err}"
    assert "mean return" in out
    stats = json.loads((run_dir / "evaluation.json").read_text())
    assert stats["episodes"] == 1 and stats["env"] == "Pendulum-v1"
    assert math.isfinite(stats["return_mean"]) and stats["length_mean"] == 200
    assert stats["env_step"] == STEP


def test_fixtures_are_as_written():
    """Every fixture file still has the SHA-256 that PROVENANCE.txt recorded when it was
    written: the fixtures are never edited or regenerated (a migration converts copies)."""
    recorded = {}
    for line in (FIXTURES / "PROVENANCE.txt").read_text().splitlines():
        match = re.fullmatch(r"\s+(\S+)\s+\d+ bytes\s+sha256 ([0-9a-f]{64})", line)
        if match:
            recorded[match.group(1)] = match.group(2)
    present = sorted(str(p.relative_to(FIXTURES)) for name in CASES
                     for p in (FIXTURES / name).rglob("*") if p.is_file())
    assert present == sorted(recorded)
    for rel, digest in recorded.items():
        assert hashlib.sha256((FIXTURES / rel).read_bytes()).hexdigest() == digest, rel
