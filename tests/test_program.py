"""The behaviour policy as a program (hpc_refer.algorithms.kit.program): what an actor rank
receives from its learner and runs in numpy, without torch. Checked against the torch module
for every built-in algorithm (feed-forward and recurrent), through pickling, on the actor's
own vector after loads; its errors; and that an actor rank's modules import neither torch
nor numba."""

import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch

from hpc_refer.algorithms.kit.networks import flat_state, load_flat_state
from hpc_refer.algorithms.kit.ops import Op
from hpc_refer.algorithms.kit.program import NumpyBehaviour, Place, Program
from hpc_refer.algorithms.registry import ALGORITHMS
from hpc_refer.config.resolve import build_config

OBS, ACT = 5, 2
CASES = [(name, None) for name in ("vracer", "ddpg", "td3", "naf", "sac", "crossq")] + [
    (name, cell) for name in ("vracer", "sac") for cell in ("gru", "lstm")]


def behaviour_policy(name: str, cell: str | None) -> torch.nn.Module:
    table = {"hidden": [16, 16]} | ({"cell": cell, "cell_width": 4} if cell else {})
    config = build_config({"run": {"algorithm": name}, name: table})
    torch.manual_seed(3)
    return ALGORITHMS[name].behaviour_policy(OBS, ACT, config.algorithm)


@pytest.mark.parametrize(("name", "cell"), CASES)
def test_the_program_an_actor_receives_is_the_torch_policy_after_each_load(name, cell):
    """Pickled (as it travels), bound to the actor's own vector: after each load of new
    parameters (and new state statistics, which travel in the vector) the program's mean,
    std and carry are the module's to float32 round-off, and the learner-side numpy forward
    on views of the module gives the same numbers bit for bit."""
    net = behaviour_policy(name, cell)
    program = pickle.loads(pickle.dumps(net.program()))
    assert program.size == flat_state(net).size and program.carry_dim == net.carry_dim
    mine = np.zeros(program.size, np.float32)
    behaviour = program.bind(mine)
    views = net.numpy_step()
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((7, OBS + net.carry_dim)).astype(np.float32)
    for _ in range(3):
        flat = flat_state(net) + 0.3 * rng.standard_normal(program.size).astype(np.float32)
        normalizer = next(m for k, m in net.named_modules() if k.endswith("normalizer"))
        load_flat_state(net, flat)
        normalizer.set_stats(rng.standard_normal(OBS), rng.uniform(0.5, 2.0, OBS))
        mine[:] = flat_state(net)  # what an actor's load does
        mean, std, carry = behaviour(rows)
        with torch.no_grad():
            want_mean, want_std = net.policy(torch.from_numpy(rows))
        np.testing.assert_allclose(mean, want_mean.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.broadcast_to(std, mean.shape),
                                   want_std.expand_as(want_mean).numpy(), rtol=1e-5, atol=1e-6)
        if cell:
            with torch.no_grad():
                want_carry = net.body.rows(torch.from_numpy(rows)).carry.numpy()
            np.testing.assert_allclose(carry, want_carry, rtol=1e-5, atol=1e-6)
        for got, same in zip((mean, std, carry), views(rows), strict=True):
            assert got.tobytes() == same.tobytes()


def test_a_program_refuses_arrays_that_are_not_the_policys_and_vectors_of_another_size():
    net = behaviour_policy("vracer", None)
    described = net.numpy_step()
    foreign = NumpyBehaviour(OBS, 0, described.outputs, described.mean,
                             (Op("const", (np.ones(ACT, np.float32),)),))
    tensors = [(t.data_ptr(), t.numel(), t.element_size()) for t in net.state_dict().values()]
    with pytest.raises(ValueError, match="is no view of the policy's parameters"):
        Program.of(foreign, tensors, flat_state(net))
    program = net.program()
    with pytest.raises(ValueError, match=f"a policy vector of {program.size} float32 values"):
        program.bind(np.zeros(program.size + 1, np.float32))
    with pytest.raises(ValueError, match="lies outside the policy vector"):
        Place(program.size - 1, (2,), (1,)).view(np.zeros(program.size, np.float32))


def test_an_actor_ranks_modules_import_neither_torch_nor_numba():
    """What an actor or solver rank imports (the entry point, its role, the actor, its
    checkpoint part and the channels): no torch and no numba, the learner's stack."""
    code = ("import sys, hpc_refer.run.main, hpc_refer.run.roles, hpc_refer.loop.actor, "
            "hpc_refer.loop.actor_checkpoint, hpc_refer.parallel.channels; "
            "print(sorted(m for m in ('torch', 'numba') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
