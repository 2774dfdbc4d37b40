"""Run directories written by an older hpc_refer still resume and evaluate (issues 23, 35).

The fixtures in ``tests/fixtures/`` are tiny one-process run directories written by
``python -m hpc_refer.run`` at an old commit, in the format of checkpoint schema version 1
(commit 2299f677357ec998662003ddf48f7e825744db4c, ``make_schema1.py``, ``PROVENANCE.txt``),
2 (commit 6df8affa0907e77fbf6d633322e158a98057b11c, ``make_schema2.py``,
``PROVENANCE-schema2.txt``) and 3 before network bodies (commit
36728b6d9012c47abce49ca47c602515ad68da6e, ``make_schema3.py``, ``PROVENANCE-schema3.txt``);
``freeze.py`` says how they were made and kept:

- ``schema1``: V-RACER with ReF-ER on Pendulum-v1 (hidden 16,16, an evaluation round, so
  ``eval.csv`` and the loop's pending evaluations are in it);
- ``schema1_ddpg``: DDPG on Pendulum-v1 with its extra fields away from the defaults (OU
  exploration with ``refer.mode er``, ``critic_lr_factor`` 5);
- ``schema2``: V-RACER with prioritized replay (the sum tree) and an evaluation round;
- ``schema2_agents``: V-RACER on the two-agent KS task (lanes, outbox, per-agent open tails);
- ``schema2_recurrent``: SAC with a GRU policy (carries in the rows, recurrent networks);
- ``schema3_naf``, ``schema3_td3``: NAF and TD3 on Pendulum-v1, their heads' tensors named
  before bodies (version 1 of the algorithm's tree and of the policy file; the other trees
  stamped with their versions, as schema 3 writes them).

Each holds ``config.toml``, its newest complete checkpoint (a full, wrapped replay ring of 512
rows; the schema-2 and schema-3 ones in the middle of an episode), ``policy.h5`` and the metric
files whose lengths the manifest records; nothing else.

**Never regenerate them with a later version**: they are the old format by definition, and
these tests prove that today's code still reads what those commits wrote, through the
migration chain of :mod:`hpc_refer.report.formats` (each upgrade is also tested on them
alone, in ``test_checkpoint_formats.py``).

Every test works on a copy in ``tmp_path`` named like the fixture: a restart compares
``run.run_dir`` (relative, the fixture's name) with the checkpoint's, so the copy resumes from
the directory above it under the same name.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import re
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path

import h5py
import pytest

from hpc_refer.algorithms.ddpg import DDPG
from hpc_refer.algorithms.naf import NAF
from hpc_refer.algorithms.registry import algorithm_class
from hpc_refer.algorithms.sac import SAC
from hpc_refer.algorithms.td3 import TD3
from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.evaluate import main as evaluate_main
from hpc_refer.loop import checkpoint, policy_file
from hpc_refer.loop.actor import ACTOR_FORMAT
from hpc_refer.loop.learner import LEARNER_FORMAT
from hpc_refer.loop.learner_loop import LOOP_FORMAT
from hpc_refer.replay.tree import REPLAY_FORMAT
from hpc_refer.report.build import main as report_main
from hpc_refer.report.formats import VERSION_KEY
from hpc_refer.report.schema import read_intervals
from hpc_refer.run.main import main as run_main

pytestmark = pytest.mark.mpi_skip

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MORE = 900
"""Where the resumed runs go."""
REPLAY_COLUMNS = ("obs", "act", "rew", "mu_mean", "mu_std", "log_mu", "value", "rho", "vtbc",
                  "prev", "next", "flags")
"""The datasets of a replay shard in schema 1 (``/state/learner/replay``), one row each;
schema 2 adds ``episode``."""


@dataclass(frozen=True)
class Case:
    """A fixture: the schema it was written in (not checkpoint.SCHEMA_VERSION, which a later
    version raises), the step of its (only) checkpoint, where its run ended, its algorithm,
    environment, obs width of the stored rows, episode length, and config values that must
    survive (dotted keys)."""

    schema: int
    step: int
    algorithm: str
    env: str
    row_dim: int
    length: int
    expected: dict[str, object]


CASES = {
    "schema1": Case(1, 600, VRacer.name, "Pendulum-v1", 3, 200,
                    {f"{VRacer.name}.hidden": [16, 16], f"{VRacer.name}.batch": 32,
                     "refer.mode": "refer", "run.eval_every": 300}),
    "schema1_ddpg": Case(1, 600, DDPG.name, "Pendulum-v1", 3, 200,
                         {f"{DDPG.name}.hidden": [16, 16], f"{DDPG.name}.batch": 32,
                          f"{DDPG.name}.exploration": "ou",
                          f"{DDPG.name}.critic_lr_factor": 5.0, "refer.mode": "er"}),
    "schema2": Case(2, 650, VRacer.name, "Pendulum-v1", 3, 200,
                    {f"{VRacer.name}.hidden": [16, 16], "replay.sampling": "per",
                     "run.eval_every": 325}),
    "schema2_agents": Case(2, 650, VRacer.name, "KSAgents", 6, 100,
                           {f"{VRacer.name}.hidden": [16, 16], "env.agents": 2}),
    "schema2_recurrent": Case(2, 650, SAC.name, "Pendulum-v1", 3 + 8, 200,
                              {f"{SAC.name}.hidden": [16, 16], f"{SAC.name}.cell": "gru",
                               f"{SAC.name}.cell_width": 8, f"{SAC.name}.bptt": 4}),
    "schema3_naf": Case(3, 650, NAF.name, "Pendulum-v1", 3, 200,
                        {f"{NAF.name}.hidden": [16, 16], f"{NAF.name}.batch": 32}),
    "schema3_td3": Case(3, 650, TD3.name, "Pendulum-v1", 3, 200,
                        {f"{TD3.name}.hidden": [16, 16], f"{TD3.name}.batch": 32,
                         f"{TD3.name}.activation": "relu"}),
}
"""Fixture name -> what it holds."""


def copy_fixture(name: str, where: Path) -> Path:
    run_dir = where / name
    shutil.copytree(FIXTURES / name, run_dir)
    return run_dir


def config_value(config: dict, dotted: str) -> object:
    section, key = dotted.split(".")
    return config[section][key]


def check_config(config: dict, name: str) -> None:
    case = CASES[name]
    assert config["run"]["env"] == case.env
    assert config["run"]["algorithm"] == case.algorithm
    for key, value in case.expected.items():
        assert config_value(config, key) == value, key


@pytest.mark.parametrize("name", sorted(CASES))
def test_old_checkpoint_reads_as_written(name, tmp_path):
    """The fixture's files are of its schema and hold what that schema held (read as raw
    trees, before any upgrade)."""
    case = CASES[name]
    run_dir = copy_fixture(name, tmp_path)
    ckpt = checkpoint.latest(run_dir)
    assert ckpt is not None and ckpt.name == f"step-{case.step:012d}"
    manifest = checkpoint.verify(ckpt)  # every part's size and SHA-256
    assert manifest["schema_version"] == case.schema
    assert manifest["env_step"] == manifest["meta"]["env_step"] == case.step
    assert sorted(e["name"] for e in manifest["files"]) == ["actor-0.h5", "learner-0.h5"]
    check_config(manifest["meta"]["config"], name)
    check_config(tomllib.loads((run_dir / "config.toml").read_text()), name)
    for part in ("learner-0.h5", "actor-0.h5"):
        with h5py.File(ckpt / part, "r") as f:
            assert int(f.attrs["schema_version"]) == case.schema, part
    with h5py.File(ckpt / "learner-0.h5", "r") as f:
        assert f.attrs["env_id"].decode() == case.env
        assert f.attrs["algorithm"].decode() == case.algorithm
    learner = checkpoint.read_tree(ckpt / "learner-0.h5")
    replay = learner["learner"]["replay"]
    columns = REPLAY_COLUMNS + (("episode",) if case.schema >= 2 else ())
    missing = [c for c in columns if c not in replay]
    assert not missing, f"{ckpt / 'learner-0.h5'}: replay datasets {missing} missing"
    assert all(len(replay[c]) == replay["capacity"] for c in columns)
    assert replay["size"] == replay["capacity"] == 512 and replay["head"] > 0
    assert replay["obs"].shape[1] == case.row_dim
    assert ("agent" in replay["open"]) == (case.schema >= 2)
    assert ("grad_steps" in learner["learner"]) == (case.schema == 1)
    assert learner["learner"]["algorithm"]["name"] == case.algorithm
    assert learner["loop"]["env_steps"] == case.step
    assert ("agent" in learner["loop"]["episodes"]) == (case.schema >= 2)
    stamped = [VERSION_KEY in t for t in (learner["learner"], replay, learner["loop"],
                                          learner["learner"]["algorithm"])]
    assert stamped == [case.schema >= 3] * 4  # schema 3 stamps each owner's tree
    if case.schema >= 3:  # written before bodies: the algorithm's first version
        assert learner["learner"]["algorithm"][VERSION_KEY] == 1
    actor = checkpoint.read_tree(ckpt / "actor-0.h5")
    assert actor["policy"].size > 0 and "rng" in actor["actor"]
    assert ("history" in actor["actor"]) == (case.schema >= 2)
    assert ("lanes" in actor["actor"]) == (name == "schema2_agents")
    if case.schema >= 2:  # checkpointed in the middle of an episode
        assert actor["actor"]["obs"] is not None
    policy = policy_file.load_policy(run_dir / "policy.h5")
    assert policy.env_step == case.step and policy.grad_step > 0
    assert policy.action_low is None and policy.action_high is None  # written before the box
    check_config(policy.config, name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_old_run_directory_resumes(name, in_tmp, capsys):
    case = CASES[name]
    run_dir = copy_fixture(name, in_tmp)
    code = run_main(["--restart", name, "--steps", str(MORE)])
    assert code == 0, f"--restart of the schema-{case.schema} fixture {name} failed:\n" \
                      f"{capsys.readouterr().err}"
    records = [json.loads(line) for line in (run_dir / "train.jsonl").read_text().splitlines()]
    steps = [r["env_step"] for r in records]
    assert steps[-1] == MORE and steps == sorted(set(steps)), steps
    assert records[-1]["grad_step"] > records[0]["grad_step"]
    ckpt = checkpoint.latest(run_dir)
    assert ckpt is not None and ckpt.name == f"step-{MORE:012d}"
    manifest = checkpoint.verify(ckpt)
    assert manifest["meta"]["grad_step"] > 300
    # what the resumed run writes is today's format: every owner's tree stamped
    assert manifest["schema_version"] == checkpoint.SCHEMA_VERSION
    learner = checkpoint.read_tree(ckpt / "learner-0.h5")
    actor = checkpoint.read_tree(ckpt / "actor-0.h5")["actor"]
    for fmt, tree in ((LEARNER_FORMAT, learner["learner"]), (LOOP_FORMAT, learner["loop"]),
                      (REPLAY_FORMAT, learner["learner"]["replay"]),
                      (algorithm_class(case.algorithm).state_format,
                       learner["learner"]["algorithm"]),
                      (ACTOR_FORMAT, actor)):
        assert tree[VERSION_KEY] == fmt.version, fmt.owner
    assert (run_dir / "checkpoints" / f"step-{case.step:012d}").is_dir()  # kept (keep = 2)
    log = (run_dir / "log.txt").read_text()
    stored = re.search(r"resumed (\d+) stored transitions of 1 learner", log)
    assert stored is not None and int(stored.group(1)) > 0, log
    assert (run_dir / "state.txt").read_text().strip() == "finished"
    check_config(tomllib.loads((run_dir / "config.toml").read_text()), name)
    check_config(manifest["meta"]["config"], name)
    # the episode in progress continued: every episode has its full length (an interrupted
    # one would be closed short)
    with (run_dir / "episodes.csv").open() as f:
        lengths = [int(row["length"]) for row in csv.DictReader(f)]
    assert lengths and set(lengths) == {case.length}, lengths
    # the old lines and the resumed run's read as one list, and are reported
    assert records[-1]["compiled"] is False  # --compile off
    if case.schema == 1:
        assert "compiled" not in records[0]
    assert [r.env_step for r in read_intervals(run_dir / "train.jsonl")] == steps
    assert report_main([name]) == 0
    assert "<h2>Losses</h2><figure" in (run_dir / "report.html").read_text()


@pytest.mark.parametrize("name", sorted(CASES))
def test_old_policy_evaluates(name, in_tmp, capsys):
    case = CASES[name]
    run_dir = copy_fixture(name, in_tmp)
    code = evaluate_main([name, "--episodes", "1"])
    out, err = capsys.readouterr()
    assert code == 0, f"evaluate of the schema-{case.schema} fixture {name} failed:\n{err}"
    assert "mean return" in out
    stats = json.loads((run_dir / "evaluation.json").read_text())
    assert stats["env"] == case.env
    assert math.isfinite(stats["return_mean"]) and stats["length_mean"] == case.length
    assert stats["env_step"] == case.step


def test_fixtures_are_as_written():
    """Every fixture file still has the SHA-256 that PROVENANCE.txt recorded when it was
    written: the fixtures are never edited or regenerated (a migration converts copies)."""
    recorded = {}
    lines = [line for provenance in ("PROVENANCE.txt", "PROVENANCE-schema2.txt",
                                     "PROVENANCE-schema3.txt")
             for line in (FIXTURES / provenance).read_text().splitlines()]
    for line in lines:
        match = re.fullmatch(r"\s+(\S+)\s+\d+ bytes\s+sha256 ([0-9a-f]{64})", line)
        if match:
            recorded[match.group(1)] = match.group(2)
    present = sorted(str(p.relative_to(FIXTURES)) for name in CASES
                     for p in (FIXTURES / name).rglob("*") if p.is_file())
    assert present == sorted(recorded)
    for rel, digest in recorded.items():
        assert hashlib.sha256((FIXTURES / rel).read_bytes()).hexdigest() == digest, rel
