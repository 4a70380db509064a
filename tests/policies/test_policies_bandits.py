"""Hand-computed cases for the classic bandit rules on the fused score."""
import math

import numpy as np
import pytest

from policies import Feedback, make
from policies.bandits import thompson_argmax_law


def _scores_first(pol, seq):
    for arm, L in seq:
        pol.update(Feedback(arm=arm, learnability=L))


def test_exp3s_hand_computed_update():
    # H = 2, no warm-up, L only. First update on arm 0 with a single value -> S = 0.5.
    pol = make("exp3s", n_arms=2, seed=0, warmup_rounds=0, gamma=0.2, share=0.01)
    np.testing.assert_allclose(pol.probabilities(), [0.5, 0.5])
    pol.update(Feedback(arm=0, learnability=0.3))
    # reward-hat = 0.5 / 0.5 = 1; w0 = e^(0.2*1/2) + e*0.01/2*2, w1 = 1 + e*0.01/2*2
    w0, w1 = math.exp(0.1) + math.e * 0.01, 1 + math.e * 0.01
    expected = 0.8 * np.array([w0, w1]) / (w0 + w1) + 0.1
    np.testing.assert_allclose(pol.probabilities(), expected, rtol=1e-12)


def test_ucb1_plays_unscored_arms_then_the_index():
    pol = make("ucb1", n_arms=3, seed=0, warmup_rounds=0, ucb_c=1.0)
    assert pol.select(1).arm == 0
    _scores_first(pol, [(0, 0.2), (1, 0.6), (2, 0.4)])   # S: 0.5 (1 value), 1.0, 0.5
    # index = mean + sqrt(2 ln 3 / 1): arm 1 is largest
    d = pol.diagnostics()
    np.testing.assert_allclose(d["U"], np.array([0.5, 1.0, 0.5]) + math.sqrt(2 * math.log(3)))
    assert pol.select(1).arm == 1 and pol.probabilities().tolist() == [0.0, 1.0, 0.0]


def test_thompson_law_matches_monte_carlo_and_is_exact_for_ties():
    a, b = np.array([3.0, 1.0, 0.0]), np.array([1.0, 3.0, 0.0])
    draws = np.random.default_rng(0).beta(a + 1, b + 1, size=(400_000, 3)).argmax(1)
    np.testing.assert_allclose(thompson_argmax_law(a, b), np.bincount(draws) / 400_000, atol=4e-3)
    np.testing.assert_allclose(thompson_argmax_law(np.zeros(4), np.zeros(4)), 0.25, atol=1e-9)


def test_discounted_ts_discounts_every_arm():
    pol = make("dts", n_arms=2, seed=0, warmup_rounds=0, ts_gamma=0.5)
    _scores_first(pol, [(0, 0.1), (1, 0.3)])            # S = 0.5, then 1.0
    np.testing.assert_allclose(pol.a, [0.25, 1.0])      # a0 = 0.5 * 0.5; a1 = 0 * 0.5 + 1
    np.testing.assert_allclose(pol.b, [0.25, 0.0])


def test_rank_law_hand_computed():
    pol = make("rank", n_arms=3, seed=0, warmup_rounds=0, plr_beta=1.0, plr_rho=0.5)
    _scores_first(pol, [(0, 0.0), (1, 1.0), (2, 0.5)])   # S = 0.5, 1.0, 0.5 exactly -> Q = same
    # ranks (stable): arm1 -> 1, arm0 -> 2, arm2 -> 3: P_score ∝ 1, 1/2, 1/3 ... by arm: [1/2, 1, 1/3]
    p_score = np.array([0.5, 1.0, 1 / 3]) / (11 / 6)
    stale = np.array([3 - 1, 3 - 2, 3 - 3], dtype=float)  # t=3, last chosen at steps 1, 2, 3
    np.testing.assert_allclose(pol.probabilities(), 0.5 * p_score + 0.5 * stale / stale.sum())


@pytest.mark.parametrize("knob,value", [("gamma", 0.0), ("share", 2.0)])
def test_exp3s_validation(knob, value):
    with pytest.raises(ValueError, match=knob):
        make("exp3s", n_arms=2, **{knob: value})


def test_index_policies_have_no_selection_knobs():
    with pytest.raises(ValueError, match="no knob 'tau'"):
        make("ucb1", n_arms=2, tau=0.1)
