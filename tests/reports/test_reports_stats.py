"""Hand-computed cases for the statistics of reports.stats, reports.passk, reports.metrics and
reports.bootstrap."""
import itertools
from math import comb

import numpy as np
import pytest
from scipy import stats as sps

from reports.readings import intervals
from reports import bootstrap, metrics, passk, stats


def test_pass_at_k_matches_closed_form_including_n_minus_c_below_k():
    n = np.array([5, 5, 5, 5, 10, 3, 200])
    c = np.array([0, 1, 3, 5, 7, 1, 2])
    k = 3
    want = [1 - comb(int(a) - int(b), k) / comb(int(a), k) for a, b in zip(n, c)]
    got = passk.pass_at_k(n, c, k)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    # n - c < k: c = 3 of n = 5 leaves 2 failures < 3 -> exactly 1
    assert got[2] == 1.0 and got[3] == 1.0 and got[0] == 0.0
    assert got[4] == pytest.approx(1 - 1 / 120)  # C(3,3)/C(10,3)
    assert passk.pass_at_k(4, 1, 1) == pytest.approx(0.25)


def test_pass_hat_k_is_ratio_of_binomials():
    n = np.array([3, 3, 3, 5, 10])
    c = np.array([0, 2, 3, 4, 7])
    got = passk.pass_hat_k(n, c, 3)
    want = [comb(int(b), 3) / comb(int(a), 3) for a, b in zip(n, c)]
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert got.tolist()[:3] == [0.0, 0.0, 1.0]
    assert got[3] == pytest.approx(4 / 10) and got[4] == pytest.approx(35 / 120)


def test_pass_k_rejects_k_above_attempts():
    with pytest.raises(ValueError, match="k"):
        passk.pass_at_k([2, 2], [1, 0], 3)
    with pytest.raises(ValueError, match="k"):
        passk.pass_hat_k([2], [1], 0)


def test_sign_flip_p_is_exact_on_six_tasks():
    d = np.array([0.3, -0.1, 0.2, 0.5, 0.05, 0.4])
    observed = abs(d.mean())
    hits = 0
    for signs in itertools.product([-1.0, 1.0], repeat=6):  # all 64 sign patterns
        hits += abs((np.array(signs) * d).mean()) >= observed - 1e-12
    want = hits / 64
    # |1.35 - 2 s_F| >= 1.35 for the flipped set F: s_F <= 0 (F = {}, {-0.1}, {-0.1, 0.05})
    # or s_F >= 1.35 (their complements): 6 of 64 patterns
    assert want == pytest.approx(6 / 64)
    got = stats.sign_flip_test(d, resamples=10000, rng=np.random.default_rng(0))
    assert got == pytest.approx(want, abs=1e-12)
    rows = stats.sign_flip_test(np.stack([d, np.zeros(6)]), resamples=10000, rng=np.random.default_rng(0))
    np.testing.assert_allclose(rows, [want, 1.0])


def test_holm_and_bh_on_known_vectors():
    p = np.array([0.01, 0.04, 0.03, 0.005])
    # Holm: sorted 0.005*4, 0.01*3, 0.03*2, 0.04*1 with running max
    np.testing.assert_allclose(stats.adjust(p, "holm"), [0.03, 0.06, 0.06, 0.02])
    # BH: sorted p*(m/rank) = 0.02, 0.02, 0.04, 0.04 with running min from the top
    np.testing.assert_allclose(stats.adjust(p, "fdr_bh"), [0.02, 0.04, 0.04, 0.02])
    np.testing.assert_allclose(stats.adjust(np.array([0.02, np.nan]), "holm"), [0.02, np.nan])


def test_wilcoxon_sign_test_and_wins():
    d = np.array([0.5, 0.0, -0.25, 1.0, 0.75])
    assert stats.wins_ties_losses(d) == (3, 1, 1)
    assert stats.sign_test(3, 1) == pytest.approx(0.625)  # 2 * P(X >= 3 | 4, 1/2) = 2 * 5/16
    assert stats.sign_test(0, 0) == 1.0
    assert stats.wilcoxon_p(np.zeros(4)) == 1.0
    # with a zero difference: tie-corrected normal approximation of scipy
    assert stats.wilcoxon_p(d) == pytest.approx(sps.wilcoxon(d, zero_method="zsplit", method="approx").pvalue)
    # no zeros/ties: exact. ranks of |d| = 2, 1, 4, 3; W- = 1; P(W- <= 1) = 2/16, two-sided 0.25
    assert stats.wilcoxon_p(np.array([0.5, -0.25, 1.0, 0.75])) == pytest.approx(0.25)
    assert np.isnan(stats.wilcoxon_p(np.array([])))


def test_mde_and_seeds_needed_match_statsmodels_t_power():
    from statsmodels.stats.power import TTestPower

    d = np.array([0.1, -0.1, 0.2, 0.0, 0.15])  # one paired difference per seed
    sd = np.std(d, ddof=1)
    want = TTestPower().solve_power(nobs=5, alpha=0.05, power=0.8) * sd
    assert stats.mde(d, 0.05) == pytest.approx(want, rel=1e-6)
    # at n = 5 the t-based MDE is larger than the normal one (z 2.8016 * sd / sqrt(5))
    assert stats.mde(d, 0.05) > 2.8016 * sd / np.sqrt(5)
    assert np.isnan(stats.mde(d[:1], 0.05))
    # seeds needed: the smallest n whose power reaches 0.8 (beyond the sign-flip floor, at n > 16
    # Monte Carlo with 10,000 resamples: the level is alpha itself, as for the t-test)
    n = stats.seeds_needed(0.05, sd, 0.05)
    assert n > 16
    power = TTestPower().power(effect_size=0.05 / sd, nobs=n, alpha=0.05)
    power_less = TTestPower().power(effect_size=0.05 / sd, nobs=n - 1, alpha=0.05)
    assert power >= 0.8 > power_less
    assert stats.seeds_needed(0.0, sd, 0.05) == float("inf")
    assert stats.seeds_needed(1e-6, 1.0, 0.05) == float("inf")  # beyond 10,000 seeds


def test_exact_ties_make_equal_rationals_equal():
    a = np.array([1 - 2 / 3, 1 / 3 - 0.0, (0.1 + 0.2) - 0.3, -1e-17])
    assert a[0] != a[1] and a[2] != 0.0  # the float noise the rounding removes
    r = stats.exact_ties(a)
    assert r[0] == r[1] == 0.333333333333 and r[2] == 0.0 and r[3] == 0.0
    assert str(r[3]) == "0.0"  # no negative zero
    tiny = np.array([1e-20, 3e-20])  # 12 digits relative to the data, not absolute
    np.testing.assert_allclose(stats.exact_ties(tiny), tiny, rtol=1e-11)


def test_wilcoxon_on_thirds_equals_the_tie_correct_value_on_exact_integers():
    # pass@1 with 3 attempts: per-task values k/3, differences (k - j)/3 computed as floats
    rng = np.random.default_rng(4)
    kc, kb = rng.integers(0, 4, 40), rng.integers(0, 4, 40)
    d_float = np.array([a / 3 - b / 3 for a, b in zip(kc, kb)])
    d_float += rng.choice([0.0, 1e-16, -1e-16], 40) * (d_float != 0)  # summation-order noise
    d_int = (kc - kb).astype(np.int64)  # the same differences times 3, exact
    want = sps.wilcoxon(d_int, zero_method="zsplit", method="approx").pvalue
    assert stats.wilcoxon_p(d_float) == pytest.approx(want, rel=1e-12)
    raw = sps.wilcoxon(d_float, zero_method="zsplit", method="approx").pvalue
    assert raw != pytest.approx(want, rel=1e-6)  # without the rounding, ties break
    assert stats.wins_ties_losses(d_float) == (int((d_int > 0).sum()), int((d_int == 0).sum()),
                                               int((d_int < 0).sum()))


def test_seed_sign_flip_is_exact_enumeration_and_vectorised():
    d = np.array([0.2, 0.1, 0.3, -0.05, 0.15])  # 5 seeds: 32 patterns
    obs = abs(d.sum())
    want = np.mean([abs((np.array(s) * d).sum()) >= obs - 1e-12
                    for s in itertools.product([-1.0, 1.0], repeat=5)])
    assert want == pytest.approx(4 / 32)  # the identity, flipping -0.05 (sum 0.8), and their mirrors
    got = stats.sign_flip_test(d, resamples=10, rng=np.random.default_rng(0))  # exact regardless
    assert got == pytest.approx(want)
    assert stats.p_floor(5, 10000) == pytest.approx(2 / 32)
    assert stats.sign_flip_test(np.abs(d), resamples=10, rng=None) == pytest.approx(2 / 32)
    assert stats.p_floor(200, 10000) == pytest.approx(1 / 10001)
    # Monte Carlo above exact_max: (1 + hits) / (B + 1), reproducible from the generator
    big = np.full(30, 0.1)
    p = stats.sign_flip_test(big, resamples=999, rng=np.random.default_rng(1))
    assert p == pytest.approx(1 / 1000)
    assert p == stats.sign_flip_test(big, resamples=999, rng=np.random.default_rng(1))


def test_t_test_p_over_seeds():
    d = np.array([0.1, 0.3, 0.2, -0.1])
    assert stats.t_test_p(d) == pytest.approx(sps.ttest_1samp(d, 0).pvalue)
    assert stats.t_test_p(np.zeros(3)) == 1.0 and stats.t_test_p(np.full(3, 0.2)) == 0.0
    assert np.isnan(stats.t_test_p(np.array([0.1])))


def test_mcnemar_table_and_mid_p():
    cand = np.array([1, 1, 1, 1, 1, 0, 0, 1, 0, 0])
    base = np.array([1, 0, 0, 0, 0, 0, 1, 1, 0, 0])
    r = stats.mcnemar_test(cand, base)
    assert (r["n11"], r["n10"], r["n01"], r["n00"]) == (2, 4, 1, 3)
    assert r["p"] == pytest.approx(2 * (1 + 5) / 32)  # 2 * P(X <= 1 | 5, 1/2)
    assert r["mid_p"] == pytest.approx(2 * (1 + 5) / 32 - 5 / 32)


def _brute_force_bounds(n, a, b):
    ps = []
    A = np.zeros(n, bool)
    A[:a] = True
    for ones in itertools.combinations(range(n), b):  # every pairing of B's successes with A's
        B = np.zeros(n, bool)
        B[list(ones)] = True
        ps.append(stats.mcnemar_test(A, B)["p"])
    return min(ps), max(ps)


@pytest.mark.parametrize("n,a,b", [(6, 3, 2), (7, 5, 4), (8, 2, 6), (5, 5, 0), (6, 3, 3)])
def test_marginal_mcnemar_bounds_match_brute_force(n, a, b):
    res = stats.marginal_mcnemar_bounds(n, a, b)
    lo, hi = _brute_force_bounds(n, a, b)
    assert res["min"]["p"] == pytest.approx(lo) and res["max"]["p"] == pytest.approx(hi)
    for r in (res["min"], res["max"]):
        assert r["n10"] - r["n01"] == a - b and r["n11"] + r["n10"] == a and min(r.values()) >= 0


def test_marginal_bounds_of_the_paper_counts():
    res = stats.marginal_mcnemar_bounds(161, 67, 62)
    assert (res["min"]["n10"], res["min"]["n01"]) == (5, 0)
    assert res["min"]["p"] == pytest.approx(2 / 32)
    assert (res["max"]["n10"], res["max"]["n01"]) == (67, 62)
    assert res["tables"] == 63
    with pytest.raises(ValueError, match="allowed"):
        stats.marginal_mcnemar_bounds(10, 11, 2)


def test_marginal_bounds_are_closed_form_for_huge_n():
    res = stats.marginal_mcnemar_bounds(10 ** 8, 6 * 10 ** 7, 5 * 10 ** 7)  # was O(n) binomial tests
    assert res["tables"] == 5 * 10 ** 7 - 10 ** 7 + 1
    assert (res["min"]["n10"], res["min"]["n01"]) == (10 ** 7, 0) and res["min"]["p"] == 0.0
    assert res["max"]["n11"] == 10 ** 7 and res["max"]["p"] < 1e-300
    for bad in (-1, 10 ** 9 + 1, 1.5, True):
        with pytest.raises(ValueError, match="allowed"):
            stats.marginal_mcnemar_bounds(bad, 0, 0)


def test_prob_improvement_hand_case():
    x = np.array([[1.0, 0.0], [1.0, 1.0]])  # (seeds, tasks)
    y = np.array([[0.0, 0.0], [1.0, 1.0]])
    # task 0: pairs (1,0)>,(1,1)=,(1,0)>,(1,1)= -> 3/4; task 1: (0,0)=,(0,1)<,(1,0)>,(1,1)= -> 1/2
    assert metrics.prob_improvement(x, y) == pytest.approx(0.625)
    assert metrics.iqm(np.array([0, 1, 2, 3, 4, 5, 6, 100.0])) == pytest.approx(3.5)


def test_bootstrap_reproducible_and_chunk_progress():
    x = np.random.default_rng(0).random((2, 5, 30))
    calls = []
    a = bootstrap.crossed_bootstrap(x, bootstrap.weighted_mean, resamples=2500, rng=np.random.default_rng(7),
                                progress=lambda d, t, lab: calls.append((d, t)))
    b = bootstrap.crossed_bootstrap(x, bootstrap.weighted_mean, resamples=2500, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(a, b)
    assert a.shape == (2500, 2) and calls == [(1000, 2500), (2000, 2500), (2500, 2500)]
    c = bootstrap.crossed_bootstrap(x, bootstrap.weighted_mean, resamples=2500, rng=np.random.default_rng(8))
    assert not np.array_equal(a, c)


@pytest.mark.calibration
def test_bootstrap_interval_covers_planted_delta_about_95_percent():
    rng = np.random.default_rng(1)
    hits, reps, truth = 0, 200, 0.1
    for _ in range(reps):
        # delta cube (seeds, tasks) = effect + task effect + seed effect + noise
        d = truth + rng.normal(0, 0.1, 40)[None] + rng.normal(0, 0.05, 10)[:, None] + rng.normal(0, 0.05, (10, 40))
        boot = bootstrap.crossed_bootstrap(d[None], bootstrap.weighted_mean, resamples=400, rng=rng)
        lo, hi = intervals.percentile_interval(boot, 0.95)
        hits += bool(lo[0] <= truth <= hi[0])
    assert 0.88 <= hits / reps <= 0.99


def test_bootstrap_speed(benchmark):
    x = np.random.default_rng(0).random((8, 5, 200))
    out = benchmark(lambda: bootstrap.crossed_bootstrap(x, bootstrap.weighted_mean, resamples=2000,
                                                    rng=np.random.default_rng(0)))
    assert out.shape == (2000, 8)


def test_mde_and_seeds_needed_at_two_seeds_where_scipy_nct_cdf_is_nan():
    # df = 1: scipy's nct.cdf(-crit, 1, nc) is nan for nc around 8-27, which used to stop
    # the MDE search early (0.197 instead of 11.55 sd units at 2 seeds)
    from statsmodels.stats.power import TTestPower

    d = np.array([0.0, 1.0])  # sd = 0.7071
    want = 11.549888 * np.std(d, ddof=1)  # TTestPower().solve_power(nobs=2, power=0.8); quad integral agrees
    assert stats.mde(d, 0.05) == pytest.approx(want, rel=1e-5)
    for e in (8.0, 13.0, 20.0):  # power finite and equal to statsmodels' upper tail + lower tail
        assert stats._t_power(e, 2, 0.05) == pytest.approx(
            sps.nct.sf(sps.t.ppf(0.975, 1), 1, e * np.sqrt(2)), abs=1e-12)
    # effect 8 sd at 2 seeds has power 0.625 < 0.8 and 3 seeds would do for the t-test, but the
    # procedure is the sign-flip test: its floor 2 / 2**n stays >= 0.05 up to 5 seeds, so 6 are needed
    assert TTestPower().power(8.0, 3, 0.05) >= 0.8
    assert stats.seeds_needed(8.0, 1.0, 0.05) == 6.0


def test_sign_flip_p_does_not_depend_on_the_unit_of_the_differences():
    # the tie tolerance used to be absolute (1e-9) below |d| sums of 1: tiny units gave p = 1
    d = np.array([0.3, -0.1, 0.2, 0.05, -0.02])  # exact p = 12 / 32
    for scale in (1.0, 1e-3, 1e-8, 1e-12, 1e6):
        assert stats.sign_flip_test(d * scale, resamples=100, rng=np.random.default_rng(0)) == 12 / 32


def test_level_counts_and_integer_means_equal_the_einsum_sums_to_the_bit():
    """The exact-integer paths (profiles' level counts, binary cubes' means by BLAS) give
    the bits of the summation they replace: a one-hot cube's einsum weighted mean."""
    rng = np.random.default_rng(7)
    x = rng.integers(0, 4, (3, 5, 37)).astype(float)  # 4 levels, lead 3
    ws, wt = bootstrap.draw_counts(rng, 50, 5), bootstrap.draw_counts(rng, 50, 37)

    def ref(cube):
        return np.einsum("b...s,bs->b...", np.einsum("...st,bt->b...s", cube, wt), ws) / (5 * 37)

    levels = np.unique(x)
    onehot = (x[..., None, :, :] == levels[:, None, None]).astype(float)  # (3, 4, 5, 37)
    counts = bootstrap.level_counts(x, levels, ws, wt)
    assert counts.shape == (50, 3, 4)
    assert np.array_equal(counts / (5 * 37), ref(onehot))
    assert np.array_equal(counts.sum(axis=-1), np.full((50, 3), 5.0 * 37))  # every draw counted once
    assert np.array_equal(bootstrap.weighted_mean(x, ws, wt), ref(x))  # integer cube: exact sums, any order
    y = x / 3  # not integer: BLAS's order of summation, equal to rounding
    np.testing.assert_allclose(bootstrap.weighted_mean(y, ws, wt), ref(y), rtol=1e-14, atol=0)
    assert not np.allclose(bootstrap.weighted_mean(y + 1e-9, ws, wt), ref(y), rtol=1e-14, atol=0)
