"""Confidence intervals: the one home of the interval maths of `hb sim`'s summary
(`reports.readings.summary`), the references' share of the gap (`reports.readings.references`) and the reports
(`reports`). A leaf: it imports numpy only (scipy inside `t_interval`, see there).

Convention, everywhere: ``level`` is the COVERAGE of a two-sided interval (0.95: a 95%
interval, (1 - level) / 2 in each tail). A caller that holds a test level alpha passes
``1 - alpha``. (The level of a TEST, as in `reports.stats.procedure_level`, is its size
alpha: a test rejects at level alpha, an interval covers at level 1 - alpha.)

* `t_quantile(p, df)`: Student's t quantile for an integer df, in pure Python (scipy's
  import costs `hb sim` 60 ms; the series agrees with scipy to ~1e-13).
* `mean_half_width(values, level)`: the mean of ``values`` and the half-width of its
  Student-t interval (df = n - 1): `hb sim`'s "mean ± half-width over seeds".
* `t_interval(mean, se, df, level)`: (low, high) of mean -/+ t(df) se for any real df >= 1
  (Welch's too): the reports' headline interval.
* `percentile_interval(reps, level)`: the percentile interval of bootstrap replicates.
* `ratio_interval(d, g, level, n_boot=, seed=)`: mean d / mean g with the percentile
  seed-bootstrap interval of that ratio of means (kept for comparison: it under-covers at a
  few seeds, 0.82-0.89 at 6; the share uses Fieller's interval).
* `fieller_interval(d, g, level)`: mean d / mean g with Fieller's interval on the paired
  per-seed values (exact under normality): the share of the achievable gain
  (`reports.readings.references.share_of_gap`).
"""
from __future__ import annotations

import math

import numpy as np


def _t_central(theta: float, df: int) -> float:
    """P(|T| <= sqrt(df) tan(theta)) for Student's t with an integer ``df`` (Abramowitz &
    Stegun 26.7.3-4: a finite series in cos(theta))."""
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2 == 0:
        term = total = 1.0
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        return s * total
    total, term = 0.0, 1.0
    if df > 1:
        total = 1.0
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
    return 2.0 / math.pi * (theta + s * math.cos(theta) * total)


def t_quantile(p: float, df: int) -> float:
    """The p-quantile (p > 1/2) of Student's t with integer ``df`` >= 1, to double precision
    (bisection on the angle; scipy.special.stdtrit agrees to ~1e-13 and costs a 60 ms import)."""
    target, lo, hi = 2.0 * p - 1.0, 0.0, math.pi / 2
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if _t_central(mid, df) < target else (lo, mid)
    return math.sqrt(df) * math.tan(0.5 * (lo + hi))


def mean_half_width(values, level: float = 0.95) -> tuple[float, float]:
    """(mean, half-width of the two-sided Student-t interval of coverage ``level``) of the
    finite ``values`` (n of them, df = n - 1): half-width = t_{(1 + level) / 2}(n - 1) sd / sqrt(n).
    No finite value: (nan, nan); one: (its value, nan)."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return float("nan"), float("nan")
    mean = float(values.mean())
    if values.size < 2:
        return mean, float("nan")
    half = t_quantile(0.5 + level / 2, values.size - 1) * values.std(ddof=1) / np.sqrt(values.size)
    return mean, float(half)


def t_interval(mean: float, se: float, df: float, level: float = 0.95) -> tuple[float, float]:
    """(low, high) = mean -/+ t_{(1 + level) / 2}(df) se, the two-sided Student-t interval of
    coverage ``level`` for a real ``df`` (scipy's quantile: df need not be an integer).
    (nan, nan) without df >= 1, a finite se, and 0 < level < 1."""
    if not (df >= 1 and np.isfinite(se) and 0 < level < 1):
        return float("nan"), float("nan")
    from scipy import stats as sps   # here, not at the top: `hb sim` imports this module without scipy

    half = float(sps.t.ppf(0.5 + level / 2, df)) * se
    return mean - half, mean + half


def percentile_interval(reps: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """(low, high): the (1 - level) / 2 and (1 + level) / 2 quantiles over axis 0 of bootstrap
    replicates ``reps`` (replicates, ...) (numpy's linear interpolation) -> two (...) arrays."""
    tail = (1.0 - level) / 2
    lo, hi = np.quantile(reps, [tail, 1.0 - tail], axis=0)
    return lo, hi


def ratio_interval(d: np.ndarray, g: np.ndarray, level: float = 0.95, *, n_boot: int,
                   seed: int) -> tuple[float, float, float]:
    """(mean d / mean g, low, high): the ratio of means of the paired per-seed values d, g (seeds,)
    and its percentile SEED-BOOTSTRAP interval of coverage ``level`` (``n_boot`` resamples of the
    seeds with replacement from ``default_rng(seed)``, the ratio recomputed in each).
    Ratio nan when mean g <= 0; interval nan below 2 seeds, or when more than (1 - level) / 2
    of the resamples have mean g <= 0 (the ratio is unbounded there)."""
    n = len(d)
    if n == 0 or g.mean() <= 0:
        return float("nan"), float("nan"), float("nan")
    share = float(d.mean() / g.mean())
    if n < 2:
        return share, float("nan"), float("nan")
    idx = np.random.default_rng(seed).integers(n, size=(n_boot, n))
    num, den = d[idx].mean(axis=1), g[idx].mean(axis=1)
    if np.mean(den <= 0) > (1.0 - level) / 2:
        return share, float("nan"), float("nan")
    ratio = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.inf)
    lo, hi = percentile_interval(ratio, level)
    return share, float(lo), float(hi)


def fieller_interval(d, g, level: float = 0.95) -> tuple[float, float, float, bool]:
    """(mean d / mean g, low, high, bounded): FIELLER's interval of coverage ``level`` for the
    ratio theta = E[d] / E[g] of the paired per-seed values d, g (seeds,).

    For a candidate theta the per-seed e_s = d_s - theta g_s has mean 0, so theta is in the
    set where the paired t statistic of e stays within t = t_{(1 + level) / 2}(n - 1):

        (dbar - theta gbar)^2 <= t^2 (s_dd - 2 theta s_dg + theta^2 s_gg) / n

    (s: the sample (co)variances, ddof 1), i.e. a theta^2 - 2 b theta + c <= 0 with
    a = gbar^2 - t^2 s_gg / n, b = dbar gbar - t^2 s_dg / n, c = dbar^2 - t^2 s_dd / n.
    a > 0 (the denominator's own two-sided t test at 1 - level rejects, |gbar| / se > t) gives
    the bounded interval (b -/+ sqrt(b^2 - a c)) / a, which holds the point estimate. a <= 0
    gives an UNBOUNDED set (the whole line, or the line minus an interval): then bounded is
    False and low = high = nan -- the ratio has no finite interval at this seed count.
    Ratio nan when mean g <= 0; every value nan below 2 seeds or with non-finite values."""
    d, g = np.asarray(d, dtype=np.float64), np.asarray(g, dtype=np.float64)
    n = d.size
    nan = float("nan")
    if n < 2 or g.size != n or not (np.all(np.isfinite(d)) and np.all(np.isfinite(g))):
        return nan, nan, nan, False
    dbar, gbar = float(d.mean()), float(g.mean())
    ratio = dbar / gbar if gbar > 0 else nan
    cov = np.cov(np.vstack([d, g]), ddof=1)
    t2 = t_quantile(0.5 + level / 2, n - 1) ** 2 / n
    a = gbar * gbar - t2 * cov[1, 1]
    b = dbar * gbar - t2 * cov[0, 1]
    c = dbar * dbar - t2 * cov[0, 0]
    if not (a > 0 and gbar > 0):
        return ratio, nan, nan, False
    root = math.sqrt(max(b * b - a * c, 0.0))    # >= 0 when a > 0: the point estimate is inside
    return ratio, (b - root) / a, (b + root) / a, True
