"""The compiled learner step (issue 11): the same numbers as the eager step (autograd and
torch's Adam) to float32 round-off for V-RACER, DDPG and NAF, through one learner's fused
graph and through the several-learner path; the same optimizer state in checkpoints; a
fallback to the eager step with one log line where compiling fails; and ``run.compile``."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import torch
from learners import small_table
from log_records import own_records
from output_lines import lines_with, one_line_with

from hpc_refer.algorithms.ddpg import DDPG
from hpc_refer.algorithms.kit.base import Algorithm, ReferTerms, StepResult
from hpc_refer.algorithms.kit.compiled import failure_reason
from hpc_refer.algorithms.kit.networks import gaussian_log_prob
from hpc_refer.algorithms.kit.step import Step
from hpc_refer.algorithms.registry import ALGORITHMS, make_algorithm
from hpc_refer.algorithms.vracer import VRacer
from hpc_refer.config.modes import COMPILE_AUTO_STEPS
from hpc_refer.config.resolve import build_config
from hpc_refer.loop.learner import make_step
from hpc_refer.replay.shard import Batch

OBS, ACT = 5, 2


def make_batch(algo: Algorithm, n: int, seed: int) -> Batch:
    """Rows around the current policy: actions N(m(s), (0.5 sigma_k)^2) from a behaviour whose
    mean is off by a row-dependent amount (some rows near, some far at c_max = 2), PER-like
    weights, a few terminal rows."""
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((n, algo.row_dim)).astype(np.float32)  # a recurrent row: [s, c]
    with torch.no_grad():
        mean, std = algo.behaviour.policy(torch.from_numpy(obs))
    mean = mean.numpy()
    mu_std = np.broadcast_to(std.numpy(), mean.shape).astype(np.float32)
    mu_mean = (mean + rng.uniform(0, 2, (n, 1)) * mu_std).astype(np.float32)
    act = (mu_mean + 0.5 * mu_std * rng.standard_normal(mean.shape)).astype(np.float32)
    log_mu = gaussian_log_prob(*(torch.from_numpy(x) for x in (act, mu_mean, mu_std))).numpy()
    f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    return Batch(np.arange(n), obs, act, mu_mean, mu_std, log_mu, f32(n), f32(n, algo.row_dim),
                 (rng.random(n) < 0.1).astype(np.float32),
                 f32(n) if algo.config.retrace else None,
                 rng.uniform(0.3, 1.0, n).astype(np.float32))


class OtherLearner:
    """A reducer of two learners whose other learner's values are a fixed vector per size
    (the gradient; CrossQ's running statistics): the average is (g + g_other) / 2, so a step
    that skipped a reduction would differ."""

    size = 2

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.other: dict[int, np.ndarray] = {}

    def average_(self, flat: np.ndarray) -> None:
        if flat.size not in self.other:
            self.other[flat.size] = (1e-2 * self.rng.standard_normal(flat.size)).astype(
                np.float32)
        flat += self.other[flat.size]
        flat *= np.float32(0.5)

    def sum(self, values: np.ndarray) -> np.ndarray:
        return values


class Trainee:
    """An algorithm and its gradient step, counting the steps taken (t)."""

    def __init__(self, algo: Algorithm, step: Step) -> None:
        self.algo, self.step, self.t = algo, step, 0

    def train_step(self, batch: Batch, terms: ReferTerms) -> StepResult:
        out = self.step(batch, terms, self.t)
        self.t += 1
        return out


def assert_called_directly(*graphs: Any) -> None:
    """After its first call each graph of a step (a
    :class:`~hpc_refer.algorithms.compiled.DirectGraph`) is called directly, without dynamo's
    frame evaluation. Not asserted under ``make mutation`` (``MUTANT_UNDER_TEST`` set, even
    empty), where mutmut's trampolines make every mutated function a graph break, so no step
    is one graph there."""
    if "MUTANT_UNDER_TEST" in os.environ:
        return
    for graph in graphs:
        assert graph._plans and all(plan is not None for plan in graph._plans.values()), \
            "after its first call the step calls its graph directly (DirectGraph)"


def pair(name: str, reducer_seed: int | None = None, **table: Any) -> tuple[Trainee, Trainee]:
    """An eager and a compiled step of algorithms with the same networks (and reducers
    alike); ``table``: more of the algorithm's settings."""
    config = build_config({"run": {"algorithm": name, "compile": "off"},
                           name: small_table(name, batch=32, **table)})
    out = []
    for compiled in (False, True):
        reducer = None if reducer_seed is None else OtherLearner(reducer_seed)
        algo = make_algorithm(config, OBS, ACT, seed=3)
        algo.set_input_scaling(np.full(algo.row_dim, 0.1), np.full(algo.row_dim, 1.5))
        out.append(Trainee(algo, make_step(algo, reducer, compiled)))  # type: ignore[arg-type]
    return out[0], out[1]


def assert_same_state(eager: Algorithm, compiled: Algorithm) -> None:
    for k, module in eager.modules.items():
        for (n, a), b in zip(module.state_dict().items(),
                             compiled.modules[k].state_dict().values(), strict=True):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=f"{k}.{n}")
    for k, spec in eager.optimizers.items():
        sa, sb = spec.optimizer.state_dict(), compiled.optimizers[k].optimizer.state_dict()
        assert sa["param_groups"] == sb["param_groups"], k
        assert sa["state"].keys() == sb["state"].keys(), k
        for i, s in sa["state"].items():
            assert s.keys() == sb["state"][i].keys()
            for key, value in s.items():
                assert value.dtype == sb["state"][i][key].dtype, (k, i, key)
                # round-off relative to the moment's largest entry: where the rows meet in
                # batch statistics (CrossQ) every gradient entry carries the sums' round-off
                scale = value.abs().max().item()
                torch.testing.assert_close(sb["state"][i][key], value, rtol=1e-4,
                                           atol=max(1e-8, 1e-5 * scale),
                                           msg=f"{k} state {i} {key}")


def take_steps(eager: Trainee, compiled: Trainee, steps: int) -> None:
    for i in range(steps):
        batch = make_batch(eager.algo, 32, seed=i)
        terms = ReferTerms(beta=0.9 - 0.1 * i, c_max=2.0 + 0.1 * i, lr_factor=1.0 - 0.05 * i)
        noise = torch.get_rng_state()  # both steps draw the same noise (SAC's loss has some)
        want = eager.train_step(batch, terms)
        torch.set_rng_state(noise)
        got = compiled.train_step(batch, terms)
        assert compiled.step.compiled
        assert got.stats.keys() == want.stats.keys()
        for k in want.stats:
            assert got.stats[k] == pytest.approx(want.stats[k], rel=1e-5, abs=1e-6), k
        near = want.stats["near_fraction"]
        assert 0.0 < near < 1.0, "the minibatch holds near and far rows"
        np.testing.assert_allclose(got.rho, want.rho, rtol=1e-5)
        np.testing.assert_allclose(got.error, want.error, rtol=1e-5, atol=1e-6)
        if want.value is None:
            assert got.value is None
        else:
            np.testing.assert_allclose(got.value, want.value, rtol=1e-5, atol=1e-6)
    assert_same_state(eager.algo, compiled.algo)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_compiled_step_equals_eager_step(name: str) -> None:
    """Five steps with beta, c_max and the learning rate changing every step (no recompile
    is needed for new values): outputs, parameters (targets included) and Adam's state
    agree to round-off."""
    eager, compiled = pair(name)
    take_steps(eager, compiled, 5)
    assert_called_directly(compiled.step._compiled._fused)


def test_compiled_step_of_several_learners_averages_gradients() -> None:
    """With L > 1 the step is two graphs around the reduction; the averaged gradient is the
    one Adam applies."""
    eager, compiled = pair(VRacer.name, reducer_seed=7)
    take_steps(eager, compiled, 3)
    alone, _ = pair(VRacer.name)
    batch = make_batch(alone.algo, 32, seed=0)
    alone.train_step(batch, ReferTerms(0.9, 2.0, 1.0))
    fresh, _ = pair(VRacer.name, reducer_seed=7)
    fresh.train_step(batch, ReferTerms(0.9, 2.0, 1.0))
    differ = any(not torch.equal(a, b) for a, b in zip(
        alone.algo.behaviour.state_dict().values(), fresh.algo.behaviour.state_dict().values(),
        strict=True))
    assert differ, "the other learner's gradient changes the step"


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_the_two_graph_step_of_several_learners_equals_the_eager_step(name: str) -> None:
    """With L > 1 (gradients, reduction, Adam as separate graphs) every algorithm's compiled
    step agrees with its eager step to round-off, a stochastic loss's noise included."""
    eager, compiled = pair(name, reducer_seed=7)
    take_steps(eager, compiled, 3)
    assert_called_directly(compiled.step._compiled._grads, compiled.step._compiled._adam)


def test_checkpoints_move_between_compiled_and_eager_steps() -> None:
    """The compiled step keeps torch's Adam state layout: its checkpoint continues eagerly,
    and an eager checkpoint continues compiled (two more steps each)."""
    eager, compiled = pair(DDPG.name)
    take_steps(eager, compiled, 2)
    to_eager, to_compiled = pair(DDPG.name)
    to_eager.algo.restore_state(compiled.algo.checkpoint_state())
    to_compiled.algo.restore_state(eager.algo.checkpoint_state())
    for i in range(2):
        batch = make_batch(eager.algo, 32, seed=9 + i)
        terms = ReferTerms(0.8, 2.5, 0.9)
        want = eager.train_step(batch, terms)
        for resumed in (to_eager, to_compiled):
            got = resumed.train_step(batch, terms)
            np.testing.assert_allclose(got.error, want.error, rtol=1e-5, atol=1e-6)
    assert to_compiled.step.compiled
    assert_same_state(eager.algo, to_eager.algo)
    assert_same_state(eager.algo, to_compiled.algo)


FALLBACK = """
import numpy as np
from hpc_refer.algorithms.registry import make_algorithm
from hpc_refer.algorithms.kit.base import ReferTerms
from hpc_refer.config.resolve import build_config
from hpc_refer.loop.learner import make_step
from test_compiled_step import OBS, ACT, make_batch
from hpc_refer.algorithms.vracer import VRacer
config = build_config({VRacer.name: {"hidden": [8], "batch": 16}})
algo, ref = (make_algorithm(config, OBS, ACT, seed=1) for _ in range(2))
step, eager = make_step(algo, None, True), make_step(ref, None, False)
for i in range(2):
    batch = make_batch(ref, 16, seed=i)
    a = step(batch, ReferTerms(0.9, 2.0, 1.0), i)
    b = eager(batch, ReferTerms(0.9, 2.0, 1.0), i)
    assert np.array_equal(a.rho, b.rho) and a.stats == b.stats
assert not step.compiled and step.kind == "eager"
print("eager results")
"""


def test_without_a_compiler_the_step_falls_back_to_eager_with_one_line(tmp_path) -> None:
    """No C++ compiler (CXX names a missing program, an empty compiler cache): one warning
    line, then the eager step's exact numbers."""
    env = {**os.environ, "CXX": "/nonexistent/c++", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": os.path.dirname(__file__)}
    out = subprocess.run([sys.executable, "-c", FALLBACK], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert lines_with(out.stdout, "eager results") == ["eager results"], out.stdout[-3000:]
    # one line of the fallback's (other warnings may come with it on a busy machine)
    line = one_line_with(out.stderr, "compiled learner step unavailable (")
    assert f"{VRacer.name}: {line}" in out.stderr, out.stderr[-3000:]
    assert line.endswith("); using the eager step"), out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]


COMPILES = """
import torch
from torch._dynamo.utils import counters
from hpc_refer.algorithms.registry import make_algorithm
from hpc_refer.algorithms.kit.base import ReferTerms
from hpc_refer.config.resolve import build_config
from hpc_refer.loop.learner import make_step
from test_compiled_step import OBS, ACT, _direct, _Scaled, make_batch
torch.set_num_threads(1)  # as in a run: the graph for one thread
from hpc_refer.algorithms.vracer import VRacer
config = build_config({VRacer.name: {"hidden": [8], "batch": 16}})
algo = make_algorithm(config, OBS, ACT, seed=1)
step = make_step(algo, None, True)
step(make_batch(algo, 16, seed=0), ReferTerms(0.9, 2.0, 1.0), 0)
assert step.compiled
module = _Scaled()  # a DirectGraph built with none of the step's options
got = _direct(module.apply, module)("k", torch.arange(3.0), {"w": torch.zeros(3)})
assert torch.equal(got["y"], torch.arange(3.0) * 2 + 1)
print("compiled", counters["inductor"]["fxgraph_cache_hit"])
"""


def test_a_cache_built_for_another_vector_isa_is_not_reused(tmp_path) -> None:
    """On one inductor cache: a normal process compiles the step and a bare DirectGraph (no
    options of the step's) for this CPU's vector ISA; then a process whose torch runs its
    plain kernels (ATEN_CPU_CAPABILITY=default, as a node of another CPU sharing the cache
    directory) compiles anew for scalar C++ instead of failing on the cached vector code
    (torch 2.13's FX graph cache does not key on the ISA; DirectGraph's cache tag does); a
    second normal process finds its own graphs in the cache again. (``make test-portable``
    runs the whole suite so, with AVX2 too, on a cache that normal runs filled.)"""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": os.path.dirname(__file__)}
    env.pop("ATEN_CPU_CAPABILITY", None)
    hits = []
    for capability in (None, "default", None):
        if capability is None:
            env.pop("ATEN_CPU_CAPABILITY", None)
        else:
            env["ATEN_CPU_CAPABILITY"] = capability
        out = subprocess.run([sys.executable, "-c", COMPILES], env=env, capture_output=True,
                             text=True, timeout=600)
        said = lines_with(out.stdout, "compiled ")
        assert out.returncode == 0 and len(said) == 1, (capability, out.stderr[-3000:])
        hits.append(int(said[0].split()[1]))
    assert hits[0] == 0 and hits[-1] > 0, hits


def test_a_failed_compile_names_the_compiler_error() -> None:
    """The fallback's line quotes the C++ compiler's diagnostic, not inductor's wrapper."""
    message = ("backend='inductor' raised:\nCppCompileError: C++ compile error\n\nCommand:\n"
               "g++ /tmp/x/k.cpp -O3\n\nOutput:\n/tmp/x/k.cpp:12:3: error: 'at::vec' has "
               "not been declared\n/tmp/x/k.cpp:13:3: error: 'fmadd' was not declared")
    assert failure_reason(RuntimeError(message)) == "RuntimeError: error: 'at::vec' has not been " \
        "declared"
    assert failure_reason(RuntimeError("wrapped:\nUnsupported: a data-dependent branch")) == (
        "RuntimeError: wrapped:")
    assert failure_reason(ValueError("wrapped:\nInternalError: no kernel")) == (
        "ValueError: InternalError: no kernel")


@pytest.mark.parametrize(("mode", "steps", "want"), [
    ("on", 1000, True), ("off", 10**7, False),
    ("auto", 10**7, True), ("auto", COMPILE_AUTO_STEPS, False),
])
def test_run_compile_decides_whether_learners_compile(mode: str, steps: int,
                                                      want: bool) -> None:
    config = build_config({"run": {"compile": mode, "steps": steps},
                           "replay": {"size": 2000, "learn_start": 1000}})
    assert config.compiles is want
    edge = build_config({"run": {"compile": "auto", "steps": COMPILE_AUTO_STEPS + 1000},
                         "replay": {"size": 2000, "learn_start": 1000}})
    assert edge.compiles, "grad_ratio x (steps - replay start) = COMPILE_AUTO_STEPS compiles"


def _adam(*params: torch.Tensor, **options) -> torch.optim.Adam:
    return torch.optim.Adam(list(params), lr=1e-2, foreach=False, fused=True, **options)


def test_the_compiled_step_takes_only_plain_single_group_adam() -> None:
    """Non-Adam, two-group Adam, amsgrad or maximize: TypeError with its exact message."""
    from hpc_refer.algorithms.kit.compiled import _Group

    a, b = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(3))
    names = {id(a): "a", id(b): "b"}
    one_group = "the compiled step supports one torch.optim.Adam group per optimizer, not "
    two = torch.optim.Adam([{"params": [a]}, {"params": [b], "lr": 1e-3}])
    cases = [(torch.optim.SGD([a, b], lr=0.1), one_group + "SGD"), (two, one_group + "Adam")]
    for flag in ("amsgrad", "maximize"):
        cases.append((_adam(a, b, **{flag: True}),
                      "the compiled step does not support amsgrad or maximize"))
    for opt, message in cases:
        with pytest.raises(TypeError) as err:
            _Group(opt, 1e-2, names)
        assert str(err.value) == message
    assert _Group(_adam(a, b), 1e-2, names).names == ["a", "b"]


def test_group_state_is_fused_adams_shared_and_cached_until_a_new_state_dict() -> None:
    """state(): fused Adam's layout, one shared step, cached until a state dict is loaded."""
    from hpc_refer.algorithms.kit.compiled import _Group

    a, b = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(3, 2))
    opt = _adam(a, b)
    group = _Group(opt, 1e-2, {id(a): "a", id(b): "b"})
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        m, v, step = group.state()
    finally:
        torch.set_default_dtype(default)
    assert step.dtype == torch.float32 and float(step) == 0.0
    for p, mp, vp in zip((a, b), m, v, strict=True):
        assert opt.state[p]["step"] is step
        assert mp is opt.state[p]["exp_avg"] and vp is opt.state[p]["exp_avg_sq"]
        assert mp.shape == p.shape and not mp.any() and not vp.any()
    assert group.state() is group.state()
    ref_a, ref_b = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(3, 2))
    ref = _adam(ref_a, ref_b)
    ref_a.grad, ref_b.grad = torch.full((2,), 0.5), torch.full((3, 2), -1.0)
    ref.step()
    first = group.state()
    opt.load_state_dict(ref.state_dict())
    m, v, step = group.state()
    assert m[0] is opt.state[a]["exp_avg"] and m[0] is not first[0][0]
    torch.testing.assert_close(m[0], torch.full((2,), 0.05))
    assert float(step) == 1.0 and all(opt.state[p]["step"] is step for p in (a, b))


def test_unshare_gives_each_parameter_its_own_step_count() -> None:
    """unshare() gives each parameter its own step tensor; state() then shares anew."""
    from hpc_refer.algorithms.kit.compiled import _Group

    a, b = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(3))
    opt = _adam(a, b)
    group = _Group(opt, 1e-2, {id(a): "a", id(b): "b"})
    group.unshare()
    assert not opt.state[a] and not opt.state[b]
    first = group.state()
    first[2].add_(3.0)
    group.unshare()
    steps = [opt.state[p]["step"] for p in (a, b)]
    assert steps[0] is not steps[1] and all(s is not first[2] for s in steps)
    assert all(isinstance(s, torch.Tensor) and float(s) == 3.0 for s in steps)
    again = group.state()
    assert again is not first and again[2] is steps[0]
    assert opt.state[b]["step"] is steps[0]


def test_failure_reason_edge_cases() -> None:
    """From the first 'error:' on; an empty message; the 300-character cap."""
    assert failure_reason(RuntimeError("k.cpp:3:1: error: bad error: here")) == (
        "RuntimeError: error: bad error: here")
    assert failure_reason(OSError("")) == "OSError: "
    long = failure_reason(RuntimeError("x" * 500))
    assert long == "RuntimeError: " + "x" * (300 - len("RuntimeError: "))


@pytest.mark.parametrize("two_learners", [False, True])
def test_a_compile_failure_falls_back_to_the_eager_step_in_process(
        two_learners: bool, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A compile failure: one warning, then the eager step's exact results from then on."""
    from hpc_refer.algorithms.kit.compiled import CompiledOrEagerStep
    from hpc_refer.algorithms.kit.step import EagerStep
    from hpc_refer.algorithms.sac import SAC

    config = build_config({"run": {"algorithm": SAC.name},
                           SAC.name: {"hidden": [8], "batch": 16}})
    algo, ref = (make_algorithm(config, OBS, ACT, seed=1) for _ in range(2))
    reducers = [OtherLearner(4) if two_learners else None for _ in range(2)]
    step = CompiledOrEagerStep(algo, reducers[0])
    eager = EagerStep(ref, reducers[1])
    calls = []

    def fail(*args):
        calls.append(args)
        raise RuntimeError("InvalidCxxCompiler: no working C++ compiler found")

    assert step._compiled is not None
    monkeypatch.setattr(step._compiled, "_grads" if two_learners else "_fused", fail)
    for i in range(3):
        batch = make_batch(ref, 16, seed=i)
        terms = ReferTerms(0.9 - 0.1 * i, 2.0, 1.0 - 0.1 * i)
        with caplog.at_level(logging.WARNING, logger="hpc_refer.algorithms.kit.compiled"):
            torch.manual_seed(50 + i)
            got = step(batch, terms, i)
        torch.manual_seed(50 + i)
        want = eager(batch, terms, i)
        assert got.stats == want.stats
        assert np.array_equal(got.rho, want.rho) and np.array_equal(got.error, want.error)
        assert got.value is None and want.value is None
        assert not step.compiled and step.kind == "eager" and step.compile_seconds == 0.0
    assert len(calls) == 1
    records = own_records(caplog, "hpc_refer.algorithms.kit.compiled")
    assert [(r.levelno, r.getMessage()) for r in records] == [
        (logging.WARNING, "sac: compiled learner step unavailable (RuntimeError: "
         "InvalidCxxCompiler: no working C++ compiler found); using the eager step")]
    for k, module in ref.modules.items():
        for (n, a), b in zip(module.state_dict().items(),
                             algo.modules[k].state_dict().values(), strict=True):
            assert torch.equal(a, b), f"{k}.{n}"
    for k, spec in ref.optimizers.items():
        for p, q in zip(spec.optimizer.param_groups[0]["params"],
                        algo.optimizers[k].optimizer.param_groups[0]["params"], strict=True):
            sp, sq = spec.optimizer.state[p], algo.optimizers[k].optimizer.state[q]
            assert float(sq["step"]) == float(sp["step"]) == 3.0, k
            assert torch.equal(sq["exp_avg"], sp["exp_avg"]), k


def test_the_step_reports_compiled_and_its_compile_time_after_its_first_call():
    """Before its first call the step is not compiled and took 0 s to compile; after it, it
    is compiled and its compile time is positive and within the call's own duration."""
    import time

    _, compiled = pair(VRacer.name)
    step = compiled.step
    assert step.compiled is False and step.compile_seconds == 0.0
    batch = make_batch(compiled.algo, 32, seed=0)
    start = time.perf_counter()
    compiled.train_step(batch, ReferTerms(beta=0.5, c_max=2.0, lr_factor=1.0))
    elapsed = time.perf_counter() - start
    assert step.compiled is True
    assert 0.0 < step.compile_seconds <= elapsed
    assert step.kind == f"compiled ({step.compile_seconds:.1f} s to compile)"


def test_a_minibatch_of_another_size_gets_its_own_graph() -> None:
    """The guards the step keeps (:func:`call_guards`) include the minibatch's shapes: after
    steps on 32 rows, steps on 16 rows (a new graph) still equal the eager step's."""
    eager, compiled = pair(VRacer.name)
    take_steps(eager, compiled, 2)
    for i in range(2):
        batch = make_batch(eager.algo, 16, seed=20 + i)
        terms = ReferTerms(0.7, 2.2, 0.8)
        want, got = eager.train_step(batch, terms), compiled.train_step(batch, terms)
        assert got.rho.shape == (16,)
        np.testing.assert_allclose(got.rho, want.rho, rtol=1e-5)
        np.testing.assert_allclose(got.error, want.error, rtol=1e-5, atol=1e-6)
    assert_same_state(eager.algo, compiled.algo)


def test_call_guards_drop_only_what_is_fixed_for_the_life_of_the_step() -> None:
    """Guards on the step's own attributes, module globals, the parameters and Adam's
    moments are dropped; those on the minibatch, beta, the bounds, the step terms, the
    schedule and torch's global state are kept."""
    from types import SimpleNamespace

    from hpc_refer.algorithms.kit.compiled import call_guards

    dropped = ["self.root._modules['parts']", "self.groups[0].eps", "G['torch'].nn",
               "__import__('torch').utils._pytree.SUPPORTED_NODES",
               "dict(type(self.root).__mro__[1].__dict__)", "params['parts.net.w']",
               "states[0][0][1]"]
    kept = ["batch.obs", "beta", "bounds[0]", "terms[1][0]", "now[0]", "now", ""]
    entries = [SimpleNamespace(name=n) for n in dropped + kept]
    assert call_guards(entries) == [False] * len(dropped) + [True] * len(kept)


def test_group_state_refuses_a_moment_of_another_shape() -> None:
    """A loaded Adam moment whose shape is not its parameter's is refused by name (the
    step's graph does not guard the moments' shapes)."""
    from hpc_refer.algorithms.kit.compiled import _Group

    a = torch.nn.Parameter(torch.ones(2))
    opt = _adam(a)
    group = _Group(opt, 1e-2, {id(a): "net.a"})
    group.state()
    opt.state[a]["exp_avg"] = torch.zeros(3)
    with pytest.raises(ValueError, match=r"Adam state of net.a has shape \(3,\), its "
                                         r"parameter \(2,\)"):
        group.state()


def test_new_input_scaling_reaches_the_graph() -> None:
    """The normaliser's statistics change between steps (every ``replay.stats_every``): the
    compiled step reads the new ones, as the eager step does."""
    eager, compiled = pair(VRacer.name)
    take_steps(eager, compiled, 1)
    for trainee in (eager, compiled):
        trainee.algo.set_input_scaling(np.linspace(-1, 1, OBS), np.full(OBS, 0.5))
    batch, terms = make_batch(eager.algo, 32, seed=5), ReferTerms(0.9, 2.0, 1.0)
    want, got = eager.train_step(batch, terms), compiled.train_step(batch, terms)
    np.testing.assert_allclose(got.value, want.value, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got.rho, want.rho, rtol=1e-5)


def test_steps_of_other_widths_and_constants_in_one_process_each_use_their_own_graphs(
        ) -> None:
    """Each compiled step finds only its own graphs (the guards on its networks and
    constants are dropped): in one process, a V-RACER of other widths after a first one, and
    a DDPG of another gamma (a constant of its loss) after a first one, each equal their
    eager steps."""
    def sized(name: str, hidden: list[int], gamma: float) -> tuple[Trainee, Trainee]:
        config = build_config({"run": {"algorithm": name, "compile": "off"},
                               name: {"hidden": hidden, "batch": 32, "gamma": gamma}})
        out = []
        for compiled in (False, True):
            algo = make_algorithm(config, OBS, ACT, seed=3)
            algo.set_input_scaling(np.full(algo.row_dim, 0.1), np.full(algo.row_dim, 1.5))
            out.append(Trainee(algo, make_step(algo, None, compiled)))
        return out[0], out[1]

    for name, hidden, gamma in ((VRacer.name, [16, 16], 0.99), (VRacer.name, [24, 8], 0.99),
                                (DDPG.name, [16, 16], 0.99), (DDPG.name, [16, 16], 0.9)):
        take_steps(*sized(name, hidden, gamma), 2)


def _direct(fn, module: torch.nn.Module):
    from hpc_refer.algorithms.kit.compiled import DirectGraph, call_guards

    return DirectGraph(fn, module, {"guard_filter_fn": call_guards, "fallback_random": True})


class _Scaled(torch.nn.Module):
    """A module whose buffer a function reads (as the loss reads the normaliser's)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.full((3,), 2.0))

    def apply(self, x: torch.Tensor, w: dict[str, torch.Tensor]) -> dict[str, Any]:
        w["w"].add_(1.0)  # an input changed in place, as Adam changes the parameters
        return {"y": x * self.scale + w["w"], "name": "y", "none": None}


def test_direct_graph_calls_take_new_arguments_buffers_and_in_place_updates() -> None:
    """After the first call of a key, calls go to the graph directly: with new argument
    tensors, a module buffer changed in place, the in-place update of an input, and the
    result's constants, as eager code computes them; a new key gets its own plan."""
    module = _Scaled()
    step = _direct(module.apply, module)
    w = {"w": torch.zeros(3)}
    for i in range(4):
        x = torch.arange(3.0) + i
        module.scale.fill_(2.0 + i)
        want = x * (2.0 + i) + (w["w"] + 1.0)
        got = step("k", x, w)
        torch.testing.assert_close(got["y"], want)
        assert got["name"] == "y" and got["none"] is None
    torch.testing.assert_close(w["w"], torch.full((3,), 4.0))
    assert step._plans["k"] is not None, "later calls of the key go direct"
    got = step("k5", torch.arange(5.0)[:3], w)
    assert set(step._plans) == {"k", "k5"}


def test_direct_graph_keeps_dynamo_where_an_input_comes_from_elsewhere() -> None:
    """A tensor the function reads from neither its arguments nor the modules (a global):
    no plan for the key; every call goes through dynamo and sees the global's new value."""
    module = torch.nn.Module()
    step = _direct(_reads_global, module)
    for i in range(3):
        _GLOBAL.fill_(float(i))
        torch.testing.assert_close(step("k", torch.ones(2)), torch.full((2,), 1.0 + i))
    assert step._plans["k"] is None


_GLOBAL = torch.zeros(2)


def _reads_global(x: torch.Tensor) -> torch.Tensor:
    return x + _GLOBAL


def test_direct_graph_keeps_no_record_of_later_calls() -> None:
    """Only the first call of a key is recorded (for its plan): the calls of a key that stays
    with dynamo leave nothing behind (no tensors held from call to call)."""
    step = _direct(_reads_global, torch.nn.Module())
    for _ in range(3):
        step("k", torch.ones(2))
    assert step._plans["k"] is None and step._calls == []


def test_a_compiled_step_goes_on_after_a_reset_of_the_networks() -> None:
    """A reset (``replay.reset_every``) restores fresh weights and empty Adam states into
    the same tensors: the compiled step takes it (new moments, t from 0) as the eager one."""
    eager, compiled = pair(VRacer.name)
    take_steps(eager, compiled, 2)
    for trainee in (eager, compiled):
        trainee.algo.reset_networks(11)
    assert_same_state(eager.algo, compiled.algo)
    take_steps(eager, compiled, 2)
    assert compiled.algo.optimizers["adam"].optimizer.state_dict()["state"][0]["step"] == 2
