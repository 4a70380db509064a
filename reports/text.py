"""Plain-text views of a finished ReportResult: one sentence per suite (the first lines of
every view), the one-paragraph conclusion, the headline table and the column legend
(shared by stdout, report.md and index.html).

Nothing is computed here but formatting (and the one-cell verdict of a headline row and
the MDE's format, shared by the first screen and the sections); it imports no other
reports module, so `build`, `render`, `sections` and `page` all use it.
"""
from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd

from hbsim.contract.labels import parse_label
from policies import POLICIES

#: every column of the headline table, explained once (stdout legend, report header)
LEGEND = ("The primary metric (--primary) is the headline: p_seed = sign-flip permutation test over seeds of the "
          "per-seed paired difference d_s (exact for <= 16 seeds), p_adj = p_seed Holm-adjusted over every "
          "candidate x suite on the primary metric (p_holm); secondary metrics: p_adj = max-T sign-flip over the "
          "candidate's metrics (p_maxt). The seed-level tests test 'the policy has no effect' (the two runs of a "
          "seed exchangeable). CI = t interval of mean(d_s) over seeds for these tasks and new training runs, "
          "simultaneous at 1 - alpha over the same family, i.e. 1 - alpha / family per row (an interval that "
          "excludes 0 has p_adj < alpha); boot_low/boot_high "
          "in paired.csv target new tasks and new runs. value = the candidate's mean on the same seeds x tasks as "
          "its delta; seeds +/- = seeds where the candidate is ahead / behind; MDE = smallest true delta the "
          "headline procedure (this sign-flip test, its floor and its Holm family; secondary rows: max-T's family) "
          "detects with power 0.8, from the test's own power near its floor ('none': not at these seeds); W/T/L = "
          "tasks won / tied / lost (seed-averaged, conditional on these trained models).")


def fmt_p(p) -> str:
    """p-values everywhere: 3 decimals, or 2 significant digits in scientific notation below 0.001."""
    if p is None or not np.isfinite(p):
        return "n/a"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def fmt_seeds(n) -> str:
    """seeds_needed: an integer, 'more than 10000' (also for a zero target), or 'n/a' (no estimate)."""
    if n is None or np.isnan(n):
        return "n/a"
    return "more than 10000" if n > 10000 else str(int(n))


def interval_label(alpha: float) -> str:
    """What the headline interval is, everywhere it is drawn or tabled: its simultaneous
    coverage over the row's family (each row alone: 1 - alpha / family, ci_level)."""
    return f"{100 * (1 - alpha):.0f}% simultaneous"


def fmt_ci(lo, hi) -> str:
    return f"[{lo:+.3f}, {hi:+.3f}]" if np.isfinite(lo) and np.isfinite(hi) else "(no interval)"


def _suite_sentence(g: pd.DataFrame, suite: str, base: str, alpha: float, metric: str | None) -> str:
    """One suite's clause of the conclusion; ``metric``: its headline metric (None: none)."""
    prim = g[g["metric"] == metric] if metric is not None else g.iloc[:0]
    if prim.empty:
        return f"on {suite} the primary metric is not computed (no headline)"
    n_s = int(prim["n_seeds"].max())
    m = int(prim["family"].iloc[0])
    head = f"at {n_s} seed{'s' if n_s != 1 else ''} on {suite} ({metric})"
    if n_s < 2:
        return (f"{head}, no interval and no p-value over seeds: at least two seeds (training runs) per policy are "
                "needed -- with one seed there is no seed-level test at all")
    sig = prim[prim["p_holm"] < alpha].sort_values("delta", ascending=False)
    if len(sig):
        said = "; ".join(f"{r['candidate']} {'beats' if r['delta'] > 0 else 'trails'} {base} by {r['delta']:+.3f} "
                         f"{fmt_ci(r['ci_low'], r['ci_high'])}, p_holm = {fmt_p(r['p_holm'])}"
                         for _, r in sig.iterrows())
        rest = len(prim) - len(sig)
        text = f"{head}, {said}" + (f"; the other {rest} candidate(s) do not differ detectably" if rest else "")
    else:
        r = prim.loc[prim["delta"].abs().idxmax()]
        mde = prim["mde"].to_numpy(dtype=float)
        mde_text = (f"; minimum detectable effect about {np.median(mde):.3f}" if np.isfinite(mde).all() else "")
        text = (f"{head}, no policy differs detectably from {base} (largest |delta|: {r['candidate']} "
                f"{r['delta']:+.3f} {fmt_ci(r['ci_low'], r['ci_high'])}, p_holm = {fmt_p(r['p_holm'])}"
                f"{mde_text})")
    floor = float(prim["p_floor"].iloc[0])
    if floor >= alpha / m:
        r = prim.loc[prim["delta"].abs().idxmax()]
        unpaired = r["pairing"] == "unpaired"
        t_test = "Welch's t-test over seeds, which assumes normal per-seed means" if unpaired else \
            "the paired t-test over seeds, which assumes normal d_s"
        text += (f" -- with {n_s} seeds the smallest attainable p is {fmt_p(floor)}, too large to pass Holm over "
                 f"{m} comparisons at alpha = {alpha}; at least {_min_seeds(alpha / m, unpaired)} seeds are needed "
                 f"({t_test}, gives {r['candidate']} p = {fmt_p(r['p_seed_t'])})")
    return text


def _min_seeds(alpha: float, unpaired: bool = False) -> int:
    """Fewest seeds whose exact permutation floor is below alpha: 2 / 2**n (sign flips) or
    2 / C(2n, n) (two-sample relabelings of n + n runs)."""
    from math import comb

    n = 1
    while (2.0 / comb(2 * n, n) if unpaired else 2.0 / 2 ** n) >= alpha:
        n += 1
    return n


def suite_sentences(result) -> list[str]:
    """One plain sentence per suite, the first lines of stdout, report.md and index.html: the
    design (clairvoyant references left out unless they are all there is) with the largest delta on the suite's headline metric (``result.headline``), by
    how much it beats (or trails) the baseline with its headline interval, and whether that
    difference is significant after Holm's correction over the family (``p_holm`` < alpha).
    Every number is the paired row's own (paired.csv: delta, ci_low, ci_high, p_holm, family);
    nothing is recomputed. A suite without a headline row says so; a budget report names its
    milestone."""
    paired, cfg = result.tables["paired"], result.config
    base, alpha = cfg["baseline"], cfg["alpha"]
    if paired.empty:
        return []
    budget = cfg.get("budget")               # a budget report: every number at its milestone
    at = f", at {budget['unit']} = {budget['at']:g}" if budget else ""
    out = []
    for suite, g in paired.groupby("suite", sort=True):
        metric = result.headline.get(suite)
        prim = g[g["metric"] == metric] if metric is not None else g.iloc[:0]
        if prim.empty:
            out.append(f"{suite}: no headline comparison (the primary metric is not computed on this suite).")
            continue
        designs = prim[~prim["candidate"].map(is_reference)]      # the oracle is a yardstick, not a design
        r = (designs if len(designs) else prim).loc[(designs if len(designs) else prim)["delta"].idxmax()]
        n_s, m = int(r["n_seeds"]), int(r["family"])
        where = f"On {suite} ({metric}, {n_s} seed{'s' if n_s != 1 else ''}{at})"
        if r["delta"] > 0:
            lead = f"{where}, the best design is {r['candidate']}: {r['delta']:+.3f} over the baseline {base}"
        else:
            lead = (f"{where}, no design beats the baseline {base}; the closest, {r['candidate']}, "
                    f"{'ties it' if r['delta'] == 0 else 'trails it by'}" + ("" if r["delta"] == 0 else f" {r['delta']:+.3f}"))
        if n_s < 2:
            out.append(f"{lead}, with one seed: no interval and no test.")
            continue
        p = adjusted_p(r)
        test = (f"significant after Holm's correction over {m} comparison{'s' if m != 1 else ''}" if p < alpha else
                f"not significant after Holm's correction over {m} comparison{'s' if m != 1 else ''}"
                if np.isfinite(p) else "not tested")
        out.append(f"{lead} {fmt_ci(r['ci_low'], r['ci_high'])} ({interval_label(alpha)} interval), {test} "
                   f"(p_holm = {fmt_p(p)}, alpha = {alpha}).")
    return out


def is_reference(label: str) -> bool:
    """A clairvoyant reference (`Policy.reference`: the oracle, a fixed arm), read from a
    grid's label `name[knob=value]` (`hbsim.contract.labels.parse_label`)."""
    name = parse_label(label)[0]
    return name in POLICIES and bool(POLICIES[name].reference)


def lead_text(result, width: int = 110) -> str:
    """`suite_sentences` as the first lines of a terminal (`hb report`, `hb demo`): each
    sentence wrapped at ``width``, then a blank line ('' without sentences)."""
    lines = [textwrap.fill(line, width=width) for line in suite_sentences(result)]
    return "\n".join(lines) + "\n" if lines else ""


def conclusion(result) -> str:
    """One paragraph: per suite, which candidates differ from the baseline on its headline
    metric (``result.headline``) by the seed-level test (Holm over candidates x suites), with
    delta, the headline interval and p."""
    paired, cfg = result.tables["paired"], result.config
    base, alpha = cfg["baseline"], cfg["alpha"]
    if paired.empty:
        return f"Conclusion: no candidate could be compared with the baseline {base} (see the warnings)."
    prim = paired[paired["role"] == "primary"]
    m = int(prim["family"].iloc[0]) if len(prim) else 0
    test = ("two-sample permutation test over seeds (--unpaired)" if (paired["pairing"] == "unpaired").any()
            else "seed-level sign-flip test")
    parts = [_suite_sentence(g, s, base, alpha, result.headline.get(s))
             for s, g in paired.groupby("suite", sort=True)]
    return (budget_clause(cfg.get("budget"))
            + f"Conclusion ({test} of 'no effect', Holm over {m} candidate x suite comparison(s) on the primary "
            f"metric, alpha = {alpha}; intervals: {interval_label(alpha)} t intervals over seeds, for these tasks "
            "and new training runs): " + "; ".join(parts)
            + ". Secondary metrics: max-T over each candidate's metrics; task-level tests are conditional on these "
            "trained models (see the tables)." + page_error_clause(result))


def page_error_clause(result) -> str:
    """The report-level error rate (`inference.page_error_rate`), one sentence ('' without one)."""
    page = result.tables.get("page_error")
    if page is None or page.empty:
        return ""
    r = page.iloc[0]
    paired, cats, alpha = result.tables["paired"], result.tables.get("categories"), result.config["alpha"]
    flagged = int(sum(adjusted_p(row) < alpha for _, row in paired.iterrows()))
    regress = int(cats["regresses"].astype(bool).sum()) if cats is not None and "regresses" in cats else 0
    return (f" Report-level error: this page flags {flagged} row(s) of the headline table and {regress} "
            f"regressing categor{'y' if regress == 1 else 'ies'}; under no effect at all, a page with these "
            f"families flags at least one row with probability about {r['rate']:.2f} +- {r['mc_sd']:.2f} (headline "
            f"table {r['rate_table']:.2f}, categories {r['rate_categories']:.2f}; {int(r['draws'])} relabelings of "
            f"the policies within seeds), though each family holds alpha = {alpha} on its own.")


def budget_clause(budget: dict | None) -> str:
    """The opening words of a budget report's conclusion ('' otherwise): unit, milestone, rule."""
    if not budget:
        return ""
    return (f"Budget report, at equal cost: every run at exactly {budget['unit']} = {budget['at']:g}"
            + (" (the largest milestone every run reached)" if budget.get("largest") else "")
            + f", {budget['rule']}; every table below is at that milestone. ")


def headline_table(result) -> str:
    """Plain-text headline: per suite and metric (its headline metric first), each policy's value and,
    for candidates, delta vs the baseline with the headline interval, p_seed, the
    adjusted p (Holm on the primary, max-T on secondaries), seeds ahead/behind, MDE and
    task W/T/L. A candidate's value is on the same seeds x tasks as its delta."""
    summ, paired = result.tables["summary"], result.tables["paired"]
    if summ.empty and paired.empty:
        return "(no comparable data)"
    base = result.config["baseline"]
    pct = interval_label(result.config["alpha"])
    width = max(12, max(len(p) for p in result.policies) + 2)
    lines = []
    for s in sorted(set(summ.get("suite", pd.Series(dtype=str))) | set(paired.get("suite", pd.Series(dtype=str)))):
        g = summ[summ["suite"] == s] if len(summ) else summ
        ps = paired[paired["suite"] == s] if len(paired) else paired
        src = ps if len(ps) else g
        n_t, n_s = int(src["n_tasks"].max()), int(src["n_seeds"].max())
        lines.append(f"suite {s}: {n_t} tasks x {n_s} seeds, {result.suites[s]} attempt(s), baseline {base}")
        lines.append(f"  {'metric':<8} {'policy':<{width}} {'value':>7}  {'delta':>7}  {pct:>18}  {'p_seed':>7}  "
                     f"{'p_adj':>11}  {'seeds +/-':>9}  {'MDE':>6}  {'W/T/L':>11}")
        head = result.headline.get(s)
        metrics = list(ps["metric"].drop_duplicates()) if len(ps) else []
        metrics = [head] + [m for m in metrics if m != head] if head in metrics else metrics
        metrics += [m for m in g["metric"].drop_duplicates() if m not in metrics] if len(g) else []
        for metric in metrics:
            b = g[(g["metric"] == metric) & g["is_baseline"]] if len(g) else g
            if len(b):
                lines.append(f"  {metric:<8} {base:<{width}} {b['value'].iloc[0]:7.3f}  (baseline)")
            for _, q in (ps[ps["metric"] == metric].iterrows() if len(ps) else []):
                seeds = f"{int(q['seeds_up'])}/{int(q['seeds_down'])}"
                mde = (f"{q['mde']:6.3f}" if np.isfinite(q["mde"]) else f"{'none' if q['mde'] > 0 else 'n/a':>6}")
                adj = (f"{fmt_p(q['p_holm'])} holm" if q["role"] == "primary" else
                       f"{fmt_p(q['p_maxt'])} maxT" if np.isfinite(q["p_maxt"]) else "descriptive")
                lines.append(f"  {metric:<8} {q['candidate']:<{width}} {q['candidate_value']:7.3f}  {q['delta']:+7.3f}  "
                             f"{fmt_ci(q['ci_low'], q['ci_high']):>18}  {fmt_p(q['p_seed']):>7}  {adj:>11}  "
                             f"{seeds:>9}  {mde}  {int(q['wins']):>3}/{int(q['ties']):>3}/{int(q['losses']):>3}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def adjusted_p(r) -> float:
    """The row's own adjusted p: p_holm on the primary metric, p_maxt on a secondary (nan:
    descriptive, e.g. --unpaired secondaries)."""
    p = r["p_holm"] if r.get("role", "primary") == "primary" else r.get("p_maxt", np.nan)
    return float(p) if p is not None and np.isfinite(p) else float("nan")


def verdict(r, alpha: float) -> str:
    """One table cell from the row's own test (`adjusted_p`: Holm on the primary, max-T on a
    secondary) that never contradicts its interval (ci_low, ci_high): 'ahead' / 'behind' when
    the test rejects and the interval lies on that side of 0; when it rejects but the t
    interval still reaches 0 (the permutation test and the t interval are two procedures),
    the cell says so; a row that is not rejected has an interval that holds 0
    (`inference.headline` widens it), and is 'not detectable (|delta| < MDE)' or 'not
    significant (TEST)'."""
    if int(r["n_seeds"]) < 2:
        return "one seed: no test"
    test = "Holm" if r.get("role", "primary") == "primary" else "max-T"
    p = adjusted_p(r)
    if not np.isfinite(p):
        return "descriptive (no test)"
    if p < alpha:
        side = "ahead" if r["delta"] > 0 else "behind"
        lo, hi = float(r.get("ci_low", np.nan)), float(r.get("ci_high", np.nan))
        if np.isfinite(lo) and lo <= 0 <= hi:
            return f"{side} by the {test} test; its t interval reaches 0"
        return side
    mde = r.get("mde", np.nan)
    if np.isfinite(mde) and abs(r["delta"]) < mde:
        return "not detectable (|delta| < MDE)"
    return f"not significant ({test})"


def fmt_mde(v) -> str:
    """The MDE; above 1 no attainable delta is detectable (every metric lies in [0, 1])."""
    if v is None or not np.isfinite(v):
        return "n/a"
    return "> 1 (none)" if v > 1 else f"{v:.3f}"
