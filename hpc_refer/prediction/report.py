"""Figure 2 of the seed (learning curves, step-size sensitivity) and the results table."""

from __future__ import annotations

from pathlib import Path

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from hpc_refer.prediction import results
from hpc_refer.prediction.algorithms import learner_class
from hpc_refer.prediction.analysis import half_depth_width, mean_se, sensitivity
from hpc_refer.prediction.sweep import Rerun, SweepConfig, SweepResult

#: WHOLE in blue and TARGET in red, as the seed's Figure 2.
COLOURS = {"WHOLE": "tab:blue", "TARGET": "tab:red"}
Y_LIMIT = (0.0, 0.8)


def _power(value: float) -> str:
    exponent = np.log2(value)
    return f"2^{exponent:.0f}" if exponent == round(exponent) else f"{value:g}"


def best_parameters(config: SweepConfig, name: str, best: np.ndarray) -> str:
    """'alpha = 2^-x' plus the third parameter of a (extra index, alpha index) pair."""
    cls = learner_class(name)
    text = f"alpha = {_power(config.alphas()[best[1]])}"
    extra = config.extra_values(cls)
    if extra is not None:
        value = _power(extra[best[0]]) if cls.extra == "eta" else f"{extra[best[0]]:g}"
        text += f", {cls.extra} = {value}"
    return text


def _rerun(result: SweepResult, name: str) -> Rerun:
    rerun = result.algorithms[name].rerun
    if rerun is None:
        raise ValueError(f"results: {name} has no re-run; run the sweep without --no-rerun")
    return rerun


def _grid(n: int) -> tuple[Figure, list[Axes]]:
    cols = min(n, 5)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.0 * cols, 2.5 * rows), sharey=True,
                             squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat)


def learning_curves(result: SweepResult, path: Path) -> None:
    """(a) Mean RMSVE over the re-run runs of each best setting; band one standard error wide."""
    config = result.config
    fig, axes = _grid(len(result.algorithms))
    steps = np.arange(config.steps) / 1000
    for ax, name in zip(axes, result.algorithms, strict=False):
        rerun = _rerun(result, name)
        for k, placement in enumerate(config.placements):
            mean, se = rerun.curve_mean[k], rerun.curve_se[k]
            colour = COLOURS[placement.name]
            ax.plot(steps, mean, color=colour, lw=1, label=placement.name)
            ax.fill_between(steps, mean - se / 2, mean + se / 2, color=colour, alpha=0.3, lw=0)
        ax.set_title(learner_class(name).label, fontsize=9)
        ax.set_ylim(*Y_LIMIT)
        ax.set_xlabel("steps (thousands)", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].set_ylabel("RMSVE")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Learning curves of the best settings (mean of {config.runs} re-runs, "
                 "band = 1 standard error)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def sensitivity_curves(result: SweepResult, path: Path) -> None:
    """(b) Mean AUC over alpha at the best third parameter of each placement (error bars 1 SE)."""
    config = result.config
    fig, axes = _grid(len(result.algorithms))
    log_alpha = np.log2(config.alphas())
    for ax, name in zip(axes, result.algorithms, strict=False):
        res = result.algorithms[name]
        for k, placement in enumerate(config.placements):
            mean, se = sensitivity(res.auc[k], int(_rerun(result, name).best[k, 0]))
            ax.errorbar(log_alpha, mean, yerr=se, color=COLOURS[placement.name], lw=1,
                        marker=".", ms=3, capsize=1.5, label=placement.name)
        ax.set_title(learner_class(name).label, fontsize=9)
        ax.set_ylim(*Y_LIMIT)
        ax.set_xlabel(r"$\log_2 \alpha$", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].set_ylabel("mean AUC (RMSVE)")
    axes[0].legend(fontsize=7)
    fig.suptitle("Step-size sensitivity (diverged settings at 2.0, off the chart)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def widths(result: SweepResult, name: str) -> list[int]:
    """Sensitivity-curve width per placement (:func:`analysis.half_depth_width`), measured against
    the algorithm's best mean AUC over all placements."""
    res, rerun = result.algorithms[name], _rerun(result, name)
    curves = [sensitivity(res.auc[k], int(rerun.best[k, 0]))[0]
              for k in range(len(result.config.placements))]
    best = min(float(c.min()) for c in curves)
    return [half_depth_width(c, best) for c in curves]


def table(result: SweepResult) -> str:
    """Markdown: one row per algorithm and placement, the best setting's re-run summaries."""
    config = result.config
    lines = [
        f"Best setting per algorithm and placement (min mean AUC over seeds 0-{config.runs - 1}, "
        f"diverged means replaced by 2.0); AUC, SE and final error from the re-run on seeds "
        f"{config.runs}-{2 * config.runs - 1}. Width: step sizes (of {config.alphas().size}) "
        "reaching half of the algorithm's best AUC improvement over the initial error.",
        "",
        "| algorithm | placement | best parameters | mean AUC | SE | final error | SE (final) "
        "| AUC (selection) | width |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, res in result.algorithms.items():
        rerun = _rerun(result, name)
        auc, auc_se = mean_se(rerun.auc)
        final, final_se = mean_se(rerun.final)
        for k, (placement, width) in enumerate(zip(config.placements, widths(result, name),
                                                   strict=True)):
            e, a = rerun.best[k]
            lines.append(
                f"| {learner_class(name).label} | {placement.name} | "
                f"{best_parameters(config, name, rerun.best[k])} | {auc[k]:.4f} | "
                f"{auc_se[k]:.4f} | {final[k]:.4f} | {final_se[k]:.4f} | "
                f"{mean_se(res.auc[k, e, a])[0]:.4f} | {width} |")
    return "\n".join(lines) + "\n"


def comparison(result: SweepResult) -> str:
    """Markdown: per algorithm, TARGET minus WHOLE in re-run AUC and final error, paired over
    the same seeds (mean and SE of the per-run differences), the widths and a verdict
    (a difference beyond two standard errors decides; otherwise "no clear difference")."""
    order = [p.name for p in result.config.placements]
    if sorted(order) != ["TARGET", "WHOLE"]:
        return ""
    k_w, k_t = order.index("WHOLE"), order.index("TARGET")
    lines = ["| algorithm | AUC WHOLE | AUC TARGET | TARGET - WHOLE (AUC) | "
             "TARGET - WHOLE (final) | width WHOLE / TARGET | lower AUC |",
             "|---|---|---|---|---|---|---|"]
    for name in result.algorithms:
        rerun = _rerun(result, name)
        auc = mean_se(rerun.auc)[0]
        d_auc, se_auc = mean_se(rerun.auc[k_t] - rerun.auc[k_w])
        d_final, se_final = mean_se(rerun.final[k_t] - rerun.final[k_w])
        width = widths(result, name)
        verdict = ("WHOLE" if d_auc > 2 * se_auc else "TARGET" if d_auc < -2 * se_auc
                   else "no clear difference")
        lines.append(f"| {learner_class(name).label} | {auc[k_w]:.4f} | {auc[k_t]:.4f} | "
                     f"{d_auc:+.4f} ± {se_auc:.4f} | {d_final:+.4f} ± {se_final:.4f} | "
                     f"{width[k_w]} / {width[k_t]} | {verdict} |")
    return "\n".join(lines) + "\n"


def write_report(path: str | Path, out_dir: str | Path) -> list[Path]:
    """Read a sweep file, write learning_curves.png, sensitivity.png and table.md."""
    mpl.use("Agg")
    result = results.read(path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "learning_curves.png", out / "sensitivity.png", out / "table.md"]
    learning_curves(result, written[0])
    sensitivity_curves(result, written[1])
    paired = comparison(result)
    text = table(result) + (f"\nWHOLE vs TARGET, paired over the re-run seeds:\n\n{paired}"
                            if paired else "")
    written[2].write_text(text, encoding="utf-8")
    return written
