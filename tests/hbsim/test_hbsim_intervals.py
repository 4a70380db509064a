"""reports.readings.intervals, the one home of the interval maths: hand-computed cases, and one
convention for ``level`` (the coverage) across its functions."""
from __future__ import annotations

import numpy as np
import pytest

from reports.readings import intervals


@pytest.mark.parametrize("df, p, expected", [(1, 0.975, 12.706204736174707), (2, 0.975, 4.302652729749464),
                                             (4, 0.975, 2.7764451051977934), (19, 0.975, 2.0930240544083096),
                                             (2, 0.75, 0.816496580927726)])
def test_t_quantile_matches_tables(df, p, expected):
    # df = 2: closed form sqrt(2) (2p - 1) / sqrt(1 - (2p - 1)^2); others: scipy.special.stdtrit
    assert intervals.t_quantile(p, df) == pytest.approx(expected, rel=1e-12)


def test_t_quantile_closed_form_df2():
    for p in np.linspace(0.55, 0.999, 9):
        a = 2 * p - 1
        assert intervals.t_quantile(p, 2) == pytest.approx(np.sqrt(2) * a / np.sqrt(1 - a * a), rel=1e-12)


def test_mean_half_width_hand_computed():
    mean, half = intervals.mean_half_width(np.array([1.0, 2.0, 3.0]))
    # sd = 1, t_{0.975, 2} = 4.30265273 (tables)
    assert mean == 2.0 and half == pytest.approx(4.30265273 / np.sqrt(3), rel=1e-8)
    # level 0.5: t_{0.75, 2} = 0.81649658 (closed form sqrt(2) / sqrt(3))
    assert intervals.mean_half_width([1.0, 2.0, 3.0], 0.5)[1] == pytest.approx(0.81649658 / np.sqrt(3), rel=1e-8)
    assert intervals.mean_half_width([1.0, np.nan, 3.0])[0] == 2.0          # non-finite values are left out
    assert np.isnan(intervals.mean_half_width(np.array([1.0]))[1])
    assert all(np.isnan(intervals.mean_half_width(np.array([]))))


def test_t_interval_hand_computed():
    lo, hi = intervals.t_interval(1.0, 0.5, 4, 0.95)          # t_{0.975, 4} = 2.776445 (tables)
    assert (lo, hi) == pytest.approx((1 - 2.776445 * 0.5, 1 + 2.776445 * 0.5), rel=1e-6)
    lo, hi = intervals.t_interval(0.0, 1.0, 2.5, 0.9)           # a Welch df: t(2.5)'s 0.95-quantile
    assert 2.353363 < hi < 2.919986 and hi == pytest.approx(2.5582186, abs=1e-6) and lo == -hi  # t(3) < . < t(2)
    assert all(np.isnan(intervals.t_interval(1.0, 0.5, 0.5, 0.95)))    # df < 1
    assert all(np.isnan(intervals.t_interval(1.0, np.nan, 4, 0.95)))
    assert all(np.isnan(intervals.t_interval(1.0, 0.5, 4, 1.0)))       # a coverage, not a tail


@pytest.mark.parametrize("level", [0.5, 0.9, 0.95, 0.99])
def test_one_level_convention_the_two_t_forms_agree(level):
    """mean_half_width (pure Python quantile) and t_interval (scipy's) read ``level`` the
    same way: the same interval of the same values, to the series' precision."""
    x = np.random.default_rng(4).normal(size=7)
    mean, half = intervals.mean_half_width(x, level)
    lo, hi = intervals.t_interval(mean, x.std(ddof=1) / np.sqrt(x.size), x.size - 1, level)
    assert (lo, hi) == pytest.approx((mean - half, mean + half), rel=1e-11)
    # and the interval widens with the coverage
    assert half > intervals.mean_half_width(x, level - 0.1)[1]


def test_percentile_interval_hand_computed():
    reps = np.arange(101.0)                                        # quantile q of 0..100 is 100 q
    lo, hi = intervals.percentile_interval(reps, 0.9)
    assert (lo, hi) == pytest.approx((5.0, 95.0), abs=1e-9)
    lo, hi = intervals.percentile_interval(np.stack([reps, 2 * reps], axis=1), 0.5)   # per column of axis 0
    assert lo.tolist() == pytest.approx([25.0, 50.0]) and hi.tolist() == pytest.approx([75.0, 150.0])


def test_ratio_interval_is_the_seed_bootstrap_of_the_ratio_of_means():
    d, g = np.array([0.1, 0.1, 0.0, 0.2]), np.array([0.2, 0.4, 0.2, 0.4])
    share, lo, hi = intervals.ratio_interval(d, g, n_boot=4000, seed=3)
    idx = np.random.default_rng(3).integers(4, size=(4000, 4))
    want = np.quantile(d[idx].mean(axis=1) / g[idx].mean(axis=1), [0.025, 0.975])
    assert share == pytest.approx(1 / 3) and (lo, hi) == pytest.approx(tuple(want))
    narrow = intervals.ratio_interval(d, g, 0.5, n_boot=4000, seed=3)
    assert lo < narrow[1] < narrow[2] < hi                               # the same draws, a smaller coverage
    assert np.isnan(intervals.ratio_interval(d, -g, n_boot=100, seed=0)[0])                   # no gap to share
    unsure = np.array([0.5, -0.5, 0.4, -0.3])
    assert np.isnan(intervals.ratio_interval(d, unsure, n_boot=100, seed=0)[1])   # the gap's sign is unsure
    one = intervals.ratio_interval(d[:1], g[:1], n_boot=100, seed=0)
    assert one[0] == 0.5 and np.isnan(one[1])


def test_fieller_interval_hand_computed():
    d, g = np.array([0.1, 0.1, 0.0, 0.2]), np.array([0.2, 0.4, 0.2, 0.4])
    share, lo, hi, bounded = intervals.fieller_interval(d, g)
    # by hand: dbar 0.1, gbar 0.3, s_dd = s_dg = 0.02 / 3, s_gg = 0.04 / 3, t_{0.975, 3} = 3.182446305 (tables)
    t2 = 3.182446305 ** 2 / 4
    a, b, c = 0.09 - t2 * 0.04 / 3, 0.03 - t2 * 0.02 / 3, 0.01 - t2 * 0.02 / 3
    root = np.sqrt(b * b - a * c)
    assert bounded and share == pytest.approx(1 / 3)
    assert (lo, hi) == pytest.approx(((b - root) / a, (b + root) / a), rel=1e-8)
    assert lo == pytest.approx(-0.18713, abs=1e-4) and hi == pytest.approx(0.65371, abs=1e-4)
    # at either bound the paired t statistic of e = d - theta g is exactly the t quantile (the pivot)
    for theta in (lo, hi):
        e = d - theta * g
        assert abs(e.mean()) / (e.std(ddof=1) / 2) == pytest.approx(3.182446305, rel=1e-7)
    assert intervals.fieller_interval(d, g, 0.5)[1] > lo                       # a smaller coverage, narrower
    # d = g: the share is exactly 1 with a zero-width interval (the reference against itself)
    assert intervals.fieller_interval(g, g)[1:] == pytest.approx((1.0, 1.0, True))


def test_fieller_interval_is_unbounded_where_the_gap_is_not_significant():
    d = np.array([0.1, 0.1, 0.0, 0.2])
    unsure = np.array([0.5, -0.5, 0.4, -0.3])        # mean 0.025, t = 0.1: the denominator is not significant
    share, lo, hi, bounded = intervals.fieller_interval(d, unsure)
    assert not bounded and np.isnan(lo) and np.isnan(hi) and share == pytest.approx(4.0)
    assert not intervals.fieller_interval(d, -np.array([0.2, 0.4, 0.2, 0.4]))[3]    # a negative gap: no share
    assert np.isnan(intervals.fieller_interval(d, -np.array([0.2, 0.4, 0.2, 0.4]))[0])
    assert not intervals.fieller_interval(d[:1], unsure[:1])[3]                     # one seed
    assert not intervals.fieller_interval(np.array([0.1, np.nan]), np.array([0.2, 0.3]))[3]
