"""Checkpoints: every owner's state round trip through HDF5, the file schema, atomic
publishing under SIGKILL, redistribution of the replay over another number of learners,
keep-k pruning and policy files.

Each test names what it guards: a restored learner that does not continue bit for bit, a
file that returns other numbers instead of failing, a published checkpoint lost or replaced
by an older one after a kill, transitions or episode links lost when the learner count
changes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from output_lines import lines_with

from hpc_refer import __version__
from hpc_refer.algorithms.ddpg import DDPG
from hpc_refer.algorithms.kit.base import module_state, optimizer_state_dict, optimizer_tree
from hpc_refer.algorithms.kit.collectives import SerialReducer
from hpc_refer.algorithms.registry import ALGORITHMS, make_algorithm
from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.config.resolve import build_config
from hpc_refer.loop import checkpoint, policy_file
from hpc_refer.loop.checkpoint import CheckpointError
from hpc_refer.loop.learner import Learner
from hpc_refer.replay.shard import HAS_ACTION, IN_USE, TERMINAL
from hpc_refer.replay.sumtree import SumTree
from hpc_refer.replay.tree import split_episodes
from hpc_refer.report.records import OPEN, TERMINATED, TRUNCATED, Chunk, ChunkEnd

OBS, ACT = 3, 2
ALGOS = sorted(ALGORITHMS)
REPO = Path(__file__).resolve().parents[1]
f32 = np.float32


class Learners(SerialReducer):
    """The reductions of one of ``size`` learners whose others hold nothing (shard
    capacity N / size; the sums are this learner's own)."""

    def __init__(self, size: int) -> None:
        self.size = size


def config(algorithm: str = VRacer.name, **replay):
    """Tiny networks and replay; beta starts at 0.5 so that eq. 12 moves it either way."""
    return build_config({"run": {"algorithm": algorithm, "steps": 1000},
                         algorithm: {"hidden": [16], "batch": 32},
                         "refer": {"beta_init": 0.5},
                         "replay": {"size": 256, "learn_start": 64, "stats_every": 4,
                                    **replay}})


def make(algorithm: str = VRacer.name, seed: int = 0, learners: int = 1, **replay) -> Learner:
    """A learner built as ``training.make_learner`` builds one, with seeds of our choice."""
    cfg = config(algorithm, **replay)
    return Learner(make_algorithm(cfg, OBS, ACT, seed), cfg, seed + 100, Learners(learners))


def chunks(seed: int, n: int, sources: tuple[int, ...] = (0, 1, 2)) -> list[Chunk]:
    """Chunks of 3-19 steps from interleaved actors, ending open, terminated or truncated
    (mu near and far from the initial policy), then one open chunk per actor."""
    rng = np.random.default_rng(seed)
    ends = [ChunkEnd(int(e)) for e in rng.choice([0, 0, 1, 2], size=n)] + [OPEN] * len(sources)
    out = []
    for i, end in enumerate(ends):
        m = int(rng.integers(3, 20))
        out.append(Chunk(
            rng.standard_normal((m + (end == TRUNCATED), OBS)).astype(f32),
            (0.3 * rng.standard_normal((m, ACT))).astype(f32),
            (2.0 * rng.standard_normal(m) + 1.0).astype(f32),
            (rng.choice([0.0, 1.5], size=(m, 1)) * np.ones((1, ACT))).astype(f32),
            np.full((m, ACT), 0.3, f32), end, sources[i % len(sources)]))
    return out


def fill(learner: Learner, seed: int, n: int, sources: tuple[int, ...] = (0, 1, 2)) -> None:
    for chunk in chunks(seed, n, sources):
        learner.store(chunk)


def assert_trees_equal(a, b, where: str = "") -> None:
    """Same keys, same leaf types; arrays of the same dtype and shape, bit for bit."""
    assert isinstance(b, type(a)) or isinstance(a, type(b)), (where, type(a), type(b))
    if isinstance(a, dict):
        assert sorted(a) == sorted(b), where
        for k in a:
            assert_trees_equal(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, (where, a.dtype, b.dtype)
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), where
    else:
        assert type(a) is type(b) and a == b, (where, a, b)


def assert_learners_equal(a: Learner, b: Learner) -> None:
    """Every tensor, optimizer state, replay column (all rows), counter and generator."""
    assert a.algo.checksum() == b.algo.checksum()
    for k in a.algo.modules:
        assert_trees_equal(module_state(a.algo.modules[k]), module_state(b.algo.modules[k]), k)
    for k, spec in a.algo.optimizers.items():
        assert_trees_equal(optimizer_tree(spec.optimizer),
                           optimizer_tree(b.algo.optimizers[k].optimizer), k)
    for name in ("obs", "act", "rew", "mu_mean", "mu_std", "log_mu", "value", "rho", "vtbc",
                 "prev", "next", "flags"):
        x, y = getattr(a.replay, name), getattr(b.replay, name)
        assert np.array_equal(x, y, equal_nan=True), name
    for name in ("head", "size", "n_transitions", "n_far", "n_removed", "reward_scale",
                 "_written", "_open"):
        assert getattr(a.replay, name) == getattr(b.replay, name), name
    if a.replay.tree is not None:
        assert b.replay.tree is not None
        assert np.array_equal(a.replay.tree.tree, b.replay.tree.tree)
        assert a.replay.tree.max_priority == b.replay.tree.max_priority
    assert (a.refer.beta, a.refer.t, a.grad_steps, a.start_env_steps, a.local_batch) == (
        b.refer.beta, b.refer.t, b.grad_steps, b.start_env_steps, b.local_batch)
    assert a.rng.bit_generator.state == b.rng.bit_generator.state


# --- round trips of the owners -------------------------------------------------------------


@pytest.mark.parametrize("sampling", ["uniform", "per"])
@pytest.mark.parametrize("algorithm", ALGOS)
def test_learner_continues_bit_for_bit_after_a_file_round_trip(tmp_path, algorithm, sampling):
    """A learner trained k steps, written to HDF5, read back into a learner built with other
    seeds, takes the same m next steps as the original (with new chunks that continue open
    episodes and wrap the ring, and a scaling refresh among them): the same statistics,
    and afterwards the same weights, optimizer states, replay columns, beta, generators."""
    a = make(algorithm, sampling=sampling)
    fill(a, seed=1, n=30)
    assert a.replay.size == a.replay.capacity and a.replay.n_removed > 0, "the ring wrapped"
    assert a.replay._open, "open episodes at the checkpoint"
    a.update_start(a.replay.size, 0)
    for _ in range(6):
        a.train_step()
    torch_state = torch.get_rng_state()
    checkpoint.write_tree(tmp_path / "learner.h5", a.checkpoint_state(), {"kind": "learner"})
    torch.rand(5)  # the restore must bring torch's generator back
    tree = checkpoint.read_tree(tmp_path / "learner.h5")
    b = make(algorithm, seed=7, sampling=sampling)
    assert b.algo.checksum() != a.algo.checksum()
    b.restore_state(tree)
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert_learners_equal(a, b)
    assert_trees_equal(a.checkpoint_state(), b.checkpoint_state())
    more = chunks(2, 8)

    def continue_from_the_checkpoint(learner: Learner) -> list[dict]:
        """10 steps from torch's generator as restored (a loss may draw noise from it, as
        SAC's does: one learner per process, so the two runs go one after the other)."""
        torch.set_rng_state(torch_state)
        stats = []
        for step in range(10):
            if step % 3 == 0:
                learner.store(more[step // 3])
            stats.append(learner.train_step().stats)
        return stats

    assert continue_from_the_checkpoint(a) == continue_from_the_checkpoint(b)
    assert_learners_equal(a, b)
    assert a.rng.random() == b.rng.random()


def test_a_shard_stores_only_the_rows_in_use_and_restores_the_rest_as_unused():
    """Before the ring wraps, only rows 0 .. size-1 are stored; a restored shard of a used
    learner holds the same columns in every row (the unused ones as never written)."""
    a = make(sampling="per")
    fill(a, seed=3, n=4)
    tree = a.replay.checkpoint_state()
    assert tree["obs"].shape == (a.replay.size, OBS) and a.replay.size < a.replay.capacity
    b = make(seed=5, sampling="per")
    fill(b, seed=4, n=40)  # full of other rows: the restore must clear them
    b.replay.restore_state(tree)
    for name in ("obs", "act", "mu_std", "rho", "vtbc", "prev", "next", "flags"):
        assert np.array_equal(getattr(a.replay, name), getattr(b.replay, name),
                              equal_nan=True), name
    assert a.replay._open == b.replay._open


def test_sumtree_restore_rebuilds_the_internal_sums_bit_for_bit():
    tree = SumTree(37)
    rng = np.random.default_rng(0)
    for _ in range(20):
        rows = rng.integers(0, 37, 9)
        tree.update(rows, rng.exponential(size=9) ** 3)
    other = SumTree(37)
    other.restore_state(tree.checkpoint_state())
    assert np.array_equal(tree.tree, other.tree) and tree.max_priority == other.max_priority
    assert np.array_equal(tree.sample(50, np.random.default_rng(1)),
                          other.sample(50, np.random.default_rng(1)))


@pytest.mark.parametrize("algorithm", ALGOS)
def test_restore_refuses_another_network_or_replay_saying_what_differs(algorithm):
    a = make(algorithm)
    tree = a.checkpoint_state()
    cfg = build_config({"run": {"algorithm": algorithm}, algorithm: {"hidden": [8], "batch": 32},
                        "replay": {"size": 256, "learn_start": 64}})
    with pytest.raises(ValueError, match=r"module \w+ does not match"):
        make_algorithm(cfg, OBS, ACT, 0).restore_state(tree["algorithm"])
    with pytest.raises(ValueError, match=r"capacity: checkpoint 256, here 512"):
        make(algorithm, size=512).replay.restore_state(tree["replay"])
    with pytest.raises(ValueError, match=r"prioritized: checkpoint False, here True"):
        make(algorithm, sampling="per").replay.restore_state(tree["replay"])


# --- the file schema -----------------------------------------------------------------------


def every_leaf() -> dict:
    return {"yes": True, "no": False, "int": -(2**62), "float": 0.1,
            "text": "\u03c1 \u00e9 json {}",
            "empty_text": "", "none": None,
            "arrays": {"f32": np.arange(6, dtype=f32).reshape(2, 3), "i32": np.array([-1, 7],
                       np.int32), "u8": np.array([0, 255], np.uint8), "bool": np.array([1, 0],
                       bool), "scalar": np.asarray(np.float32(3.5)), "empty": np.zeros((0, 4)),
                       "large": np.random.default_rng(0).standard_normal((3000, 7))},
            "nested": {"deeper": {"x": 1}, "empty": {}}}


def test_every_leaf_type_round_trips_with_its_type(tmp_path):
    tree = every_leaf()
    checkpoint.write_tree(tmp_path / "t.h5", tree, {"kind": "test"})
    assert_trees_equal(tree, checkpoint.read_tree(tmp_path / "t.h5"))
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("leaf", [[1, 2], np.array(["a"]), 2**63, {"a/b": 1}, {"": 1}])
def test_unstorable_leaves_are_refused_and_leave_no_file(tmp_path, leaf):
    with pytest.raises(TypeError):
        checkpoint.write_tree(tmp_path / "t.h5", {"leaf": leaf}, {})
    assert list(tmp_path.iterdir()) == []


def test_a_learner_file_is_readable_with_plain_h5py_by_the_documented_names(tmp_path):
    learner = make(VRacer.name)
    fill(learner, seed=1, n=6)
    path = tmp_path / "learner-0.h5"
    checkpoint.write_tree(path, {"learner": learner.checkpoint_state()}, {"kind": "learner"})
    with h5py.File(path, "r") as f:
        assert f.attrs["schema_version"] == checkpoint.SCHEMA_VERSION == 3
        assert f.attrs["hpc_refer_version"].decode() == __version__
        assert f.attrs["kind"].decode() == "learner"
        state = f["state/learner"]
        replay = state["replay"]
        assert replay["obs"].dtype == np.float32 and replay["obs"].shape == (learner.replay.size,
                                                                            OBS)
        assert replay["prev"].dtype == np.int32 and replay["flags"].dtype == np.uint8
        assert replay.attrs["size"] == learner.replay.size
        assert replay.attrs["head"] == learner.replay.head
        assert set(replay["open"]) == {"source", "agent", "row", "written"}
        assert isinstance(state.attrs["start_env_steps"], h5py.Empty)  # None
        assert json.loads(state.attrs["rng"])["bit_generator"] == "PCG64"
        assert state["torch_rng"].dtype == np.uint8
        assert state["refer"].attrs["beta"] == learner.refer.beta
        algo = state["algorithm"]
        assert algo.attrs["name"].decode() == VRacer.name
        assert algo.attrs["behaviour"].decode() == "net"
        w = algo["modules/net/body.trunk.0.weight"][()]
        assert np.array_equal(w, learner.algo.modules["net"].state_dict()["body.trunk.0.weight"])
        assert algo["modules/net/body.normalizer.mean"].shape == (OBS,)
        assert algo["optimizers/adam/param_groups/0"].attrs["lr"] == pytest.approx(1e-4)
        # each owner's tree carries the version of its format (hpc_refer.report.formats)
        assert state.attrs["tree_version"] == 2 and replay.attrs["tree_version"] == 2
        assert algo.attrs["tree_version"] == 2  # the heads hold a body (kit/bodies.py)


def test_a_newer_schema_is_refused_naming_both_versions(tmp_path):
    path = tmp_path / "t.h5"
    checkpoint.write_tree(path, {"x": 1}, {})
    with h5py.File(path, "a") as f:
        f.attrs["schema_version"] = 4
        f.attrs["hpc_refer_version"] = "9.9"
    with pytest.raises(CheckpointError, match=r"schema_version 4 \(written by hpc_refer 9.9\)"
                       r" is newer than schema_version 3"):
        checkpoint.read_tree(path)


def test_a_truncated_file_is_refused_naming_it(tmp_path):
    path = tmp_path / "t.h5"
    checkpoint.write_tree(path, every_leaf(), {})
    data = path.read_bytes()
    for length in (0, 8, 100, len(data) // 3, len(data) // 2, len(data) - 100, len(data) - 1):
        path.write_bytes(data[:length])
        with pytest.raises(CheckpointError, match=re.escape(str(path))):
            checkpoint.read_tree(path)
    path.unlink()
    with pytest.raises(CheckpointError, match=re.escape(f"{path}: no such checkpoint file")):
        checkpoint.read_tree(path)


def test_a_flipped_byte_is_refused_or_changes_nothing(tmp_path):
    """Flip 400 bytes spread over the file, and the first 16 bytes of every stored value
    (each array's data, wherever its layout puts it, each chunk of the large one, the
    strings): read_tree either refuses the file (naming it) or returns the very same tree
    (the byte was unused); it never returns other numbers."""
    path = tmp_path / "t.h5"
    tree = every_leaf()
    checkpoint.write_tree(path, tree, {})
    data = path.read_bytes()
    with h5py.File(path, "r") as f:
        ds = f["state/arrays/large"]
        starts = [ds.id.get_chunk_info(i).byte_offset for i in range(ds.id.get_num_chunks())]
    values = [a.tobytes()[:16] for a in tree["arrays"].values() if a.nbytes >= 2]
    values += [tree["text"].encode(), np.float64(tree["float"]).tobytes()]  # attributes
    found = [data.find(v) for v in values]
    assert min(found) >= 0, "every value is found in the file"
    starts += found
    positions = sorted({*np.linspace(0, len(data) - 1, 400).astype(int).tolist(),
                        *(s + i for s in starts for i in range(16))})
    refused = 0
    for pos in positions:
        flipped = bytearray(data)
        flipped[pos] ^= 0x5A
        path.write_bytes(bytes(flipped))
        try:
            assert_trees_equal(tree, checkpoint.read_tree(path), f"flip at {pos}")
        except CheckpointError as err:
            assert str(path) in str(err)
            refused += 1
    assert refused > len(positions) // 2


def test_verify_names_a_missing_truncated_or_changed_file(tmp_path):
    for name in ("learner-0.h5", "actor-0.h5", "run.h5"):
        checkpoint.write_tree(checkpoint.partial_dir(tmp_path, 5) / name, every_leaf(), {})
    ckpt = checkpoint.publish(tmp_path, 5, {"learners": 1}, keep=2)
    manifest = checkpoint.verify(ckpt)
    assert manifest["env_step"] == 5 and manifest["meta"] == {"learners": 1}
    assert manifest["schema_version"] == 3 and manifest["hpc_refer_version"] == __version__
    assert [f["name"] for f in manifest["files"]] == ["actor-0.h5", "learner-0.h5", "run.h5"]
    data = (ckpt / "run.h5").read_bytes()
    (ckpt / "run.h5").write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(CheckpointError, match=r"run\.h5: sha256 differs"):
        checkpoint.verify(ckpt)
    (ckpt / "learner-0.h5").write_bytes(b"x")
    (ckpt / "actor-0.h5").unlink()
    with pytest.raises(CheckpointError) as err:
        checkpoint.verify(ckpt)
    message = str(err.value)
    assert f"{ckpt / 'learner-0.h5'}: size 1 bytes, the manifest says" in message
    assert f"{ckpt / 'actor-0.h5'}: listed in the manifest but missing" in message
    assert "run.h5: sha256 differs" in message
    newer = checkpoint.SCHEMA_VERSION + 1
    (ckpt / "manifest.json").write_text(json.dumps({**manifest, "schema_version": newer}))
    with pytest.raises(CheckpointError, match=f"schema_version {newer} "):
        checkpoint.verify(ckpt)
    (ckpt / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match=r"no manifest\.json"):
        checkpoint.verify(ckpt)


def test_check_compatible_lists_every_differing_key():
    saved = config(VRacer.name).to_dict()
    current = build_config({"run": {"algorithm": VRacer.name, "steps": 5000, "seed": 3},
                            VRacer.name: {"hidden": [64, 64], "batch": 32},
                            "refer": {"mode": "er", "beta_init": 0.5},
                            "replay": {"size": 256, "learn_start": 64,
                                       "stats_every": 4}}).to_dict()
    with pytest.raises(CheckpointError) as err:
        # run.log_every follows run.steps by default, and a restart may change both
        checkpoint.check_compatible(saved, current, {"run.steps", "run.log_every"})
    lines = str(err.value).splitlines()[1:]
    assert sorted(x.strip() for x in lines) == [
        'refer.mode: checkpoint "refer", now "er"',
        "run.seed: checkpoint 0, now 3",
        f"{VRacer.name}.hidden: checkpoint [16], now [64, 64]",
    ]
    checkpoint.check_compatible(saved, current, {"run", f"{VRacer.name}.hidden", "refer.mode"})
    with pytest.raises(CheckpointError, match=r"run\.extra: checkpoint \(absent\), now 1"):
        checkpoint.check_compatible(saved, {**current, "run": {**current["run"], "extra": 1}},
                                    {"run.steps", "run.seed", VRacer.name, "refer"})


# --- the directory: publishing, pruning, SIGKILL -------------------------------------------


def publish_parts(run_dir: Path, step: int, keep: int = 2) -> Path:
    for name in ("learner-0.h5", "actor-0.h5"):
        checkpoint.write_tree(checkpoint.partial_dir(run_dir, step) / name, {"step": step}, {})
    return checkpoint.publish(run_dir, step, {"step": step}, keep)


def test_publish_keeps_the_newest_k_and_removes_stale_partials(tmp_path):
    assert checkpoint.latest(tmp_path) is None
    for step in range(1, 6):
        publish_parts(tmp_path, step * 100)
    root = tmp_path / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["step-000000000400", "step-000000000500"]
    checkpoint.partial_dir(tmp_path, 50)  # a stale partial of an older attempt
    (checkpoint.partial_dir(tmp_path, 600) / "learner-0.h5.tmp").write_bytes(b"half")
    publish_parts(tmp_path, 600, keep=3)
    assert sorted(p.name for p in root.iterdir()) == [
        "step-000000000400", "step-000000000500", "step-000000000600"]
    assert [f["name"] for f in checkpoint.verify(root / "step-000000000600")["files"]] == [
        "actor-0.h5", "learner-0.h5"]
    assert checkpoint.latest(tmp_path) == root / "step-000000000600"
    (root / "step-000000000700").mkdir()  # no manifest: not complete
    assert checkpoint.latest(tmp_path) == root / "step-000000000600"
    publish_parts(tmp_path, 600, keep=1)  # the same step again replaces it
    assert sorted(p.name for p in root.iterdir()) == ["step-000000000600", "step-000000000700"]
    checkpoint.partial_dir(tmp_path, 800)
    checkpoint.discard_partials(tmp_path)
    assert not list(root.glob(".partial-*"))


WRITER = """
import os, shutil, signal, sys
from pathlib import Path
import numpy as np
from hpc_refer.loop import checkpoint

run_dir, kill_at, cycles = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
calls = 0

def counted(fn):
    def call(*args, **kwargs):
        global calls
        calls += 1
        if calls == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return fn(*args, **kwargs)
    return call

for name in ("replace", "rename", "fsync", "unlink", "rmdir"):
    setattr(os, name, counted(getattr(os, name)))
shutil.rmtree = counted(shutil.rmtree)
for _ in range(cycles):
    last = checkpoint.latest(run_dir)
    step = 1 if last is None else int(last.name[len("step-"):]) + 1
    part = checkpoint.partial_dir(run_dir, step)
    for name in ("learner-0.h5", "actor-0.h5"):
        tree = {"step": step, "data": np.full(5000, step, np.float64)}
        checkpoint.write_tree(part / name, tree, {"kind": name})
    checkpoint.publish(run_dir, step, {"step": step}, keep=2)
    print("published", step, flush=True)
print("calls", calls, flush=True)
"""


def run_writer(script: Path, run_dir: Path, kill_at: int, cycles: int) -> tuple[int, list[int]]:
    out = subprocess.run([sys.executable, str(script), str(run_dir), str(kill_at), str(cycles)],
                         capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
    assert out.returncode in (0, -9), out.stderr
    published = [int(x.split()[1]) for x in lines_with(out.stdout, "published ")]
    return out.returncode, published


def test_sigkill_at_every_step_of_publishing_never_loses_a_published_checkpoint(tmp_path):
    """The writer kills itself (SIGKILL) before its k-th file operation (replace, rename,
    fsync, unlink, rmdir, rmtree), for every k of a publishing cycle, each run starting from
    what the previous kill left. After each kill the newest complete checkpoint
    verifies, loads and holds its step, and it is never older than the newest one before
    the kill nor than any the writer reported published."""
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    run_dir = tmp_path / "run"
    rc, published = run_writer(script, run_dir, 0, 3)  # steady state: pruning happens
    assert rc == 0 and published == [1, 2, 3]
    newest = 3
    kills = 0
    for kill_at in range(1, 22):  # a cycle makes 17 operations, more after a kill
        rc, published = run_writer(script, run_dir, kill_at, 1)
        kills += rc == -9
        path = checkpoint.latest(run_dir)
        assert path is not None
        step = int(path.name[len("step-"):])
        assert step >= max([newest, *published]), (kill_at, step, newest, published)
        manifest = checkpoint.verify(path)
        assert manifest["meta"] == {"step": step}
        for entry in manifest["files"]:
            tree = checkpoint.read_tree(path / entry["name"])
            assert tree["step"] == step and np.all(tree["data"] == step)
        newest = step
    assert kills >= 17
    rc, _ = run_writer(script, run_dir, 0, 1)
    assert rc == 0
    names = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert names == [f"step-{newest:012d}", f"step-{newest + 1:012d}"]


# --- another number of learners ------------------------------------------------------------


def transitions(learner: Learner) -> Counter:
    """Every stored transition (state, action, reward, mu, and what follows it: the next
    state, 'terminal', or 'open' when its successor has not arrived), with its PER
    priority."""
    r = learner.replay
    out: Counter = Counter()
    for k in np.flatnonzero((r.flags & HAS_ACTION) != 0):
        nxt = r.next[k]
        after = (b"terminal" if r.flags[k] & TERMINAL else r.obs[nxt].tobytes() if nxt >= 0
                 else b"open")
        priority = r.tree.get(np.array([k]))[0] if r.tree is not None else 0.0
        out[(r.obs[k].tobytes(), r.act[k].tobytes(), float(r.rew[k]), r.mu_mean[k].tobytes(),
             after, priority)] += 1
    return out


def assert_links_valid(learner: Learner) -> None:
    """Rows 0 .. size-1 in use, every prev/next pair consistent; under PER exactly the
    sampleable transitions have a positive priority."""
    r = learner.replay
    used = np.flatnonzero(r.flags & IN_USE)
    assert used.size == r.size and np.array_equal(used, np.arange(r.size))
    if r.tree is not None:
        assert np.array_equal(r.tree.get(used) > 0, r.sampleable(used))
    for k in used:
        if r.next[k] >= 0:
            assert r.flags[r.next[k]] & IN_USE and r.prev[r.next[k]] == k, k
        if r.prev[k] >= 0:
            assert r.flags[r.prev[k]] & IN_USE and r.next[r.prev[k]] == k, k


@pytest.mark.parametrize(("algorithm", "sampling"),
                         [(VRacer.name, "uniform"), (VRacer.name, "per"), (DDPG.name, "per")])
def test_two_learners_to_one_and_back_keep_every_transition_and_link(tmp_path, algorithm,
                                                                     sampling):
    """2 -> 1 -> 2 learners through files: the stored transitions (with their successors and
    PER priorities) are the same multiset (but for the one split to fill two full shards
    exactly), every prev/next pair is consistent, V and rho are those of the new learner's
    network, open episodes stay unsampleable and link to nothing new, training goes on."""
    old = [make(algorithm, learners=2, sampling=sampling) for _ in range(2)]
    fill(old[0], seed=11, n=12, sources=(0, 2))
    fill(old[1], seed=12, n=40, sources=(1, 3))  # the second shard has wrapped
    assert old[1].replay.size == old[1].replay.capacity == 128
    for i, learner in enumerate(old):
        for _ in range(3):
            learner.replay.update_priorities(*_errors(learner, i))
    before = transitions(old[0]) + transitions(old[1])
    paths = []
    for i, learner in enumerate(old):
        paths.append(tmp_path / f"learner-{i}.h5")
        checkpoint.write_tree(paths[i], {"learner": learner.checkpoint_state()}, {})
    trees = [checkpoint.read_tree(p)["learner"] for p in paths]

    one = make(algorithm, seed=3, sampling=sampling)
    [share] = split_episodes([t["replay"] for t in trees], 1)
    one.restore_resized(trees[0], share)
    assert one.algo.checksum() == old[0].algo.checksum()
    assert transitions(one) == before
    assert one.replay.n_transitions == sum(x.replay.n_transitions for x in old)
    assert one.replay.size == sum(x.replay.size for x in old)
    assert_links_valid(one)
    _assert_values_are_the_networks(one)
    if sampling == "per":
        assert one.replay.tree is not None
        assert one.replay.tree.max_priority == max(x.replay.tree.max_priority for x in old)

    path = tmp_path / "one.h5"
    checkpoint.write_tree(path, {"learner": one.checkpoint_state()}, {})
    tree = checkpoint.read_tree(path)["learner"]
    shares = split_episodes([tree["replay"]], 2, capacity=128)
    two = [make(algorithm, seed=4, learners=2, sampling=sampling) for _ in range(2)]
    for learner, share in zip(two, shares, strict=True):
        learner.restore_resized(tree, share)
        assert_links_valid(learner)
        _assert_values_are_the_networks(learner)
    # The memory is full (2 x 128 rows): one episode is split over the two shards, the
    # transition before the split keeps everything but its successor.
    assert [x.replay.size for x in two] == [128, 128] == [x.replay.capacity for x in two]
    assert sum(x.replay.n_transitions for x in two) == one.replay.n_transitions
    after = transitions(two[0]) + transitions(two[1])
    assert Counter(k[:4] for k in after.elements()) == Counter(k[:4] for k in before.elements())
    assert sum((before - after).values()) == 1
    # The open episodes are stored, unsampleable, and no actor's next chunk continues them.
    for learner in two:
        r = learner.replay
        tails = np.flatnonzero((r.flags & (HAS_ACTION | TERMINAL) == HAS_ACTION) & (r.next < 0))
        assert not r.sampleable(tails).any()
        new = []
        for source in range(4):
            new.append(learner.store(chunks(source, 0, sources=(source,))[0]))
            assert r.prev[new[-1][0]] == -1
        alive = np.setdiff1d(tails, np.concatenate(new))
        assert alive.size and (r.next[alive] == -1).all()
        learner.update_start(10**6, 0)
        learner.train_step()


def _errors(learner: Learner, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rows = learner.replay.sample_rows(16, np.random.default_rng(seed))
    return rows, np.random.default_rng(seed).standard_normal(rows.size)


def _assert_values_are_the_networks(learner: Learner) -> None:
    """V (for V-RACER) and rho of every stored row are those of the learner's networks."""
    r = learner.replay
    rows = np.arange(r.size)
    value, log_pi = learner.algo.evaluate(r.obs[rows], r.act[rows])
    acts = (r.flags[rows] & HAS_ACTION) != 0
    rho = np.exp(np.clip(log_pi - r.log_mu[rows], -7, 7))
    np.testing.assert_allclose(r.rho[rows][acts], rho[acts], rtol=1e-6)
    if value is not None:
        np.testing.assert_allclose(r.value[rows], value, rtol=1e-5, atol=1e-7)
        assert not np.isnan(r.vtbc[rows]).any()


def test_split_episodes_balances_rows_and_orders_by_age():
    a = make(learners=1, size=512)
    fill(a, seed=21, n=40, sources=(0, 1, 2, 3))
    tree = a.replay.checkpoint_state()
    shares = split_episodes([tree], 3)
    sizes = [sum(len(e.chunk.obs) for e in s) for s in shares]
    assert sum(sizes) == a.replay.size
    assert max(sizes) - min(sizes) <= max(len(e.chunk.obs) for s in shares for e in s)
    ends = Counter(e.chunk.end for s in shares for e in s)
    assert ends[OPEN] == 4 and ends[TERMINATED] > 0 and ends[TRUNCATED] > 0
    with pytest.raises(ValueError, match="n_learners"):
        split_episodes([tree], 0)


# --- policy files --------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ALGOS)
def test_a_policy_file_rebuilds_the_behaviour_with_its_input_scaling(tmp_path, algorithm):
    learner = make(algorithm)
    fill(learner, seed=1, n=8)
    learner.update_start(learner.replay.size, 0)  # sets the input normalisation
    learner.train_step()
    cfg = learner.config.to_dict()
    path = tmp_path / "policy.h5"
    box = (np.array([-1.0, -np.inf]), np.array([2.0, np.inf]))  # a dimension unbounded
    policy_file.save_policy(path, learner.algo, cfg, 1234, 56, box)
    policy, saved, obs_dim, act_dim, env_step, grad_step, low, high = policy_file.load_policy(
        path)
    assert saved == cfg and (obs_dim, act_dim, env_step, grad_step) == (OBS, ACT, 1234, 56)
    assert low.tolist() == [-1.0, -np.inf] and high.tolist() == [2.0, np.inf]
    obs = torch.from_numpy(np.random.default_rng(0).standard_normal((5, OBS)).astype(f32))
    with torch.no_grad():
        for x, y in zip(policy.policy(obs), learner.algo.behaviour.policy(obs), strict=True):
            assert torch.equal(x, y)
    fmt = ALGORITHMS[algorithm].policy_format
    with h5py.File(path, "r") as f:
        assert f.attrs["kind"].decode() == "policy"
        assert f["state"].attrs["algorithm"].decode() == algorithm
        assert list(f["state/hidden"][()]) == [16]
        assert int(f["state"].attrs[fmt.key]) == fmt.version
    checkpoint.write_tree(tmp_path / "other.h5", {"x": 1}, {})
    with pytest.raises(CheckpointError, match="not a policy file"):
        policy_file.load_policy(tmp_path / "other.h5")
    newer = {**checkpoint.read_tree(path), fmt.key: fmt.version + 1}
    checkpoint.write_tree(tmp_path / "newer.h5", newer, {"kind": "policy"})
    with pytest.raises(CheckpointError, match=rf"newer.h5: policy file tree of version "
                                              rf"{fmt.version + 1} is newer"):
        policy_file.load_policy(tmp_path / "newer.h5")


# --- optimizer state as a pickle-free tree ----------------------------------------------------


def _adam(**kwargs) -> torch.optim.Adam:
    """An Adam over two small parameters after one step (so it has per-parameter state)."""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(3, 2)), torch.nn.Parameter(torch.randn(2))]
    opt = torch.optim.Adam(params, **kwargs)
    sum((p ** 2).sum() for p in params).backward()
    opt.step()
    return opt


def test_optimizer_tree_round_trips_adam_with_its_types():
    """Adam's defaults (foreach None, betas a tuple) and a tensor learning rate come back in
    the template's types; a float64 value stored for a float32 tensor becomes float32; a
    hyper-parameter the checkpoint lacks keeps the template's value."""
    a = _adam(lr=torch.tensor(0.01))
    tree = optimizer_tree(a)
    assert tree["param_groups"]["0"]["foreach"] is None
    tree["param_groups"]["0"]["lr"] = np.asarray(0.02, np.float64)
    del tree["param_groups"]["0"]["eps"]
    template = _adam(lr=torch.tensor(0.5), eps=1e-3).state_dict()
    sd = optimizer_state_dict(tree, template)
    group = sd["param_groups"][0]
    assert isinstance(group["betas"], tuple) and group["betas"] == (0.9, 0.999)
    assert group["lr"].dtype == torch.float32 and float(group["lr"]) == pytest.approx(0.02)
    assert group["eps"] == 1e-3
    for i, s in a.state_dict()["state"].items():
        for k, v in s.items():
            torch.testing.assert_close(sd["state"][i][k], v, rtol=0, atol=0)


def test_optimizer_tree_names_what_it_cannot_store():
    """A value that is neither a tensor, a sequence of numbers nor a scalar is a TypeError
    naming where it is; a checkpoint whose groups hold other parameters is refused."""
    opt = _adam()
    opt.param_groups[0]["tag"] = object()
    with pytest.raises(TypeError) as err:
        optimizer_tree(opt)
    assert str(err.value) == "param_groups 0 tag: cannot store a value of type object"
    del opt.param_groups[0]["tag"]
    first = next(iter(opt.state.values()))
    first["note"] = ["a"]
    with pytest.raises(TypeError) as err:
        optimizer_tree(opt)
    assert str(err.value) == "state 0 note: cannot store ['a'] (not a sequence of numbers)"
    del first["note"]
    tree = optimizer_tree(opt)
    tree["param_groups"]["0"]["params"] = np.asarray([0, 5])
    with pytest.raises(ValueError) as err:
        optimizer_state_dict(tree, _adam().state_dict())
    assert str(err.value) == ("parameter group 0: parameters [0, 5] in the checkpoint, "
                              "[0, 1] here")
