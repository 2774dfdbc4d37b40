"""``python -m hpc_refer.export``: policy.onnx run by onnxruntime, the C routine compiled with
``cc -O2`` and the Fortran module compiled with ``gfortran`` give the actions of the numpy
policy that ``python -m hpc_refer.evaluate`` runs (:class:`~hpc_refer.export.controller.Controller`)
over 1,000 states of whole episodes, far states and actions at the bounds included, for each
algorithm, a history policy, GRU and LSTM policies and several agents; bad files and states
get their error codes.

The tolerance. Every form computes in float32 what the numpy policy computes in float32, with
other summation orders (BLAS blocks against a plain loop) and other tanh/exp implementations:
each op differs by a few float32 ulps of its operands, and a network of a few layers by some
1e-6 of its outputs' scale, more where a far state makes a sum cancel. The actions are
compared after the box map as |a - a_numpy| <= 1e-4 (h + |a_numpy|) on each dimension (h its
half-width; 1 on an unbounded dimension, where the action is the policy's output itself):
about 840 float32 ulps. The largest seen on an AMD EPYC was 1.1e-5 (a history policy fed
its own actions, over states up to 1e6); a wrong weight, op or history order is off by 1e-2
and more (test_a_broken_export_is_seen shows that the comparison sees one weight changed by
1 %).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from hpc_refer.algorithms.kit.actors import DeterministicActor
from hpc_refer.algorithms.kit.networks import BehaviourPolicy
from hpc_refer.algorithms.registry import make_algorithm
from hpc_refer.config.resolve import build_config
from hpc_refer.export.__main__ import main as export_main
from hpc_refer.export.controller import Controller
from hpc_refer.export.onnx_model import OnnxPolicy
from hpc_refer.loop.policy_file import save_policy

pytestmark = pytest.mark.mpi_skip

DRIVERS = Path(__file__).parent / "export_drivers"
RTOL = 1e-4
"""The module docstring's tolerance, relative to |h| + |a|."""

STATE_DIM, ACT_DIM = 5, 3
LOW = np.array([-2.0, 0.0, -np.inf])
HIGH = np.array([2.0, 10.0, np.inf])
"""A box with a symmetric, a shifted and an unbounded dimension."""

CASES = {
    "vracer": {"run": {"algorithm": "vracer"}, "vracer": {"hidden": [24, 16]}},
    "vracer-history": {"run": {"algorithm": "vracer"}, "vracer": {"hidden": [16]},
                       "env": {"history": 3, "history_actions": True}},
    "vracer-gru": {"run": {"algorithm": "vracer"},
                   "vracer": {"hidden": [16], "cell": "gru", "cell_width": 6}},
    "sac-lstm-history": {"run": {"algorithm": "sac"},
                         "sac": {"hidden": [16], "cell": "lstm", "cell_width": 5},
                         "env": {"history": 2}},
    "ddpg": {"run": {"algorithm": "ddpg"}, "ddpg": {"hidden": [24, 16]}},
    "td3-relu": {"run": {"algorithm": "td3"}, "td3": {"hidden": [16, 16], "activation": "relu"}},
    "naf": {"run": {"algorithm": "naf"}, "naf": {"hidden": [16, 16]}},
    "sac": {"run": {"algorithm": "sac"}, "sac": {"hidden": [24, 16]}},
    "crossq": {"run": {"algorithm": "crossq"}, "crossq": {"hidden": [24, 16]}},
}


def make_policy_file(path: Path, tables: dict, seed: int = 0) -> Path:
    """A policy file of ``tables``' algorithm with random weights, statistics and running
    statistics of the size of a trained one's (outputs of order one and more, so that the
    box's clip and tanh are reached), for states of STATE_DIM values."""
    config = build_config(tables)
    history = config.env.get("history", 1)
    obs_dim = history * (STATE_DIM + (ACT_DIM if config.env.get("history_actions") else 0))
    algo = make_algorithm(config, obs_dim, ACT_DIM, seed)
    policy = algo.behaviour
    gen = torch.Generator().manual_seed(seed)
    tensors = policy.state_dict()
    last = [name for name in tensors if "trunk" in name and name.endswith("weight")][-1]
    with torch.no_grad():
        for name, tensor in tensors.items():
            if name.endswith(("normalizer.mean", "ra_mean")):
                tensor.copy_(torch.randn(tensor.shape, generator=gen))
            elif name.endswith(("inv_std", "ra_var")):
                tensor.copy_(0.5 + torch.rand(tensor.shape, generator=gen))
            elif tensor.ndim == 2:
                tensor.mul_(300.0 if name == last else 2.0)  # (the output layer starts small)
        if config.env.get("history_actions"):  # the past actions' columns: scaled as a trained
            columns = np.arange(obs_dim) >= history * STATE_DIM  # run's statistics would
            tensors["body.normalizer.inv_std"][columns] = 0.02  # (a loop gain of ~1e3 would
            # amplify round-off from step to step)
    save_policy(path, algo, config.to_dict(), 1000, 500, (LOW, HIGH))
    return path


def episode_states(steps: int, agents: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """States [steps, agents, STATE_DIM] of episodes of 5-40 steps (starts [steps]): most of
    order one, some of 1e2-1e6 (far outside any training range) and one of -1e30."""
    rng = np.random.default_rng(seed)
    states = rng.standard_normal((steps, agents, STATE_DIM))
    states *= rng.choice([1.0, 3.0, 100.0, 1e6], p=[0.7, 0.2, 0.07, 0.03], size=(steps, 1, 1))
    states[steps // 2, 0, 1] = -1e30
    starts = np.zeros(steps, bool)
    t = 0
    while t < steps:
        starts[t] = True
        t += int(rng.integers(5, 41))
    return states, starts


def controller_actions(controller: Controller | OnnxPolicy, states: np.ndarray,
                       starts: np.ndarray) -> np.ndarray:
    out = []
    for state, start in zip(states, starts, strict=True):
        if start:
            controller.reset()
        out.append(controller.act(state[0] if state.shape[0] == 1 else state))
    return np.array(out).reshape(len(states), states.shape[1], -1)


def write_steps(path: Path, states: np.ndarray, starts: np.ndarray) -> None:
    """The drivers' input file (tests/export_drivers/driver.c)."""
    with path.open("wb") as f:
        f.write(np.array([*states.shape, ACT_DIM], np.int32).tobytes())
        for state, start in zip(states, starts, strict=True):
            f.write(np.int32(start).tobytes() + state.astype(np.float64).tobytes())


@pytest.fixture(scope="module")
def drivers(tmp_path_factory) -> dict[str, Path]:
    """The C driver built with cc -O2 and the Fortran one with gfortran, over the routine
    that ``python -m hpc_refer.export`` writes."""
    build = tmp_path_factory.mktemp("drivers")
    sources = Path(__file__).parents[1] / "hpc_refer" / "export" / "c"
    for f in sources.iterdir():
        shutil.copy(f, build)
    run = lambda *cmd: subprocess.run(cmd, cwd=build, check=True, capture_output=True)  # noqa: E731
    run("cc", "-std=c99", "-O2", "-Wall", "-Werror", "-pedantic", "-c", "hpc_refer_policy.c")
    run("cc", "-std=c99", "-O2", "-I.", str(DRIVERS / "driver.c"), "hpc_refer_policy.o",
        "-lm", "-o", "driver_c")
    out = {"c": build / "driver_c"}
    if shutil.which("gfortran"):
        run("gfortran", "-std=f2008", "-O2", "-Wall", "-Werror", "-c", "hpc_refer_policy.f90",
            "-o", "hpc_refer_policy_f.o")
        run("gfortran", "-std=f2018", "-O2", str(DRIVERS / "driver.f90"), "hpc_refer_policy_f.o",
            "hpc_refer_policy.o", "-o", "driver_f")
        out["fortran"] = build / "driver_f"
    return out


def run_driver(driver: Path, policy_dir: Path, states: np.ndarray, starts: np.ndarray,
               work: Path) -> tuple[int, str, np.ndarray]:
    """(exit code, printed line, actions [steps, agents, ACT_DIM] or empty)."""
    write_steps(work / "steps.bin", states, starts)
    done = subprocess.run([str(driver), str(policy_dir), str(work / "steps.bin"),
                           str(work / "actions.bin")], capture_output=True, text=True)
    actions = np.fromfile(work / "actions.bin", np.float64) if done.returncode == 0 else None
    shape = (len(states), states.shape[1], ACT_DIM)
    return done.returncode, done.stdout.strip(), (
        actions.reshape(shape) if actions is not None else np.zeros(0))


def assert_close(actions: np.ndarray, reference: np.ndarray) -> None:
    """The module docstring's tolerance, per dimension."""
    half = np.where(np.isfinite(LOW) & np.isfinite(HIGH), (HIGH - LOW) / 2, 1.0)
    bound = RTOL * (half + np.abs(reference))
    worst = np.max(np.abs(actions - reference) - bound)
    assert worst <= 0, f"off by {worst:g} beyond the tolerance"


@pytest.mark.parametrize("agents", [1, 3])
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_form_acts_as_the_numpy_policy(case, agents, in_tmp, drivers):
    source = make_policy_file(in_tmp / "policy.h5", CASES[case])
    assert export_main([str(in_tmp), "--out", str(in_tmp / "out")]) == 0
    states, starts = episode_states(1000 // agents, agents, seed=agents)
    reference = controller_actions(Controller.load(source), states, starts)
    bounded = np.isfinite(LOW)
    assert np.all(reference[..., bounded] >= LOW[bounded])
    assert np.all(reference[..., bounded] <= HIGH[bounded])
    near = 1e-3 * (HIGH - LOW)[bounded]  # (tanh reaches a bound to float32 only past |u| ~ 9)
    at_bounds = (reference[..., bounded] - LOW[bounded] < near) | (
        HIGH[bounded] - reference[..., bounded] < near)
    assert at_bounds.mean() > 0.05, "few actions at the box's bounds: the test would not see them"
    assert_close(controller_actions(OnnxPolicy(in_tmp / "out" / "policy.onnx"), states, starts),
                 reference)
    for language, driver in drivers.items():
        code, line, actions = run_driver(driver, in_tmp / "out", states, starts, in_tmp)
        assert code == 0, (language, line)
        assert_close(actions, reference)


def corrupt_version(out: Path) -> None:
    header = json.loads((out / "policy.json").read_text())
    (out / "policy.json").write_text(json.dumps({**header, "format_version": 2}))


def corrupt_truncated(out: Path) -> None:
    raw = (out / "policy.bin").read_bytes()
    (out / "policy.bin").write_bytes(raw[:-6])


def corrupt_mismatch(out: Path) -> None:
    header = json.loads((out / "policy.json").read_text())
    header["ops"][1]["out"] += 1  # a linear layer one unit wider than its weights
    (out / "policy.json").write_text(json.dumps(header))


def corrupt_json(out: Path) -> None:
    text = (out / "policy.json").read_text()
    (out / "policy.json").write_text(text[:len(text) // 2])


@pytest.mark.parametrize(("corrupt", "code", "words"), [
    (corrupt_version, 2, "format hpc_refer-policy version 2; this routine reads"),
    (corrupt_truncated, 4, "(a truncated or another weight file)"),
    (corrupt_mismatch, 3, "op 1 (linear) does not match the weights"),
    (corrupt_json, 3, "not valid JSON at byte"),
], ids=["version", "truncated", "mismatch", "json"])
def test_a_bad_file_is_an_error_code_and_a_message(corrupt, code, words, in_tmp, drivers):
    make_policy_file(in_tmp / "policy.h5", CASES["vracer"])
    assert export_main([str(in_tmp), "--out", str(in_tmp / "out"), "--no-onnx"]) == 0
    assert not (in_tmp / "out" / "policy.onnx").exists()
    corrupt(in_tmp / "out")
    states, starts = episode_states(3, 1, seed=0)
    for language, driver in drivers.items():
        got, line, _ = run_driver(driver, in_tmp / "out", states, starts, in_tmp)
        assert (got, line[:line.index(":")]) == (code, f"error {code}"), (language, line)
        assert words in line, (language, line)


@pytest.mark.parametrize("bad", ["width", "nan", "far"])
def test_a_bad_state_is_an_error_code_and_changes_nothing(bad, in_tmp, drivers):
    """A state of the wrong length, with NaN, or beyond float32 (1e39): the C and Fortran
    error code, the ONNX policy's and the controller's ValueError."""
    source = make_policy_file(in_tmp / "policy.h5", CASES["vracer-gru"])
    assert export_main([str(in_tmp), "--out", str(in_tmp / "out")]) == 0
    states, starts = episode_states(4, 1, seed=0)
    if bad == "width":
        states = np.concatenate([states, states[..., :1]], axis=-1)
    else:
        states[2, 0, 0 if bad == "nan" else -1] = np.nan if bad == "nan" else 1e39  # (ends)
    code, words = ((5, "a state of 6 values and an action of 3: this policy takes 5")
                   if bad == "width" else (6, "the state holds 1 NaN or infinite value(s)"))
    for language, driver in drivers.items():
        got, line, _ = run_driver(driver, in_tmp / "out", states, starts, in_tmp)
        assert got == code and words in line, (language, line)
    for policy in (Controller.load(source), OnnxPolicy(in_tmp / "out" / "policy.onnx")):
        policy.act(states[0, 0, :STATE_DIM])
        before = policy.act(states[1, 0, :STATE_DIM])
        with pytest.raises(ValueError, match=r"shape \(6,\)|NaN or infinite"):
            policy.act(states[2, 0])
        if bad == "width":
            continue
        again = type(policy).load(source) if isinstance(policy, Controller) else OnnxPolicy(
            in_tmp / "out" / "policy.onnx")
        again.act(states[0, 0])
        np.testing.assert_array_equal(again.act(states[1, 0]), before)  # nothing changed:
        np.testing.assert_array_equal(again.act(states[3, 0]), policy.act(states[3, 0]))


def test_a_broken_export_is_seen(in_tmp, drivers):
    """One weight of the output layer (hidden unit 0 -> the mean's first dimension, output 1
    after V) changed by 1 % gives actions outside the tolerance: the comparison above would
    see such a fault."""
    source = make_policy_file(in_tmp / "policy.h5", CASES["vracer-history"])
    assert export_main([str(in_tmp), "--out", str(in_tmp / "out"), "--no-onnx"]) == 0
    states, starts = episode_states(300, 1, seed=0)
    reference = controller_actions(Controller.load(source), states, starts)
    header = json.loads((in_tmp / "out" / "policy.json").read_text())
    weights = np.fromfile(in_tmp / "out" / "policy.bin", "<f4")
    weights[header["ops"][3]["offset"] + 1] *= 1.01
    weights.tofile(in_tmp / "out" / "policy.bin")
    _, _, actions = run_driver(drivers["c"], in_tmp / "out", states, starts, in_tmp)
    with pytest.raises(AssertionError, match="beyond the tolerance"):
        assert_close(actions, reference)


def test_a_plugin_algorithm_exports_through_its_heads_ops(in_tmp, drivers, monkeypatch,
                                                          capsys):
    """tests/plugin_algorithm.py's DelayedAC (a DeterministicActor head: its ops come with
    it) exports and acts as its numpy policy; a behaviour policy that does not describe its
    itself as ops is refused with a message naming it (exit 2)."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    tables = {"run": {"plugins": ["plugin_algorithm"], "algorithm": "delayed_ac"},
              "delayed_ac": {"hidden": [16, 16]}}
    source = make_policy_file(in_tmp / "policy.h5", tables)
    assert export_main([str(in_tmp), "--out", str(in_tmp / "out"), "--no-onnx"]) == 0
    states, starts = episode_states(200, 1, seed=0)
    _, _, actions = run_driver(drivers["c"], in_tmp / "out", states, starts, in_tmp)
    assert_close(actions, controller_actions(Controller.load(source), states, starts))
    monkeypatch.setattr(DeterministicActor, "behaviour_ops", BehaviourPolicy.behaviour_ops)
    assert export_main([str(in_tmp), "--out", str(in_tmp / "no")]) == 2
    assert "error: DeterministicActor does not describe itself as ops" in capsys.readouterr().err
    assert not (in_tmp / "no").exists()
