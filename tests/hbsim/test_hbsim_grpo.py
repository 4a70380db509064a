"""GRPO maths (SPEC §2.1-2.3): hand-computed cases, the L(k) law, the 4/7 bound, and the
dynamic-sampling Monte Carlo facts."""
import numpy as np
import pytest

from hbsim import grpo


def test_loo_advantages_hand_computed():
    r = np.array([1.0, 0.0, 0.0, 1.0])
    # A_i = r_i - mean of the others: 1 - 1/3 = 2/3 ; 0 - 2/3 = -2/3
    np.testing.assert_allclose(grpo.advantages(r), [2 / 3, -2 / 3, -2 / 3, 2 / 3], rtol=0, atol=1e-15)
    r = np.array([0.2, 0.5, 0.9])
    expected = [0.2 - (0.5 + 0.9) / 2, 0.5 - (0.2 + 0.9) / 2, 0.9 - (0.2 + 0.5) / 2]
    np.testing.assert_allclose(grpo.advantages(r, "loo"), expected, rtol=0, atol=1e-15)


def test_grpo_and_mean_advantages_hand_computed():
    r = np.array([1.0, 0.0, 0.0, 0.0])
    std = np.sqrt(0.25 * 0.75)                      # population std
    np.testing.assert_allclose(grpo.advantages(r, "grpo"),
                               np.array([0.75, -0.25, -0.25, -0.25]) / (std + 1e-6), rtol=1e-15)
    np.testing.assert_allclose(grpo.advantages(r, "mean"), [0.75, -0.25, -0.25, -0.25], rtol=0, atol=1e-15)
    # zero-variance group: grpo divides by 1e-6 only -> zeros
    np.testing.assert_array_equal(grpo.advantages(np.ones(4), "grpo"), np.zeros(4))


def test_advantages_vectorised_over_leading_axes():
    rng = np.random.default_rng(0)
    r = rng.random((3, 5, 8))
    for kind in grpo.ADVANTAGES:
        a = grpo.advantages(r, kind)
        assert a.shape == r.shape
        np.testing.assert_allclose(a[1, 2], grpo.advantages(r[1, 2], kind), rtol=0, atol=1e-15)


def test_unknown_advantage_kind_lists_valid_kinds():
    with pytest.raises(ValueError, match="kind='ppo'.*loo, grpo, mean"):
        grpo.advantages(np.zeros(4), "ppo")


def test_keep_mask():
    r = np.array([[1, 1, 1], [0, 1, 0], [0.5, 0.5, 0.5], [0.2, 0.2, 0.3]])
    np.testing.assert_array_equal(grpo.keep_mask(r), [False, True, False, True])
    assert grpo.keep_mask(np.zeros((2, 3, 4))).shape == (2, 3)


@pytest.mark.parametrize("k", range(9))
def test_learnability_binary_law_G8(k):
    G = 8
    r = np.array([[1.0] * k + [0.0] * (G - k)])
    got = grpo.learnability(grpo.advantages(r))
    assert got == pytest.approx(2 * k * (G - k) / (G * (G - 1)), rel=1e-14, abs=1e-15)
    assert grpo.binary_group_learnability(k, G) == pytest.approx(got, rel=1e-14, abs=1e-15)


def test_learnability_max_is_four_sevenths_and_bounds_random_rewards():
    assert grpo.learnability(grpo.advantages(np.array([[1.0] * 4 + [0.0] * 4]))) == pytest.approx(4 / 7, rel=1e-14)
    rng = np.random.default_rng(1)
    r = rng.random((200_000, 8))
    per_group = np.abs(grpo.advantages(r)).mean(axis=-1)
    assert per_group.max() <= 4 / 7 + 1e-12
    # also near-vertex rewards (where the maximum lives)
    r = np.clip(rng.integers(0, 2, (50_000, 8)) + rng.normal(0, 0.01, (50_000, 8)), 0, 1)
    assert np.abs(grpo.advantages(r)).mean(axis=-1).max() <= 4 / 7 + 1e-12


def test_learnability_hierarchical_mean_with_token_mask():
    adv = np.array([[[1.0, -2.0, 3.0], [0.5, 0.5, 9.0]],
                    [[-4.0, 0.0, 0.0], [1.0, 1.0, 1.0]]])          # (groups=2, G=2, T=3)
    mask = np.array([[[1, 1, 0], [1, 0, 0]],
                     [[1, 0, 0], [1, 1, 1]]])
    # group 0: l = (1+2)/2 = 1.5, 0.5/1 = 0.5 -> 1.0 ; group 1: l = 4, 1 -> 2.5 ; L = 1.75
    assert grpo.learnability(adv, mask) == pytest.approx(1.75, rel=1e-15)
    # a trajectory without valid tokens is left out of its group's mean
    mask2 = mask.copy()
    mask2[1, 1] = 0
    assert grpo.learnability(adv, mask2) == pytest.approx((1.0 + 4.0) / 2, rel=1e-15)
    # outcome advantages broadcast along T give l_i = |A_i|
    out = np.array([[0.5, -0.5]])
    assert grpo.learnability(np.repeat(out[..., None], 4, axis=-1), np.ones((1, 2, 4))) == pytest.approx(0.5)


def test_learnability_skips_non_finite_trajectories():
    adv = np.array([[np.nan, 1.0], [2.0, -2.0]])
    # group 0: only |1| counts -> 1 ; group 1: 2 ; L = 1.5
    assert grpo.learnability(adv) == 1.5
    assert grpo.learnability(np.array([[np.nan, np.nan], [1.0, -1.0]])) == 1.0


def test_learnability_missing_when_no_group():
    assert grpo.learnability(np.zeros((0, 8))) is None
    assert grpo.learnability(np.ones((1, 2, 3)), np.zeros((1, 2, 3))) is None
    with pytest.raises(ValueError, match="mask shape"):
        grpo.learnability(np.ones((1, 2, 3)), np.ones((1, 2)))


@pytest.mark.parametrize("p, keep_ref, cond_ref", [(0.1, 0.5695, 0.316), (0.5, 0.9922, 0.504)])
def test_dynamic_sampling_monte_carlo(p, keep_ref, cond_ref):
    G, n = 8, 200_000
    rng = np.random.default_rng(12345)
    r = (rng.random((n, G)) < p).astype(float)
    keep = grpo.keep_mask(r)
    keep_theory = 1 - (1 - p) ** G - p ** G
    cond_theory = 2 * p * (1 - p) / keep_theory
    assert keep_theory == pytest.approx(keep_ref, abs=5e-4)
    assert cond_theory == pytest.approx(cond_ref, abs=5e-4)
    se_keep = np.sqrt(keep_theory * (1 - keep_theory) / n)
    assert abs(keep.mean() - keep_theory) < 3 * se_keep
    adv = grpo.advantages(r[keep])
    per_group = np.abs(adv).mean(axis=-1)
    L = grpo.learnability(adv)
    assert L == pytest.approx(per_group.mean(), rel=1e-12)
    assert abs(L - cond_theory) < 3 * per_group.std(ddof=1) / np.sqrt(keep.sum())
    # before filtering E[L] = 2p(1-p)
    all_groups = np.abs(grpo.advantages(r)).mean(axis=-1)
    assert abs(all_groups.mean() - 2 * p * (1 - p)) < 3 * all_groups.std(ddof=1) / np.sqrt(n)
