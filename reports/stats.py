"""Hypothesis tests over paired policy comparisons and their power (no I/O, no plotting).

Every function works on numpy arrays; axis order is stated in words. Randomness only
through a passed ``np.random.Generator``. The tests themselves come from scipy /
statsmodels; this module shapes the data for them: `exact_ties`, the sign-flip test (exact
for <= 16 units), t / Wilcoxon / sign tests, max-T over metrics, the two-sample permutation
test, Holm, the attainable level of the sign-flip test, MDE / seeds needed, McNemar and its
bounds from marginals. pass@k: `reports.passk`; the crossed bootstrap: `reports.bootstrap`;
intervals: `reports.readings.intervals`.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
from statsmodels.stats.multitest import multipletests
from policies.errors import UserError


def exact_ties(d, digits: int = 12) -> np.ndarray:
    """``d`` rounded to ``digits`` significant digits of its largest magnitude, so that
    differences that are equal as rationals (k/3 - j/3 computed in different orders) are
    equal floats and float noise around zero is an exact zero. Applied before every
    rank-, sign- and tie-based test. d: any shape (rounded as one set of values)."""
    d = np.asarray(d, dtype=np.float64)
    finite = np.abs(d[np.isfinite(d)])
    top = float(finite.max()) if finite.size else 0.0
    if top == 0.0:
        return d.copy()
    decimals = digits - 1 - int(np.floor(np.log10(top)))
    return np.round(d, decimals) + 0.0  # + 0.0 turns -0.0 into 0.0


def _sign_patterns(n: int, resamples: int, rng: np.random.Generator, exact_max: int):
    """(patterns, n) of +-1 and whether they are all 2**n patterns (then the identity is one of them)."""
    if n <= exact_max or 2 ** n <= resamples:
        bits = (np.arange(2 ** n)[:, None] >> np.arange(n)[None, :]) & 1
        return 1.0 - 2.0 * bits, True
    return 1.0 - 2.0 * rng.integers(0, 2, size=(resamples, n)), False


def sign_flip_test(d: np.ndarray, *, resamples: int, rng: np.random.Generator, exact_max: int = 16,
                   chunk: int = 2000):
    """Two-sided sign-flip permutation test of mean(d) = 0 over the last axis.

    d: (n,) -> float, or (rows, n) -> (rows,) p-values (the sign patterns shared by the
    rows). Exact (all 2**n patterns enumerated, p = share of patterns with |mean| >= the
    observed one) when n <= exact_max or 2**n <= resamples; otherwise Monte Carlo with
    ``resamples`` random patterns from ``rng`` and p = (1 + hits) / (resamples + 1), so
    the smallest attainable p is 2 / 2**n (exact) or 1 / (resamples + 1). Differences are
    passed through `exact_ties`; a row of zeros gets p = 1; n = 0 -> nan.
    """
    d = exact_ties(d)
    rows = np.atleast_2d(d)
    n = rows.shape[1]
    if n == 0:
        p = np.full(rows.shape[0], np.nan)
        return float(p[0]) if d.ndim == 1 else p
    observed = np.abs(rows.sum(axis=1))  # (rows,)
    tol = 1e-9 * np.abs(rows).sum(axis=1)  # relative: p does not depend on the unit of d
    signs, exact = _sign_patterns(n, resamples, rng, exact_max)
    hits = np.zeros(rows.shape[0])
    for start in range(0, signs.shape[0], chunk):
        flipped = np.abs(signs[start:start + chunk] @ rows.T)  # (patterns, rows)
        hits += (flipped >= observed - tol).sum(axis=0)
    p = hits / signs.shape[0] if exact else (1.0 + hits) / (signs.shape[0] + 1.0)
    p = np.minimum(1.0, p)
    p[np.all(rows == 0, axis=1)] = 1.0
    return float(p[0]) if d.ndim == 1 else p


def p_floor(n: int, resamples: int, exact_max: int = 16) -> float:
    """Smallest p `sign_flip_test` can return for n units: 2 / 2**n when exact, else
    1 / (resamples + 1)."""
    if n < 1:
        return float("nan")
    if n <= exact_max or 2 ** n <= resamples:
        return 2.0 / 2 ** n
    return 1.0 / (resamples + 1)


def t_test_p(d: np.ndarray) -> float:
    """Two-sided one-sample t-test of mean(d) = 0 (= the paired t-test of the two arms,
    scipy ttest_1samp). Fewer than 2 values -> nan; all zero -> 1; constant non-zero -> 0."""
    d = exact_ties(d)
    if d.size < 2:
        return float("nan")
    if np.all(d == d[0]):
        return 1.0 if d[0] == 0 else 0.0
    return float(sps.ttest_1samp(d, 0.0).pvalue)


def t_test_greater_p(x: np.ndarray) -> float:
    """One-sided one-sample t-test of mean(x) > 0 (scipy ttest_1samp, alternative "greater"):
    the test behind `hb stress`'s "captures at least half" (x_s = d_s - 0.5 g_s). Fewer than 2
    values -> nan; constant -> 0 if positive, else 1."""
    x = exact_ties(x)
    if x.size < 2:
        return float("nan")
    if np.all(x == x[0]):
        return 0.0 if x[0] > 0 else 1.0
    return float(sps.ttest_1samp(x, 0.0, alternative="greater").pvalue)


def wilcoxon_p(d: np.ndarray) -> float:
    """Wilcoxon signed-rank p (zero_method="zsplit") on `exact_ties` differences. All
    differences zero -> 1.0 (no evidence of any difference; scipy would return nan);
    empty -> nan.

    The exact null distribution is used for <= 50 values without zeros or ties, the
    tie-corrected normal approximation otherwise (scipy's "auto" would fall back to a
    slow Monte-Carlo permutation there; the sign-flip test is our permutation test).
    The approximation can fall below what any signed-rank test on these values can
    give: with n non-zero values the 2**n equally likely sign patterns put the
    smallest two-sided p at 2 / 2**n, so p is clipped there (ties included).
    """
    d = exact_ties(d)
    if d.size == 0:
        return float("nan")
    if np.all(d == 0):
        return 1.0
    a = np.abs(d)
    clean = d.size <= 50 and not (a == 0).any() and np.unique(a).size == a.size
    p = float(sps.wilcoxon(d, zero_method="zsplit", method="exact" if clean else "approx").pvalue)
    return min(1.0, max(p, 2.0 ** (1 - int((d != 0).sum()))))   # = 2 / 2**n, no overflow at n > 1023


def wins_ties_losses(d: np.ndarray) -> tuple[int, int, int]:
    d = exact_ties(d)
    return int((d > 0).sum()), int((d == 0).sum()), int((d < 0).sum())


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test on the non-tied tasks; no non-tied task -> 1.0."""
    if wins + losses == 0:
        return 1.0
    return float(sps.binomtest(wins, wins + losses, 0.5).pvalue)


def adjust(p: np.ndarray, method: str) -> np.ndarray:
    """Multiplicity adjustment ("holm", or a statsmodels method such as "fdr_bh") ignoring
    NaNs. Holm is computed here (adjusted p_(i) = max over j <= i of min(1, (m - j + 1)
    p_(j)), the same values as statsmodels, whose "holm" costs ~50 ms a call)."""
    p = np.asarray(p, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    ok = np.isfinite(p)
    if ok.any() and method == "holm":
        q = p[ok]
        order = np.argsort(q, kind="stable")
        steps = np.minimum(1.0, (q.size - np.arange(q.size)) * q[order])
        adj = np.empty(q.size)
        adj[order] = np.maximum.accumulate(steps)
        out[ok] = adj
    elif ok.any():
        out[ok] = multipletests(p[ok], method=method)[1]
    return out


def _t_power(effect: float, n: int, alpha: float) -> float:
    """Power of the two-sided one-sample t-test at standardised effect ``effect`` and n values."""
    return _power_nc(effect * np.sqrt(n), n - 1, alpha)


def _power_nc(nc: float, df: float, alpha: float) -> float:
    """Power of a two-sided t-test with ``df`` degrees of freedom, noncentrality ``nc``, level alpha."""
    if not alpha > 0:
        return 0.0
    crit = _t_crit(float(df), float(alpha))
    # lower tail P(T < -crit | nc) as P(T > crit | -nc): scipy's nct.cdf returns nan there
    # for large nc (e.g. df = 1, nc = 11.3), which broke the MDE search at 2 seeds
    return float(sps.nct.sf(crit, df, nc) + sps.nct.sf(crit, df, -nc))


@lru_cache(maxsize=4096)
def _t_crit(df: float, alpha: float) -> float:
    return float(sps.t.ppf(1 - alpha / 2, df))


@lru_cache(maxsize=4096)
def _nc_for_power(df: float, alpha: float, power: float) -> float:
    """The noncentrality at which the two-sided t-test (df, level alpha) has ``power`` (brentq;
    cached: every row with the same seeds and family shares it)."""
    from scipy.optimize import brentq

    hi = 1.0
    while _power_nc(hi, df, alpha) < power:
        hi *= 2.0
    return float(brentq(lambda nc: _power_nc(nc, df, alpha) - power, 0.0, hi, xtol=1e-12, rtol=1e-12))


def attainable_level(alpha: float, step: float, exact: bool) -> float:
    """The size of the rule "reject when p < alpha" for a test whose exact p-values are
    multiples of ``step`` (sign flips over n seeds: step = 2 / 2**n): the largest multiple
    of step below alpha (0 when even the smallest p is >= alpha). Monte Carlo: alpha."""
    if not exact:
        return float(alpha)
    return float(step * max(np.ceil(alpha / step - 1e-9) - 1, 0))


def procedure_level(n: int, alpha: float, family: int, resamples: int, exact_max: int = 16) -> float:
    """The per-comparison level of the headline procedure: the sign-flip test over n
    seeds inside Holm over ``family`` comparisons; a single true effect among nulls is
    rejected when its p < alpha / family (Holm's first step), so the level is that
    threshold rounded down to what the sign-flip test can attain (0: never)."""
    if n < 2 or family < 1:
        return 0.0
    exact = n <= exact_max or 2 ** n <= resamples
    return attainable_level(alpha / family, 2.0 / 2 ** n if exact else 0.0, exact)


def mde_se(se: float, df: float, alpha: float, power: float = 0.8) -> float:
    """Smallest true mean difference detected with ``power`` by a two-sided t-test at level
    ``alpha`` when the estimate has standard error ``se`` and ``df`` degrees of freedom
    (noncentral t). alpha 0 (a floor above it) or a non-finite se -> inf / nan."""
    if not np.isfinite(se) or not df >= 1:
        return float("nan")
    if alpha <= 0:
        return float("inf")
    if se == 0:
        return 0.0
    return float(_nc_for_power(float(df), float(alpha), float(power)) * se)


#: the exact sign-flip test's power is the t approximation's only where its level is many
#: attainable steps (2 / 2**n) wide; below this many steps it is computed for the test itself
#: (`sign_flip_power`): at 10 seeds and Holm over 14 (one step) power 0.8 needs 2.01 sd of d_s,
#: the t approximation said 1.70 (power 0.63 there)
EXACT_POWER_STEPS = 16
#: normal draws of d_s behind `sign_flip_power` (Monte-Carlo sd of a power of 0.8: 0.013)
POWER_DRAWS = 1000


@lru_cache(maxsize=64)
def _power_draws(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(POWER_DRAWS, n) standard normals, the same for every effect (common random numbers:
    the simulated power is monotone in the effect), from a generator of their own; and the
    (2**n, n) sign patterns."""
    bits = (np.arange(2 ** n)[:, None] >> np.arange(n)[None, :]) & 1
    return np.random.default_rng([20261202, n]).standard_normal((POWER_DRAWS, n)), 1.0 - 2.0 * bits


def sign_flip_power(effect: float, n: int, alpha: float) -> float:
    """Power of the exact two-sided sign-flip test over n values d_s ~ N(effect, 1) (effect in
    sd units of d_s) that rejects when p <= alpha, alpha a multiple of its step 2 / 2**n
    (`attainable_level`). At one step (alpha = 2 / 2**n) only the two all-same-sign patterns
    reach the observed |sum|, so the test rejects exactly when every d_s has the same sign:
    Phi(e)**n + Phi(-e)**n. Above it, the share of `_power_draws` rejected."""
    step = 2.0 / 2 ** n
    k = int(round(alpha / step))
    if k < 1:
        return 0.0
    if k == 1:
        return float(sps.norm.cdf(effect) ** n + sps.norm.cdf(-effect) ** n)
    z, signs = _power_draws(n)
    d = z + effect                                        # (draws, n)
    observed = np.abs(d.sum(axis=1)) - 1e-9 * np.abs(d).sum(axis=1)
    hits = np.zeros(d.shape[0])
    for start in range(0, signs.shape[0], 2048):          # `sign_flip_test`'s exact p, without its ties step
        hits += (np.abs(signs[start:start + 2048] @ d.T) >= observed).sum(axis=0)
    return float((hits / signs.shape[0] <= alpha + 1e-12).mean())


@lru_cache(maxsize=4096)
def mde_effect(n: int, alpha: float, power: float = 0.8, exact: bool = True) -> float:
    """The smallest standardised effect (true mean of d_s / its sd) that the sign-flip test
    over n seeds, rejecting at p <= alpha (an attainable level), detects with ``power``: the
    test's own power (`sign_flip_power`) where alpha is fewer than EXACT_POWER_STEPS steps of
    2 / 2**n above 0, else the t approximation (noncentral t, n - 1 df). alpha 0 -> inf."""
    if alpha <= 0 or n < 2:
        return float("inf")
    if not exact or alpha / (2.0 / 2 ** n) >= EXACT_POWER_STEPS - 1e-9:
        return _nc_for_power(float(n - 1), float(alpha), float(power)) / np.sqrt(n)
    from scipy.optimize import brentq

    t_approx = _nc_for_power(float(n - 1), float(alpha), float(power)) / np.sqrt(n)
    lo, hi = 0.8 * t_approx, 1.4 * t_approx       # a bracket around the t approximation, widened if needed
    while sign_flip_power(hi, n, alpha) < power:
        lo, hi = hi, 2.0 * hi
    while lo > 0 and sign_flip_power(lo, n, alpha) >= power:
        lo, hi = lo / 2, lo
    if alpha / (2.0 / 2 ** n) < 1.5:              # one step: the closed form, solved exactly
        return float(brentq(lambda e: sign_flip_power(e, n, alpha) - power, lo, hi, xtol=1e-10))
    while hi - lo > 2e-3:                         # bisection on the simulated (step) curve
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sign_flip_power(mid, n, alpha) < power else (lo, mid)
    return float(hi)


def mde(d: np.ndarray, alpha: float, power: float = 0.8) -> float:
    """Minimum detectable mean difference of the paired t-test over the n values of d
    (one per seed) at level alpha and the given power: the standardised effect e with
    power(e, n) = power (noncentral t), times sd(d, ddof=1). n < 2 -> nan. (The report's
    `mde` is that of its headline procedure: `mde_effect` at `procedure_level`.)"""
    d = np.asarray(d, dtype=np.float64)
    if d.size < 2:
        return float("nan")
    return mde_se(float(d.std(ddof=1)) / np.sqrt(d.size), d.size - 1, alpha, power)


def seeds_needed(delta: float, sd: float, alpha: float, power: float = 0.8, most: int = 10000, *,
                 family: int = 1, resamples: int = 10000, unpaired: bool = False) -> float:
    """Design calculation: the smallest number of seeds n >= 2 at which the headline
    procedure (sign-flip over seeds at `procedure_level`, i.e. inside Holm over
    ``family`` comparisons; its own power near its floor, `mde_effect`, the t-test at
    that level above) detects a true mean difference ``delta`` with the given power, when
    per-seed differences have standard deviation ``sd`` (unpaired: sd of one arm's
    per-seed mean, two arms of n seeds, Welch t approximation).
    inf if more than ``most`` (or delta = 0), nan if sd is not finite."""
    if not np.isfinite(sd) or not np.isfinite(delta):
        return float("nan")
    if delta == 0:
        return float("inf")

    def ok(n: int) -> bool:
        level = procedure_level(n, alpha, family, resamples)
        if sd == 0:
            return level > 0
        if unpaired:
            return _power_nc(abs(delta) / (sd * np.sqrt(2.0 / n)), 2 * n - 2, level) >= power - 1e-9
        exact = n <= 16 or 2 ** n <= resamples
        return abs(delta) / sd >= mde_effect(n, level, power, exact) - 1e-9  # the mde itself counts as detected

    if not ok(most):
        return float("inf")
    lo, hi = 1, 2
    while not ok(hi):
        lo, hi = hi, min(most, hi * 2)
    while hi - lo > 1:  # power is increasing in n once the floor allows a rejection
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if not ok(mid) else (lo, mid)
    return float(hi)


def skewness(d: np.ndarray) -> float:
    """Sample skewness (adjusted Fisher-Pearson, scipy bias=False) of d; nan below 3
    values, 0 when d is constant."""
    d = np.asarray(d, dtype=np.float64)
    if d.size < 3:
        return float("nan")
    if np.allclose(d, d[0], rtol=0, atol=1e-15):
        return 0.0
    return float(sps.skew(d, bias=False))


def max_t_sign_flip(d: np.ndarray, *, resamples: int, rng: np.random.Generator, exact_max: int = 16) -> np.ndarray:
    """Single-step max-T sign-flip p-values over the rows of d: (metrics, seeds).

    Flipping seed s swaps the two runs of that seed, which flips EVERY metric of it
    together, so one pattern flips all rows at once and the joint null distribution is
    exact. Statistic per row: |sum_s e_s d_s| / sqrt(sum_s d_s**2) (the sum of squares
    does not change under flips, so rows on different scales are comparable); adjusted
    p of row m = share of patterns whose largest statistic over the rows reaches row m's
    observed one (Monte Carlo: (1 + hits) / (resamples + 1)). Controls the family-wise
    error over the rows. A row of zeros gets p = 1; fewer than 1 seed -> nan.

    d may also be (metrics, candidates, seeds): every candidate's max-T over its metrics at
    once, one set of sign patterns for all -> (metrics, candidates) (the page's error rate,
    `reports.inference.page_flags`; equal to the candidates one at a time on the same stream).
    """
    d = exact_ties(np.asarray(d, dtype=float))
    one = d.ndim < 3
    if one:
        d = np.atleast_2d(d)[:, None, :]
    m, c, n = d.shape
    if n == 0:
        return np.full((m, c), np.nan)[:, 0] if one else np.full((m, c), np.nan)
    scale = np.sqrt((d ** 2).sum(axis=2))
    zero = scale == 0
    scale[zero] = 1.0
    observed = np.abs(d.sum(axis=2)) / scale                        # (metrics, candidates)
    signs, exact = _sign_patterns(n, resamples, rng, exact_max)
    flat = d.reshape(m * c, n)
    hits = np.zeros((m, c))
    for start in range(0, signs.shape[0], 2000):
        st = np.abs(signs[start:start + 2000] @ flat.T).reshape(-1, m, c) / scale   # (patterns, metrics, cands)
        top = st.max(axis=1)                                                         # (patterns, cands)
        hits += (top[:, None, :] >= observed[None] - 1e-9).sum(axis=0)
    p = hits / signs.shape[0] if exact else (1.0 + hits) / (signs.shape[0] + 1.0)
    p = np.minimum(1.0, p)
    p[zero] = 1.0
    return p[:, 0] if one else p


def two_sample_permutation_test(a: np.ndarray, b: np.ndarray, *, resamples: int, rng: np.random.Generator
                                ) -> np.ndarray:
    """Two-sided permutation test of mean(a) = mean(b) for independent runs, per row.

    a, b: (rows, na), (rows, nb) per-seed values of two arms that share no random numbers.
    All C(na + nb, na) relabelings when that is <= resamples, else ``resamples`` random
    ones (shared by the rows) and p = (1 + hits) / (resamples + 1). Returns (rows,)."""
    from itertools import combinations
    from math import comb

    a, b = np.atleast_2d(a), np.atleast_2d(b)
    both = exact_ties(np.concatenate([a, b], axis=1))
    na, n = a.shape[1], a.shape[1] + b.shape[1]
    if na == 0 or n == na:
        return np.full(both.shape[0], np.nan)
    exact = comb(n, na) <= resamples
    if exact:
        labels = np.zeros((comb(n, na), n))
        for i, idx in enumerate(combinations(range(n), na)):
            labels[i, list(idx)] = 1.0
    else:
        labels = (np.argsort(rng.random((resamples, n)), axis=1) < na).astype(np.float64)
    weights = labels / na - (1.0 - labels) / (n - na)  # mean of the "a" group minus the other's
    observed = np.abs(both[:, :na].mean(axis=1) - both[:, na:].mean(axis=1))
    stat = np.abs(weights @ both.T)  # (labelings, rows)
    hits = (stat >= observed[None, :] - 1e-9 * np.abs(both).sum(axis=1)[None, :] / n).sum(axis=0)
    p = hits / labels.shape[0] if exact else (1.0 + hits) / (labels.shape[0] + 1.0)
    p = np.minimum(1.0, p)
    p[np.all(both == both[:, :1], axis=1)] = 1.0
    return p


def mcnemar_test(cand: np.ndarray, base: np.ndarray) -> dict:
    """Exact McNemar on paired binary outcomes (tasks,) + mid-p.

    Returns n11 (both pass), n10 (candidate only), n01 (baseline only), n00, p, mid_p.
    """
    cand = np.asarray(cand).astype(bool)
    base = np.asarray(base).astype(bool)
    n11, n10 = int((cand & base).sum()), int((cand & ~base).sum())
    n01, n00 = int((~cand & base).sum()), int((~cand & ~base).sum())
    p = float(sm_mcnemar([[n11, n10], [n01, n00]], exact=True).pvalue) if n10 + n01 else 1.0
    mid = p - float(sps.binom.pmf(min(n10, n01), n10 + n01, 0.5)) if n10 + n01 else 1.0
    return {"n11": n11, "n10": n10, "n01": n01, "n00": n00, "p": p, "mid_p": mid}


def mcnemar_exact_p(n10: int, n01: int) -> float:
    """Two-sided exact McNemar p from the discordant counts: the binomial test at p = 1/2,
    which by symmetry is min(1, 2 P(Bin(n10 + n01, 1/2) <= min(n10, n01))) (O(1))."""
    if n10 + n01 == 0:
        return 1.0
    return float(min(1.0, 2.0 * sps.binom.cdf(min(n10, n01), n10 + n01, 0.5)))


MARGINAL_MAX_N = 10 ** 9


def marginal_mcnemar_bounds(n: int, a: int, b: int) -> dict:
    """Smallest and largest exact McNemar p over every pairing consistent with marginals.

    Two systems solve a and b of the same n tasks; unpaired, the 2x2 table is unknown.
    Every feasible table has n11 in [max(0, a+b-n), min(a, b)], n10 = a - n11,
    n01 = b - n11, n00 = n - a - b + n11, so n10 - n01 = a - b is fixed and only the
    number of discordant tasks m = a + b - 2 n11 moves. For a fixed difference the exact
    p = min(1, 2 P(Bin(m, 1/2) <= (m - |a - b|) / 2)) is non-decreasing in m (adding two
    discordant tasks changes that probability by (P(X = k + 1) - P(X = k)) / 4 >= 0), so
    the smallest p is at n11 = min(a, b) and the largest at n11 = max(0, a + b - n):
    closed form, O(1) for any n <= MARGINAL_MAX_N.
    """
    for name, v in (("n", n), ("a", a), ("b", b)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise UserError(f"{name}: got {v!r}, allowed: a non-negative integer")
    if n > MARGINAL_MAX_N:
        raise UserError(f"n: got {n}, allowed: at most {MARGINAL_MAX_N:,} tasks (10**9)")
    if a > n or b > n:
        raise UserError(f"a, b: got a={a}, b={b}, allowed: 0 <= a, b <= n = {n}")
    keys = ("p", "n11", "n10", "n01", "n00")
    out = {}
    for name, n11 in (("min", min(a, b)), ("max", max(0, a + b - n))):
        n10, n01 = a - n11, b - n11
        out[name] = dict(zip(keys, (mcnemar_exact_p(n10, n01), n11, n10, n01, n - a - b + n11)))
    out["tables"] = min(a, b) - max(0, a + b - n) + 1
    return out
