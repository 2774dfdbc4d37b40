"""The checkpoint trees' formats and their migration chain (issue 35, point 4):
:class:`~hpc_refer.report.formats.TreeFormat` itself, then every upgrade of every owner on the
trees of the frozen fixtures of the version before (``tests/fixtures/``, schemas 1 and 2,
which are version 1 of every tree), each alone, as a pure function.

A resumed old run directory (the whole chain through restore, to the end of a run) is
``test_old_checkpoints.py``'s.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from algorithm_traits import BUILT_IN

from hpc_refer.algorithms.kit.base import Algorithm
from hpc_refer.algorithms.kit.bodies import policy_with_body
from hpc_refer.algorithms.registry import algorithm_class, make_algorithm
from hpc_refer.config.resolve import build_config
from hpc_refer.loop import checkpoint
from hpc_refer.loop.actor import (
    ACTOR_FORMAT,
    ONE_AGENT_LANE,
    history_and_series,
    lanes_for_every_actor,
    warmup_counter,
)
from hpc_refer.loop.checkpoint import (
    MANIFEST_FORMAT,
    clock_and_tree_versions,
    config_of_the_chosen_algorithm,
)
from hpc_refer.loop.learner import LEARNER_FORMAT, without_grad_steps
from hpc_refer.loop.learner_loop import (
    LOOP_FORMAT,
    episode_times_and_agents,
    interval_counts_per_statistic,
)
from hpc_refer.replay.tree import REPLAY_FORMAT, episode_ids_and_agent_lanes, stored_episodes
from hpc_refer.report.formats import VERSION_KEY, FormatError, TreeFormat
from hpc_refer.report.records import episodes_from

FIXTURES = Path(__file__).resolve().parent / "fixtures"
OLD = {"schema1": 600, "schema1_ddpg": 600, "schema2": 650, "schema2_agents": 650,
       "schema2_recurrent": 650}
"""The frozen run directories and the step of each one's checkpoint."""
SCHEMA1 = ("schema1", "schema1_ddpg")
BEFORE_BODIES = {**OLD, "schema3_naf": 650, "schema3_td3": 650}
"""Every frozen run directory written before the algorithms' heads held a body (version 1 of
the algorithm's tree and of the policy file; schema 3's also stamp the other trees)."""


def part(name: str, file: str) -> dict:
    step = BEFORE_BODIES[name]
    return checkpoint.read_tree(FIXTURES / name / "checkpoints" / f"step-{step:012d}" / file)


def manifest(name: str) -> dict:
    ckpt = FIXTURES / name / "checkpoints" / f"step-{BEFORE_BODIES[name]:012d}"
    return json.loads((ckpt / "manifest.json").read_text())


def same(a: object, b: object) -> bool:
    """Whether two trees hold the same keys and values (arrays by value, nan = nan)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))
    return type(a) is type(b) and a == b


def pure(upgrade, tree: dict) -> dict:
    """``upgrade(tree)``, checking that it leaves its input as it was."""
    before = copy.deepcopy(tree)
    out = upgrade(tree)
    assert same(tree, before), f"{upgrade.__name__} changed its input"
    assert out is not tree
    return out


# --- TreeFormat ----------------------------------------------------------------------------


def add(key: str):
    def step(tree: dict) -> dict:
        return {**tree, "steps": [*tree.get("steps", []), key]}
    step.__name__ = f"add_{key}"
    return step


CHAIN = TreeFormat("widget", (add("a"), add("b"), add("c")))


def test_the_version_is_one_more_than_the_upgrades_and_is_stamped():
    assert TreeFormat("plain").version == 1 and CHAIN.version == 4
    assert CHAIN.stamp({"x": 1}) == {"x": 1, VERSION_KEY: 4}
    assert TreeFormat("m", key="schema_version").stamp({}) == {"schema_version": 1}


@pytest.mark.parametrize(("written", "applied"), [(None, ["a", "b", "c"]), (1, ["a", "b", "c"]),
                                                  (2, ["b", "c"]), (3, ["c"]), (4, [])])
def test_upgrade_runs_the_chain_from_the_trees_version_in_order(written, applied):
    tree = {"x": 1} if written is None else {"x": 1, VERSION_KEY: written}
    before = dict(tree)
    out = CHAIN.upgrade(tree)
    assert out.get("steps", []) == applied and out[VERSION_KEY] == 4 and out["x"] == 1
    assert tree == before  # the tree read is left as it was


@pytest.mark.parametrize("bad", [0, -1, "2", 2.0, True, None])
def test_a_stamp_that_is_not_a_version_is_refused_naming_the_owner(bad):
    with pytest.raises(FormatError, match=rf"^widget tree: {VERSION_KEY} = .* is not a version"):
        CHAIN.upgrade({VERSION_KEY: bad})


def test_a_newer_tree_is_refused_naming_the_owner_and_both_versions():
    with pytest.raises(FormatError, match=r"^widget tree of version 5 is newer than version 4, "
                                          r"the newest this hpc_refer reads"):
        CHAIN.upgrade({VERSION_KEY: 5})


def test_a_replay_shard_refuses_a_newer_tree_before_restoring_anything():
    from learners import small_learner

    learner = small_learner()
    tree = learner.replay.checkpoint_state()
    tree[VERSION_KEY] = REPLAY_FORMAT.version + 1
    size = learner.replay.size
    with pytest.raises(FormatError, match=r"^replay shard tree of version 3 is newer"):
        learner.replay.restore_state(tree)
    assert learner.replay.size == size


def test_every_owner_declares_its_current_version():
    """The versions of today's trees (a bump must come with its upgrade and its fixture)."""
    assert {f.owner: f.version for f in (MANIFEST_FORMAT, LEARNER_FORMAT, REPLAY_FORMAT,
                                         LOOP_FORMAT, ACTOR_FORMAT, Algorithm.state_format)} == {
        "checkpoint manifest": 3, "learner": 2, "replay shard": 2, "learner loop": 3,
        "actor": 4, "algorithm": 1}
    assert MANIFEST_FORMAT.version == checkpoint.SCHEMA_VERSION
    assert MANIFEST_FORMAT.key == "schema_version"
    assert Algorithm.policy_format.version == 1  # a plug-in's own behaviour module
    assert {name: (cls.state_format.version, cls.policy_format.version)
            for name, cls in BUILT_IN.items()} == {
        **{name: (2, 2) for name in BUILT_IN}, "crossq": (1, 1)}  # (CrossQ came after bodies)


# --- the upgrades, each on the frozen trees of the version before --------------------------


@pytest.mark.parametrize("name", SCHEMA1)
def test_replay_1_to_2_numbers_schema_1_episodes_from_their_links(name):
    tree = part(name, "learner-0.h5")["learner"]["replay"]
    assert "episode" not in tree and "agent" not in tree["open"]
    out = pure(episode_ids_and_agent_lanes, tree)
    found = stored_episodes(tree)
    assert len(found) > 1
    expected = np.full(int(tree["size"]), -1, np.int64)
    for k, rows in enumerate(found):  # oldest first, as the ring's age orders them
        expected[rows] = k
    np.testing.assert_array_equal(out["episode"], expected)
    assert out["next_episode"] == len(found)
    assert out["open"]["agent"].dtype == np.int64
    assert len(out["open"]["agent"]) == len(tree["open"]["source"])
    assert not out["open"]["agent"].any()
    assert same({k: v for k, v in out.items() if k not in ("episode", "next_episode", "open")},
                {k: v for k, v in tree.items() if k != "open"})


def test_replay_1_to_2_gives_the_agent_lane_0_to_open_tails_written_before_agents():
    tree = part("schema2", "learner-0.h5")["learner"]["replay"]
    tails = tree["open"]
    tree["open"] = {"source": np.array([3, 5], np.int64), "row": np.array([7, 9], np.int64),
                    "written": np.array([70, 90], np.int64)}
    out = pure(episode_ids_and_agent_lanes, tree)
    np.testing.assert_array_equal(out["open"]["agent"], [0, 0])
    np.testing.assert_array_equal(out["open"]["source"], [3, 5])
    assert "agent" in tails


@pytest.mark.parametrize("name", ["schema2", "schema2_agents", "schema2_recurrent"])
def test_replay_1_to_2_keeps_what_a_schema_2_tree_has(name):
    tree = part(name, "learner-0.h5")["learner"]["replay"]
    assert same(pure(episode_ids_and_agent_lanes, tree), tree)


@pytest.mark.parametrize("name", sorted(OLD))
def test_learner_1_to_2_drops_schema_1s_grad_steps_and_nothing_else(name):
    tree = part(name, "learner-0.h5")["learner"]
    out = pure(without_grad_steps, tree)
    assert "grad_steps" not in out
    assert same(out, {k: v for k, v in tree.items() if k != "grad_steps"})
    assert ("grad_steps" in tree) == (name in SCHEMA1)


@pytest.mark.parametrize("name", sorted(OLD))
def test_loop_1_to_2_gives_old_episodes_an_unknown_end_time_and_agent_0(name):
    tree = part(name, "learner-0.h5")["loop"]
    out = pure(episode_times_and_agents, tree)
    for key in ("episodes", "evals"):
        old, new = tree[key], out[key]
        count = len(old["env_step"])
        if name in SCHEMA1:
            assert "wall_s" not in old and "agent" not in old
            assert np.isnan(new["wall_s"]).all() and new["wall_s"].shape == (count,)
            assert new["agent"].dtype == np.int64 and not new["agent"].any()
        else:
            assert same(new, old)
        got = episodes_from(new)
        assert [e.env_step for e in got] == old["env_step"].tolist()
    assert same({k: v for k, v in out.items() if k not in ("episodes", "evals")},
                {k: v for k, v in tree.items() if k not in ("episodes", "evals")})


def test_loop_1_to_2_keeps_the_agents_of_a_schema_2_run_with_agents():
    tree = part("schema2_agents", "learner-0.h5")["loop"]
    out = pure(episode_times_and_agents, tree)
    assert same(out["episodes"]["agent"], tree["episodes"]["agent"])


@pytest.mark.parametrize("name", sorted(OLD))
def test_actor_1_to_2_gives_schema_1_actors_no_history(name):
    tree = part(name, "actor-0.h5")["actor"]
    out = pure(history_and_series, tree)
    assert out["history"] is None if name in SCHEMA1 else same(out, tree)
    assert "history" in out and "series" in out
    assert same({k: v for k, v in out.items() if k != "history"},
                {k: v for k, v in tree.items() if k != "history"})


@pytest.mark.parametrize("name", sorted(set(OLD) - {"schema2_agents"}))
def test_actor_2_to_3_makes_a_one_agent_actors_episode_its_lane_0(name):
    tree = pure(history_and_series, part(name, "actor-0.h5")["actor"])
    assert "lanes" not in tree
    out = pure(lanes_for_every_actor, tree)
    assert same(out["lanes"], {"0": {k: tree[k] for k in ONE_AGENT_LANE}})
    in_progress = tree["obs"] is not None
    assert in_progress == (out["lanes"]["0"]["length"] > 0) and (in_progress or name in SCHEMA1)
    assert same(out["active"], np.array([in_progress]))
    assert out["outbox"] == {}
    assert same(out["noise"], tree["noise"][None])
    assert out["obs"] is None if not in_progress else same(out["obs"], tree["obs"][None])
    assert same({k: v for k, v in out.items() if k not in ("lanes", "active", "outbox", "noise",
                                                           "obs")},
                {k: v for k, v in tree.items() if k not in (*ONE_AGENT_LANE, "noise", "obs")})


def test_actor_2_to_3_keeps_the_lanes_of_an_actor_of_agents_and_drops_its_unused_episode():
    tree = pure(history_and_series, part("schema2_agents", "actor-0.h5")["actor"])
    assert tree["pending"]["act"].shape[0] == 0 and not tree["sent"]  # never used
    out = pure(lanes_for_every_actor, tree)
    assert same(out, {k: v for k, v in tree.items() if k not in ONE_AGENT_LANE})
    assert len(out["lanes"]) == len(out["active"]) == 2 == out["obs"].shape[0]
    assert out["noise"].shape == (2, 1)


@pytest.mark.parametrize("name", ["schema3_naf", "schema3_td3"])
def test_actor_3_to_4_gives_actors_before_the_uniform_warm_up_none_of_it_left(name):
    tree = pure(lanes_for_every_actor, part(name, "actor-0.h5")["actor"])  # version 2 -> 3
    assert "warmup_left" not in tree
    out = pure(warmup_counter, tree)
    assert out["warmup_left"] == 0
    assert same({k: v for k, v in out.items() if k != "warmup_left"}, tree)


@pytest.mark.parametrize("name", sorted(BEFORE_BODIES))
def test_loop_2_to_3_counts_every_statistic_of_the_interval_over_all_its_steps(name):
    tree = part(name, "learner-0.h5")["loop"]
    tree = pure(episode_times_and_agents, tree) if name in SCHEMA1 else tree  # version 1 -> 2
    interval = tree["interval"]
    assert interval["sums"], "the frozen run stopped inside an interval with gradient steps"
    out = pure(interval_counts_per_statistic, tree)
    assert "count" not in out["interval"]
    assert out["interval"]["counts"] == {k: interval["count"] for k in interval["sums"]}
    assert same({k: v for k, v in out["interval"].items() if k != "counts"},
                {k: v for k, v in interval.items() if k != "count"})
    assert same({k: v for k, v in out.items() if k != "interval"},
                {k: v for k, v in tree.items() if k != "interval"})


@pytest.mark.parametrize("name", sorted(OLD))
def test_manifest_1_to_2_and_2_to_3_restart_the_clock_only_where_it_was_not_stored(name):
    raw = manifest(name)
    assert raw["schema_version"] == (1 if name in SCHEMA1 else 2)
    mid = pure(config_of_the_chosen_algorithm, raw) if name in SCHEMA1 else raw
    assert same(mid, raw)
    out = pure(clock_and_tree_versions, mid)
    if "wall_s" in raw["meta"]:
        assert same(out, raw)
    else:
        assert out["meta"] == {**raw["meta"], "wall_s": 0.0}
    assert name in SCHEMA1 or "wall_s" in raw["meta"]  # schema 2's last commit stored it
    upgraded = MANIFEST_FORMAT.upgrade(raw)
    assert upgraded["schema_version"] == 3 and math.isfinite(upgraded["meta"]["wall_s"])


def algorithm_of(name: str) -> type[Algorithm]:
    """The class of the fixture's algorithm."""
    return algorithm_class(part(name, "learner-0.h5")["learner"]["algorithm"]["name"])


def fresh(name: str) -> Algorithm:
    """A new algorithm of the fixture's config and sizes (today's module layout)."""
    tree = part(name, "learner-0.h5")["learner"]["algorithm"]
    config = build_config(manifest(name)["meta"]["config"])
    return make_algorithm(config, int(tree["obs_dim"]), int(tree["act_dim"]), seed=0)


def renamed(old: dict, new: dict) -> None:
    """``new`` holds ``old``'s tensors, the same arrays, each under its name or ``body.`` +
    its name."""
    assert len(new) == len(old)
    for key, value in old.items():
        assert new.get(key, new.get(f"body.{key}")) is value, key


@pytest.mark.parametrize("name", sorted(BEFORE_BODIES))
def test_algorithm_1_to_2_puts_the_heads_tensors_under_their_body(name):
    """Every module of an old algorithm tree gets the names of today's module (its head's
    feed-forward normaliser and trunk under ``body.``; the critics and a recurrent head,
    already ``body.*``, as they were) and keeps its arrays."""
    tree = part(name, "learner-0.h5")["learner"]["algorithm"]
    (upgrade,) = algorithm_of(name).state_format.upgrades
    out = pure(upgrade, tree)
    today = fresh(name).modules
    assert out["modules"].keys() == today.keys()
    for k, module in today.items():
        assert out["modules"][k].keys() == module.state_dict().keys(), k
        renamed(tree["modules"][k], out["modules"][k])
    assert same({k: v for k, v in out.items() if k != "modules"},
                {k: v for k, v in tree.items() if k != "modules"})
    moved = {k for k, m in tree["modules"].items() if m.keys() != out["modules"][k].keys()}
    assert moved == {"vracer": {"net"}, "naf": {"net", "target"}, "sac": set(),  # (a GRU's)
                     "ddpg": {"actor", "target_actor"}, "td3": {"actor", "target_actor"}
                     }[tree["name"]]


@pytest.mark.parametrize("name", sorted(BEFORE_BODIES))
def test_policy_file_1_to_2_puts_the_behaviours_tensors_under_its_body(name):
    tree = checkpoint.read_tree(FIXTURES / name / "policy.h5")
    assert algorithm_of(name).policy_format.upgrades == (policy_with_body,)
    out = pure(policy_with_body, tree)
    algo = fresh(name)
    assert out["policy"].keys() == algo.behaviour.state_dict().keys()
    renamed(tree["policy"], out["policy"])
    assert same({k: v for k, v in out.items() if k != "policy"},
                {k: v for k, v in tree.items() if k != "policy"})


@pytest.mark.parametrize("name", [*sorted(n for n, cls in BUILT_IN.items()
                                          if cls.state_format.version > 1), "delayed_ac"])
def test_every_algorithms_tree_of_before_bodies_restores_its_networks(name):
    """A tree as the algorithm wrote it before its heads held a body (today's, unstamped,
    with ``body.`` taken off every feed-forward head's tensors) restores the same networks:
    the upgrade names every head of every algorithm, target copies included (and those of
    tests/plugin_algorithm.py, a plug-in built on the kit's actor; not CrossQ's, written after
    bodies and without one)."""
    plugins = [] if name in BUILT_IN else ["plugin_algorithm"]
    config = build_config({"run": {"algorithm": name, "plugins": plugins}, name: {"hidden": [8]}})
    algo = make_algorithm(config, 3, 2, seed=1)
    algo.set_input_scaling(np.full(3, 0.5), np.full(3, 2.0))
    tree = algo.checkpoint_state()
    del tree[VERSION_KEY]
    heads = [k for k, m in tree["modules"].items() if any(n.startswith("body.") for n in m)]
    assert heads
    for k in heads:
        tree["modules"][k] = {n.removeprefix("body."): v for n, v in tree["modules"][k].items()}
    other = make_algorithm(config, 3, 2, seed=2)
    other.restore_state(tree)
    assert other.checksum() == algo.checksum()
    for k, module in algo.modules.items():
        for (n, a), b in zip(module.state_dict().items(), other.modules[k].state_dict().values(),
                             strict=True):
            assert torch.equal(a, b), f"{k}.{n}"


@pytest.mark.parametrize("name", sorted(OLD))
def test_every_old_tree_upgrades_to_the_current_versions(name):
    learner = part(name, "learner-0.h5")
    actor = part(name, "actor-0.h5")["actor"]
    for fmt, tree in ((LEARNER_FORMAT, learner["learner"]), (LOOP_FORMAT, learner["loop"]),
                      (REPLAY_FORMAT, learner["learner"]["replay"]),
                      (algorithm_of(name).state_format, learner["learner"]["algorithm"]),
                      (ACTOR_FORMAT, actor)):
        assert VERSION_KEY not in tree and fmt.version_of(tree) == 1
        assert fmt.upgrade(tree)[VERSION_KEY] == fmt.version
