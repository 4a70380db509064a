"""Figures drawn from finished numbers (no statistic is computed here).

Every function returns ``(fig, ax)`` (``ax`` may be an array of axes) and uses the Agg
backend, so it works headless.
"""
from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from reports.text import adjusted_p  # noqa: E402


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


def headline_plot(rows: pd.DataFrame, interval: str = "interval"):
    """The report's one figure: per suite (one panel each), every candidate's delta on the
    primary metric with its headline interval, the baseline at 0.
    rows: suite, title, candidate, delta, low, high, significant (in the order to draw)."""
    suites = list(rows["suite"].drop_duplicates())
    n = max(1, max(int((rows["suite"] == s).sum()) for s in suites))
    fig, axes = plt.subplots(1, len(suites), figsize=(4.3 * len(suites) + 1.2, 0.27 * n + 1.3), squeeze=False)
    labels = list(rows["candidate"].drop_duplicates())
    for ax, suite in zip(axes[0], suites):
        r = rows[rows["suite"] == suite].set_index("candidate").reindex(labels)
        y = np.arange(len(labels))[::-1]
        d = r["delta"].to_numpy(dtype=float)
        sig = r["significant"].fillna(False).to_numpy(dtype=bool)
        color = np.where(d >= 0, "tab:green", "tab:red")
        ax.hlines(y, r["low"], r["high"], colors=color, lw=2)
        ax.scatter(d[sig], y[sig], c=color[sig], zorder=3, s=22)
        ax.scatter(d[~sig], y[~sig], facecolors="white", edgecolors=color[~sig], zorder=3, s=22)
        ax.axvline(0, color="black", lw=0.9)
        ax.set_title(str(r["title"].dropna().iloc[0]) if r["title"].notna().any() else suite, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.xaxis.set_major_locator(plt.MaxNLocator(5))
        ax.set_yticks(y, labels if ax is axes[0, 0] else [""] * len(labels), fontsize=7)
    fig.suptitle(f"delta vs baseline (0) with the {interval}; filled: significant", fontsize=8)
    fig.subplots_adjust(left=_label_margin(labels, 7, fig.get_figwidth()), right=0.98, top=_top(fig, 0.5),
                        bottom=0.35 / fig.get_figheight(), wspace=0.06)
    return fig, axes


def rliable_plot(agg: pd.DataFrame, prof: pd.DataFrame, pi: pd.DataFrame, steps: pd.DataFrame, title: str = ""):
    """rliable's views of one suite on one metric, one figure: the aggregates (median,
    IQM, mean, optimality gap; top row), the performance profile with its band, the
    probability of improvement over the baseline, and IQM over evaluation steps (bottom).
    agg: policy, aggregate, value, low, high; prof: policy, tau, value, low, high;
    pi: policy, value, low, high (candidates); steps: policy, step, iqm, low, high."""
    pols = list(agg["policy"].drop_duplicates())
    col = _colors(pols)
    names = [("median", "Median"), ("iqm", "IQM"), ("mean", "Mean"), ("optimality_gap", "Optimality gap")]
    fig = plt.figure(figsize=(12.5, 0.22 * len(pols) + 5.2))
    grid = fig.add_gridspec(2, 12, height_ratios=[0.22 * len(pols) + 0.6, 3.2], hspace=0.3, wspace=1.2)
    y = np.arange(len(pols))[::-1]
    axes = []
    for i, (key, label) in enumerate(names):
        ax = fig.add_subplot(grid[0, 3 * i:3 * i + 3])
        r = agg[agg["aggregate"] == key].set_index("policy").reindex(pols)
        ax.hlines(y, r["low"], r["high"], colors=[col[p] for p in pols], lw=4, alpha=0.6)
        ax.scatter(r["value"], y, c="black", s=6, zorder=3)
        ax.set_title(label, fontsize=8)
        ax.set_yticks(y, pols if i == 0 else [""] * len(pols), fontsize=7)
        ax.tick_params(axis="x", labelsize=7)
        ax.xaxis.set_major_locator(plt.MaxNLocator(4))
        axes.append(ax)
    ax = fig.add_subplot(grid[1, 0:4])
    for p, g in prof.groupby("policy", sort=False):
        ax.plot(g["tau"], g["value"], color=col.get(p, "grey"), lw=1.2, label=str(p))
        ax.fill_between(g["tau"], g["low"], g["high"], color=col.get(p, "grey"), alpha=0.15, lw=0)
    ax.set_xlabel("tau", fontsize=7)
    ax.set_title("performance profile: share of runs x tasks > tau", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=6, ncol=2)
    axes.append(ax)
    ax = fig.add_subplot(grid[1, 5:8])  # column 4 left free for its labels
    cands = list(pi["policy"])
    yc = np.arange(len(cands))[::-1]
    ax.hlines(yc, pi["low"], pi["high"], colors=[col.get(p, "grey") for p in cands], lw=4, alpha=0.6)
    ax.scatter(pi["value"], yc, c="black", s=6, zorder=3)
    ax.axvline(0.5, color="grey", lw=0.8, ls=":")
    ax.set_yticks(yc, cands, fontsize=6)
    ax.set_title("P(candidate > baseline)", fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    axes.append(ax)
    ax = fig.add_subplot(grid[1, 8:12])
    for p, g in steps.groupby("policy", sort=False) if not steps.empty else ():
        ax.plot(g["step"], g["iqm"], color=col.get(p, "grey"), lw=1.2, marker="o", ms=2)
        ax.fill_between(g["step"], g["low"], g["high"], color=col.get(p, "grey"), alpha=0.15, lw=0)
    ax.set_xlabel("step", fontsize=7)
    ax.set_title("IQM over evaluation steps", fontsize=8)
    ax.tick_params(labelsize=7)
    axes.append(ax)
    fig.suptitle(f"{title} (bands and bars: 95% crossed-bootstrap intervals, per point)", fontsize=9)
    fig.subplots_adjust(left=_label_margin(pols, 7, 12.5), right=0.98, top=_top(fig, 0.45), bottom=0.08)
    return fig, axes


def sensitivity_plot(rows: pd.DataFrame, axis: str, title: str = "", alpha: float = 0.05):
    """Delta against the baseline (with its interval) as a function of a swept knob, one
    panel per metric. rows: metric, role, axis_value, delta, ci_low, ci_high (the headline
    interval, simultaneous at 1 - alpha), p_holm, p_maxt (in the order to draw; a point is
    filled when its own adjusted p, p_holm on the primary, p_maxt on a secondary, is below
    alpha); numeric knob values on a numeric axis, others as categories."""
    metrics = list(rows["metric"].drop_duplicates())
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.2 * len(metrics) + 0.8, 3.4), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        r = rows[rows["metric"] == metric]
        x = pd.to_numeric(r["axis_value"], errors="coerce")
        numeric = bool(x.notna().all())
        xs = x.to_numpy(dtype=float) if numeric else np.arange(len(r), dtype=float)
        d = r["delta"].to_numpy(dtype=float)
        err = np.vstack([d - r["ci_low"].to_numpy(dtype=float), r["ci_high"].to_numpy(dtype=float) - d])
        sig = np.array([adjusted_p(row) < alpha for _, row in r.iterrows()], dtype=bool)
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
    fig.suptitle(f"{title} ({100 * (1 - alpha):.0f}% simultaneous t intervals over seeds; filled: p_holm / p_maxt "
                 f"< {alpha})", fontsize=9)
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


#: the resolution of every figure of a report
DPI = 80


def save(fig, path) -> None:
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def png_bytes(fig) -> bytes:
    """The bytes `save` writes to a .png path (the same call, into memory); leaves ``fig`` open."""
    buf = io.BytesIO()
    fig.savefig(buf, dpi=DPI, format="png")
    return buf.getvalue()


def close(fig) -> None:
    plt.close(fig)


def share_panels(panels: dict, title: str = ""):
    """One `share_heatmap` panel per entry of ``panels`` (panel title -> (share, marks), the
    same rows and columns in each; `hb stress`: one per axis), two panels a row, one colour
    scale; returns fig, axes."""
    names = list(panels)
    rows, cols = panels[names[0]][0].shape
    ncols = min(2, len(names))
    nrows = -(-len(names) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(ncols * (1.6 + 0.62 * cols), nrows * (1.2 + 0.3 * rows)),
                             squeeze=False)
    cmap = plt.get_cmap("RdBu").with_extremes(bad="#dddddd")
    image = None
    for k, ax in enumerate(axes.flat):
        if k >= len(names):
            ax.axis("off")
            continue
        share, marks = panels[names[k]]
        values = share.to_numpy(dtype=float)
        image = ax.imshow(np.ma.masked_invalid(np.clip(values, -1.0, 1.0)), cmap=cmap, vmin=-1.0, vmax=1.0,
                          aspect="auto")
        for i in range(values.shape[0]):
            for j in range(values.shape[1]):
                if np.isfinite(values[i, j]):
                    star = "*" if bool(marks.iat[i, j]) else ""
                    ax.text(j, i, f"{values[i, j]:.2f}{star}", ha="center", va="center", fontsize=6,
                            color="white" if abs(np.clip(values[i, j], -1, 1)) > 0.6 else "black")
        ax.set_xticks(range(values.shape[1]), [str(c) for c in share.columns], rotation=45, ha="right", fontsize=7)
        ax.set_yticks(range(values.shape[0]), [str(r) if k % ncols == 0 else "" for r in share.index], fontsize=7)
        ax.set_title(names[k], fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0.0, 0.0, 0.95, 1.0))       # the colour scale's strip on the right
    if image is not None:
        fig.colorbar(image, cax=fig.add_axes((0.955, 0.2, 0.012, 0.6)))
    return fig, axes


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
