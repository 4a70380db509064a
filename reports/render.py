"""Lay out a finished ReportResult: CSVs, PNG figures, the rliable export, a self-contained
index.html (figures embedded as base64 PNG) and report.md. Nothing is computed here except
formatting and the selection of rows to show.

One screen first: the top of index.html is one sentence per suite (`text.suite_sentences`),
the conclusion, one figure (per suite, each
candidate's delta on its headline metric, `ReportResult.headline`, with its headline
interval, the baseline at 0)
and one compact table (the same rows); everything else follows in collapsible groups
(`<details>`), laid out by `reports.sections`; the page toolkit (`Doc`, tables, CSS) is
`reports.page`.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from hbsim.contract import REPORT_INDEX, REPORT_MARKDOWN
from hbsim.contract.atomic import atomic_write
from hbsim.contract.folders import written_files
from reports import figures, gap, rliable_views, sections, text
from reports.page import CSS, EXPORT_DIR, Doc, export_stem
from reports.text import fmt_mde, verdict

# ------------------------------------------------------------------ paired columns

def interval_columns(paired: pd.DataFrame, level: float) -> tuple[str, str, str]:
    """(low, high, label) of the headline interval's columns, looked up here only (no
    maths: the intervals are `reports.readings.intervals`'): the t interval over seeds (ci_low,
    ci_high) where paired.csv has it, else the crossed bootstrap; ``level``: the coverage
    the label states (1 - alpha)."""
    pct = f"{100 * level:.0f}%"
    if {"ci_low", "ci_high"} <= set(paired.columns):
        return "ci_low", "ci_high", f"{text.interval_label(1 - level)} CI"
    return "boot_low", "boot_high", f"{pct} crossed-bootstrap CI"


def headline_rows(result) -> pd.DataFrame:
    """The paired rows of each suite's headline metric (``result.headline``); a suite without
    one has no row."""
    paired = result.tables["paired"]
    if paired.empty:
        return paired
    keep = [g[g["metric"] == result.headline.get(s)] for s, g in paired.groupby("suite", sort=True)]
    return pd.concat(keep, ignore_index=True)


def headline_table(result) -> pd.DataFrame:
    """The compact table under the figure: one row per suite x candidate, primary metric;
    the values are the pair's own (the seeds and tasks of its delta)."""
    rows = headline_rows(result)
    alpha = result.config["alpha"]
    lo, hi, label = interval_columns(result.tables["paired"], 1 - alpha)
    return pd.DataFrame({
        "suite": rows["suite"], "metric": rows["metric"], "candidate": rows["candidate"],
        "seeds": rows["n_seeds"].astype(int).astype(str), "candidate value": rows["candidate_value"],
        "baseline value": rows["baseline_value"], "delta": rows["delta"],
        label: [f"[{a:+.3f}, {b:+.3f}]" if np.isfinite(a) else "n/a" for a, b in zip(rows[lo], rows[hi])],
        "p_holm": rows["p_holm"], "seeds +/-": [f"{int(u)}/{int(d)}" for u, d in zip(rows["seeds_up"],
                                                                                rows["seeds_down"])],
        "MDE": rows["mde"].map(fmt_mde), "verdict": [verdict(r, alpha) for _, r in rows.iterrows()]})


def _headline(doc: Doc, result) -> None:
    """The top of the page: one sentence per suite, the conclusion, the one figure, the compact table."""
    cfg = result.config
    cands = [p for p in result.policies if p != cfg["baseline"]]
    doc.h(1, f"{len(cands)} candidate(s) against the baseline {cfg['baseline']}")
    for line in text.suite_sentences(result):      # the answer first, one plain sentence per suite
        doc.p(line, "lead")
    doc.p(text.conclusion(result), "conclusion")
    rows = headline_rows(result)
    budget = cfg.get("budget")
    if not rows.empty:
        lo, hi, label = interval_columns(result.tables["paired"], 1 - cfg["alpha"])
        titles = {s: f"{s}: {g['metric'].iloc[0]}, {int(g['n_seeds'].max())} seeds x {int(g['n_tasks'].max())} tasks"
                  for s, g in rows.groupby("suite")}
        fig_rows = pd.DataFrame({"suite": rows["suite"], "title": rows["suite"].map(titles),
                                 "candidate": rows["candidate"], "delta": rows["delta"], "low": rows[lo],
                                 "high": rows[hi], "significant": rows["p_holm"] < cfg["alpha"]})
        at = f"; at {budget['unit']} = {budget['at']:g}" if budget else ""
        doc.figure("headline", figures.headline_plot(fig_rows, f"{label} (p_holm < {cfg['alpha']}){at}"))
        doc.table(headline_table(result), max_rows=200, keys=3)
        doc.p(f"delta = candidate - baseline on the seeds and tasks both have; {label}: "
              + ("t interval over the per-seed differences, simultaneous over the family of p_holm (each row "
                 "alone: level 1 - alpha / family, ci_level in paired.csv)" if lo == "ci_low" else
                 "crossed bootstrap over tasks and seeds")
              + "; p_holm: seed-level sign-flip test, Holm-adjusted; seeds +/-: seeds where the candidate is "
                "ahead / behind; MDE: smallest true delta detectable with power 0.8 at these seeds. Every "
                "metric and column: the groups below and paired.csv.", "meta")
    gap.headline(doc, result)      # the share of the achievable gain, where the runs have the references
    doc.p(f"Source: {cfg['source']}. Policies: {', '.join(result.policies)}. Bootstrap: {cfg['resamples']} "
          f"crossed task x seed resamples (generator seed {cfg['seed']}), alpha = {cfg['alpha']}. "
          f"Runs hash {cfg['runs']['hash']}.", "meta")
    if "validity" in result.files:
        doc.md.append("Signal validity (what-if probes, `--counterfactual`): [validity.html](validity.html)\n")
        doc.html.append('<p class="meta">Signal validity (what-if probes, <code>--counterfactual</code>): '
                        '<a href="validity.html">validity.html</a></p>')
    if cfg.get("tuning"):
        doc.p("Tuned designs (DIR/tune.json): each design was tested with the setting it chose on tuning seeds "
              "that the test seeds never include.", "meta")
        doc.pre("\n".join(cfg["tuning"]))
    if budget:
        _budget(doc, result, budget)
    if result.notes:
        with doc.details(f"Warnings and exclusions ({len(result.notes)})", 2):
            for line in result.notes:
                doc.p(line, "note")


def _budget(doc: Doc, result, budget: dict) -> None:
    """A budget report's group: the cost each design's runs were read at, the ranking check."""
    with doc.details(f"Equal cost: every run at {budget['unit']} = {budget['at']:g} (budget report)", 2):
        doc.pre("\n".join(budget["lines"]))
        doc.p("cost_read: the cost each run is compared at (budget.csv); cost_above: its first evaluation at or "
              "past the milestone, cost_below: the last one below it, weight: the share of the upper evaluation in "
              "the interpolation. A ranking 'changes' only when a swapped pair passes the seed-level sign-flip "
              "test of its difference at equal steps minus at equal cost (Holm over the suite's swapped pairs; "
              "ranking.csv).", "meta")
        doc.table(result.tables["budget"].drop(columns=["unit", "milestone"]), max_rows=400, keys=2)


# ------------------------------------------------------------------------ writing

def write(result, out: Path, jobs: int = 1) -> None:
    """Write CSVs, figures, the rliable export, report.md and index.html into ``out``
    (files replaced atomically, created with the user's umask: `hbsim.contract.atomic.atomic_write`)."""
    out.mkdir(parents=True, exist_ok=True)
    fig_dir = out / "figures"
    fig_dir.mkdir(exist_ok=True)
    for name, df in result.tables.items():
        atomic_write(out / f"{name}.csv", df.to_csv(index=False))
        result.files[name] = out / f"{name}.csv"
    _export(result, out / EXPORT_DIR)
    doc = Doc(fig_dir, jobs)
    _headline(doc, result)
    for suite in sorted(result.suites):
        sections.suite(doc, result, suite)
    sections.sensitivity(doc, result)
    gap.section(doc, result)
    sections.diagnostics(doc, result)
    sections.reference(doc, result)
    body = doc.body_html()  # renders and writes the figures first
    atomic_write(out / REPORT_MARKDOWN, "\n".join(doc.md))
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>harnessbandit report</title>"
            f"<style>{CSS}</style></head><body>{body}</body></html>")
    atomic_write(out / REPORT_INDEX, page)
    atomic_write(out / "config.json", json.dumps(result.config, indent=1, default=str))
    result.files.update({"index": out / REPORT_INDEX, "markdown": out / REPORT_MARKDOWN})
    result.files.update({f"fig:{k}": v for k, v in doc.figs.items()})
    for stale in {p for p in written_files(out) if p.parent == fig_dir} - set(doc.figs.values()):
        stale.unlink()  # figures an earlier report wrote here (its marker lists them); the user's stay
    result.out = out


def _export(result, folder: Path) -> None:
    """rliable's input form: one .npz per suite x metric, {policy: (runs, tasks)}."""
    if result.views is None or not result.views.matrices:
        return
    folder.mkdir(exist_ok=True)
    files = rliable_views.export_files(result.views, export_stem)
    for name, data in files.items():
        atomic_write(folder / name, data)
    for stale in {p for p in written_files(folder.parent) if p.parent == folder} - {folder / n for n in files}:
        stale.unlink()  # matrices an earlier report wrote here (its marker lists them); the user's stay
    result.files["rliable"] = folder
