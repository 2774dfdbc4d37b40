"""Terms left out on the steps where their optimizer rests (issue 36, point 6): CrossQ's actor
and temperature step every third gradient step and TD3's actor every other; on the other
steps their losses are not computed (as sb3-contrib's CrossQ and SB3's TD3 do), which must
leave the critics' gradients as they were, give the resting modules no gradient, and save the
arithmetic; the interval means count each statistic over the steps that gave it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from learners import small_table
from test_compiled_step import ACT, OBS, make_batch
from torch.utils.flop_counter import FlopCounterMode

from hpc_refer.algorithms.kit.base import Algorithm, ReferTerms
from hpc_refer.algorithms.kit.step import EagerStep, due, resting
from hpc_refer.algorithms.registry import make_algorithm
from hpc_refer.config.resolve import build_config
from hpc_refer.loop.intervals import IntervalStats

DELAYED = {"crossq": ({"actor", "temperature"}, {"loss_pi", "entropy"}),
           "td3": ({"actor"}, {"loss_mu"})}
"""The algorithms with delayed optimizers: those that rest two steps in three (CrossQ) or
one in two (TD3), and the statistics only their steps give."""


def algorithm(name: str, **table: object) -> Algorithm:
    config = build_config({"run": {"algorithm": name},
                           name: small_table(name, batch=64, **table)})
    algo = make_algorithm(config, OBS, ACT, seed=4)
    algo.set_input_scaling(np.full(algo.row_dim, 0.1), np.full(algo.row_dim, 1.5))
    return algo


def gradients(algo: Algorithm, loss: torch.Tensor) -> dict[str, torch.Tensor | None]:
    params = {f"{m}.{n}": p for m, module in algo.modules.items()
              for n, p in module.named_parameters() if p.requires_grad}
    got = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
    return dict(zip(params, got, strict=True))


@pytest.mark.parametrize("name", sorted(DELAYED))
def test_a_resting_step_keeps_the_critics_gradient_and_skips_the_rest(name: str) -> None:
    algo = algorithm(name)
    rests, only_due = DELAYED[name]
    assert resting(algo, due(algo, 1)) == rests and resting(algo, due(algo, 0)) == set()
    batch = make_batch(algo, 64, seed=1)
    terms = ReferTerms(beta=0.7, c_max=2.0, lr_factor=1.0)
    noise = torch.get_rng_state()  # the critics' target draws the same noise in both
    with FlopCounterMode(display=False) as full_count:
        full = algo.losses(batch, terms)
    torch.set_rng_state(noise)
    with FlopCounterMode(display=False) as rest_count:
        part = algo.losses(batch, terms, frozenset(rests))
    assert set(full.stats) - set(part.stats) == only_due
    for k in part.stats:
        torch.testing.assert_close(part.stats[k], full.stats[k])
    np.testing.assert_array_equal(part.rho.numpy(), full.rho.numpy())
    want, got = gradients(algo, full.loss), gradients(algo, part.loss)
    resting_params = {f"{m}.{n}" for m in rests for n, _ in algo.modules[m].named_parameters()}
    assert resting_params and all(got[k] is None for k in resting_params)
    for k, g in got.items():
        if k not in resting_params and want[k] is not None:
            assert g is not None, k
            torch.testing.assert_close(g, want[k], rtol=1e-5, atol=1e-7, msg=k)
    assert (part.updates or {}).keys() <= (full.updates or {}).keys()
    assert not any(k.startswith("actor.") for k in part.updates or {})
    saved = 1.0 - rest_count.get_total_flops() / full_count.get_total_flops()
    assert saved > 0.1, f"{name}: a resting step saved only {saved:.0%} of the arithmetic"


@pytest.mark.parametrize("name", sorted(DELAYED))
def test_the_resting_modules_do_not_move_and_their_statistics_are_kept(name: str) -> None:
    """Through the eager step: at t = 0 every module with parameters moves; at t = 1 the
    resting modules keep parameters and buffers (the actor's running statistics too), the
    critics move."""
    algo = algorithm(name)
    rests, _ = DELAYED[name]
    step = EagerStep(algo)
    for t in (0, 1):
        before = {m: {k: v.clone() for k, v in algo.modules[m].state_dict().items()}
                  for m in algo.modules}
        step(make_batch(algo, 64, seed=2 + t), ReferTerms(0.7, 2.0, 1.0), t)
        for m, state in before.items():
            after = algo.modules[m].state_dict()
            moved = any(not torch.equal(after[k], v) for k, v in state.items())
            if t == 1 and m in rests:
                assert not moved, (t, m)
            elif m in rests or m.startswith("critic"):
                assert moved, (t, m)


def test_interval_means_count_each_statistic_over_the_steps_that_gave_it() -> None:
    stats = IntervalStats()
    for step in range(6):  # an actor's loss every third step, the critics' every step
        stats.add({"loss_q": float(step), **({"loss_pi": 10.0 * step} if step % 3 == 0
                                              else {})})
    assert stats.means() == {"loss_q": 2.5, "loss_pi": 15.0}
    restored = IntervalStats()
    restored.restore_state(stats.checkpoint_state())
    assert restored.counts == {"loss_q": 6, "loss_pi": 2} and restored.sums == stats.sums


def test_a_loss_without_resting_computes_every_term_as_before() -> None:
    """A plug-in written before ``resting`` existed: its loss_terms is called without it."""
    from hpc_refer.algorithms.td3 import TD3

    class Older(TD3):
        def loss_terms(self, batch, beta, bounds):  # type: ignore[override]
            return super().loss_terms(batch, beta, bounds)

    algo = algorithm("td3")
    algo.__class__ = Older
    out = algo.losses(make_batch(algo, 64, seed=3), ReferTerms(0.7, 2.0, 1.0),
                      frozenset({"actor"}))
    assert "loss_mu" in out.stats
