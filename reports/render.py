"""Lay out a finished ReportResult: CSVs, PNG figures, a self-contained index.html
(figures embedded as base64 PNG) and report.md. Nothing is computed here except
formatting and the selection of rows to show."""
from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from hbsim.contract import REPORT_INDEX, REPORT_MARKDOWN
from hbsim.folders import atomic_write, written_files
from reports import figures, text

CSS = ("body{font-family:sans-serif;max-width:1100px;margin:auto;padding:1em;color:#222}"
       "table{border-collapse:collapse;font-size:12px;margin:.5em 0}td,th{border:1px solid #ccc;"
       "padding:2px 6px;text-align:right}th{background:#eee}pre{background:#f6f6f6;padding:.5em;"
       "font-size:12px;overflow-x:auto}img{max-width:100%;display:block;margin:.5em 0}.note{color:#a33}")


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text.replace("@", "_at").replace("^", "_hat")).strip("_")


def _is_p(column) -> bool:
    c = str(column)
    return c == "p" or c.startswith("p_") or c.endswith("_p") or c == "mcnemar_mid_p"


def _fmt(v, p_value: bool = False) -> str:
    """One format for every table: p-values as `text.fmt_p`, other floats with 3 decimals."""
    if v is pd.NA or v is None:
        return ""
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else ""
    if isinstance(v, (float, np.floating)):
        if not np.isfinite(v):
            return "" if np.isnan(v) else str(v)
        return text.fmt_p(v) if p_value else f"{v:.3f}"
    return str(v)


def _rows(df: pd.DataFrame):
    flags = [_is_p(c) for c in df.columns]
    for row in df.itertuples(index=False):
        yield [_fmt(v, f) for v, f in zip(row, flags)]


def md_table(df: pd.DataFrame, max_rows: int = 60) -> str:
    if df.empty:
        return "_(none)_\n"
    df = df.head(max_rows)
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(row) + " |" for row in _rows(df)]
    return "\n".join(lines) + "\n"


def html_table(df: pd.DataFrame, max_rows: int = 60) -> str:
    if df.empty:
        return "<p><i>(none)</i></p>"
    df = df.head(max_rows)
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>" for row in _rows(df))
    return f"<div style='overflow-x:auto'><table><tr>{head}</tr>{body}</table></div>"


class Doc:
    """Accumulates the same content as Markdown and HTML."""

    def __init__(self, fig_dir: Path):
        self.md, self.html, self.fig_dir, self.figs = [], [], fig_dir, {}

    def h(self, level: int, text: str):
        self.md.append(f"{'#' * level} {text}\n")
        self.html.append(f"<h{level}>{html.escape(text)}</h{level}>")

    def p(self, text: str, cls: str = ""):
        self.md.append(text + "\n")
        attr = f' class="{cls}"' if cls else ""
        self.html.append(f"<p{attr}>{html.escape(text)}</p>")

    def pre(self, text: str):
        self.md.append("```\n" + text.rstrip() + "\n```\n")
        self.html.append(f"<pre>{html.escape(text)}</pre>")

    def table(self, df: pd.DataFrame, max_rows: int = 60):
        self.md.append(md_table(df, max_rows))
        self.html.append(html_table(df, max_rows))
        if len(df) > max_rows:
            self.p(f"({len(df) - max_rows} more rows in the CSV)")

    def figure(self, name: str, fig_ax):
        path = self.fig_dir / f"{slug(name)}.png"
        atomic_write(path, lambda tmp: figures.save(fig_ax[0], tmp))
        self.figs[name] = path
        data = base64.b64encode(path.read_bytes()).decode()
        self.md.append(f"![{name}](figures/{path.name})\n")
        self.html.append(f'<img alt="{html.escape(name)}" src="data:image/png;base64,{data}">')


def write(result, out: Path) -> None:
    """Write CSVs, figures, report.md and index.html into ``out`` (files replaced atomically,
    created with the user's umask: `hbsim.folders.atomic_write`)."""
    out.mkdir(parents=True, exist_ok=True)
    fig_dir = out / "figures"
    fig_dir.mkdir(exist_ok=True)
    for name, df in result.tables.items():
        atomic_write(out / f"{name}.csv", df.to_csv(index=False))
        result.files[name] = out / f"{name}.csv"
    doc = Doc(fig_dir)
    _header(doc, result, text.headline_table(result))
    for suite in sorted(result.suites):
        _suite_section(doc, result, suite)
    _sensitivity(doc, result)
    _diagnostics_section(doc, result)
    doc.h(2, "Provenance")
    cfg = {k: v for k, v in result.config.items() if k != "runs"}
    doc.pre(json.dumps(cfg, default=str))
    runs = pd.DataFrame([{"run_id": k, **v} for k, v in result.config["runs"]["runs"].items()])
    doc.p(f"{len(runs)} runs in the final evaluation (runs hash {result.config['runs']['hash']}):")
    doc.table(runs, max_rows=400)
    atomic_write(out / REPORT_MARKDOWN, "\n".join(doc.md))
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>harnessbandit report</title>"
            f"<style>{CSS}</style></head><body>{''.join(doc.html)}</body></html>")
    atomic_write(out / REPORT_INDEX, page)
    atomic_write(out / "config.json", json.dumps(result.config, indent=1, default=str))
    result.files.update({"index": out / REPORT_INDEX, "markdown": out / REPORT_MARKDOWN})
    result.files.update({f"fig:{k}": v for k, v in doc.figs.items()})
    for stale in {p for p in written_files(out) if p.parent == fig_dir} - set(doc.figs.values()):
        stale.unlink()  # figures an earlier report wrote here (its marker lists them); the user's stay
    result.out = out


def _header(doc: Doc, result, headline: str) -> None:
    cfg = result.config
    doc.h(1, f"Paired report against baseline {cfg['baseline']}")
    doc.p(f"Source: {cfg['source']}. Policies: {', '.join(result.policies)}. Bootstrap: {cfg['resamples']} "
          f"crossed task x seed resamples (generator seed {cfg['seed']}), alpha = {cfg['alpha']}. "
          f"Runs hash {cfg['runs']['hash']}.")
    doc.p(text.conclusion(result))
    doc.pre(headline)
    doc.p(text.LEGEND)
    doc.p("Why the seed is the unit: every task of one training run shares that run's luck (the model it "
          "trained), so tasks are not independent replications of a training method. p_seed and p_holm "
          "test the per-seed paired difference over seeds; the task-level tests (p_task_*) answer 'on these "
          "tasks, for these trained models' and are shown for that question only. `hb calibrate` measures "
          "each test's false-positive rate on A/A comparisons.")
    if "validity" in result.files:
        doc.md.append("Signal validity (what-if probes, `--counterfactual`): [validity.html](validity.html)\n")
        doc.html.append('<p>Signal validity (what-if probes, <code>--counterfactual</code>): '
                        '<a href="validity.html">validity.html</a></p>')
    if result.notes:
        doc.h(2, "Warnings and exclusions")
        for line in result.notes:
            doc.p(line, "note")


def _verdict(r, alpha: float) -> str:
    p_adj = r["p_holm"] if r["role"] == "primary" else r["p_maxt"]
    if p_adj < alpha:
        word = "distinguishable from seed noise"
    elif np.isfinite(r["mde"]) and abs(r["delta"]) < r["mde"]:
        word = (f"not distinguishable: |delta| is below the minimum detectable effect {r['mde']:.3f} at "
                f"{int(r['n_seeds'])} seeds")
    elif r["n_seeds"] >= 2 and not np.isfinite(r["mde"]):
        word = (f"not testable at {int(r['n_seeds'])} seeds (design: {text.fmt_seeds(r['seeds_needed'])} seeds "
                f"detect {r['target_delta']:.3f} with power 0.8)")
    else:
        word = "not significant after adjustment"
    return (f"{r['candidate']} on {r['metric']} ({r['role']}): delta {r['delta']:+.3f} "
            f"{text.fmt_ci(r['ci_low'], r['ci_high'])}, p_seed {text.fmt_p(r['p_seed'])}, adjusted "
            f"{text.fmt_p(p_adj)}, ahead on {int(r['seeds_up'])} of {int(r['n_seeds'])} seeds: {word}.")


#: the paired columns shown in the page (paired.csv has them all)
SHOWN = ["metric", "role", "candidate", "delta", "ci_low", "ci_high", "p_seed", "p_holm", "p_maxt", "p_seed_t",
         "p_seed_wilcoxon",
         "seeds_up", "seeds_down", "mde", "target_delta", "seeds_needed", "p_task_permutation", "wins", "ties", "losses"]


def _suite_section(doc: Doc, result, suite: str) -> None:
    t = result.tables
    summ = t["summary"][t["summary"]["suite"] == suite] if not t["summary"].empty else pd.DataFrame()
    if summ.empty:
        return
    paired = t["paired"][t["paired"]["suite"] == suite]
    doc.h(2, f"Suite {suite}")
    doc.h(3, "Is the delta distinguishable from seed noise?")
    for _, r in paired.iterrows():
        doc.p(_verdict(r, result.config["alpha"]))
    doc.table(paired[SHOWN].assign(seeds_needed=paired["seeds_needed"].map(text.fmt_seeds)))
    doc.p("p_seed / p_seed_t / p_seed_wilcoxon: sign-flip, paired t and Wilcoxon tests over seeds; "
          "p_task_permutation: over tasks, conditional on these trained models (all columns in paired.csv).")
    doc.h(3, "Values with crossed-bootstrap intervals")
    doc.table(summ.drop(columns=["suite", "is_baseline"]))
    doc.figure(f"intervals_{suite}", figures.interval_plot(summ, suite))
    cv = result.tables.get("category_values", pd.DataFrame())
    if not cv.empty and (cv["suite"] == suite).any():
        doc.h(3, "Values per category (mean over seeds and the category's tasks)")
        sub = cv[cv["suite"] == suite]
        wide = sub.pivot_table(index=["metric", "category", "n_tasks"], columns="policy", values="value", sort=False)
        doc.table(wide.reset_index(), max_rows=80)
    _forests(doc, result, suite)
    _passk(doc, summ, suite)
    _scatter(doc, result, suite)
    _per_seed(doc, result, suite)
    _flips(doc, result, suite)
    _categories(doc, result, suite)
    gee = t["gee"]
    if not gee.empty and (gee["suite"] == suite).any():
        doc.h(3, "Model-based check: GEE logistic, success ~ policy, clustered by seed")
        doc.table(gee[gee["suite"] == suite].drop(columns=["suite"]))


def _forests(doc: Doc, result, suite: str) -> None:
    paired, cats = result.tables["paired"], result.tables["categories"]
    rows = []
    for metric in paired.loc[paired["suite"] == suite, "metric"].drop_duplicates():
        for _, r in paired[(paired["suite"] == suite) & (paired["metric"] == metric)].iterrows():
            rows.append({"metric": metric, "label": f"{r['candidate']}: all", "delta": r["delta"], "boot_low": r["boot_low"],
                         "boot_high": r["boot_high"], "p": r["p_holm"] if r["role"] == "primary" else r["p_maxt"]})
            if not cats.empty:
                sel = cats[(cats["suite"] == suite) & (cats["metric"] == metric) & (cats["candidate"] == r["candidate"])]
                rows += [{"metric": metric, "label": f"{r['candidate']}: {c['category']} ({c['n_tasks']})", "delta": c["delta"],
                          "boot_low": c["boot_low"], "boot_high": c["boot_high"], "p": c["p_bh"]} for _, c in sel.iterrows()]
    if rows:
        doc.figure(f"forest_{suite}", figures.forest_plot(
            pd.DataFrame(rows), f"{suite}: delta vs baseline (seed-level: all: Holm / max-T; categories: BH)"))


def _passk(doc: Doc, summ: pd.DataFrame, suite: str) -> None:
    rows = []
    for _, r in summ.iterrows():
        m = re.fullmatch(r"pass([@^])(\d+)", r["metric"])
        if m:
            kinds = ["pass@k", "pass^k"] if m.group(2) == "1" else ["pass@k" if m.group(1) == "@" else "pass^k"]
            rows += [{"policy": r["policy"], "kind": kind, "k": int(m.group(2)), "value": r["value"]} for kind in kinds]
    curves = pd.DataFrame(rows)
    if not curves.empty and curves["k"].nunique() > 1:
        doc.figure(f"passk_{suite}", figures.passk_plot(curves, f"{suite}: pass@k and pass^k against k"))


def _scatter(doc: Doc, result, suite: str) -> None:
    per_task, base = result.tables["per_task"], result.config["baseline"]
    sub = per_task[(per_task["suite"] == suite) & (per_task["metric"] == "score")]
    if sub.empty:
        return
    wide = sub.pivot(index="task", columns="policy", values="value")
    pairs = {c: (wide[base].to_numpy(), wide[c].to_numpy()) for c in wide.columns if c != base}
    if pairs:
        doc.figure(f"scatter_{suite}", figures.paired_scatter(pairs, base, "score", f"{suite}: per-task score"))


def _per_seed(doc: Doc, result, suite: str) -> None:
    ps = result.tables["per_seed"]
    if ps.empty:
        return
    sub = ps[ps["suite"] == suite]
    doc.h(3, "Per seed: delta of each seed (is the sign stable across seeds?)")
    wide = sub.pivot_table(index=["metric", "candidate"], columns="seed", values="delta", sort=False)
    wide.columns = [f"seed {c}" for c in wide.columns]
    doc.table(wide.reset_index(), max_rows=80)
    mc = sub[sub["mcnemar_p"].notna()]
    if not mc.empty:
        doc.h(3, "Per seed: exact McNemar p (mid-p) on the binary per-task outcome")
        mc = mc.assign(cell=[f"{p:.3g} ({m:.3g}) {a}:{b}" for p, m, a, b in
                             zip(mc["mcnemar_p"], mc["mcnemar_mid_p"], mc["n10"], mc["n01"])])
        wide = mc.pivot(index=["metric", "candidate"], columns="seed", values="cell")
        wide.columns = [f"seed {c}" for c in wide.columns]
        doc.p("cell = exact p (mid-p) candidate-only:baseline-only discordant tasks")
        doc.table(wide.reset_index(), max_rows=80)


def _flips(doc: Doc, result, suite: str) -> None:
    counts, flips = result.tables["flip_counts"], result.tables["flips"]
    if counts.empty:
        return
    doc.h(3, "Which tasks flipped (seed-majority outcome)")
    sub = counts[counts["suite"] == suite]
    for _, r in sub.iterrows():
        if r["gained"] and r["lost"]:
            hides = ("equal counts hide a swap of tasks" if r["baseline_passed"] == r["candidate_passed"] else
                     f"the net change of {r['candidate_passed'] - r['baseline_passed']:+d} hides the tasks that moved")
            doc.p(f"{r['candidate']} {r['metric']}: {r['baseline_passed']} -> {r['candidate_passed']} tasks passed, "
                  f"but {r['gained']} gained and {r['lost']} lost: {hides}.")
    doc.table(sub.drop(columns=["suite", "baseline"]))
    if not flips.empty:
        doc.table(flips[flips["suite"] == suite].drop(columns=["suite", "baseline"]), max_rows=40)


def _categories(doc: Doc, result, suite: str) -> None:
    cats = result.tables["categories"]
    if cats.empty:
        return
    sub = cats[cats["suite"] == suite]
    doc.h(3, "Which categories regressed")
    alpha = result.config["alpha"]
    if not sub["regresses"].any():
        doc.p(f"No category regresses significantly (negative delta with the seed-level test's BH-adjusted "
              f"p < {alpha}; the task-level p_task_bh, conditional on these trained models, is in the table); "
              "the worst category of each candidate and metric is marked in the table.")
    for _, r in sub[sub["regresses"]].iterrows():
        doc.p(f"{r['candidate']} regresses on {r['category']} ({r['metric']}): delta {r['delta']:+.3f} "
              f"[{r['boot_low']:+.3f}, {r['boot_high']:+.3f}], seed-level BH p {r['p_bh']:.3g}", "note")
    doc.table(sub.drop(columns=["suite", "baseline"]), max_rows=80)


def _sensitivity(doc: Doc, result) -> None:
    sens = result.tables.get("sensitivity", pd.DataFrame())
    axis = result.config.get("axis")
    if not axis:
        return
    doc.h(2, f"Sensitivity: delta against {result.config['baseline']} as a function of {axis}")
    if sens.empty:
        doc.p(f"No candidate carries a value of {axis}.", "note")
        return
    doc.table(sens.drop(columns=["axis", "baseline"]), max_rows=120)
    for suite, g in sens.groupby("suite", sort=True):
        doc.figure(f"sensitivity_{suite}", figures.sensitivity_plot(g, axis, f"{suite}: delta vs {axis}"))


def _diagnostics_section(doc: Doc, result) -> None:
    d = result.diag
    doc.h(2, "Training diagnostics and cost")
    if not d.cost.empty:
        doc.h(3, "What it cost (sum over each run; mean and sd over seeds)")
        doc.table(d.cost.pivot(index="policy", columns="quantity", values="mean").reset_index())
        shown = d.cost.groupby("quantity")["mean"].transform(lambda v: bool((v != 0).any()))
        doc.figure("cost", figures.facet_bars(d.cost[shown.astype(bool)], "quantity", "policy", "mean", "sd",
                                              "cost per run (mean ± sd over seeds)"))
    if not d.spearman.empty and d.spearman["rho"].notna().any():
        doc.h(3, "Are learnability and transfer distinct signals? (Spearman per run)")
        agg = d.spearman.groupby("policy")["rho"].agg(["median", "min", "max", "count"]).reset_index()
        doc.table(agg)
        high = int((d.spearman["rho"].abs() > 0.7).sum())
        doc.p(f"{high} of {int(d.spearman['rho'].notna().sum())} runs have |rho| > 0.7 (signals largely redundant "
              "there); small |rho| supports the claim that L and T carry distinct information.")
        doc.figure("spearman", figures.strip_plot(d.spearman, "policy", "rho", "Spearman(L, T) per run", "rho", 0.0))
    if not d.selection.empty:
        doc.figure("selection", figures.band_plot(d.selection, "harness", "selection probability", "p", "policy"))
    if not d.visits.empty:
        doc.figure("visits", figures.bar_plot(d.visits, "policy", "harness", "visits", "visits_sd",
                                              "visits per harness (pure steps)"))
    for name, sigs in (("signals_raw", ("learnability", "transfer")), ("signals_norm", ("l_norm", "t_norm"))):
        sub = d.signals[d.signals["signal"].isin(sigs)] if not d.signals.empty else d.signals
        if not sub.empty:
            title = "raw signals" if name == "signals_raw" else "normalised signals"
            doc.figure(name, figures.band_plot(sub, "policy", f"{title} (mean ± sd over seeds)", "value", "signal"))
    if not d.memory.empty:
        doc.figure("memory", figures.band_plot(d.memory, "policy", "memory (mean over harnesses)", "", "quantity"))
    if not d.regret.empty:
        doc.figure("regret", figures.band_plot(d.regret, "policy", "cumulative regret", "regret"))
    if not d.eval_curves.empty:
        doc.figure("eval_curves", figures.band_plot(d.eval_curves, "policy", "eval reward over steps", "reward", "suite"))
    for line in d.notes:
        doc.p(line, "note")
