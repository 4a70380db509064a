"""The paired comparison tables of a suite, assembled from the pure functions of `stats`,
`bootstrap` and `inference`: paired.csv's rows (`paired_rows`, its columns
`PAIRED_COLUMNS`), per seed (`per_seed_rows`), per category (`category_rows`), the tasks
that flipped (`flip_rows`) and the sensitivity to a swept knob (`sensitivity_rows`).

Decisions (each visible in the report):
* D_t = per-task difference of the seed-averaged cell metric; delta = mean_t D_t.
* Intervals: the headline interval (ci_low, ci_high) is the t interval of mean(d_s) over
  seeds, simultaneous over the headline family (`inference.headline`); boot_low/boot_high
  are the crossed bootstrap over tasks and seeds (draws shared by both arms).
* Per-seed McNemar only where the metric is binary by construction (pass@k / pass^k with
  k = number of attempts).
* Flips: a seed passes a task when its metric is >= 0.5; the majority outcome passes when
  MORE than half of the seeds pass (an even split counts as a fail).
* The random generator is consumed in a fixed order (suites, then candidates, sorted), so
  a fixed seed gives identical tables for any input row order.
Cells and rectangles: `reports.cells`; the summary table: `reports.values`; GEE: `reports.gee`.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from reports.readings import intervals
from reports import bootstrap, inference, metrics, stats
from reports.cells import Aligned


#: The columns of paired.csv, in order -- the one contract other modules read (render, figures).
#:   suite, metric, candidate, baseline, n_tasks, n_seeds: the comparison and its rectangle
#:   role: "primary" (the `--primary` metric: the headline, Holm over candidates x suites) or
#:     "secondary" (other metrics: max-T over the candidate's metrics, p_maxt)
#:   pairing: "paired" (common random numbers checked from run.json, or seed labels when no
#:     run.json says otherwise) or "unpaired" (`--unpaired`: the seeds are independent runs)
#:   candidate_value, baseline_value, delta: means over the pair's own seeds x tasks
#:     (delta = candidate_value - baseline_value, always the same rectangle)
#:   ci_low, ci_high: THE headline interval: t(df_seed) interval of mean(d_s) over seeds
#:     (population: these tasks, new training runs), at level ci_level = 1 - alpha / family,
#:     simultaneous over the family; ci_widened: a non-rejected row's interval was widened to 0
#:   family: size of the row's multiplicity family (primary: candidates x suites; secondary:
#:     the candidate's metrics in the suite)
#:   boot_low, boot_high: crossed bootstrap over tasks AND seeds (population: new tasks and new
#:     runs); empty at one seed; a note says where it undercovers (`bootstrap.percentile_coverage`)
#:   p_seed: seed-level permutation test (sign-flip of d_s; unpaired: two-sample); p_holm: its
#:     Holm adjustment over the primary family (NaN on secondary rows); p_maxt: max-T sign-flip
#:     over the candidate's metrics (NaN when unpaired: those rows are descriptive)
#:   p_seed_t, p_seed_wilcoxon: paired t / Wilcoxon over seeds (unpaired: Welch / Mann-Whitney)
#:   seeds_up, seeds_down: seeds where d_s > 0 / < 0
#:   sd_seed, se_seed, df_seed, skew_seed: spread of d_s (see inference.seed_spread)
#:   mde, target_delta, seeds_needed, p_floor: power of the procedure used (inference.design)
#:   p_task_permutation, p_task_wilcoxon, p_task_sign, wins, ties, losses: over tasks,
#:     CONDITIONAL on the trained models (a screen, not a claim about the method)
#:   prob_improvement: rliable's P(candidate run > baseline run), averaged over tasks
PAIRED_COLUMNS = ["suite", "metric", "role", "candidate", "baseline", "pairing", "n_tasks", "n_seeds",
                  "candidate_value", "baseline_value", "delta", "ci_low", "ci_high", "ci_level", "ci_widened",
                  "family", "boot_low", "boot_high", "p_seed", "p_holm", "p_maxt", "p_seed_t", "p_seed_wilcoxon",
                  "seeds_up", "seeds_down", "sd_seed", "se_seed", "df_seed", "skew_seed", "mde", "target_delta",
                  "seeds_needed", "p_floor", "p_task_permutation", "p_task_wilcoxon", "p_task_sign", "wins", "ties",
                  "losses", "prob_improvement"]


def one_seed_blank(lo: np.ndarray, hi: np.ndarray, n_seeds: int) -> tuple[np.ndarray, np.ndarray]:
    """A crossed-bootstrap interval, blank (nan) at one seed: it claims new tasks AND new runs,
    and one run per arm shows no run-to-run variation, so it would be a task bootstrap under
    that label (the draws are still taken: the generator's stream, and every other number,
    stay as they were)."""
    if n_seeds >= 2:
        return lo, hi
    return np.full_like(lo, np.nan, dtype=float), np.full_like(hi, np.nan, dtype=float)


def paired_rows(al: Aligned, suite: str, cand: str, baseline: str, *, resamples: int,
                rng: np.random.Generator, alpha: float, primary: str | None = None, unpaired: bool = False,
                progress=None) -> list[dict]:
    """Rows of paired.csv for one (suite, candidate), every metric (the headline columns --
    p_holm, ci_*, mde, seeds_needed -- are filled by `inference.headline` once every
    comparison is known).

    Tests: `inference.paired_tests` (or `unpaired_tests`), seed level first, then the
    task-level ones, conditional on the trained models; p_maxt: `stats.max_t_sign_flip`
    over the metrics; boot_*: the crossed bootstrap."""
    c, b = al.policies.index(cand), al.policies.index(baseline)
    diff = al.x[:, c] - al.x[:, b]  # (metrics, seeds, tasks)
    reps = bootstrap.crossed_bootstrap(diff, bootstrap.weighted_mean, resamples=resamples, rng=rng,
                                   progress=progress, label=f"paired {suite} {cand}")
    lo, hi = one_seed_blank(*intervals.percentile_interval(reps, 1 - alpha), len(al.seeds))
    if unpaired:
        tests = inference.unpaired_tests(al.x[:, c], al.x[:, b], resamples=resamples, rng=rng)
    else:
        tests = inference.paired_tests(diff, resamples=resamples, rng=rng)
    d_seed = stats.exact_ties(diff.mean(axis=2))  # (metrics, seeds)
    if unpaired or len(al.seeds) < 2:
        p_maxt = np.full(len(al.metrics), np.nan)
    else:
        p_maxt = stats.max_t_sign_flip(d_seed, resamples=resamples, rng=rng)
    rows = []
    for i, metric in enumerate(al.metrics):
        w, ti, lo_ = stats.wins_ties_losses(diff[i].mean(axis=0))
        row = {"suite": suite, "metric": metric, "role": "primary" if metric == primary else "secondary",
               "candidate": cand, "baseline": baseline, "pairing": "unpaired" if unpaired else "paired",
               "n_tasks": len(al.tasks), "n_seeds": len(al.seeds),
               "candidate_value": float(al.x[i, c].mean()), "baseline_value": float(al.x[i, b].mean()),
               "delta": float(diff[i].mean()), "boot_low": float(lo[i]), "boot_high": float(hi[i]),
               "p_maxt": float(p_maxt[i]), "seeds_up": int((d_seed[i] > 0).sum()),
               "seeds_down": int((d_seed[i] < 0).sum()), "wins": w, "ties": ti, "losses": lo_,
               "prob_improvement": metrics.prob_improvement(al.x[i, c], al.x[i, b])}
        row.update({name: float(p[i]) for name, p in tests.items()})
        row.update(inference.seed_spread(al.x[i, c], al.x[i, b], unpaired))
        rows.append(row)
    return rows


def binary_metric(metric: str, attempts: int) -> bool:
    """pass@k and pass^k are per-task binary outcomes exactly when k = n attempts."""
    m = re.fullmatch(r"pass[@^](\d+)", metric)
    return bool(m) and int(m.group(1)) == attempts


def per_seed_rows(al: Aligned, suite: str, cand: str, baseline: str, attempts: int) -> list[dict]:
    """Per seed: delta, W/T/L, and exact McNemar (+ mid-p) where the metric is binary
    by construction (pass@k / pass^k with k = attempts)."""
    c, b = al.policies.index(cand), al.policies.index(baseline)
    rows = []
    for i, metric in enumerate(al.metrics):
        binary = binary_metric(metric, attempts)
        for si, seed in enumerate(al.seeds):
            xc, xb = al.x[i, c, si], al.x[i, b, si]
            w, ti, lo = stats.wins_ties_losses(xc - xb)
            row = {"suite": suite, "metric": metric, "candidate": cand, "baseline": baseline, "seed": seed,
                   "n_tasks": len(al.tasks), "candidate_value": float(xc.mean()),
                   "baseline_value": float(xb.mean()), "delta": float((xc - xb).mean()),
                   "wins": w, "ties": ti, "losses": lo}
            keys = ("n11", "n10", "n01", "n00", "p", "mid_p")
            mc = stats.mcnemar_test(xc, xb) if binary else dict.fromkeys(keys, None)
            row.update({f"mcnemar_{k}" if k in ("p", "mid_p") else k: v for k, v in mc.items()})
            rows.append(row)
    return rows


def category_rows(al: Aligned, suite: str, cand: str, baseline: str, *, resamples: int,
                  rng: np.random.Generator, alpha: float, unpaired: bool = False) -> list[dict]:
    """Per category: delta, crossed-bootstrap interval, and two tests.

    p_seed: the seed-level test on the per-seed difference of the category's mean (the
    same test as the headline: sign-flip over seeds, two-sample when unpaired); p_bh: BH
    across the categories of a (candidate, metric); regresses = delta < 0 and p_bh < alpha.
    p_task_permutation / p_task_bh: the task-level sign-flip and its BH adjustment,
    conditional on the trained models (a screen for where to look, not a claim about the
    method; A/A runs shaped like the demo flag a category in 28% of comparisons with it)."""
    c, b = al.policies.index(cand), al.policies.index(baseline)
    rows = []
    cats = sorted(set(al.categories.tolist()))
    for cat in cats:
        mask = al.categories == cat
        xc, xb = al.x[:, c][..., mask], al.x[:, b][..., mask]
        diff = xc - xb  # (metrics, seeds, tasks_c)
        reps = bootstrap.crossed_bootstrap(diff, bootstrap.weighted_mean, resamples=resamples, rng=rng)
        lo, hi = one_seed_blank(*intervals.percentile_interval(reps, 1 - alpha), len(al.seeds))
        dall = diff.mean(axis=1)  # (metrics, tasks_c)
        p_perm = stats.sign_flip_test(dall, resamples=resamples, rng=rng)
        if len(al.seeds) < 2:
            p_seed = np.full(len(al.metrics), np.nan)
        elif unpaired:
            p_seed = stats.two_sample_permutation_test(xc.mean(axis=2), xb.mean(axis=2), resamples=resamples, rng=rng)
        else:
            p_seed = np.atleast_1d(stats.sign_flip_test(diff.mean(axis=2), resamples=resamples, rng=rng))
        for i, metric in enumerate(al.metrics):
            d = dall[i]
            rows.append({"suite": suite, "metric": metric, "candidate": cand, "baseline": baseline,
                         "category": cat, "n_tasks": int(mask.sum()), "n_seeds": len(al.seeds),
                         "candidate_value": float(xc[i].mean()), "baseline_value": float(xb[i].mean()),
                         "delta": float(d.mean()), "boot_low": float(lo[i]), "boot_high": float(hi[i]),
                         "p_seed": float(p_seed[i]), "p_task_permutation": float(p_perm[i])})
    out = pd.DataFrame(rows)
    if out.empty:
        return rows
    out["p_bh"] = np.nan
    out["p_task_bh"] = np.nan
    out["worst"] = False
    for _, idx in out.groupby("metric").groups.items():
        out.loc[idx, "p_bh"] = stats.adjust(out.loc[idx, "p_seed"].to_numpy(), "fdr_bh")
        out.loc[idx, "p_task_bh"] = stats.adjust(out.loc[idx, "p_task_permutation"].to_numpy(), "fdr_bh")
        out.loc[out.loc[idx, "delta"].idxmin(), "worst"] = True
    out["regresses"] = (out["delta"] < 0) & (out["p_bh"] < alpha)
    return out.to_dict("records")


def flip_rows(al: Aligned, suite: str, cand: str, baseline: str) -> tuple[list[dict], list[dict]]:
    """Tasks whose seed-majority outcome differs between the arms, per pass metric.

    A seed passes a task when the metric is >= 0.5 (for binary metrics: it passed); the
    majority outcome passes when MORE than half the seeds pass (a tie is a fail).
    Returns (flip rows, count rows: passed by each arm, gained, lost).
    """
    c, b = al.policies.index(cand), al.policies.index(baseline)
    flips, counts = [], []
    for i, metric in enumerate(al.metrics):
        if not metric.startswith("pass"):
            continue
        maj_c = (al.x[i, c] >= 0.5).mean(axis=0) > 0.5
        maj_b = (al.x[i, b] >= 0.5).mean(axis=0) > 0.5
        for t in np.flatnonzero(maj_c != maj_b):
            flips.append({"suite": suite, "metric": metric, "candidate": cand, "baseline": baseline,
                          "task": al.tasks[t], "category": al.categories[t],
                          "direction": "fail->pass" if maj_c[t] else "pass->fail",
                          "candidate_value": float(al.x[i, c, :, t].mean()),
                          "baseline_value": float(al.x[i, b, :, t].mean())})
        counts.append({"suite": suite, "metric": metric, "candidate": cand, "baseline": baseline,
                       "n_tasks": len(al.tasks), "baseline_passed": int(maj_b.sum()),
                       "candidate_passed": int(maj_c.sum()), "both": int((maj_b & maj_c).sum()),
                       "gained": int((maj_c & ~maj_b).sum()), "lost": int((maj_b & ~maj_c).sum())})
    return flips, counts


def sensitivity_rows(paired: pd.DataFrame, axis: str, values: dict, baseline: str) -> pd.DataFrame:
    """Effect against the baseline as a function of a swept knob: the paired rows of the
    candidates that carry a value of ``axis`` (values: label -> knob value), sorted by it."""
    cols = ["suite", "metric", "role", "axis", "axis_value", "candidate", "baseline", "n_seeds", "delta", "ci_low",
            "ci_high", "boot_low", "boot_high", "p_seed", "p_holm", "p_maxt", "mde"]
    sub = paired[paired["candidate"].isin(list(values))]
    if sub.empty:
        return pd.DataFrame(columns=cols)
    out = sub.assign(axis=axis, axis_value=sub["candidate"].map(values))
    key = pd.to_numeric(out["axis_value"], errors="coerce")
    order = key if key.notna().all() else out["axis_value"].astype(str)
    rank = {m: i for i, m in enumerate(paired["metric"].drop_duplicates())}  # metrics in report order
    out = out.assign(_order=order, _metric=out["metric"].map(rank))
    out = out.sort_values(["suite", "_metric", "_order", "candidate"], kind="stable")
    return out[cols].reset_index(drop=True)
