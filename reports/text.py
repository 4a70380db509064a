"""Plain-text views of a finished ReportResult: the one-paragraph conclusion, the
headline table and the column legend (shared by stdout, report.md and index.html).

Nothing is computed here but formatting; it imports no other reports module, so
`build` and `render` both use it without importing each other.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

#: every column of the headline table, explained once (stdout legend, report header)
LEGEND = ("delta = candidate - baseline (mean over seeds and tasks); boot CI = percentile interval of the "
          "crossed bootstrap (tasks and seeds resampled together); p_seed = sign-flip permutation test over "
          "seeds of the per-seed paired difference d_s (exact for <= 16 seeds), p_holm = p_seed Holm-adjusted "
          "over all candidates x metrics of the suite; seeds +/- = seeds where the candidate is ahead / behind; "
          "MDE = smallest true delta the paired t-test over these seeds detects with power 0.8; "
          "W/T/L = tasks won / tied / lost (seed-averaged, conditional on these trained models).")


def fmt_p(p) -> str:
    """p-values everywhere: 3 decimals, or 2 significant digits in scientific notation below 0.001."""
    if p is None or not np.isfinite(p):
        return "n/a"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def fmt_seeds(n) -> str:
    """seeds_needed: an integer, '>10000' (also for a zero delta), or 'n/a' (no estimate)."""
    if n is None or np.isnan(n):
        return "n/a"
    return ">10000" if n > 10000 else str(int(n))


def _suite_sentence(g: pd.DataFrame, suite: str, base: str, alpha: float) -> str:
    n_tests = len(g)  # Holm runs over every candidate x metric of the suite
    metric = g["metric"].iloc[0]
    g = g[g["metric"] == metric]
    n_s = int(g["n_seeds"].max())
    head = f"at {n_s} seed{'s' if n_s != 1 else ''} on {suite} ({metric})"
    sig = g[g["p_holm"] < alpha].sort_values("delta", ascending=False)
    if len(sig):
        said = "; ".join(f"{r['candidate']} {'beats' if r['delta'] > 0 else 'trails'} {base} by {r['delta']:+.3f} "
                         f"[{r['boot_low']:+.3f}, {r['boot_high']:+.3f}], p_holm = {fmt_p(r['p_holm'])}"
                         for _, r in sig.iterrows())
        rest = len(g) - len(sig)
        text = f"{head}, {said}" + (f"; the other {rest} candidate(s) do not differ detectably" if rest else "")
    else:
        r = g.loc[g["delta"].abs().idxmax()]
        mde = g["mde"].to_numpy(dtype=float)
        mde_text = f"; minimum detectable effect about {np.median(mde):.3f}" if np.isfinite(mde).all() else ""
        text = (f"{head}, no policy differs detectably from {base} (largest |delta|: {r['candidate']} "
                f"{r['delta']:+.3f} [{r['boot_low']:+.3f}, {r['boot_high']:+.3f}], p_holm = {fmt_p(r['p_holm'])}"
                f"{mde_text})")
    floor, m = float(g["p_floor"].iloc[0]), int(n_tests)
    if n_s < 2:
        text += " -- with one seed there is no seed-level test at all"
    elif floor * m >= alpha:
        r = g.loc[g["delta"].abs().idxmax()]
        text += (f" -- with {n_s} seeds the smallest attainable p is {fmt_p(floor)}, too large to pass Holm over "
                 f"{m} comparisons at alpha = {alpha}; at least {_min_seeds(alpha / m)} seeds are needed "
                 f"(the paired t-test over seeds, which assumes normal d_s, gives {r['candidate']} "
                 f"p = {fmt_p(r['p_seed_t'])})")
    return text


def _min_seeds(alpha: float) -> int:
    n = 1
    while 2.0 / 2 ** n >= alpha:
        n += 1
    return n


def conclusion(result) -> str:
    """One paragraph: per suite, which candidates differ from the baseline on the suite's
    first metric by the seed-level test (Holm), with delta, interval and p."""
    paired, cfg = result.tables["paired"], result.config
    base, alpha = cfg["baseline"], cfg["alpha"]
    if paired.empty:
        return f"Conclusion: no candidate could be compared with the baseline {base} (see the warnings)."
    parts = [_suite_sentence(g, s, base, alpha) for s, g in paired.groupby("suite", sort=True)]
    return ("Conclusion (seed-level sign-flip test, Holm-adjusted, alpha = " + f"{alpha}): " + "; ".join(parts)
            + ". Task-level tests are conditional on these trained models (see the tables).")


def headline_table(result) -> str:
    """Plain-text headline: per suite and metric, each policy's value and, for
    candidates, delta vs the baseline with its bootstrap interval, p_seed, Holm p,
    seeds ahead/behind, MDE and task W/T/L."""
    summ, paired = result.tables["summary"], result.tables["paired"]
    if summ.empty:
        return "(no comparable data)"
    base = result.config["baseline"]
    pct = f"{100 * (1 - result.config['alpha']):.0f}% boot CI"
    width = max(12, max(len(p) for p in result.policies) + 2)
    lines = []
    for s, g in summ.groupby("suite", sort=True):
        n_t, n_s = int(g["n_tasks"].iloc[0]), int(g["n_seeds"].iloc[0])
        lines.append(f"suite {s}: {n_t} tasks x {n_s} seeds, {result.suites[s]} attempt(s), baseline {base}")
        lines.append(f"  {'metric':<8} {'policy':<{width}} {'value':>7}  {'delta':>7}  {pct:>18}  {'p_seed':>7}  "
                     f"{'p_holm':>7}  {'seeds +/-':>9}  {'MDE':>6}  {'W/T/L':>11}")
        for metric in g["metric"].drop_duplicates():
            rows = g[g["metric"] == metric]
            for _, r in pd.concat([rows[rows["is_baseline"]], rows[~rows["is_baseline"]]]).iterrows():
                row = f"  {metric:<8} {r['policy']:<{width}} {r['value']:7.3f}"
                p = paired[(paired["suite"] == s) & (paired["metric"] == metric) & (paired["candidate"] == r["policy"])]
                if len(p):
                    q = p.iloc[0]
                    seeds = f"{int(q['seeds_up'])}/{int(q['seeds_down'])}"
                    mde = f"{q['mde']:6.3f}" if np.isfinite(q["mde"]) else f"{'n/a':>6}"
                    row += (f"  {q['delta']:+7.3f}  [{q['boot_low']:+.3f}, {q['boot_high']:+.3f}]  "
                            f"{fmt_p(q['p_seed']):>7}  {fmt_p(q['p_holm']):>7}  {seeds:>9}  {mde}"
                            f"  {int(q['wins']):>3}/{int(q['ties']):>3}/{int(q['losses']):>3}")
                elif r["policy"] == base:
                    row += "  (baseline)"
                lines.append(row)
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
