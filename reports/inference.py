"""Which unit the tests replicate over, and how often they are wrong under the null.

The replication unit of a training method is the seed (one training run): every task
of a run shares that run's luck, the model it trained. So the headline tests work on
the per-seed paired difference

    d_s = mean over tasks t of (candidate[s, t] - baseline[s, t])      (same seed s)

and test mean(d_s) = 0 over the S seeds: an exact sign-flip permutation test (all 2**S
sign patterns when S <= 16, else Monte Carlo), the paired t-test and the Wilcoxon
signed-rank test. Tasks are nested inside seeds, so the held-out-harness suite (tasks x
harnesses, not independent) needs no special case. The task-level tests (on the
seed-averaged per-task difference D_t) answer "on these tasks, for these trained
models", not "for this training method"; they are kept, labelled as conditional.

`false_positive_rates` turns the p-values of K A/A comparisons (two arms that differ
only in the policy's seed) into each test's empirical false-positive rate with an
exact binomial interval; `hb calibrate` (ablations.calibrate) runs the A/A simulations.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from reports.readings import intervals
from reports import stats

#: test name -> what it treats as the replication unit (for tables and the README)
TESTS = {
    "p_seed": "seeds: sign-flip permutation of d_s (exact for <= 16 seeds)",
    "p_seed_t": "seeds: paired t-test of d_s",
    "p_seed_wilcoxon": "seeds: Wilcoxon signed-rank of d_s",
    "p_task_permutation": "tasks, conditional on the trained models: sign-flip of D_t",
    "p_task_wilcoxon": "tasks, conditional on the trained models: Wilcoxon of D_t",
    "p_task_sign": "tasks, conditional on the trained models: sign test of D_t",
}


def paired_tests(diff: np.ndarray, *, resamples: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Every paired test of `TESTS` for each row of ``diff``.

    diff: (rows, seeds, tasks) = candidate - baseline on a complete rectangle. Returns
    {test name: (rows,) p-values}; the sign patterns are shared by the rows, so rows of
    a vectorised call are tested exactly as if tested one by one with the same draws.
    With one seed there is no test over seeds: the p_seed* values are nan.
    """
    diff = np.asarray(diff, dtype=np.float64)
    d_seed, d_task = diff.mean(axis=2), diff.mean(axis=1)  # (rows, seeds), (rows, tasks)
    out = {"p_seed": np.atleast_1d(stats.sign_flip_test(d_seed, resamples=resamples, rng=rng)),
           "p_seed_t": np.array([stats.t_test_p(r) for r in d_seed]),
           "p_seed_wilcoxon": np.array([stats.wilcoxon_p(r) for r in d_seed]),
           "p_task_permutation": np.atleast_1d(stats.sign_flip_test(d_task, resamples=resamples, rng=rng))}
    if d_seed.shape[1] < 2:
        for name in ("p_seed", "p_seed_t", "p_seed_wilcoxon"):
            out[name] = np.full(d_seed.shape[0], np.nan)
    out["p_task_wilcoxon"] = np.array([stats.wilcoxon_p(r) for r in d_task])
    wtl = [stats.wins_ties_losses(r) for r in d_task]
    out["p_task_sign"] = np.array([stats.sign_test(w, lo) for w, _, lo in wtl])
    return out


def unpaired_tests(cand: np.ndarray, base: np.ndarray, *, resamples: int, rng: np.random.Generator
                   ) -> dict[str, np.ndarray]:
    """`--unpaired`: the runs of a seed share no random numbers, so the seed-level tests
    compare the per-seed means of the two arms as independent samples: p_seed = two-sample
    permutation test, p_seed_t = Welch's t-test, p_seed_wilcoxon = Mann-Whitney U. The
    task-level tests stay paired by task (the tasks are shared), conditional as always.
    cand, base: (rows, seeds, tasks)."""
    a, b = cand.mean(axis=2), base.mean(axis=2)  # (rows, seeds)
    out = paired_tests(cand - base, resamples=resamples, rng=rng)
    if a.shape[1] < 2:
        return out
    out["p_seed"] = stats.two_sample_permutation_test(a, b, resamples=resamples, rng=rng)
    out["p_seed_t"] = np.array([_welch_p(x, y) for x, y in zip(a, b)])
    out["p_seed_wilcoxon"] = np.array([float(sps.mannwhitneyu(x, y).pvalue) if np.ptp(np.r_[x, y]) > 0 else 1.0
                                       for x, y in zip(stats.exact_ties(a), stats.exact_ties(b))])
    return out


def _welch_p(x: np.ndarray, y: np.ndarray) -> float:
    se, _ = welch_se_df(x, y)
    if se == 0:
        return 1.0 if x.mean() == y.mean() else 0.0
    return float(sps.ttest_ind(x, y, equal_var=False).pvalue)


def welch_se_df(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Standard error of mean(x) - mean(y) for independent samples and its Welch df."""
    vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    se = float(np.sqrt(vx + vy))
    if se == 0:
        return 0.0, float(x.size + y.size - 2)
    return se, float((vx + vy) ** 2 / (vx ** 2 / (x.size - 1) + vy ** 2 / (y.size - 1)))


def seed_spread(cand: np.ndarray, base: np.ndarray, unpaired: bool) -> dict:
    """Per-seed spread of one row: sd_seed (paired: sd of d_s; unpaired: the root mean of
    the two arms' per-seed variances), se_seed and df_seed of delta (paired: sd / sqrt(S),
    S - 1; unpaired: Welch), skew_seed (skewness of d_s, paired only). cand, base: (seeds, tasks)."""
    a, b = cand.mean(axis=1), base.mean(axis=1)
    n = a.size
    if n < 2:
        return {"sd_seed": np.nan, "se_seed": np.nan, "df_seed": np.nan, "skew_seed": np.nan}
    if unpaired:
        se, df = welch_se_df(a, b)
        sd = float(np.sqrt((a.var(ddof=1) + b.var(ddof=1)) / 2))
        return {"sd_seed": sd, "se_seed": se, "df_seed": df, "skew_seed": np.nan}
    d = stats.exact_ties(a - b)
    sd = float(d.std(ddof=1))
    return {"sd_seed": sd, "se_seed": sd / np.sqrt(n), "df_seed": float(n - 1), "skew_seed": stats.skewness(d)}


def floor_of(n: int, resamples: int, unpaired: bool = False) -> tuple[float, bool]:
    """(smallest attainable p, exact?) of the seed-level permutation test at n seeds per arm."""
    from math import comb

    if n < 2:
        return float("nan"), False
    if unpaired:
        c = comb(2 * n, n)
        return (2.0 / c, True) if c <= resamples else (1.0 / (resamples + 1), False)
    exact = n <= 16 or 2 ** n <= resamples
    return stats.p_floor(n, resamples), exact


#: the effect `seeds_needed` plans for by default (--target-delta): two points on a metric in [0, 1], the size
#: of the gains the paper reports (+1.3 points on 147 tasks); a stated design target, never the current mde
DEFAULT_TARGET_DELTA = 0.02


def design(delta: float, se: float, df: float, n: int, *, family: int, alpha: float, resamples: int,
           unpaired: bool = False, target: float | None = None, power: float = 0.8) -> dict:
    """Power of the procedure actually used, for one row.

    level: the per-comparison threshold of the headline procedure (alpha / family, Holm's
    first step; family = candidates x suites on the primary metric, or the candidate's
    metrics for the max-T secondaries), rounded down to what the permutation test over
    n seeds can attain (0 when its floor is above it). mde: the smallest true delta that
    test detects with ``power`` -- paired: the sign-flip test's own power near its floor
    (`stats.mde_effect`, times the sd of d_s), the t approximation far above it; unpaired:
    Welch's t at that level -- inf when the level is 0 or the mde exceeds 1, the widest a
    difference of metrics in [0, 1] can be. target_delta: ``target`` or, by default,
    DEFAULT_TARGET_DELTA (a stated design effect, so seeds_needed is not the current seed
    count by construction). seeds_needed: a design count, never post-hoc -- the seeds per
    arm at which the same procedure detects target_delta with ``power``, with the per-seed
    sd of these runs."""
    floor, exact = floor_of(n, resamples, unpaired)
    target = DEFAULT_TARGET_DELTA if target is None else target
    if n < 2 or not np.isfinite(se):
        return {"mde": np.nan, "target_delta": float(target), "seeds_needed": np.nan, "p_floor": floor}
    level = stats.attainable_level(alpha / family, floor, exact)
    sd = se * np.sqrt(n / 2.0) if unpaired else se * np.sqrt(n)
    if unpaired or se == 0:   # se 0: mde 0 where a rejection is attainable, else inf (mde_se's cases)
        m = stats.mde_se(se, df, level, power)
    else:
        m = stats.mde_effect(n, level, power, exact) * sd
    m = m if m <= 1.0 else float("inf")
    need = stats.seeds_needed(target, sd, alpha, power, family=family, resamples=resamples, unpaired=unpaired)
    return {"mde": m, "target_delta": float(target), "seeds_needed": need, "p_floor": floor}


def headline(paired: pd.DataFrame, alpha: float, resamples: int, target_delta: float | None = None
             ) -> pd.DataFrame:
    """The headline procedure on the rows of paired.csv (every suite and candidate).

    Family: the primary-metric rows of every candidate x suite; p_holm = Holm over that
    family of p_seed. ci_low/ci_high: the t(df) interval of mean(d_s) over seeds (target:
    these tasks, new training runs) at the Bonferroni level alpha / family, simultaneous
    over the family; a non-rejected row (p_holm >= alpha) whose interval excludes 0 is
    widened to reach 0 (ci_widened), which only adds coverage, so an interval that
    excludes 0 always has p_holm < alpha. Secondary rows: the same with p_maxt (max-T
    over the candidate's metrics) and family = those metrics. mde, target_delta,
    seeds_needed: `design` for the row's family (target_delta applies to the primary; the
    secondaries plan for DEFAULT_TARGET_DELTA)."""
    out = paired.copy()
    prim = (out["role"] == "primary").to_numpy()
    out["p_holm"] = np.nan
    out.loc[prim, "p_holm"] = stats.adjust(out.loc[prim, "p_seed"].to_numpy(dtype=float), "holm")
    n_primary = int(np.isfinite(out.loc[prim, "p_seed"].to_numpy(dtype=float)).sum())
    per_cand = out.groupby(["suite", "candidate"])["metric"].transform("size").to_numpy()
    family = np.where(prim, max(n_primary, 1), per_cand)
    cols = {k: [] for k in ("family", "ci_level", "ci_low", "ci_high", "ci_widened", "mde", "target_delta",
                            "seeds_needed", "p_floor")}
    for i, r in enumerate(out.itertuples(index=False)):
        fam = int(family[i])
        coverage = 1 - alpha / fam   # of the simultaneous interval (reports.readings.intervals: level = the coverage)
        lo, hi = intervals.t_interval(r.delta, r.se_seed, r.df_seed, coverage)
        p_adj = r.p_holm if prim[i] else r.p_maxt
        widened = bool(np.isfinite(lo) and not (p_adj < alpha) and (lo > 0 or hi < 0))
        if widened:
            lo, hi = min(lo, 0.0), max(hi, 0.0)
        d = design(r.delta, r.se_seed, r.df_seed, int(r.n_seeds), family=fam, alpha=alpha, resamples=resamples,
                   unpaired=r.pairing == "unpaired", target=target_delta if prim[i] else None)
        for k, v in (("family", fam), ("ci_level", coverage), ("ci_low", lo), ("ci_high", hi),
                     ("ci_widened", widened), *d.items()):
            cols[k].append(v)
    for k, v in cols.items():
        out[k] = v
    return out


def false_positive_rates(pvalues: dict[str, np.ndarray], alpha: float = 0.05, confidence: float = 0.95
                         ) -> pd.DataFrame:
    """Empirical false-positive rate of each test over K null comparisons.

    pvalues: {test: (K,) p-values of A/A comparisons}; NaN p-values are left out.
    Returns test, blocks, rejections (p < alpha), fpr and the exact (Clopper-Pearson)
    binomial interval of scipy's binomtest(...).proportion_ci.
    """
    rows = []
    for name, p in pvalues.items():
        p = np.asarray(p, dtype=np.float64)
        p = p[np.isfinite(p)]
        k, n = int((p < alpha).sum()), int(p.size)
        lo, hi = (sps.binomtest(k, n).proportion_ci(confidence) if n else (np.nan, np.nan))
        rows.append({"test": name, "blocks": n, "rejections": k, "fpr": k / n if n else np.nan,
                     "fpr_low": float(lo), "fpr_high": float(hi)})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ the page's error rate

#: within-seed relabelings behind `page_error_rate` (Monte-Carlo sd of a rate of 0.2: 0.04; about 1 s of a
#: demo-sized report, 8 designs x 10 seeds x 2 suites)
PAGE_DRAWS = 100


@dataclass
class SuiteFamilies:
    """What one suite's flags are computed from: x (metrics, policies, seeds, tasks), the
    all-policy rectangle; the baseline's index in the policies; the primary metric's index
    in the metrics (None: every metric secondary); categories (tasks,)."""

    x: np.ndarray
    baseline: int
    head: int | None
    categories: np.ndarray


def page_flags(suites: list[SuiteFamilies], alpha: float, *, resamples: int, rng: np.random.Generator
               ) -> tuple[bool, bool]:
    """(the headline table flags a row, the categories flag one) by the report's own tests:
    a primary row when Holm over every candidate x suite rejects it (some rejection exactly
    when min p_seed * m < alpha); a secondary row when its max-T p (over the candidate's
    metrics) is below alpha; a category when it regresses (delta < 0 and its seed-level p,
    BH-adjusted over the categories of the candidate and metric, below alpha)."""
    prim, table, cats = [], False, False
    for su in suites:
        m, p, s, _ = su.x.shape
        cands = [j for j in range(p) if j != su.baseline]
        if s < 2 or not cands:
            continue
        d = su.x[:, cands] - su.x[:, [su.baseline]]       # (metrics, C, seeds, tasks)
        d_seed = d.mean(axis=3)                            # (metrics, C, seeds)
        if su.head is not None:
            prim.append(np.atleast_1d(stats.sign_flip_test(d_seed[su.head], resamples=resamples, rng=rng)))
        sec = [i for i in range(m) if i != su.head]
        if sec and not table:
            table = bool((stats.max_t_sign_flip(d_seed, resamples=resamples, rng=rng)[sec] < alpha).any())
        if not cats:
            labels = sorted(set(su.categories.tolist()))
            dc = np.stack([d[..., su.categories == k].mean(axis=3) for k in labels], axis=2)  # (m, C, K, seeds)
            pc = stats.sign_flip_test(dc.reshape(-1, s), resamples=resamples, rng=rng).reshape(dc.shape[:3])
            cats = bool((bh_reject(pc, alpha) & (dc.mean(axis=3) < 0)).any())
    if prim:
        allp = np.concatenate(prim)
        allp = allp[np.isfinite(allp)]
        table = table or bool(allp.size and allp.min() * allp.size < alpha)
    return table, cats


def bh_reject(p: np.ndarray, alpha: float) -> np.ndarray:
    """Benjamini-Hochberg over the last axis: True where the BH-adjusted p is below alpha
    (`stats.adjust(p, "fdr_bh") < alpha`, vectorised over the leading axes; nan never rejects)."""
    k = p.shape[-1]
    q = np.where(np.isfinite(p), p, np.inf)
    order = np.sort(q, axis=-1)
    below = order * k / np.arange(1, k + 1) < alpha
    last = np.where(below.any(axis=-1), k - 1 - np.argmax(below[..., ::-1], axis=-1), -1)
    cut = np.where(last >= 0, np.take_along_axis(order, np.maximum(last, 0)[..., None], axis=-1)[..., 0], -np.inf)
    return q <= cut[..., None]


def page_error_rate(suites: list[SuiteFamilies], alpha: float, *, resamples: int, rng: np.random.Generator,
                    draws: int = PAGE_DRAWS) -> dict:
    """The chance, under no effect at all, that the page shows at least one flagged row (the
    headline table, every metric, or a regressing category), for THIS report's families:
    the policies' labels are permuted within each seed (a seed's runs swap labels in every
    suite together: under no effect they are exchangeable), ``draws`` times, and
    `page_flags` recomputed. Each family holds alpha; the page, the union of many, does not.
    Returns rate, rate_table, rate_categories, draws and the rate's Monte-Carlo sd."""
    hits = np.zeros((draws, 2), dtype=bool)
    n_pol = {su.x.shape[1] for su in suites}
    for r in range(draws):
        seeds = max(su.x.shape[2] for su in suites)
        perms = [rng.permutation(max(n_pol)) for _ in range(seeds)] if len(n_pol) == 1 else None
        shuffled = []
        for su in suites:
            m, p, s, t = su.x.shape
            order = [perms[i] if perms is not None else rng.permutation(p) for i in range(s)]
            x = np.stack([su.x[:, order[i], i] for i in range(s)], axis=2)
            shuffled.append(SuiteFamilies(x, su.baseline, su.head, su.categories))
        hits[r] = page_flags(shuffled, alpha, resamples=resamples, rng=rng)
    both = hits.any(axis=1)
    rate = float(both.mean())
    return {"rate": rate, "rate_table": float(hits[:, 0].mean()), "rate_categories": float(hits[:, 1].mean()),
            "draws": draws, "mc_sd": float(np.sqrt(max(rate * (1 - rate), 1e-12) / draws))}
