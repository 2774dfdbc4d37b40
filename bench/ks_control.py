"""KS flow control: does V-RACER + ReF-ER lower the energy of the Kuramoto-Sivashinsky solution?

``python bench/ks_control.py [--steps 20000] [--seeds 0 1]`` trains, for each seed, one
process (one actor, one learner) on the built-in ``KS`` environment for ``--steps`` steps with
the settings of ``configs/ks.toml``, then evaluates on ``--eval`` initial conditions that training
never saw (reset seeds 10^6 + k):

* uncontrolled (a = 0), the reference energy;
* the proportional feedback law a_j = -u(c_j) (the actuator centres are sensors 1, 3, 5, 7);
* the trained policy's mean m_w(s) (deterministic), and the trained stochastic policy.

The figure of merit is the time-averaged energy <E> = mean_t E_t over each evaluation
episode (HORIZON control steps). Results go to ``bench/results/<name>.json`` (``--name``,
default ``ks_control``); the figure ``<name>.png`` shows <E> per episode for each controller
and the space-time diagram u(x, t) of one evaluation episode, uncontrolled and under the
trained policy; ``--out DIR``: both go there. ``--smoke`` (bench/common.py): one seed, 200
training steps, two evaluation episodes per controller (the fewest with a spread).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from common import parse, smoke, write

import hpc_refer.envs.ks as ks
from hpc_refer.algorithms.vracer import GaussianPolicyValueNet
from hpc_refer.config.resolve import build_config, load_toml
from hpc_refer.envs.registry import env_kind
from hpc_refer.report.metrics import RunDirectory
from hpc_refer.run.learning import set_threads, train_local

SETTINGS = Path(__file__).resolve().parents[1] / "configs" / "ks.toml"
EVAL_SEED0 = 10**6

Policy = Callable[[np.ndarray], np.ndarray]


def train(steps: int, seed: int, run_dir: Path) -> tuple[GaussianPolicyValueNet, float]:
    """Train on KS in this process; returns the network and the wall time in seconds."""
    layers = load_toml(SETTINGS)
    layers["run"].update(steps=steps, seed=seed, log_every=max(steps // 10, 1))
    config = build_config(layers)
    set_threads(config)
    run = RunDirectory(run_dir, config, env_kind(config.run.env).metric_names(config.run.env))
    start = time.perf_counter()
    try:
        learner = train_local(config, run).learner
    finally:
        run.close()
    net = learner.algo.behaviour
    assert isinstance(net, GaussianPolicyValueNet)
    return net, time.perf_counter() - start


def network_policy(net: GaussianPolicyValueNet, sample: bool, seed: int) -> Policy:
    """The network's mean action, or a sample of its Gaussian, clipped to [-1, 1]."""
    rng = np.random.default_rng(seed)

    @torch.inference_mode()
    def act(obs: np.ndarray) -> np.ndarray:
        _, mean, std = net(torch.from_numpy(obs)[None])
        u = mean[0].numpy() + (std.numpy() * rng.standard_normal(ks.N_ACT) if sample else 0.0)
        return np.clip(u, -1.0, 1.0)

    return act


def evaluate(policy: Policy, episodes: int, keep_field: bool = False
             ) -> tuple[list[float], np.ndarray | None]:
    """<E> of each evaluation episode; the field u(x, t) of the first one if asked."""
    env = ks.KuramotoSivashinsky()
    means, field = [], None
    for k in range(episodes):
        obs = env.reset(EVAL_SEED0 + k)
        energies, rows = [], [env.u.copy()]
        for _ in range(ks.HORIZON):
            obs, _, _ = env.step(policy(obs))
            energies.append(env.energy())
            rows.append(env.u.copy())
        means.append(float(np.mean(energies)))
        if keep_field and k == 0:
            field = np.array(rows)
    return means, field


def draw(path: Path, per_controller: dict[str, list[float]], fields: dict[str, np.ndarray]
         ) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 1 + len(fields), figsize=(4.2 * (1 + len(fields)), 3.8),
                             constrained_layout=True)
    names = list(per_controller)
    axes[0].boxplot([per_controller[n] for n in names], showmeans=True)
    axes[0].set_xticks(range(1, len(names) + 1), names, rotation=30, ha="right", fontsize=8)
    axes[0].set_ylabel("time-averaged energy <E> per episode")
    axes[0].set_title("KS, unseen initial conditions")
    limit = max(float(np.abs(f).max()) for f in fields.values())
    for ax, (name, f) in zip(axes[1:], fields.items(), strict=True):
        image = ax.imshow(f.T, origin="lower", aspect="auto", cmap="RdBu_r", vmin=-limit,
                          vmax=limit, extent=(0, ks.HORIZON * ks.DT_CONTROL, 0, ks.LENGTH))
        ax.set_xlabel("t")
        ax.set_ylabel("x")
        ax.set_title(f"u(x, t): {name}")
    fig.colorbar(image, ax=axes[1:], shrink=0.8)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def smoke_runs(out: Path) -> list[list[str]]:
    return [["--steps", "200", "--seeds", "0", "--eval", "2"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000, help="training steps per seed")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--eval", type=int, default=20, help="evaluation episodes")
    parser.add_argument("--name", default="ks_control", help="results file stem")
    args = parse(parser, argv, smoke_runs)
    if args.smoke:
        return smoke(main, smoke_runs, args.out)

    per_controller: dict[str, list[float]] = {}
    per_controller["uncontrolled"], uncontrolled_field = evaluate(
        lambda obs: np.zeros(ks.N_ACT), args.eval, keep_field=True)
    per_controller["P feedback"], _ = evaluate(lambda obs: -obs[1::2], args.eval)
    runs, fields = [], {"uncontrolled": uncontrolled_field}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            net, wall = train(args.steps, seed, Path(tmp) / f"seed{seed}")
            mean_e, field = evaluate(network_policy(net, False, seed), args.eval,
                                     keep_field=True)
            sampled_e, _ = evaluate(network_policy(net, True, seed), args.eval)
            per_controller[f"V-RACER mean, seed {seed}"] = mean_e
            per_controller[f"V-RACER sampled, seed {seed}"] = sampled_e
            if seed == args.seeds[0]:
                fields[f"V-RACER mean, seed {seed}"] = field
            runs.append({"seed": seed, "train_wall_s": round(wall, 1),
                         "energy_mean_policy": float(np.mean(mean_e)),
                         "energy_sampled_policy": float(np.mean(sampled_e))})
            print(f"seed {seed}: trained {args.steps} steps in {wall:.0f} s; <E> mean policy "
                  f"{np.mean(mean_e):.3f}, sampled {np.mean(sampled_e):.3f}")
    reference = float(np.mean(per_controller["uncontrolled"]))
    png = args.out / f"{args.name}.png"
    args.out.mkdir(parents=True, exist_ok=True)
    draw(png, per_controller, fields)
    summary = {name: {"mean": float(np.mean(v)), "std": float(np.std(v, ddof=1)),
                      "ratio_to_uncontrolled": float(np.mean(v)) / reference}
               for name, v in per_controller.items()}
    path = write(args.name, {"steps": args.steps, "settings": load_toml(SETTINGS),
                                "eval_episodes": args.eval, "runs": runs,
                                "energy": summary, "figure": png.name})
    for name, s in summary.items():
        print(f"{name:28s} <E> {s['mean']:.3f} +- {s['std']:.3f}  "
              f"(x{s['ratio_to_uncontrolled']:.2f} of uncontrolled)")
    print(f"wrote {path} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
