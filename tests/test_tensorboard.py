"""--tensorboard writes train.jsonl's scalars and the episodes as TensorBoard events, read
back here with TensorBoard's own reader (issue 14, point 3)."""

from __future__ import annotations

import csv
import json

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.run.main import main as run_main

pytestmark = pytest.mark.mpi_skip

SMALL = ["--replay.size", "600", "--replay.learn-start", "300", f"--{VRacer.name}.batch", "32",
         f"--{VRacer.name}.hidden", "16,16", "--log-every", "200"]


def test_tensorboard_events_hold_the_same_scalars_as_train_jsonl(in_tmp):
    assert run_main(["--env", "Pendulum-v1", "--steps", "800", "--run-dir", "r",
                     "--tensorboard", "true", *SMALL]) == 0
    events = EventAccumulator(str(in_tmp / "r" / "tensorboard"))
    events.Reload()
    records = [json.loads(x) for x in (in_tmp / "r" / "train.jsonl").read_text().splitlines()]
    for key in ("beta", "c_max", "far_fraction", "lr", "grad_step", "loss_v"):
        shown = [(s.step, s.value) for s in events.Scalars(f"train/{key}")]
        expected = [(r["env_step"], r[key]) for r in records if key in r]
        assert [s for s, _ in shown] == [s for s, _ in expected], key
        assert [v for _, v in shown] == pytest.approx([v for _, v in expected], rel=1e-6)
    with (in_tmp / "r" / "episodes.csv").open() as f:
        episodes = list(csv.DictReader(f))
    returns = events.Scalars("episode/return")
    assert [r.step for r in returns] == [int(e["env_step"]) for e in episodes]
    assert "episode/return_summed" not in events.Tags()["scalars"]  # one agent: no sums
    assert [r.value for r in returns] == pytest.approx([float(e["return"]) for e in episodes],
                                                       rel=1e-5)


def test_no_events_without_the_flag(in_tmp):
    assert run_main(["--env", "Pendulum-v1", "--steps", "200", "--run-dir", "r", *SMALL]) == 0
    assert not (in_tmp / "r" / "tensorboard").exists()


def test_each_agents_returns_are_a_series_of_their_own(in_tmp):
    assert run_main(["--env", "agents_envs:Points", "--steps", "400", "--run-dir", "r",
                     "--tensorboard", "true", *SMALL]) == 0
    events = EventAccumulator(str(in_tmp / "r" / "tensorboard"))
    events.Reload()
    with (in_tmp / "r" / "episodes.csv").open() as f:
        episodes = list(csv.DictReader(f))
    for agent in range(3):
        mine = [e for e in episodes if e["agent"] == str(agent)]
        shown = events.Scalars(f"episode/return_agent_{agent}")
        assert mine and [s.step for s in shown] == [int(e["env_step"]) for e in mine]
        assert [s.value for s in shown] == pytest.approx([float(e["return"]) for e in mine],
                                                         rel=1e-5)
    spread = events.Scalars("episode/spread")  # only the agents that end their simulation
    assert len(spread) == sum(e["spread"] != "nan" for e in episodes) > 0
    summed = events.Scalars("episode/return_summed")  # every simulation, each agent once
    sims = [episodes[k:k + 3] for k in range(0, len(episodes) - len(episodes) % 3, 3)]
    assert all(sorted(e["agent"] for e in sim) == ["0", "1", "2"] for sim in sims)
    assert [s.step for s in summed[:len(sims)]] == [int(sim[-1]["env_step"]) for sim in sims]
    assert [s.value for s in summed[:len(sims)]] == pytest.approx(
        [sum(float(e["return"]) for e in sim) for sim in sims], rel=1e-5)
