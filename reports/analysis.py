"""Tables of the evaluation comparison, assembled from the pure functions of `stats`.

Decisions (each visible in the report):
* Joining is by ids (policy, seed, suite, task), never by row order.
* Analysis sets: the baseline defines the seeds and tasks of a suite. A pair
  (candidate, baseline) uses the complete seeds x tasks rectangle of both arms; the
  all-policy summary uses the rectangle common to every policy. Whatever is dropped is
  named in a note (and a warning) -- never silently.
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
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from hbsim import intervals
from reports import bootstrap, inference, metrics, passk, stats

CELL_KEYS = ["policy", "seed", "suite", "task"]


def metric_names(ks: tuple[int, ...], n: int) -> list[str]:
    """Metrics of a suite with n attempts: score, pass@1, then pass@k, pass^k for k <= n."""
    names = ["score", "pass@1"]
    for k in ks:
        if 1 < k <= n:
            names += [f"pass@{k}", f"pass^{k}"]
    return names


def cell_metrics(final: pd.DataFrame, ks: tuple[int, ...]) -> pd.DataFrame:
    """One row per (policy, seed, suite, task): category, n, c, score and pass metrics.

    pass@k / pass^k are NaN in suites with fewer than k attempts.
    """
    g = final.groupby(CELL_KEYS, sort=True)
    cells = g.agg(category=("category", "first"), n=("success", "size"), c=("success", "sum"),
                  score=("reward", "mean")).reset_index()
    n, c = cells["n"].to_numpy(), cells["c"].to_numpy()
    cells["pass@1"] = c / n
    for k in sorted(set(ks) - {1}):
        ok = n >= k
        for name, fn in ((f"pass@{k}", passk.pass_at_k), (f"pass^{k}", passk.pass_hat_k)):
            col = np.full(len(cells), np.nan)
            if ok.any():
                col[ok] = fn(n[ok], c[ok], k)
            cells[name] = col
    return cells


def score_is_pass1(cells: pd.DataFrame, suite: str) -> bool:
    """True when score and pass@1 agree on every cell of ``suite`` (binary rewards): the
    report then shows that metric once."""
    sub = cells[cells["suite"] == suite]
    return bool(len(sub)) and bool(np.allclose(sub["score"], sub["pass@1"], rtol=0, atol=1e-12))


@dataclass
class Aligned:
    """The complete rectangle of one comparison. x: (metrics, policies, seeds, tasks)."""

    policies: list[str]
    seeds: list[int]
    tasks: list[str]
    categories: np.ndarray  # (tasks,)
    metrics: list[str]
    x: np.ndarray


def align(cells: pd.DataFrame, suite: str, policies: list[str], baseline: str,
          metrics: list[str]) -> tuple[Aligned, list[str]]:
    """Seeds x tasks of ``suite`` present for every policy; notes name what was dropped.

    The baseline defines the reference sets: seeds/tasks that only a candidate has are
    excluded; a seed a policy lacks entirely is dropped for all arms, then a task missing
    in any remaining (policy, seed) is dropped for all arms.
    """
    sub = cells[(cells["suite"] == suite) & cells["policy"].isin(policies)]
    base = sub[sub["policy"] == baseline]
    seeds = sorted(base["seed"].unique().tolist())
    tasks = sorted(base["task"].unique().tolist())
    notes = []
    mine = {pol: sub[sub["policy"] == pol] for pol in policies}
    for pol in policies:
        extra_s = sorted(set(mine[pol]["seed"].unique().tolist()) - set(seeds))   # unique first: no
        extra_t = sorted(set(mine[pol]["task"].unique().tolist()) - set(tasks))   # per-row iteration
        if extra_s or extra_t:
            notes.append(f"{suite}: policy {pol!r} has seeds {extra_s} / {len(extra_t)} task(s) the baseline "
                         f"{baseline!r} lacks; excluded")
    for pol in policies:
        has = set(mine[pol]["seed"].unique().tolist())
        lost = [s for s in seeds if s not in has]
        if lost:
            notes.append(f"{suite}: policy {pol!r} lacks seed(s) {lost} that the baseline has; "
                         "excluded in both arms of its comparison and from the all-policy summary")
            seeds = [s for s in seeds if s not in lost]
    for pol in policies:
        rows = mine[pol][mine[pol]["seed"].isin(seeds)]
        complete = rows.groupby("task")["seed"].nunique()
        complete = set(complete.index[complete == len(seeds)].tolist())
        lost = [t for t in tasks if t not in complete] if seeds else []
        if lost:
            shown = ", ".join(lost[:5]) + (" ..." if len(lost) > 5 else "")
            notes.append(f"{suite}: policy {pol!r} lacks {len(lost)} task(s) the baseline has ({shown}); "
                         "excluded in both arms of its comparison and from the all-policy summary")
            tasks = [t for t in tasks if t not in lost]
    x = np.full((len(metrics), len(policies), len(seeds), len(tasks)), np.nan)
    pos = [pd.Index(v).get_indexer(sub[k]) for k, v in (("policy", policies), ("seed", seeds), ("task", tasks))]
    keep = (pos[0] >= 0) & (pos[1] >= 0) & (pos[2] >= 0)
    for i, m in enumerate(metrics):
        x[i, pos[0][keep], pos[1][keep], pos[2][keep]] = sub[m].to_numpy(dtype=np.float64)[keep]
    cat = base.drop_duplicates("task").set_index("task")["category"].reindex(tasks).to_numpy()
    return Aligned(list(policies), seeds, tasks, cat, list(metrics), x), notes


# ------------------------------------------------------------------------ summary

def bootstrap_summary(al: Aligned, suite: str, baseline: str, *, resamples: int, rng: np.random.Generator,
                      alpha: float, progress=None, helper=None):
    """Per metric x policy: value, crossed-bootstrap percentile interval (boot_low,
    boot_high: tasks and seeds resampled together), IQM (+ interval) and P(policy >
    baseline) (+ interval), all from ONE set of task/seed draws. Not the t-interval over
    seeds of `hb sim` (hbsim.summary): a different estimator of a different spread.

    helper: a `reports.offload.Helper`: the IQM's replicates are computed there from the
    same draws (the generator's state at the start, replayed), while this process goes on;
    the summary is then a `Later` whose ``result()`` is the table. Without: the table."""
    m, p, s, t = al.x.shape
    flat = al.x.reshape(m * p, s, t)
    b_idx = al.policies.index(baseline)

    base = np.repeat(al.x[:, b_idx:b_idx + 1], p, axis=1).reshape(m * p, s, t)
    table = bootstrap.superiority_table(flat, base)  # once: the draws only reweight it
    iqm = start = None
    if helper is not None:
        start = rng.bit_generator.state  # where this bootstrap's draws begin: the helper replays them
        iqm = helper.submit(_replayed, flat, start, resamples)

    def stat(x, ws, wt):
        parts = [bootstrap.weighted_mean(x, ws, wt), bootstrap.table_prob_improvement(table, ws, wt)]
        if iqm is None:
            parts.append(bootstrap.weighted_iqm(x, ws, wt))
        return np.stack(parts, axis=1)  # (b, 2 or 3, m*p)

    reps = bootstrap.crossed_bootstrap(flat, stat, resamples=resamples, rng=rng, progress=progress,
                                   label=f"summary {suite}")

    def finish(iqm_reps: np.ndarray) -> pd.DataFrame:
        (lo, hi), (iqm_lo, iqm_hi) = intervals.percentile_interval(reps[:, :2], 1 - alpha), \
            intervals.percentile_interval(iqm_reps, 1 - alpha)
        rows = []
        for i, metric in enumerate(al.metrics):
            for j, pol in enumerate(al.policies):
                f = i * p + j
                rows.append({"suite": suite, "metric": metric, "policy": pol, "n_tasks": t, "n_seeds": s,
                             "value": metrics.mean(al.x[i, j]), "boot_low": lo[0, f], "boot_high": hi[0, f],
                             "iqm": metrics.iqm(al.x[i, j]), "iqm_low": iqm_lo[f], "iqm_high": iqm_hi[f],
                             "prob_improvement": metrics.prob_improvement(al.x[i, j], al.x[i, b_idx]),
                             "pi_low": lo[1, f], "pi_high": hi[1, f], "is_baseline": pol == baseline})
        return pd.DataFrame(rows)

    if iqm is None:
        return finish(reps[:, 2])
    return Later(iqm, lambda: _replayed({}, flat, start, resamples), finish)


@dataclass
class Later:
    """A table whose last part (``future``) is computed in the helper: ``result()`` waits
    for it and ``finish``es the table (once). ``steal()``: if the part has not started
    there, it is computed here instead (``local``: the same numbers), so an idle caller
    does the helper's queued work."""

    future: object
    local: Callable
    finish: Callable
    _value: pd.DataFrame | None = None

    def steal(self) -> None:
        if self.future.cancel():
            self.future = None

    def result(self) -> pd.DataFrame:
        if self._value is None:
            self._value = self.finish(self.local() if self.future is None else self.future.result())
        return self._value


def _replayed(state: dict, x: np.ndarray, start: dict, resamples: int) -> np.ndarray:
    """The IQM's bootstrap replicates of ``x`` from the draws a generator in state ``start``
    makes (`bootstrap_summary`'s, replayed in the helper process: the same numbers)."""
    rng = np.random.Generator(getattr(np.random, start["bit_generator"])())
    rng.bit_generator.state = start
    return bootstrap.crossed_bootstrap(x, bootstrap.weighted_iqm, resamples=resamples, rng=rng)


# ------------------------------------------------------------------ paired tables

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
#:     runs); undercovers below 5 seeds (a note says so)
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
    lo, hi = intervals.percentile_interval(reps, 1 - alpha)
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
        lo, hi = intervals.percentile_interval(reps, 1 - alpha)
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


# ----------------------------------------------------------------- model-based check

def gee_rows(final: pd.DataFrame, al: Aligned, suite: str, baseline: str) -> tuple[list[dict], list[str]]:
    """GEE logistic model success ~ C(policy) (baseline = reference), clustered by seed
    (the training runs of one seed share its environment draw; every attempt of a run
    shares the trained model), exchangeable working correlation, on the attempts of the
    aligned seeds x tasks. The plain sandwich covariance is optimistic with few clusters
    (A/A: 3 of 20 blocks below 0.05 at 8 seeds), so the robust variance gets the CR1
    factor K / (K - 1) and p-values and intervals use a t reference with K - 1 degrees of
    freedom (K = clusters), the usual small-sample correction for cluster-robust tests
    (Mancl-DeRouen's bias-reduced covariance holds the level too, but costs 40 s on the
    demo's 250,000 attempts; this costs nothing). With one seed there is no test (nan).

    The fit is `gee_exchangeable`'s closed form from the success counts per (seed, policy)
    (the aligned rectangle gives every seed the same attempts per policy), the estimate
    statsmodels' iterative GEE converges to (tests/reports/test_reports_gee.py)."""
    import warnings

    from scipy import stats as sps

    keep = ((final["suite"] == suite) & final["policy"].isin(al.policies)
            & final["seed"].isin(al.seeds) & final["task"].isin(al.tasks)).to_numpy()
    succ = final["success"].to_numpy(dtype=bool)[keep]
    seed = final["seed"].to_numpy()[keep]
    cands = [p for p in al.policies if p != baseline]
    if len(cands) == 0:
        return [], []
    order = [baseline] + cands
    codes, labels = pd.factorize(final["policy"])  # the column's own (arrow) codes: no object array of its rows
    pcode = pd.Index(order).get_indexer(labels)[codes[keep]]
    n_pol = np.bincount(pcode, minlength=len(order))
    rate = dict(zip(order, np.bincount(pcode, weights=succ, minlength=len(order)) / n_pol))
    if rate[baseline] in (0.0, 1.0):
        return [], [f"{suite}: GEE skipped: the baseline's success rate is {rate[baseline]:.0f} (no contrast)"]
    separated = [c for c in cands if rate[c] in (0.0, 1.0)]
    notes = []
    if separated:
        notes = [f"{suite}: GEE: {separated} succeed on all or no attempts (perfect separation); "
                 "their log-odds are not identifiable and are left blank"]
        cands = [c for c in cands if c not in separated]   # their rows leave the model
    used = [order.index(p) for p in [baseline] + cands]
    scode, seeds = pd.factorize(seed, sort=False)
    k = len(seeds)                                          # clusters (seeds)
    total = np.zeros((k, len(order)), dtype=np.int64)
    np.add.at(total, (scode, pcode), 1)
    wins = np.zeros((k, len(order)), dtype=np.int64)
    np.add.at(wins, (scode[succ], pcode[succ]), 1)
    total, wins = total[:, used], wins[:, used]
    n_obs = int(total.sum())
    same = _same_outcomes(final, keep, pcode, used, wins)
    df = max(k - 1, 1)
    try:
        with warnings.catch_warnings(record=True) as caught:   # e.g. 0 / 0 when no seed differs
            warnings.simplefilter("always")
            params, cov, corr = gee_exchangeable(wins, total)
            bse = np.sqrt(np.diag(cov)) * (np.sqrt(k / (k - 1)) if k > 1 else np.nan)     # CR1
            with np.errstate(divide="ignore", invalid="ignore"):
                pvals = 2.0 * sps.t.sf(np.abs(params / bse), df)
            # arms with identical outcomes: the estimate is 0 (its se may be 0 or undefined): p = 1
            pvals = np.where(same | (~np.isfinite(pvals) & (np.abs(params) < 1e-9)), 1.0, pvals)
            params = np.where(same, 0.0, params)
        notes += sorted({f"{suite}: GEE warning: {str(w.message).splitlines()[0]}" for w in caught})
    except (np.linalg.LinAlgError, ValueError) as exc:
        return [], notes + [f"{suite}: GEE failed ({exc}); nonparametric results stand alone"]
    z = float(sps.t.ppf(0.975, df))
    rows = []
    for j, cand in enumerate(cands, start=1):
        rows.append({"suite": suite, "candidate": cand, "baseline": baseline, "log_odds": params[j],
                     "se": bse[j], "p": pvals[j], "odds_ratio": float(np.exp(params[j])),
                     "or_ci_low": float(np.exp(params[j] - z * bse[j])),
                     "or_ci_high": float(np.exp(params[j] + z * bse[j])),
                     "n_obs": n_obs, "n_clusters": k, "working_corr": corr})
    for cand in separated:
        rows.append({"suite": suite, "candidate": cand, "baseline": baseline, "log_odds": np.nan, "se": np.nan,
                     "p": np.nan, "odds_ratio": np.nan, "or_ci_low": np.nan, "or_ci_high": np.nan,
                     "n_obs": n_obs, "n_clusters": k, "working_corr": np.nan})
    return rows, notes


def _same_outcomes(final: pd.DataFrame, keep: np.ndarray, pcode: np.ndarray, used: list[int],
                   wins: np.ndarray) -> np.ndarray:
    """Per model column (intercept first: False): whether the candidate's every attempt equals
    the baseline's, matched by (seed, task, attempt). Only arms with the baseline's successes
    in every seed are compared attempt by attempt (then the rows are ordered by integer codes)."""
    same = np.zeros(len(used), dtype=bool)
    maybe = [j for j in range(1, len(used)) if np.array_equal(wins[:, j], wins[:, 0])]
    if not maybe:
        return same
    seed = final["seed"].to_numpy()[keep]
    task = pd.factorize(final["task"].to_numpy()[keep])[0]
    order = np.lexsort((final["attempt"].to_numpy()[keep], task, seed, pcode))
    succ = final["success"].to_numpy(dtype=bool)[keep][order]
    code = pcode[order]
    base = succ[code == used[0]]
    for j in maybe:
        same[j] = np.array_equal(succ[code == used[j]], base)
    return same


def gee_exchangeable(wins: np.ndarray, total: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """The logistic GEE success ~ C(group) (column 0 the reference) with an exchangeable
    working correlation and one cluster per row, from successes ``wins`` and attempts
    ``total`` (clusters, groups), for a balanced design (every cluster the same attempts
    per group). Returns (params: intercept then log-odds ratios, robust sandwich
    covariance, working correlation), as statsmodels' GEE(..., Binomial(), Exchangeable())
    defines them (its moment estimate of the correlation with ddof = groups), in closed form:
    with a saturated design and balanced clusters the estimating equations are solved by
    the groups' success rates whatever the correlation, and every sum over attempts is a
    sum over the counts."""
    k, g = total.shape
    m = total[0].astype(np.float64)                        # attempts per group in each cluster
    if (total != total[0]).any():
        raise ValueError("unbalanced clusters: every seed needs the same attempts per policy")
    mu = wins.sum(axis=0) / total.sum(axis=0)
    v = mu * (1.0 - mu)
    s = np.sqrt(v)
    n = m.sum()                                            # attempts per cluster
    e = wins - m * mu                                      # (clusters, groups): residual sums
    pearson = e / s                                        # sum of Pearson residuals per cluster, group
    ssr = (wins * (1.0 - mu) ** 2 + (m - wins) * mu ** 2) / v
    nobs = k * n
    scale = ssr.sum() / (nobs - g)
    pairs = k * n * (n - 1) / 2.0
    rho = float(((pearson.sum(axis=1) ** 2 - ssr.sum(axis=1)) / 2.0).sum() / scale / (pairs - g))
    c = rho / (1.0 - rho) / (1.0 + rho * (n - 1))
    lmat = np.eye(g)
    lmat[:, 0] = 1.0                                       # a group's design row: intercept + its indicator
    bread = k * (lmat.T @ (np.diag(m * v) / (1.0 - rho) - c * np.outer(m * s, m * s)) @ lmat)
    score = (e / (1.0 - rho) - c * np.outer(pearson.sum(axis=1), m * s)) @ lmat   # (clusters, params)
    binv = np.linalg.inv(bread)
    cov = binv @ (score.T @ score) @ binv
    logit = np.log(mu / (1.0 - mu))
    params = np.concatenate([[logit[0]], logit[1:] - logit[0]])
    return params, cov, rho


def per_task_rows(al: Aligned, suite: str) -> pd.DataFrame:
    """Seed-averaged value of every metric per (policy, task) on the aligned set."""
    m, p, s, t = al.x.shape
    vals = al.x.mean(axis=2)  # (metrics, policies, tasks)
    idx = pd.MultiIndex.from_product([al.metrics, al.policies, al.tasks], names=["metric", "policy", "task"])
    out = pd.DataFrame({"value": vals.ravel()}, index=idx).reset_index()
    out.insert(0, "suite", suite)
    out["category"] = np.tile(al.categories, m * p)
    return out


def category_values(al: Aligned, suite: str) -> pd.DataFrame:
    """Value of every policy per category (mean over seeds and the category's tasks)."""
    rows = []
    for cat in sorted(set(al.categories.tolist())):
        mask = al.categories == cat
        for i, metric in enumerate(al.metrics):
            for j, pol in enumerate(al.policies):
                rows.append({"suite": suite, "metric": metric, "category": cat, "n_tasks": int(mask.sum()),
                             "policy": pol, "value": float(al.x[i, j][..., mask].mean())})
    return pd.DataFrame(rows)


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
