"""The model-based check of a suite: a GEE logistic model success ~ C(policy) clustered by
seed (`gee_rows`), fitted in closed form from the success counts (`gee_exchangeable`); the
odds ratio's interval is `reports.readings.intervals.t_interval` of the log-odds ratio, exponentiated."""
from __future__ import annotations

import numpy as np
import pandas as pd

from reports.readings import intervals
from reports.cells import Aligned

#: the coverage of the odds ratio's interval (or_ci_low, or_ci_high)
OR_LEVEL = 0.95


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
    rows = []
    for j, cand in enumerate(cands, start=1):
        lo, hi = intervals.t_interval(params[j], bse[j], df, OR_LEVEL)   # of the log-odds ratio, t(K - 1)
        rows.append({"suite": suite, "candidate": cand, "baseline": baseline, "log_odds": params[j],
                     "se": bse[j], "p": pvals[j], "odds_ratio": float(np.exp(params[j])),
                     "or_ci_low": float(np.exp(lo)), "or_ci_high": float(np.exp(hi)),
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
