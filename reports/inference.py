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

import numpy as np
import pandas as pd
from scipy import stats as sps

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
    """
    diff = np.asarray(diff, dtype=np.float64)
    d_seed, d_task = diff.mean(axis=2), diff.mean(axis=1)  # (rows, seeds), (rows, tasks)
    out = {"p_seed": np.atleast_1d(stats.sign_flip_test(d_seed, resamples=resamples, rng=rng)),
           "p_seed_t": np.array([stats.t_test_p(r) for r in d_seed]),
           "p_seed_wilcoxon": np.array([stats.wilcoxon_p(r) for r in d_seed]),
           "p_task_permutation": np.atleast_1d(stats.sign_flip_test(d_task, resamples=resamples, rng=rng))}
    out["p_task_wilcoxon"] = np.array([stats.wilcoxon_p(r) for r in d_task])
    wtl = [stats.wins_ties_losses(r) for r in d_task]
    out["p_task_sign"] = np.array([stats.sign_test(w, lo) for w, _, lo in wtl])
    return out


def power_columns(d_seed: np.ndarray, alpha: float, resamples: int) -> dict:
    """Power beside p for one row of per-seed differences d_s: (seeds,).

    mde: the smallest true mean difference the paired t-test over these S seeds detects
    with power 0.8 at ``alpha`` (from the observed sd of d_s); seeds_needed: seeds for
    power 0.8 at the observed delta; p_floor: the smallest p the seed sign-flip test can
    give at S seeds (2 / 2**S when exact)."""
    d_seed = np.asarray(d_seed, dtype=np.float64)
    sd = float(d_seed.std(ddof=1)) if d_seed.size > 1 else float("nan")
    return {"sd_seed": sd, "mde": stats.mde(d_seed, alpha),
            "seeds_needed": stats.seeds_needed(float(d_seed.mean()), sd, alpha) if d_seed.size > 1 else np.nan,
            "p_floor": stats.p_floor(d_seed.size, resamples)}


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
