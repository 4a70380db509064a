"""The knobs beyond the paper (SPEC §10, policies/scored.py ROBUST_KNOBS and UNDEFINED_Q_KNOBS):
each default is the paper, and each mechanism is pinned by a hand-computed case."""
import math

import numpy as np
import pytest

from policies import Feedback, make
from policies.errors import UserError
from policies.scored import BEYOND_PAPER_DEFAULTS
from policies.signals import noise_weight, success_progress, undefined_prior

NAN = float("nan")


def _gen(h: int, arm: int, rollouts: int, successes: int) -> np.ndarray:
    """Feedback.generated with rollouts on `arm` only: (H, 2) [rollouts, reward sum]."""
    gen = np.zeros((h, 2))
    gen[arm] = rollouts, successes
    return gen


def _q(pol) -> list:
    return pol.diagnostics()["Q"].tolist()


# -- defaults are the paper ---------------------------------------------------------------
def test_defaults_are_the_paper_and_stay_out_of_config():
    pol = make("harnessbandit", n_arms=3, seed=0)
    assert not set(BEYOND_PAPER_DEFAULTS) & set(pol.config())
    assert BEYOND_PAPER_DEFAULTS == {"empty_step": "skip", "empty_cost": 0.0, "learnability_source": "advantage",
                                     "progress_fast": 0.5, "progress_slow": 0.1, "progress_sign": "absolute",
                                     "noise_z": 0.0,
                                     "undefined_q": "max", "q_prior": 0.5, "prior_decay": 0.5}
    changed = make("harnessbandit", n_arms=3, seed=0, empty_step="zero")
    assert changed.config()["empty_step"] == "zero" and "noise_z" not in changed.config()


def _in_lockstep(a, b, n_arms: int, steps: int, rng, p_missing: float, dim: int) -> None:
    """Feed `a` and `b` the same feedback for `steps` steps (L missing with chance
    `p_missing`); they must choose the same arm and keep equal probabilities on every step."""
    for _ in range(steps):
        arm = a.select(8).arm
        assert b.select(8).arm == arm
        learn = None if rng.random() < p_missing else float(rng.random())
        fb = Feedback(arm=arm, learnability=learn, sketch=rng.standard_normal(dim),
                      generated=_gen(n_arms, arm, 64, int(rng.integers(0, 65))))
        a.update(fb)
        b.update(fb)
        np.testing.assert_array_equal(a.probabilities(), b.probabilities())


def test_explicit_defaults_reproduce_the_paper_step_for_step():
    paper = make("harnessbandit", n_arms=4, seed=5, warmup_rounds=1)
    explicit = make("harnessbandit", n_arms=4, seed=5, warmup_rounds=1, **BEYOND_PAPER_DEFAULTS)
    _in_lockstep(paper, explicit, 4, 60, np.random.default_rng(3), 0.3, 16)


# -- empty_step ---------------------------------------------------------------------------
def test_empty_step_skip_leaves_q_undefined_zero_scores_it_with_its_cost():
    """H = 2, no warm-up, L only. Step 1: arm 0, L = 0.4: W_L = [0.4] (< 2 values) -> L~ = 0.5,
    Q0 = 0.5. Step 2: arm 1, L missing (no retained group).
    skip (the paper): Q1 stays undefined. zero: L = 0 enters the window, W_L = [0.4, 0],
    L~ = (0 - 0) / 0.4 = 0, S = 0 - empty_cost = -0.1, Q1 = -0.1."""
    for mode, q1 in (("skip", NAN), ("zero", -0.1)):
        pol = make("learnability", n_arms=2, seed=0, warmup_rounds=0, empty_step=mode, empty_cost=0.1)
        pol.update(Feedback(arm=0, learnability=0.4))
        pol.update(Feedback(arm=1, learnability=None))
        q = _q(pol)
        assert q[0] == 0.5
        assert (math.isnan(q[1]) and math.isnan(q1)) or q[1] == pytest.approx(q1, abs=1e-15)
        assert pol.diagnostics()["missing_learnability"] == 1


def test_empty_step_zero_does_not_turn_a_nonfinite_signal_into_zero():
    pol = make("learnability", n_arms=2, seed=0, warmup_rounds=0, empty_step="zero")
    pol.update(Feedback(arm=0, learnability=float("inf")))
    assert math.isnan(_q(pol)[0]) and pol.diagnostics()["nonfinite_signals"] == 1


# -- undefined_q ---------------------------------------------------------------------------
def test_undefined_q_prior_and_optimistic_hand_computed():
    """H = 3, no warm-up. Arm 0: L = 0.4 -> Q0 = 0.5; arm 1: L missing (skip) -> Q1 undefined,
    n = [1, 1, 0]. U_h = Q'_h + 0.2 / sqrt(n_h + 1):
    max (the paper): Q' = [0.5, 0.5, 0.5];
    prior (q_prior 0.2): Q' = [0.5, 0.2, 0.2];
    optimistic (q_prior 1, prior_decay 0.5): Q' = [0.5, 1 * 0.5^1, 1 * 0.5^0] = [0.5, 0.5, 1]."""
    b1, b0 = 0.2 / math.sqrt(2.0), 0.2
    cases = {"max": ([0.5 + b1, 0.5 + b1, 0.5 + b0], {}),
             "prior": ([0.5 + b1, 0.2 + b1, 0.2 + b0], {"q_prior": 0.2}),
             "optimistic": ([0.5 + b1, 0.5 + b1, 1.0 + b0], {"q_prior": 1.0, "prior_decay": 0.5})}
    for mode, (u, extra) in cases.items():
        pol = make("learnability", n_arms=3, seed=0, warmup_rounds=0, undefined_q=mode, **extra)
        pol.update(Feedback(arm=0, learnability=0.4))
        pol.update(Feedback(arm=1, learnability=None))
        diag = pol.diagnostics()
        np.testing.assert_allclose(diag["U"], u, rtol=0, atol=1e-15)
        e = np.exp((np.array(u) - max(u)) / 0.3)
        np.testing.assert_allclose(diag["probabilities"], 0.85 * e / e.sum() + 0.05, rtol=0, atol=1e-15)


def test_undefined_prior_formula():
    assert undefined_prior([0, 1, 3], 0.8, 0.5) == [0.8, 0.4, 0.1]
    assert undefined_prior([0, 5], 0.3, 1.0) == [0.3, 0.3]


# -- learning progress and the noise check ---------------------------------------------------
def test_success_progress_hand_computed():
    assert success_progress(0.0, 0.0, 0.3, 0.5, 0.1, True) == (0.3, 0.3, 0.0)
    fast, slow, progress = success_progress(0.3, 0.3, 0.7, 0.5, 0.1, False)
    assert (fast, slow) == (pytest.approx(0.5, abs=1e-15), pytest.approx(0.34, abs=1e-15))
    assert progress == pytest.approx(0.16, abs=1e-15)


def test_success_progress_increase_counts_only_a_rise():
    # a rise: fast 0.5, slow 0.34, as above: progress 0.16 either way
    assert success_progress(0.3, 0.3, 0.7, 0.5, 0.1, False, True)[2] == pytest.approx(0.16, abs=1e-15)
    # a collapse 0.7 -> 0.1: fast = 0.7 - 0.5 * 0.6 = 0.4, slow = 0.7 - 0.1 * 0.6 = 0.64:
    # |fast - slow| = 0.24 (absolute), max(fast - slow, 0) = 0 (increase)
    assert success_progress(0.7, 0.7, 0.1, 0.5, 0.1, False)[2] == pytest.approx(0.24, abs=1e-15)
    fast, slow, progress = success_progress(0.7, 0.7, 0.1, 0.5, 0.1, False, True)
    assert (fast, slow, progress) == (pytest.approx(0.4, abs=1e-15), pytest.approx(0.64, abs=1e-15), 0.0)
    assert success_progress(0.0, 0.0, 0.3, 0.5, 0.1, True, True) == (0.3, 0.3, 0.0)


def test_progress_sign_increase_does_not_reward_a_collapse():
    """H = 2, no warm-up, L~ = normalised progress. 1: arm 0, 6/8 = 0.75, first visit: progress 0,
    W_P = [0] -> 0.5 (degenerate): Q0 = 0.5. 2: arm 0 departs, 0/8 (empty): fast = 0.375,
    slow = 0.675. absolute: progress 0.3, W_P = [0, 0.3] -> 1: Q0 = 0.7 * 0.5 + 0.3 = 0.65;
    increase: progress 0, W_P = [0, 0] (zero range) -> 0.5: Q0 = 0.5."""
    q = {}
    for sign in ("absolute", "increase"):
        pol = make("learnability", n_arms=2, seed=0, warmup_rounds=0, learnability_source="progress",
                   progress_sign=sign)
        pol.update(Feedback(arm=0, learnability=0.3, generated=_gen(2, 0, 8, 6)))
        pol.update(Feedback(arm=0, learnability=None, generated=_gen(2, 0, 8, 0)))
        q[sign] = _q(pol)[0]
    assert q["absolute"] == pytest.approx(0.65, abs=1e-15) and q["increase"] == 0.5
    with pytest.raises(UserError, match="progress_sign"):
        make("harnessbandit", n_arms=2, progress_sign="up")


def test_noise_weight_hand_computed():
    # se = sqrt(0.25 / 64) = 0.0625; progress 0.02 < 2 se: weight 0.02 / 0.125 = 0.16
    assert noise_weight(0.02, 0.5, 64.0, 2.0) == pytest.approx(0.16, abs=1e-15)
    assert noise_weight(0.5, 0.5, 64.0, 2.0) == 1.0            # moved by more than 2 se
    assert noise_weight(0.0, 0.0, 64.0, 2.0) == 1.0            # success 0 does not vary: no discount
    assert noise_weight(0.0, 0.5, NAN, 2.0) == 1.0             # rollouts unknown
    assert noise_weight(0.0, 0.5, 64.0, 0.0) == 1.0            # off


def test_learnability_source_progress_hand_computed():
    """H = 2, no warm-up, L~ = normalised progress (pooled window, as L's).
    1: arm 0, success 2/8 = 0.25, first visit: progress 0, W_P = [0] -> 0.5 (degenerate): Q0 = 0.5.
    2: arm 0, 6/8 = 0.75: fast = 0.25 + 0.5 * 0.5 = 0.5, slow = 0.25 + 0.1 * 0.5 = 0.3,
       progress 0.2, W_P = [0, 0.2] -> 1: Q0 = 0.7 * 0.5 + 0.3 * 1 = 0.65.
    3: arm 1, 0/8 (an empty step: L missing), first visit: progress 0, W_P = [0, 0.2, 0] -> 0:
       Q1 = 0 -- a dead harness gets a defined, low Q where the paper leaves it undefined."""
    pol = make("learnability", n_arms=2, seed=0, warmup_rounds=0, learnability_source="progress")
    pol.update(Feedback(arm=0, learnability=0.3, generated=_gen(2, 0, 8, 2)))
    assert _q(pol)[0] == 0.5
    pol.update(Feedback(arm=0, learnability=0.3, generated=_gen(2, 0, 8, 6)))
    assert _q(pol)[0] == pytest.approx(0.65, abs=1e-15)
    pol.update(Feedback(arm=1, learnability=None, generated=_gen(2, 1, 8, 0)))
    assert _q(pol) == [pytest.approx(0.65, abs=1e-15), 0.0]


def test_learnability_source_both_is_the_mean_and_progress_falls_back_to_reward():
    """both: step 1 L~ = 0.5 (one value), P~ = 0.5 -> Q0 = 0.5; step 2 on arm 1 with L = 0.2
    (W_L = [0.4, 0.2] -> L~ = 0) and no `generated` but reward 0.9: first visit, progress 0,
    W_P = [0, 0] -> degenerate 0.5; S = (0 + 0.5) / 2 = 0.25."""
    pol = make("learnability", n_arms=2, seed=0, warmup_rounds=0, learnability_source="both")
    pol.update(Feedback(arm=0, learnability=0.4, generated=_gen(2, 0, 8, 4)))
    pol.update(Feedback(arm=1, learnability=0.2, reward=0.9))
    assert _q(pol) == [0.5, 0.25]
    # neither generated nor reward: progress is missing; L~ alone under both, nothing under progress
    only = make("learnability", n_arms=2, seed=0, warmup_rounds=0, learnability_source="progress")
    only.update(Feedback(arm=0, learnability=0.4))
    assert math.isnan(_q(only)[0])


def test_noise_check_discounts_a_harness_whose_success_does_not_move():
    """advantage L~ with noise_z = 1. 1: arm 0, L = 0.4, 32/64: first visit, progress 0 -> weight 0,
    Q0 = 0.5 * 0 = 0. 2: arm 0, L = 0.6, 48/64 = 0.75: fast 0.625, slow 0.525, progress 0.1,
    se = sqrt(0.525 * 0.475 / 64) = 0.0624 < 0.1 -> weight 1; W_L = [0.4, 0.6] -> L~ = 1,
    Q0 = 0.7 * 0 + 0.3 * 1 = 0.3."""
    pol = make("learnability", n_arms=2, seed=0, warmup_rounds=0, noise_z=1.0)
    pol.update(Feedback(arm=0, learnability=0.4, generated=_gen(2, 0, 64, 32)))
    assert _q(pol)[0] == 0.0
    pol.update(Feedback(arm=0, learnability=0.6, generated=_gen(2, 0, 64, 48)))
    assert _q(pol)[0] == pytest.approx(0.3, abs=1e-15)


# -- the law's sharpness ---------------------------------------------------------------------
def test_sharper_law_tau_and_epsilon_hand_computed():
    """H = 2 after one defined Q each (0.5 and 1, as in the SPEC's hand case) with tau = 0.1,
    epsilon = 0, bonus 0: p = softmax([0.5, 1] / 0.1) = [1, e^5] / (1 + e^5)."""
    pol = make("learnability", n_arms=2, seed=0, warmup_rounds=0, tau=0.1, epsilon=0.0, bonus_c=0.0)
    pol.update(Feedback(arm=0, learnability=0.2))           # one value: L~ = 0.5
    pol.update(Feedback(arm=1, learnability=0.6))           # W = [0.2, 0.6]: L~ = 1
    e5 = math.exp(5.0)
    np.testing.assert_allclose(pol.probabilities(), [1 / (1 + e5), e5 / (1 + e5)], rtol=0, atol=1e-15)


# -- state and validation --------------------------------------------------------------------
def test_state_round_trip_with_every_knob_on():
    knobs = dict(empty_step="zero", empty_cost=0.05, learnability_source="both", noise_z=1.5,
                 undefined_q="optimistic", q_prior=1.0, warmup_rounds=1)
    rng = np.random.default_rng(11)
    a = make("harnessbandit", n_arms=3, seed=2, **knobs)

    def feedback(arm):
        learn = None if rng.random() < 0.3 else float(rng.random())
        return Feedback(arm=arm, learnability=learn, sketch=rng.standard_normal(8),
                        generated=_gen(3, arm, 64, int(rng.integers(0, 65))))

    for _ in range(25):
        a.update(feedback(a.select(8).arm))
    b = make("harnessbandit", n_arms=3, seed=99, **knobs)
    b.load_state_dict(a.state_dict())
    for _ in range(25):
        fb = feedback(a.select(8).arm)
        assert b.select(8).arm == fb.arm
        a.update(fb)
        b.update(fb)
        np.testing.assert_array_equal(a.probabilities(), b.probabilities())


def test_a_state_saved_before_the_progress_state_existed_loads():
    a = make("harnessbandit", n_arms=2, seed=0)
    a.update(Feedback(arm=0, learnability=0.3))
    state = a.state_dict()
    for key in ("p_window", "fast", "slow", "measured", "p_count"):
        del state["state"][key]
    b = make("harnessbandit", n_arms=2, seed=0)
    b.load_state_dict(state)
    np.testing.assert_array_equal(a.probabilities(), b.probabilities())


@pytest.mark.parametrize("knob,value,allowed", [
    ("empty_step", "none", "one of skip, zero"),
    ("undefined_q", "min", "one of max, prior, optimistic"),
    ("learnability_source", "gain", "one of advantage, progress, both"),
    ("noise_z", -1.0, r"a finite number in \[0.0, 1000000000.0\]"),
    ("progress_fast", 0.0, r"a finite number in \(0.0, 1.0\]"),
])
def test_bad_values_name_the_knob(knob, value, allowed):
    with pytest.raises(UserError, match=rf"^policy\.{knob}=.* expected {allowed}"):
        make("harnessbandit", n_arms=2, **{knob: value})


def test_index_policies_do_not_take_the_softmax_law_knobs():
    with pytest.raises(UserError, match="policy 'exp3s' has no knob 'undefined_q'"):
        make("exp3s", n_arms=2, undefined_q="prior")
    make("exp3s", n_arms=2, empty_step="zero", learnability_source="progress")


# -- harnessbandit_robust ----------------------------------------------------------------------
def test_robust_is_harnessbandit_at_the_frozen_setting_step_for_step():
    from policies.robust import ROBUST_SETTING
    assert make("harnessbandit_robust", n_arms=2).cfg.tau == 0.1
    robust = make("harnessbandit_robust", n_arms=5, seed=4)
    same = make("harnessbandit", n_arms=5, seed=4, **ROBUST_SETTING)
    _in_lockstep(robust, same, 5, 80, np.random.default_rng(8), 0.25, 8)


def test_robust_config_lists_every_knob_and_its_setting():
    from policies.robust import ROBUST_SETTING
    config = make("harnessbandit_robust", n_arms=3, seed=1).config()
    assert set(BEYOND_PAPER_DEFAULTS) <= set(config)
    assert {k: config[k] for k in ROBUST_SETTING} == ROBUST_SETTING
    assert make("harnessbandit_robust", n_arms=3, tau=0.3).config()["tau"] == 0.3      # still a knob


def test_robust_scores_a_dead_harness_low_where_the_paper_keeps_it_top():
    """H = 2 after the warm-up (10 steps): arm 0 learns (success 8/64, 16/64, ... 40/64), arm 1 is
    dead (0/64, L missing). The paper leaves Q1 undefined (it takes Q0). The robust setting
    (learnability_source=both) scores arm 1's empty step L = 0, normalised 0 against arm 0's 0.3,
    and its progress 0: its first visit finds the pooled progress window all 0 (degenerate 0.5:
    L~ = (0 + 0.5) / 2, Q1 = 0.25), every later one a window with arm 0's positive progress
    (P~ = 0, L~ = 0): Q1 = 0.25 * 0.7^4. (No cost in the feedback: no cost division.)"""
    paper, robust = make("harnessbandit", n_arms=2, seed=0), make("harnessbandit_robust", n_arms=2, seed=0)
    for t in range(10):
        arm = t % 2
        fb = Feedback(arm=arm, learnability=0.3 if arm == 0 else None,
                      generated=_gen(2, arm, 64, 8 + 4 * t if arm == 0 else 0))
        paper.update(fb)
        robust.update(fb)
    assert math.isnan(_q(paper)[1]) and _q(robust)[1] == pytest.approx(0.25 * 0.7 ** 4, abs=1e-15)
    assert _q(robust)[0] > 0.5 and paper.probabilities()[1] > 0.4 > robust.probabilities()[1]


def test_the_tuning_and_test_scenarios_are_disjoint_shipped_and_sized():
    from hbsim import scenarios
    from policies.robust import TEST_SCENARIOS, TUNING_SCENARIOS
    shipped = set(scenarios.SCENARIOS)
    assert len(TEST_SCENARIOS) == 5 and len(TUNING_SCENARIOS) <= 9
    assert not set(TEST_SCENARIOS) & set(TUNING_SCENARIOS)
    assert set(TEST_SCENARIOS) | set(TUNING_SCENARIOS) <= shipped
    assert "trap" in TEST_SCENARIOS


def test_a_generated_table_of_the_wrong_shape_is_refused():
    pol = make("harnessbandit_robust", n_arms=3, seed=0)
    with pytest.raises(ValueError, match=r"feedback.generated has shape \(2, 2\): expected \(3, 2\)"):
        pol.update(Feedback(arm=0, learnability=0.2, generated=np.zeros((2, 2))))


def test_cost_weight_hand_computed():
    """harnessbandit_robust's cost division, S / (1 + w c~), w = 1, c~ the cost min-max normalised
    in its own pooled window; `learnability` (S = L~), no warm-up, H = 2.
    1: arm 0, L 0.3, cost 1: L~ 0.5 (one value), c~ 0.5: S = 0.5 / 1.5, Q0 = 1/3.
    2: arm 1, L 0.1, cost 3: L~ = 0 ([0.3, 0.1]): S = 0, Q1 = 0.
    3: arm 0, L 0.3, cost 2: L~ = 1, c~ = (2 - 1) / (3 - 1) = 0.5: S = 2/3, Q0 = 0.7/3 + 0.3 * 2/3.
    4: arm 1, L 0.3, no cost: no division, L~ = 1: Q1 = 0.3."""
    pol = make("learnability", n_arms=2, seed=0, warmup_rounds=0, cost_weight=1.0)
    for arm, learn, cost in ((0, 0.3, 1.0), (1, 0.1, 3.0), (0, 0.3, 2.0), (1, 0.3, None)):
        pol.update(Feedback(arm=arm, learnability=learn, cost=cost))
    assert _q(pol) == pytest.approx([0.7 / 3 + 0.2, 0.3], abs=1e-15)
