"""Figures drawn from finished numbers (no statistic is computed here).

Every function returns ``(fig, ax)`` (``ax`` may be an array of axes) and uses the Agg
backend, so it works headless.
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


def _colors(labels) -> dict:
    cmap = plt.get_cmap("tab10")
    return {lab: cmap(i % 10) for i, lab in enumerate(labels)}


def _label_margin(labels, fontsize: float = 8.0, width_in: float = 7.0) -> float:
    """Left margin (figure fraction) that fits the longest y label, without tight_layout."""
    longest = max((len(str(v)) for v in labels), default=4)
    return min(0.6, (0.3 + longest * fontsize * 0.55 / 72) / width_in)


def _top(fig, inches: float = 0.6) -> float:
    """Top of the axes area (figure fraction) leaving ``inches`` for a suptitle above the
    panel titles, whatever the figure's height (a fixed fraction overlaps on short figures)."""
    return 1.0 - inches / fig.get_figheight()


def _metric_panels(rows: pd.DataFrame, key: str, panel_width: float, extra_width: float, row_height: float):
    """One panel per metric sharing the y axis, rows in first-seen order of `key`.
    Returns fig, axes (1, M), y positions, labels, and [(ax, metric, rows reindexed by label)]."""
    metrics = list(rows["metric"].drop_duplicates())
    labels = list(rows[key].drop_duplicates())
    width = panel_width * len(metrics) + extra_width
    fig, axes = plt.subplots(1, len(metrics), figsize=(width, row_height * len(labels) + 1.4), sharey=True,
                             squeeze=False)
    panels = [(ax, metric, rows[rows["metric"] == metric].set_index(key).reindex(labels))
              for ax, metric in zip(axes[0], metrics)]
    return fig, axes, np.arange(len(labels))[::-1], labels, panels


def interval_plot(summary: pd.DataFrame, title: str = ""):
    """Value and interval per policy, one panel per metric.
    summary rows: metric, policy, value, boot_low, boot_high, is_baseline."""
    fig, axes, y, pols, panels = _metric_panels(summary, "policy", 2.6, 2, 0.32)
    width = fig.get_figwidth()
    for ax, metric, rows in panels:
        colors = ["tab:red" if b else "tab:blue" for b in rows["is_baseline"]]
        ax.hlines(y, rows["boot_low"], rows["boot_high"], colors=colors, lw=2)
        ax.scatter(rows["value"], y, color=colors, zorder=3, s=14)
        base = rows[rows["is_baseline"].astype(bool)]
        if len(base):
            ax.axvline(base["value"].iloc[0], color="tab:red", ls=":", lw=1)
        ax.set_title(metric, fontsize=9)
        ax.tick_params(labelsize=7)
    axes[0, 0].set_yticks(y, pols, fontsize=8)
    fig.suptitle(f"{title} (percentile bootstrap intervals; red = baseline)", fontsize=9)
    fig.subplots_adjust(left=_label_margin(pols, 8, width), right=0.98, top=_top(fig), bottom=0.5 / fig.get_figheight(),
                        wspace=0.08)
    return fig, axes


def forest_plot(rows: pd.DataFrame, title: str = "", p_column: str = "p"):
    """Deltas with intervals, one panel per metric, rows in the same order in each panel.
    rows: metric, label, delta, boot_low, boot_high, <p_column>; filled marker: p < 0.05."""
    fig, axes, y, labels, panels = _metric_panels(rows, "label", 2.8, 3, 0.22)
    width = fig.get_figwidth()
    for ax, metric, r in panels:
        sig = r[p_column].to_numpy(dtype=float) < 0.05
        color = np.where(r["delta"].to_numpy(dtype=float) >= 0, "tab:green", "tab:red")
        ax.hlines(y, r["boot_low"], r["boot_high"], colors=color, lw=1.5)
        ax.scatter(r["delta"][sig], y[sig], c=color[sig], zorder=3, s=14)
        ax.scatter(r["delta"][~sig], y[~sig], facecolors="white", edgecolors=color[~sig], zorder=3, s=14)
        ax.axvline(0, color="black", lw=0.8)
        ax.set_title(metric, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.xaxis.set_major_locator(plt.MaxNLocator(5))
    axes[0, 0].set_yticks(y, labels, fontsize=7)
    fig.suptitle(f"{title} (filled: {p_column} < 0.05)", fontsize=9)
    fig.subplots_adjust(left=_label_margin(labels, 7, width), right=0.98, top=_top(fig),
                        bottom=0.3 / (0.22 * len(labels) + 1.4), wspace=0.08)
    return fig, axes


def sensitivity_plot(rows: pd.DataFrame, axis: str, title: str = ""):
    """Delta against the baseline (with its interval) as a function of a swept knob, one
    panel per metric. rows: metric, axis_value, delta, boot_low, boot_high, p_holm
    (in the order to draw); numeric knob values on a numeric axis, others as categories."""
    metrics = list(rows["metric"].drop_duplicates())
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.2 * len(metrics) + 0.8, 3.4), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        r = rows[rows["metric"] == metric]
        x = pd.to_numeric(r["axis_value"], errors="coerce")
        numeric = bool(x.notna().all())
        xs = x.to_numpy(dtype=float) if numeric else np.arange(len(r), dtype=float)
        d = r["delta"].to_numpy(dtype=float)
        err = np.vstack([d - r["boot_low"].to_numpy(dtype=float), r["boot_high"].to_numpy(dtype=float) - d])
        sig = r["p_holm"].to_numpy(dtype=float) < 0.05
        ax.errorbar(xs, d, yerr=err, fmt="-", color="tab:blue", lw=1, capsize=3, zorder=2)
        ax.scatter(xs[sig], d[sig], color="tab:blue", zorder=3, s=20)
        ax.scatter(xs[~sig], d[~sig], facecolors="white", edgecolors="tab:blue", zorder=3, s=20)
        ax.axhline(0, color="black", lw=0.8)
        if not numeric:
            ax.set_xticks(xs, r["axis_value"].astype(str), rotation=30, ha="right", fontsize=7)
        ax.set_xlabel(axis, fontsize=8)
        ax.set_title(metric, fontsize=9)
        ax.tick_params(labelsize=7)
    axes[0, 0].set_ylabel("delta vs baseline", fontsize=8)
    fig.suptitle(f"{title} (bootstrap intervals; filled: p_holm < 0.05)", fontsize=9)
    fig.subplots_adjust(left=0.12, right=0.98, top=_top(fig), bottom=0.25, wspace=0.3)
    return fig, axes


def passk_plot(curves: pd.DataFrame, title: str = ""):
    """pass@k (solid) and pass^k (dashed) against k. curves: policy, kind, k, value."""
    fig, ax = plt.subplots(figsize=(6.5, 4))
    col = _colors(curves["policy"].drop_duplicates())
    for (pol, kind), g in curves.groupby(["policy", "kind"], sort=False):
        g = g.sort_values("k")
        ax.plot(g["k"], g["value"], marker="o", color=col[pol], ls="-" if kind == "pass@k" else "--",
                label=f"{pol} {kind}")
    ax.set_xlabel("k")
    ax.set_ylabel("value")
    ax.set_xticks(sorted(curves["k"].unique()))
    ax.legend(fontsize=7, ncol=2)
    ax.set_title(title)
    fig.subplots_adjust(bottom=0.22, top=0.9)
    return fig, ax


def paired_scatter(pairs: dict, baseline: str, metric: str, title: str = ""):
    """Per-task seed-averaged values, baseline (x) vs each candidate (y).
    pairs: candidate -> (baseline_values (tasks,), candidate_values (tasks,))."""
    n = max(1, len(pairs))
    cols = min(4, n)
    rws = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rws, cols, figsize=(3.2 * cols, 3.2 * rws), squeeze=False)
    for ax, (cand, (xb, xc)) in zip(axes.ravel(), pairs.items()):
        ax.scatter(xb, xc, s=10, alpha=0.6)
        ax.plot([0, 1], [0, 1], color="grey", lw=0.8)
        ax.set_xlim(-0.05, 1.05)
        ax.set_ylim(-0.05, 1.05)
        ax.set_title(cand, fontsize=8)
        ax.set_xlabel(f"{baseline} {metric}", fontsize=7)
    for ax in axes.ravel()[len(pairs):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    fig.subplots_adjust(bottom=0.22 / rws, top=_top(fig), hspace=0.5)
    return fig, axes


def band_plot(df: pd.DataFrame, group: str, title: str = "", ylabel: str = "", facet: str | None = None):
    """Mean line with mean ± sd band over steps. df: [facet], group, step, mean, low, high."""
    facets = list(df[facet].drop_duplicates()) if facet else [None]
    cols = min(4, len(facets))
    rws = int(np.ceil(len(facets) / cols))
    fig, axes = plt.subplots(rws, cols, figsize=(3.6 * cols, 2.9 * rws), squeeze=False)
    col = _colors(df[group].drop_duplicates())
    for ax, f in zip(axes.ravel(), facets):
        sub = df if f is None else df[df[facet] == f]
        for lab, g in sub.groupby(group, sort=False):
            g = g.sort_values("step")
            ax.plot(g["step"], g["mean"], color=col[lab], lw=1.2, label=str(lab))
            ax.fill_between(g["step"], g["low"], g["high"], color=col[lab], alpha=0.2, lw=0)
        ax.set_title(str(f) if f is not None else title, fontsize=8)
        ax.set_xlabel("step", fontsize=7)
        ax.set_ylabel(ylabel, fontsize=7)
    for ax in axes.ravel()[len(facets):]:
        ax.axis("off")
    axes.ravel()[0].legend(fontsize=6)
    if facet:
        fig.suptitle(title, fontsize=10)
    fig.subplots_adjust(bottom=0.5 / fig.get_figheight(), top=_top(fig) if facet else 0.9, wspace=0.3, hspace=0.5)
    return fig, axes


def bar_plot(df: pd.DataFrame, x: str, group: str, value: str, err: str | None = None, title: str = "",
             ylabel: str = ""):
    """Grouped bars: one group of bars per ``x``, one bar per ``group``."""
    xs, gs = list(df[x].drop_duplicates()), list(df[group].drop_duplicates())
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(xs) * max(1, len(gs)) / 3 + 3), 3.8))
    width = 0.8 / max(1, len(gs))
    col = _colors(gs)
    for j, g in enumerate(gs):
        sub = df[df[group] == g].set_index(x).reindex(xs)
        ax.bar(np.arange(len(xs)) + j * width, sub[value], width, color=col[g], label=str(g),
               yerr=None if err is None else sub[err])
    ax.set_xticks(np.arange(len(xs)) + 0.4 - width / 2, xs, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=6, ncol=2)
    fig.subplots_adjust(bottom=0.22, top=0.9)
    return fig, ax


def facet_bars(df: pd.DataFrame, facet: str, x: str, value: str, err: str | None = None, title: str = ""):
    """One panel per ``facet`` value, one bar per ``x`` (e.g. one cost quantity per panel)."""
    facets = list(df[facet].drop_duplicates())
    xs = list(df[x].drop_duplicates())
    cols = min(4, len(facets))
    rws = int(np.ceil(len(facets) / cols))
    fig, axes = plt.subplots(rws, cols, figsize=(3.4 * cols, 2.8 * rws + 0.3 * max(len(str(v)) for v in xs) / 4),
                             squeeze=False)
    col = _colors(xs)
    for ax, f in zip(axes.ravel(), facets):
        sub = df[df[facet] == f].set_index(x).reindex(xs)
        ax.bar(np.arange(len(xs)), sub[value], color=[col[v] for v in xs],
               yerr=None if err is None else sub[err])
        ax.set_xticks(np.arange(len(xs)), xs, rotation=40, ha="right", fontsize=6)
        ax.set_title(str(f), fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
    for ax in axes.ravel()[len(facets):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=9)
    fig.subplots_adjust(hspace=0.9, wspace=0.35, bottom=0.2, top=_top(fig, 0.7))
    return fig, axes


def strip_plot(df: pd.DataFrame, x: str, value: str, title: str = "", ylabel: str = "", ref: float | None = None):
    """One dot per row (e.g. one Spearman rho per run), grouped by ``x``."""
    xs = list(df[x].drop_duplicates())
    fig, ax = plt.subplots(figsize=(max(5, 0.8 * len(xs) + 2), 3.6))
    for i, lab in enumerate(xs):
        v = df.loc[df[x] == lab, value].to_numpy(dtype=float)
        ax.scatter(np.full(v.size, i), v, s=18, alpha=0.7)
    if ref is not None:
        ax.axhline(ref, color="grey", lw=0.8)
    ax.set_xticks(np.arange(len(xs)), xs, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    fig.subplots_adjust(bottom=0.22, top=0.9)
    return fig, ax


def save(fig, path) -> None:
    fig.savefig(path, dpi=80)
    plt.close(fig)


def share_heatmap(share: pd.DataFrame, marks: pd.DataFrame, title: str = ""):
    """Rows x columns of shares of the oracle's gap (`hb stress`): diverging colours clipped
    to [-1, 1] (0 = uniform, 1 = the oracle), each cell annotated with its share and `*`
    where `marks` is True; NaN cells grey."""
    values = share.to_numpy(dtype=float)
    rows, cols = share.shape
    fig, ax = plt.subplots(figsize=(1.0 + 0.75 * cols, 1.0 + 0.4 * rows))
    cmap = plt.get_cmap("RdBu").with_extremes(bad="#dddddd")
    image = ax.imshow(np.ma.masked_invalid(np.clip(values, -1.0, 1.0)), cmap=cmap, vmin=-1.0, vmax=1.0,
                      aspect="auto")
    for i in range(rows):
        for j in range(cols):
            if np.isfinite(values[i, j]):
                star = "*" if bool(marks.iat[i, j]) else ""
                ax.text(j, i, f"{values[i, j]:.2f}{star}", ha="center", va="center", fontsize=7,
                        color="white" if abs(np.clip(values[i, j], -1, 1)) > 0.6 else "black")
    ax.set_xticks(range(cols), [str(c) for c in share.columns], rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(rows), [str(r) for r in share.index], fontsize=8)
    fig.colorbar(image, ax=ax, fraction=0.03, pad=0.02)
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig, ax
