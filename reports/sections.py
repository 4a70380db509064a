"""The collapsible groups of index.html below its first screen (`reports.render`), laid out
with the page toolkit (`reports.page`): per
suite every metric's paired table, rliable's views, categories, seeds, flips and GEE; then
sensitivity, training diagnostics and the reference groups (how to read, the plain-text
headline, provenance, the rliable export). Formatting only."""
from __future__ import annotations

import re

import pandas as pd

from reports import figures, rliable_views, text
from reports.page import EXPORT_DIR, Doc, export_stem
from reports.text import fmt_mde, verdict

#: the paired columns shown in the page, in this order where present (paired.csv has them all)
SHOWN = ["metric", "candidate", "candidate_value", "baseline_value", "delta", "ci_low", "ci_high", "boot_low",
         "boot_high", "p_seed", "p_holm", "p_maxt", "p_seed_t", "p_seed_wilcoxon", "seeds_up", "seeds_down", "mde",
         "seeds_needed", "p_task_permutation", "wins", "ties", "losses"]


def suite(doc: Doc, result, name: str) -> None:
    t = result.tables
    summ = t["summary"][t["summary"]["suite"] == name] if not t["summary"].empty else pd.DataFrame()
    if summ.empty:
        return
    paired = t["paired"][t["paired"]["suite"] == name]
    n_t, n_s = int(summ["n_tasks"].iloc[0]), int(summ["n_seeds"].iloc[0])
    doc.h(2, f"Suite {name}: {n_t} tasks x {n_s} seeds, {result.suites[name]} attempt(s)")
    alpha = result.config["alpha"]
    if not paired.empty:
        with doc.details("Every metric: paired tests against the baseline (one row per candidate and metric)"):
            shown = paired[[c for c in SHOWN if c in paired.columns]]
            shown = shown.assign(mde=paired["mde"].map(fmt_mde),
                                 seeds_needed=paired["seeds_needed"].map(text.fmt_seeds),
                                 verdict=[verdict(r, alpha) for _, r in paired.iterrows()])
            pct = f"{100 * (1 - alpha):.0f}%"
            shown = shown.rename(columns={"ci_low": f"{pct} simult. low", "ci_high": f"{pct} simult. high",
                                          "boot_low": f"boot {pct} low", "boot_high": f"boot {pct} high"})
            doc.table(shown, max_rows=200, keys=2)
            doc.p(f"{pct} simult. low/high (ci_low/ci_high in paired.csv): the t interval over seeds, "
                  f"{text.interval_label(alpha)} over the row's family (the primary metric: every candidate x "
                  "suite, Holm's; a secondary: the candidate's metrics, max-T's), i.e. each row alone at "
                  f"1 - {alpha} / family (ci_level); boot {pct} low/high: the crossed bootstrap (new tasks and new "
                  "runs), per row, unadjusted. Each row's verdict reads its own test: p_holm on the primary metric, "
                  "p_maxt (max-T over the candidate's metrics) on the others. p_seed / p_seed_t / p_seed_wilcoxon: "
                  "sign-flip, paired t and Wilcoxon tests over seeds; p_task_permutation: over tasks, conditional "
                  "on these trained models (all columns in paired.csv).")
    with doc.details("rliable's views: median, IQM, mean, optimality gap, performance profile, "
                     "P(improvement), IQM over steps"):
        _rliable(doc, result, name, summ)
    with doc.details("Values of every policy and metric (crossed-bootstrap intervals, IQM, P(improvement))"):
        doc.table(summ.drop(columns=["suite", "is_baseline"]), max_rows=200, keys=2)
        _passk(doc, summ, name)
        cv = t.get("category_values", pd.DataFrame())
        if not cv.empty and (cv["suite"] == name).any():
            doc.h(4, "Values per category (mean over seeds and the category's tasks)")
            sub = cv[cv["suite"] == name]
            wide = sub.pivot_table(index=["metric", "category", "n_tasks"], columns="policy", values="value",
                                   sort=False)
            doc.table(wide.reset_index(), max_rows=80, keys=3)
        _scatter(doc, result, name)
    _categories(doc, result, name)
    _per_seed(doc, result, name)
    _flips(doc, result, name)
    gee = t["gee"]
    if not gee.empty and (gee["suite"] == name).any():
        with doc.details("Model-based check: GEE logistic, success ~ policy, clustered by seed"):
            doc.table(gee[gee["suite"] == name].drop(columns=["suite"]))


def _rliable(doc: Doc, result, name: str, summ: pd.DataFrame) -> None:
    t = result.tables
    agg = t.get("aggregates", pd.DataFrame())
    agg = agg[agg["suite"] == name] if not agg.empty else agg
    if agg.empty:
        doc.p("(no data)")
        return
    metric = agg["metric"].iloc[0]
    prof = t["profiles"][t["profiles"]["suite"] == name]
    steps = t["iqm_steps"]
    steps = steps[steps["suite"] == name] if not steps.empty else steps
    cand = summ[(summ["metric"] == metric) & ~summ["is_baseline"].astype(bool)]
    pi = pd.DataFrame({"policy": cand["policy"], "value": cand["prob_improvement"], "low": cand["pi_low"],
                       "high": cand["pi_high"]})
    doc.figure(f"rliable_{name}", figures.rliable_plot(agg, prof, pi, steps, f"{name}: {metric}"))
    wide = agg.assign(cell=[f"{v:.3f} [{a:.3f}, {b:.3f}]" for v, a, b in zip(agg["value"], agg["low"], agg["high"])])
    wide = wide.pivot(index="policy", columns="aggregate", values="cell")
    doc.table(wide[["median", "iqm", "mean", "optimality_gap"]].reset_index(), keys=1)
    reps = min(result.config["resamples"], rliable_views.VIEW_RESAMPLES)
    doc.p(f"{metric}, as rliable defines them: median of the per-task means, IQM = 25% trimmed mean over every "
          f"run x task, optimality gap = 1 - mean of min(score, 1), performance profile = share of runs x tasks "
          f"above tau, P(candidate > baseline) = per task the chance that a run of the candidate beats a run of "
          f"the baseline, averaged over tasks. Intervals: crossed bootstrap (new tasks and new runs; median, "
          f"profile and steps: {reps} resamples of their own; mean, IQM, P: the summary's). The (runs x tasks) "
          f"matrices of every metric are in {EXPORT_DIR}/ (see 'rliable export' below).", "meta")


def _passk(doc: Doc, summ: pd.DataFrame, name: str) -> None:
    rows = []
    for _, r in summ.iterrows():
        m = re.fullmatch(r"pass([@^])(\d+)", r["metric"])
        if m:
            kinds = ["pass@k", "pass^k"] if m.group(2) == "1" else ["pass@k" if m.group(1) == "@" else "pass^k"]
            rows += [{"policy": r["policy"], "kind": kind, "k": int(m.group(2)), "value": r["value"]} for kind in kinds]
    curves = pd.DataFrame(rows)
    if not curves.empty and curves["k"].nunique() > 1:
        doc.figure(f"passk_{name}", figures.passk_plot(curves, f"{name}: pass@k and pass^k against k"))


def _scatter(doc: Doc, result, name: str) -> None:
    per_task, base = result.tables["per_task"], result.config["baseline"]
    sub = per_task[(per_task["suite"] == name) & (per_task["metric"] == "score")]
    if sub.empty:
        return
    wide = sub.pivot(index="task", columns="policy", values="value")
    pairs = {c: (wide[base].to_numpy(), wide[c].to_numpy()) for c in wide.columns if c != base}
    if pairs:
        doc.figure(f"scatter_{name}", figures.paired_scatter(pairs, base, "score", f"{name}: per-task score"))


def _categories(doc: Doc, result, name: str) -> None:
    cats = result.tables["categories"]
    if cats.empty or not (cats["suite"] == name).any():
        return
    sub = cats[cats["suite"] == name]
    alpha = result.config["alpha"]
    flagged = sub[sub["regresses"].astype(bool)] if "regresses" in sub else sub.iloc[:0]
    with doc.details(f"Per category: which categories regressed ({len(flagged)} flagged)"):
        metric = result.view_metric(name)
        prim = sub[sub["metric"] == metric]
        mark = prim["regresses"].astype(bool) if "regresses" in prim else pd.Series(False, index=prim.index)
        prim = prim.assign(cell=[f"{d:+.3f}{' (regresses)' if m else ''}" for d, m in zip(prim["delta"], mark)],
                           category=[f"{c} ({n})" for c, n in zip(prim["category"], prim["n_tasks"])])
        doc.p(f"delta per category on {metric} (candidate - baseline; tasks in brackets):")
        doc.table(prim.pivot(index="category", columns="candidate", values="cell").reset_index(), keys=1)
        if flagged.empty:
            doc.p(f"No category regresses significantly (negative delta with a seed-level test, BH-adjusted across "
                  f"categories, p < {alpha}); "
                  "the worst category of each candidate and metric is marked in the table.")
        for _, r in flagged.iterrows():
            doc.p(f"{r['candidate']} regresses on {r['category']} ({r['metric']}): delta {r['delta']:+.3f} "
                  f"({100 * (1 - alpha):.0f}% crossed-bootstrap interval over tasks and seeds, unadjusted, "
                  f"[{r['boot_low']:+.3f}, {r['boot_high']:+.3f}]), seed-level BH p {r['p_bh']:.3g}",
                  "note")
        doc.table(sub.drop(columns=["suite", "baseline"]), max_rows=80, keys=3)


def _per_seed(doc: Doc, result, name: str) -> None:
    ps = result.tables["per_seed"]
    if ps.empty or not (ps["suite"] == name).any():
        return
    sub = ps[ps["suite"] == name]
    with doc.details("Per seed: the delta of each seed (is the sign stable across seeds?)"):
        wide = sub.pivot_table(index=["metric", "candidate"], columns="seed", values="delta", sort=False)
        wide.columns = [f"seed {c}" for c in wide.columns]
        doc.table(wide.reset_index(), max_rows=80, keys=2)
        mc = sub[sub["mcnemar_p"].notna()]
        if not mc.empty:
            doc.h(4, "Per seed: exact McNemar p (mid-p) on the binary per-task outcome")
            mc = mc.assign(cell=[f"{p:.3g} ({m:.3g}) {a}:{b}" for p, m, a, b in
                                 zip(mc["mcnemar_p"], mc["mcnemar_mid_p"], mc["n10"], mc["n01"])])
            wide = mc.pivot(index=["metric", "candidate"], columns="seed", values="cell")
            wide.columns = [f"seed {c}" for c in wide.columns]
            doc.p("cell = exact p (mid-p) candidate-only:baseline-only discordant tasks")
            doc.table(wide.reset_index(), max_rows=80, keys=2)


def swap_note(r) -> str | None:
    """What the pass counts alone hide, when tasks were both gained and lost."""
    if not (r["gained"] and r["lost"]):
        return None
    head = f"{r['candidate']} {r['metric']}: {r['baseline_passed']} -> {r['candidate_passed']} tasks passed"
    if r["baseline_passed"] == r["candidate_passed"]:
        return f"{head}, but {r['gained']} gained and {r['lost']} lost: equal counts hide a swap of tasks."
    return f"{head}: the net change of {r['candidate_passed'] - r['baseline_passed']:+d} is {r['gained']} gained " \
           f"minus {r['lost']} lost."


def _flips(doc: Doc, result, name: str) -> None:
    counts, flips = result.tables["flip_counts"], result.tables["flips"]
    if counts.empty or not (counts["suite"] == name).any():
        return
    sub = counts[counts["suite"] == name]
    with doc.details("Which tasks flipped (seed-majority outcome)"):
        for _, r in sub.iterrows():
            note = swap_note(r)
            if note:
                doc.p(note)
        doc.table(sub.drop(columns=["suite", "baseline"]), max_rows=80, keys=2)
        if not flips.empty:
            doc.table(flips[flips["suite"] == name].drop(columns=["suite", "baseline"]), max_rows=40)


def sensitivity(doc: Doc, result) -> None:
    sens = result.tables.get("sensitivity", pd.DataFrame())
    axis = result.config.get("axis")
    if not axis:
        return
    with doc.details(f"Sensitivity: delta against {result.config['baseline']} as a function of {axis}", 2):
        if sens.empty:
            doc.p(f"No candidate carries a value of {axis}.", "note")
            return
        doc.table(sens.drop(columns=["axis", "baseline"]), max_rows=120, keys=3)
        for suite_name, g in sens.groupby("suite", sort=True):
            doc.figure(f"sensitivity_{suite_name}", figures.sensitivity_plot(
                g, axis, f"{suite_name}: delta vs {axis}", alpha=result.config["alpha"]))


def diagnostics(doc: Doc, result) -> None:
    d = result.diag
    with doc.details("Training diagnostics and cost", 2):
        if not d.cost.empty:
            doc.h(4, "What it cost (sum over each run; mean and sd over seeds)")
            doc.table(d.cost.pivot(index="policy", columns="quantity", values="mean").reset_index(), keys=1)
            shown = d.cost.groupby("quantity")["mean"].transform(lambda v: bool((v != 0).any()))
            doc.figure("cost", figures.facet_bars(d.cost[shown.astype(bool)], "quantity", "policy", "mean", "sd",
                                                  "cost per run (mean ± sd over seeds)"))
        if not d.spearman.empty and d.spearman["rho"].notna().any():
            doc.h(4, "Are learnability and transfer distinct signals? (Spearman per run)")
            doc.table(d.spearman.groupby("policy")["rho"].agg(["median", "min", "max", "count"]).reset_index())
            high = int((d.spearman["rho"].abs() > 0.7).sum())
            doc.p(f"{high} of {int(d.spearman['rho'].notna().sum())} runs have |rho| > 0.7 (signals largely "
                  "redundant there); small |rho| supports the claim that L and T carry distinct information.")
            doc.figure("spearman", figures.strip_plot(d.spearman, "policy", "rho", "Spearman(L, T) per run", "rho", 0.0))
        _traces(doc, d)
        for line in d.notes:
            doc.p(line, "note")


def _traces(doc: Doc, d) -> None:
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


RLIABLE_HOWTO = """# in a venv of its own (rliable 1.2 pulls arch 7.2, which fails under pandas 3.1):
#   python -m venv /tmp/rly && /tmp/rly/bin/pip install rliable "pandas<3"
import numpy as np
from rliable import library as rly, metrics
scores = dict(np.load("{file}"))            # {{policy: (runs, tasks)}}
agg = lambda x: np.array([metrics.aggregate_median(x), metrics.aggregate_iqm(x),
                          metrics.aggregate_mean(x), metrics.aggregate_optimality_gap(x)])
point, ci = rly.get_interval_estimates(scores, agg, reps=2000)
pairs = {{f"{{p}},{base}": (scores[p], scores["{base}"]) for p in scores if p != "{base}"}}
p_imp, p_ci = rly.get_interval_estimates(pairs, metrics.probability_of_improvement, reps=2000)"""


def reference(doc: Doc, result) -> None:
    """How to read the report, the plain-text headline, the export, provenance."""
    import json

    with doc.details("How to read this report", 2):
        doc.p(text.LEGEND)
        doc.p("Why the seed is the unit: every task of one training run shares that run's luck (the model it "
              "trained), so tasks are not independent replications of a training method. p_seed and p_holm "
              "test the per-seed paired difference over seeds; the task-level tests (p_task_*) answer 'on these "
              "tasks, for these trained models' and are shown for that question only. `hb calibrate` measures "
              "each test's false-positive rate on A/A comparisons.")
    with doc.details("The headline as printed on stdout", 2):
        doc.pre(text.headline_table(result))
    views = result.views
    if views is not None and views.matrices:
        with doc.details(f"rliable export: the (runs x tasks) score matrices in {EXPORT_DIR}/", 2):
            first = next(iter(views.matrices))
            doc.p(f"{EXPORT_DIR}/<suite>__<metric>.npz holds {{policy: array (runs, tasks)}} (rows: seeds, "
                  f"columns: tasks, in the order of {EXPORT_DIR}/index.json), the input form of rliable's "
                  "functions; <suite>__<metric>__steps.npz holds (runs, tasks, steps) for the IQM over steps.")
            doc.pre(RLIABLE_HOWTO.format(file=f"{EXPORT_DIR}/{export_stem(*first)}.npz",
                                         base=result.config["baseline"]))
    with doc.details("Provenance", 2):
        cfg = {k: v for k, v in result.config.items() if k != "runs"}
        doc.pre(json.dumps(cfg, default=str))
        runs = pd.DataFrame([{"run_id": k, **v} for k, v in result.config["runs"]["runs"].items()])
        doc.p(f"{len(runs)} runs in the final evaluation (runs hash {result.config['runs']['hash']}):")
        doc.table(runs, max_rows=400)

