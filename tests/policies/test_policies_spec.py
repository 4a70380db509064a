"""Tests that pin SPEC §3-5 for the policy family, with hand-computed values."""
import math

import numpy as np
import pytest

from policies import POLICIES, Allocation, Feedback, make
from policies.signals import (MemoryBank, fuse_mean, fuse_min, fuse_product, minmax_normalise, sketch_norm,
                              transfer_and_update, window_push, window_values)
from reference_hb import PlainHarnessBandit

NAN = float("nan")
#: every policy that runs without an environment (`oracle` needs its ground truth: test_policies_clairvoyant.py)
ALL = sorted(name for name, cls in POLICIES.items() if not cls.needs_ground_truth)


def test_registry_has_the_eight_names():
    from policies.registry import PAPER_POLICIES, PUBLISHED_POLICIES
    assert set(PAPER_POLICIES) == {"uniform", "round_robin", "learnability", "transfer", "harnessbandit",
                                   "product", "min", "mixed"}
    assert PUBLISHED_POLICIES == ("sec", "variance", "tac")
    assert (set(PAPER_POLICIES) | {"exp3s", "ucb1", "dts", "rank"} | set(PUBLISHED_POLICIES)
            | {"harnessbandit_robust", "oracle", "fixed"} == set(POLICIES))


# -- warm-up and the exploration floor ---------------------------------------------------
def test_warmup_is_one_hot_t_mod_h_then_floor_every_step():
    pol = make("harnessbandit", n_arms=6, seed=0)
    rng = np.random.default_rng(1)
    for t in range(30):
        p = pol.probabilities()
        expected = np.zeros(6)
        expected[t % 6] = 1.0
        np.testing.assert_array_equal(p, expected)
        alloc = pol.select(8)
        assert alloc.arm == t % 6 and alloc.counts.sum() == 8
        pol.update(Feedback(arm=alloc.arm, learnability=rng.random(), sketch=rng.standard_normal(8)))
    for _ in range(200):
        p = pol.probabilities()
        assert p.min() >= 0.15 / 6 - 1e-15 and abs(p.sum() - 1) < 1e-12
        pol.update(Feedback(arm=pol.select(8).arm, learnability=rng.random(), sketch=rng.standard_normal(8)))


def test_warmup_rounds_knob_changes_length():
    pol = make("harnessbandit", n_arms=3, seed=0, warmup_rounds=2)
    for t in range(6):
        assert pol.probabilities()[t % 3] == 1.0
        pol.update(Feedback(arm=t % 3, learnability=0.1 * t))
    assert pol.probabilities().max() < 1.0


# -- hand-computed sequences ----------------------------------------------------------------
def test_hand_computed_h2_four_post_warmup_steps():
    """H = 2, warm-up 1 round, learnability only observed (no sketches -> T missing).

    After warm-up: W_L = [0.2, 0.6], Q = [0.5 (first value, <2 in window), 1.0].
    t=2: U = Q + 0.2/sqrt(2); softmax([0.5, 1.0]/0.3) = [0.158869, 0.841131];
         p = 0.85*softmax + 0.075 = [0.2100387, 0.7899613]. arm 0, L=0.4 -> L~=(0.4-0.2)/0.4=0.5
         -> Q0 = 0.7*0.5 + 0.3*0.5 = 0.5.
    t=3: arm 1, L=0.1 -> L~ = 0 -> Q1 = 0.7*1.0 = 0.7.
    t=4: arm 1, L=0.9 -> L~ = 1 -> Q1 = 0.7*0.7 + 0.3 = 0.79.
    t=5: arm 0, L=0.6 -> L~ = (0.6-0.1)/0.8 = 0.625 -> Q0 = 0.35 + 0.1875 = 0.5375.
    """
    pol = make("harnessbandit", n_arms=2, seed=0, warmup_rounds=1)
    pol.update(Feedback(arm=0, learnability=0.2))
    pol.update(Feedback(arm=1, learnability=0.6))
    expected_p = [[0.2100387391, 0.7899612609], [0.2005005343, 0.7994994657],
                  [0.3633570865, 0.6366429135], [0.3180637822, 0.6819362178]]
    steps = [(0, 0.4, 0.5, [0.5, 1.0]), (1, 0.1, 0.0, [0.5, 0.7]), (1, 0.9, 1.0, [0.5, 0.79]),
             (0, 0.6, 0.625, [0.5375, 0.79])]
    for p_exp, (arm, L, s_exp, q_exp) in zip(expected_p, steps):
        np.testing.assert_allclose(pol.probabilities(), p_exp, atol=1e-9)
        pol.update(Feedback(arm=arm, learnability=L))
        d = pol.diagnostics()
        assert d["score"] == pytest.approx(s_exp)
        np.testing.assert_allclose(d["Q"], q_exp)
        assert math.isnan(d["transfer"])


def test_hand_computed_h3_with_transfer():
    """H = 3, warm-up 1 round, 2-d sketches (derivation in the comments).

    t0 arm0 L=.3 g=(1,0): no other memory -> T missing; L~=.5 (1 value); Q0=.5; m0=(1,0)
    t1 arm1 L=.5 g=(0,2): T=cos((0,1),m0)=0 -> T~=.5 (1 value); L~=1; S=.75; m1=(0,1)
    t2 arm2 L=.1 g=(3,4): T=(.6+.8)/2=.7 -> T~=1; L~=0; S=.5
    t3 arm0 L=.2 g=(1,1): T=(cos45 + cos((1,1),(.6,.8)))/2 = (.70711+.98995)/2 = .84853
       T~=1, L~=.25, S=.625, Q0=.7*.5+.3*.625=.5375; m0=.7(1,0)+.3(.7071,.7071)
    t4 arm2 L=.6 g=(-1,0): T=(cos(-e1, m0) + 0)/2 = -.48700 -> T~=0, L~=1, S=.5, Q2=.5
    t5 arm1 L=None g=0: both missing: Q unchanged, memory untouched, n1 += 1
    t6 arm1 L=.4 g=(2,-1)
    """
    pol = make("harnessbandit", n_arms=3, seed=0, warmup_rounds=1)
    seq = [(0, 0.3, (1.0, 0.0)), (1, 0.5, (0.0, 2.0)), (2, 0.1, (3.0, 4.0)), (0, 0.2, (1.0, 1.0)),
           (2, 0.6, (-1.0, 0.0)), (1, None, (0.0, 0.0)), (1, 0.4, (2.0, -1.0))]
    expected = [  # p before the step, T, S, Q after
        ([1, 0, 0], NAN, 0.5, [0.5, NAN, NAN]),
        ([0, 1, 0], 0.0, 0.75, [0.5, 0.75, NAN]),
        ([0, 0, 1], 0.7, 0.5, [0.5, 0.75, 0.5]),
        ([0.2476295663, 0.5047408674, 0.2476295663], 0.8485281374, 0.625, [0.5375, 0.75, 0.5]),
        ([0.2535285896, 0.5006288984, 0.245842512], -0.4870030352, 0.5, [0.5375, 0.75, 0.5]),
        ([0.2574902279, 0.5094002887, 0.2331094834], NAN, NAN, [0.5375, 0.75, 0.5]),
        ([0.2672190291, 0.4910858505, 0.2416951204], 0.2599979087, 0.5796643610, [0.5375, 0.6988993083, 0.5]),
    ]
    for (arm, L, g), (p_exp, t_exp, s_exp, q_exp) in zip(seq, expected):
        np.testing.assert_allclose(pol.probabilities(), p_exp, atol=1e-9)
        pol.update(Feedback(arm=arm, learnability=L, sketch=np.array(g)))
        d = pol.diagnostics()
        np.testing.assert_allclose([d["transfer"], d["score"]], [t_exp, s_exp], atol=1e-9)
        np.testing.assert_allclose(d["Q"], q_exp, atol=1e-9)
    np.testing.assert_array_equal(pol.diagnostics()["n"], [2, 3, 2])
    np.testing.assert_allclose(pol.probabilities(), [0.292234425790662, 0.44399444374972064, 0.26377113045961736])


@pytest.mark.parametrize("fusion", ["mean", "product", "min", "learnability", "transfer"])
def test_matches_plain_reference_on_random_forced_sequences(fusion):
    H, d = 4, 5
    rng = np.random.default_rng(7)
    name = {"mean": "harnessbandit"}.get(fusion, fusion)
    pol = make(name, n_arms=H, seed=3, window=6, warmup_rounds=2)
    ref = PlainHarnessBandit(H, window=6, warmup_rounds=2, fusion=fusion)
    for t in range(120):
        np.testing.assert_allclose(pol.probabilities(), ref.probs(), atol=1e-12)
        arm = int(rng.integers(H))
        L = None if rng.random() < 0.1 else float(rng.random())
        g = None if rng.random() < 0.1 else rng.standard_normal(d) * (rng.random() > 0.1)
        pol.update(Feedback(arm=arm, learnability=L, sketch=g))
        T, ln, tn, S = ref.update(arm, L, None if g is None else list(g))
        diag = pol.diagnostics()
        got = [diag["l_norm"], diag["t_norm"], diag["score"]]
        want = [NAN if v is None else v for v in (ln, tn, S)]
        np.testing.assert_allclose(got, want, atol=1e-12)


# -- Q, windows, normaliser -------------------------------------------------------------------
def test_q_first_value_then_ema_and_unvisited_take_max_q():
    pol = make("learnability", n_arms=3, seed=0, warmup_rounds=0, bonus_c=0.0, epsilon=0.0, tau=1.0)
    pol.update(Feedback(arm=0, learnability=0.0))
    pol.update(Feedback(arm=0, learnability=1.0))  # window [0, 1] -> L~ = 1 -> Q0 = .7*.5+.3*1 = .65
    assert pol.diagnostics()["Q"][0] == pytest.approx(0.65)
    # arms 1 and 2 are undefined: Q' = max defined = .65 -> all equal -> uniform law
    np.testing.assert_allclose(pol.probabilities(), [1 / 3] * 3)
    pol.update(Feedback(arm=1, learnability=0.0))  # L~ = 0 -> Q1 = 0 (first value)
    q = np.array([0.65, 0.0, 0.65])
    np.testing.assert_allclose(pol.probabilities(), np.exp(q) / np.exp(q).sum())


def test_window_holds_last_32_pooled_values():
    pol = make("learnability", n_arms=2, seed=0)
    for i in range(40):
        pol.update(Feedback(arm=i % 2, learnability=float(i)))
    assert sorted(window_values(pol.l_window, pol.l_count)) == [float(i) for i in range(8, 40)]
    pol.update(Feedback(arm=0, learnability=8.0))  # 8 is the min of the window after append
    assert pol.diagnostics()["l_norm"] == 0.0      # (8 drops out; 9..39 + 8) -> 0


def test_ring_buffer_and_normaliser_degenerate_rules():
    buf = np.zeros(3)
    count = 0
    for v in [5.0, 1.0, 2.0, 3.0]:
        count = window_push(buf, count, v)
    assert sorted(window_values(buf, count)) == [1.0, 2.0, 3.0]
    assert minmax_normalise(2.0, np.array([2.0])) == 0.5
    assert minmax_normalise(2.0, np.array([2.0, 2.0]), degenerate=0.3) == 0.3
    assert minmax_normalise(2.5, np.array([2.0, 4.0])) == 0.25
    assert minmax_normalise(9.0, np.array([2.0, 4.0])) == 1.0


def test_degenerate_knob_is_used():
    pol = make("harnessbandit", n_arms=2, seed=0, degenerate=0.2)
    pol.update(Feedback(arm=0, learnability=0.4))
    assert pol.diagnostics()["l_norm"] == 0.2


# -- transfer memory ------------------------------------------------------------------------------
def test_transfer_computed_before_memory_update_and_first_value_init():
    bank = MemoryBank(2, 3)
    t, compared = transfer_and_update(bank, 0, np.array([2.0, 0, 0]), 0.3, 1)
    assert math.isnan(t) and compared == 0
    np.testing.assert_allclose(bank.vector(0), [1, 0, 0])  # first value: the unit sketch
    t, compared = transfer_and_update(bank, 1, np.array([0.0, 3.0, 0]), 0.3, 2)
    assert t == 0.0 and compared == 1              # orthogonal to m0; m1 did not exist before
    t, _ = transfer_and_update(bank, 0, np.array([0.0, 1.0, 0]), 0.3, 3)
    assert t == pytest.approx(1.0)                 # compared with m1 = e2, then m0 updated
    np.testing.assert_allclose(bank.vector(0), [0.7, 0.3, 0])
    assert bank.norm()[0] == pytest.approx(math.hypot(0.7, 0.3))
    np.testing.assert_array_equal(bank.last_update, [3, 2])


def test_memory_bank_scaled_rows_stay_exact_over_many_updates():
    rng = np.random.default_rng(0)
    bank, plain = MemoryBank(2, 5), np.zeros(5)
    for k in range(300):                            # scale 0.7^k would underflow without re-normalising
        g = rng.standard_normal(5)
        transfer_and_update(bank, 0, g, 0.3, k + 1)
        u = g / np.linalg.norm(g)
        plain = u if k == 0 else 0.7 * plain + 0.3 * u
        np.testing.assert_allclose(bank.vector(0), plain, atol=1e-12)
        assert bank.norm()[0] == pytest.approx(np.linalg.norm(plain), rel=1e-9)


@pytest.mark.parametrize("bad", [np.zeros(3), np.array([1.0, np.nan, 0]), np.array([np.inf, 0, 0]), None])
def test_zero_or_nonfinite_sketch_gives_missing_t_and_untouched_memory(bad):
    pol = make("harnessbandit", n_arms=2, seed=0)
    pol.update(Feedback(arm=0, learnability=0.1, sketch=np.array([1.0, 0, 0])))
    pol.update(Feedback(arm=1, learnability=0.2, sketch=np.array([0.0, 1.0, 0])))
    before = pol.bank.state()
    pol.update(Feedback(arm=1, learnability=0.3, sketch=bad))
    assert math.isnan(pol.diagnostics()["transfer"])
    for k, v in pol.bank.state().items():
        np.testing.assert_array_equal(v, before[k])
    assert pol.diagnostics()["missing_transfer"] == 2  # the very first update had no other memory
    assert pol.diagnostics()["nonfinite_signals"] == (1 if bad is not None and not np.isfinite(bad).all() else 0)


def test_nan_learnability_is_missing_and_counted():
    pol = make("learnability", n_arms=2, seed=0)
    pol.update(Feedback(arm=0, learnability=float("nan")))
    d = pol.diagnostics()
    assert math.isnan(d["Q"][0]) and d["n"][0] == 1 and pol.l_count == 0
    assert d["missing_learnability"] == 1 and d["nonfinite_signals"] == 1


def test_transfer_only_no_q_update_while_t_missing():
    pol = make("transfer", n_arms=2, seed=0)
    pol.update(Feedback(arm=0, learnability=0.9, sketch=np.array([1.0, 0.0])))  # T missing (no other memory)
    assert not any(pol.q_defined)
    pol.update(Feedback(arm=1, learnability=0.9, sketch=np.array([1.0, 1.0])))  # T = cos45 -> T~ = .5
    np.testing.assert_allclose(pol.diagnostics()["Q"], [NAN, 0.5])


def test_learnability_only_never_computes_t():
    pol = make("learnability", n_arms=2, seed=0)
    for arm in (0, 1, 0):
        pol.update(Feedback(arm=arm, learnability=0.5, sketch=np.ones(4)))
    assert pol.bank is None and pol.t_count == 0


def test_memory_age_and_norm_in_diagnostics_and_age_limit():
    pol = make("harnessbandit", n_arms=3, seed=0, max_memory_age=0)
    pol.update(Feedback(arm=0, learnability=0.1, sketch=np.array([1.0, 0])))
    pol.update(Feedback(arm=1, learnability=0.1, sketch=np.array([0.0, 1])))
    d = pol.diagnostics()
    np.testing.assert_array_equal(d["memory_age"], [1, 0, NAN])
    np.testing.assert_allclose(d["memory_norm"], [1, 1, NAN])
    pol.update(Feedback(arm=1, learnability=0.1, sketch=np.array([1.0, 0])))  # m0 age 1 > 0: ignored
    assert math.isnan(pol.diagnostics()["transfer"])
    pol.update(Feedback(arm=0, learnability=0.1, sketch=np.array([1.0, 0])))  # m1 age 0: compared
    assert pol.diagnostics()["transfer"] == pytest.approx(0.3 / math.hypot(0.3, 0.7))  # m1 = (.3, .7)


def test_update_sketch_source():
    pol = make("harnessbandit", n_arms=2, seed=0, transfer_source="update")
    pol.update(Feedback(arm=0, sketch=np.array([1.0, 0]), update_sketch=np.array([0.0, 1])))
    pol.update(Feedback(arm=1, sketch=np.array([1.0, 0]), update_sketch=np.array([0.0, 1])))
    assert pol.diagnostics()["transfer"] == pytest.approx(1.0)


def test_fusions():
    assert fuse_mean(0.2, 0.6, 0.25) == pytest.approx(0.5)
    assert fuse_product(0.5, 0.4, 0.5) == pytest.approx(0.2)
    assert fuse_min(0.5, 0.4, 0.5) == 0.4
    for f in (fuse_mean, fuse_product, fuse_min):
        assert f(0.3, NAN, 0.5) == 0.3 and f(NAN, 0.7, 0.5) == 0.7 and math.isnan(f(NAN, NAN, 0.5))


def test_product_and_min_policies_fuse_as_named():
    for name, expect in (("product", 1.0 * 0.5), ("min", 0.5)):
        pol = make(name, n_arms=2, seed=0)
        pol.update(Feedback(arm=0, learnability=0.1, sketch=np.array([1.0, 0])))
        pol.update(Feedback(arm=1, learnability=0.3, sketch=np.array([1.0, 1])))  # L~=1, T~=.5
        assert pol.diagnostics()["score"] == pytest.approx(expect)


def test_sketch_norm_overflow_and_underflow_fallback():
    big = np.full(4, 1e30, dtype=np.float32)
    assert sketch_norm(big) == pytest.approx(2e30, rel=1e-6)
    tiny = np.full(4, 1e-30, dtype=np.float32)     # the float32 squares underflow to 0
    assert sketch_norm(tiny) == pytest.approx(2e-30, rel=1e-6)
    sub = np.full(4, 3e-23, dtype=np.float32)      # the squares are subnormal: digits lost
    assert sketch_norm(sub) == pytest.approx(6e-23, rel=1e-6)
    assert sketch_norm(np.zeros(4, np.float32)) == 0.0
    assert math.isnan(sketch_norm(np.array([np.nan], np.float32)))


# -- mixed, uniform, round robin ---------------------------------------------------------------------
@pytest.mark.parametrize("arms,batch", [([0, 4], 8), (None, 8), ([1, 2, 5], 8), ([3], 5), (None, 13)])
def test_mixed_counts_sum_and_rotate(arms, batch):
    pol = make("mixed", n_arms=6, seed=0, arms=arms)
    listed = list(range(6)) if arms is None else arms
    total = np.zeros(6, dtype=int)
    for _ in range(len(listed)):
        alloc = pol.select(batch)
        assert alloc.counts.sum() == batch
        assert set(np.flatnonzero(alloc.counts)) <= set(listed)
        assert alloc.counts[listed].max() - alloc.counts[listed].min() <= 1
        total += alloc.counts
        pol.update(Feedback(arm=alloc.arm, counts=alloc.counts))
    assert len(set(total[listed])) == 1  # the remainder rotates: equal over k steps
    np.testing.assert_allclose(pol.probabilities()[listed], 1 / len(listed))


def test_mixed_arm_is_none_unless_single():
    assert make("mixed", n_arms=6, seed=0, arms=[0, 4]).select(8).arm is None
    assert make("mixed", n_arms=6, seed=0, arms=[4]).select(8).arm == 4


def test_round_robin_and_uniform():
    rr = make("round_robin", n_arms=4, seed=0)
    arms = []
    for _ in range(9):
        arms.append(rr.select(8).arm)
        rr.update(Feedback(arm=arms[-1]))
    assert arms == [0, 1, 2, 3, 0, 1, 2, 3, 0]
    un = make("uniform", n_arms=4, seed=0)
    draws = [un.select(1).arm for _ in range(4000)]
    np.testing.assert_allclose(np.bincount(draws) / 4000, 0.25, atol=0.03)


def test_update_works_for_forced_arms_without_select():
    for name in ALL:
        pol = make(name, n_arms=3, seed=0)
        for arm in [2, 2, 0, 1, 2]:
            fb = Feedback(arm=arm, learnability=0.1 * arm, sketch=np.ones(3) * (arm + 1))
            pol.update(fb)
        assert pol.t == 5
        np.testing.assert_array_equal(pol.diagnostics()["n"], [1, 1, 3])   # every policy, mixed included
    pol, ref = make("harnessbandit", n_arms=3, seed=0, warmup_rounds=1), PlainHarnessBandit(3, warmup_rounds=1)
    for arm in [2, 2, 0, 1, 2, 1, 1, 0]:   # forced, never the warm-up order
        g = np.array([arm + 1.0, 1.0 - arm, 0.5])
        pol.update(Feedback(arm=arm, learnability=0.1 * arm + 0.05, sketch=g))
        ref.update(arm, 0.1 * arm + 0.05, list(g))
        np.testing.assert_allclose(pol.probabilities(), ref.probs(), atol=1e-12)
        np.testing.assert_allclose(pol.diagnostics()["Q"], [np.nan if q is None else q for q in ref.Q])


# -- validation -------------------------------------------------------------------------------------
@pytest.mark.parametrize("knob,value,needle", [
    ("window", 0, "window=0"), ("alpha", 1.5, "alpha=1.5"), ("q_decay", 1.0, "q_decay=1.0"),
    ("bonus_c", -1, "bonus_c=-1"), ("tau", 0, "tau=0"), ("epsilon", 2, "epsilon=2"),
    ("eta", 0, "eta=0"), ("warmup_rounds", -1, "warmup_rounds=-1"), ("fusion", "max", "fusion='max'"),
    ("degenerate", 1.1, "degenerate=1.1"), ("window", 3.5, "window=3.5"), ("tau", float("nan"), "tau=nan"),
    ("transfer_source", "adam", "transfer_source='adam'"), ("max_memory_age", -2, "max_memory_age=-2"),
])
def test_bad_knob_values_name_the_argument(knob, value, needle):
    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(".", r"\.")):
        make("harnessbandit", n_arms=6, seed=0, **{knob: value})


def test_unknown_names_and_knobs():
    with pytest.raises(ValueError, match="valid names: uniform"):
        make("ucb", n_arms=2)
    with pytest.raises(ValueError, match="no knob 'alpha'.*valid knobs"):
        make("learnability", n_arms=2, alpha=0.3)
    with pytest.raises(ValueError, match="arms="):
        make("mixed", n_arms=6, arms=[0, 6])
    with pytest.raises(ValueError, match="feedback.arm=7"):
        make("uniform", n_arms=2).update(Feedback(arm=7))


# -- state round trip ------------------------------------------------------------------------------
def _drive(pol, rng, steps, d=16):
    out = []
    for _ in range(steps):
        p = pol.probabilities()
        alloc = pol.select(8)
        out.append((p.copy(), alloc.counts.copy()))
        pol.update(Feedback(arm=alloc.arm, counts=alloc.counts, learnability=float(rng.random()),
                            sketch=rng.standard_normal(d).astype(np.float32)))
    return out


@pytest.mark.parametrize("name", ALL)
def test_state_dict_mid_stream_is_bit_identical_for_50_steps(name):
    pol = make(name, n_arms=6, seed=11)
    _drive(pol, np.random.default_rng(0), 37)
    state = pol.state_dict()
    fresh = make(name, n_arms=6, seed=999)
    fresh.load_state_dict(state)
    a = _drive(pol, np.random.default_rng(5), 50)
    b = _drive(fresh, np.random.default_rng(5), 50)
    for (pa, ca), (pb, cb) in zip(a, b):
        np.testing.assert_array_equal(pa, pb)
        np.testing.assert_array_equal(ca, cb)
    da, db = pol.diagnostics(), fresh.diagnostics()
    for k in da:
        np.testing.assert_array_equal(np.asarray(da[k]), np.asarray(db[k]))


def test_huge_finite_sketches_give_the_exact_transfer():
    pol = make("harnessbandit", n_arms=2, seed=0)
    big = np.full(65536, 3e36, dtype=np.float32)   # |g| ~ 7.7e38: |g|^2 and raw products overflow float32
    pol.update(Feedback(arm=0, learnability=0.1, sketch=big))
    pol.update(Feedback(arm=1, learnability=0.2, sketch=big))
    pol.update(Feedback(arm=0, learnability=0.2, sketch=-big))
    d = pol.diagnostics()
    assert d["transfer"] == pytest.approx(-1.0, rel=1e-6) and pol.t_count == 2 and d["nonfinite_signals"] == 0
    np.testing.assert_allclose(d["memory_norm"], [0.4, 1.0], rtol=1e-5)     # 0.7 u - 0.3 u
    tiny = np.full(8, 1e-20, dtype=np.float32)     # |g|^2 underflows float32 products
    pol = make("harnessbandit", n_arms=2, seed=0)
    pol.update(Feedback(arm=0, learnability=0.1, sketch=tiny))
    pol.update(Feedback(arm=1, learnability=0.1, sketch=tiny * np.array([1, -1] * 4, dtype=np.float32)))
    assert pol.diagnostics()["transfer"] == 0.0 and pol.t_count == 1


def test_nonfinite_cosines_are_missing_and_counted():
    pol = make("harnessbandit", n_arms=2, seed=0)
    pol.update(Feedback(arm=0, learnability=0.1, sketch=np.ones(4)))
    pol.bank.rows[0, 0] = np.inf                   # a corrupted memory: its product is inf
    pol.update(Feedback(arm=1, learnability=0.2, sketch=np.ones(4)))
    d = pol.diagnostics()
    assert math.isnan(d["transfer"]) and pol.t_count == 0 and d["nonfinite_signals"] == 1


def test_float32_bank_matches_float64_reference_with_cancellation():
    rng = np.random.default_rng(3)
    d = 4096
    pol = make("harnessbandit", n_arms=3, seed=0, warmup_rounds=1)
    ref = PlainHarnessBandit(3, warmup_rounds=1)
    base = rng.standard_normal(d)
    for t in range(60):
        arm = t % 3
        sign = -1.0 if (t // 3) % 2 else 1.0        # alternate antiparallel pushes: near-cancellation
        g = sign * base + 0.05 * rng.standard_normal(d)
        pol.update(Feedback(arm=arm, learnability=float(rng.random()), sketch=g.astype(np.float32)))
        ref.update(arm, pol.diagnostics()["learnability"], [float(v) for v in g.astype(np.float32)])
        np.testing.assert_allclose(pol.probabilities(), ref.probs(), atol=1e-5)
        m_ref = np.array(ref.mem[arm])
        np.testing.assert_allclose(pol.bank.vector(arm), m_ref, atol=1e-5)
        assert pol.diagnostics()["memory_norm"][arm] == pytest.approx(np.linalg.norm(m_ref), rel=1e-4, abs=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bank_matches_float64_reference_across_sketch_magnitudes(dtype):
    """Sketch norms from 1e-24 to 1e24 (both sides of the raw-sketch range, so the raw
    and the unit-sketch update paths interleave on the same rows) and a small eta."""
    rng = np.random.default_rng(11)
    d, eta = 256, 0.05
    pol = make("harnessbandit", n_arms=4, seed=0, warmup_rounds=1, eta=eta)
    ref = PlainHarnessBandit(4, warmup_rounds=1, eta=eta)
    base = rng.standard_normal(d)
    for t in range(120):
        arm = int(rng.integers(4))
        g = (10.0 ** rng.uniform(-24, 24)) * (0.5 * base + rng.standard_normal(d))
        g = g.astype(dtype)
        pol.update(Feedback(arm=arm, learnability=float(rng.random()), sketch=g))
        ref.update(arm, pol.diagnostics()["learnability"], [float(v) for v in g])
        np.testing.assert_allclose(pol.probabilities(), ref.probs(), atol=1e-6 if dtype == np.float32 else 1e-12)
        m_ref = np.array(ref.mem[arm])
        np.testing.assert_allclose(pol.bank.vector(arm), m_ref, atol=1e-5 if dtype == np.float32 else 1e-12)
        assert pol.diagnostics()["memory_norm"][arm] == pytest.approx(np.linalg.norm(m_ref), rel=1e-5)


@pytest.mark.parametrize("eta,dtype", [(1e-200, np.float64), (1e-310, np.float64), (1e-39, np.float32),
                                       (1e-7, np.float32), (1e-6, np.float32)])
def test_tiny_eta_keeps_memories_finite_and_exact(eta, dtype):
    pol = make("harnessbandit", n_arms=2, seed=0, eta=eta)
    a, b = np.array([1.0, 0.0], dtype), np.array([1.0, 1.0], dtype)
    for sketch, arm in ((a, 0), (b, 0), (b, 1)):
        pol.update(Feedback(arm=arm, learnability=0.5, sketch=sketch))
    d = pol.diagnostics()
    m0 = (1 - eta) * np.array([1.0, 0.0]) + eta * np.array([1.0, 1.0]) / math.sqrt(2)
    np.testing.assert_allclose(d["memory_norm"], [np.linalg.norm(m0), 1.0], rtol=1e-6)
    assert d["transfer"] == pytest.approx(m0 @ [1, 1] / (np.linalg.norm(m0) * math.sqrt(2)), rel=1e-6)


def test_additive_update_folds_its_scale_and_matches_the_reference():
    rng = np.random.default_rng(5)
    pol = make("harnessbandit", n_arms=2, seed=0, warmup_rounds=1, eta=1e-7)
    bank_ref = np.zeros(6)
    for t in range(200):
        g = rng.standard_normal(6)
        pol.update(Feedback(arm=0, learnability=0.5, sketch=g))
        u = g / np.linalg.norm(g)
        bank_ref = u if t == 0 else (1 - 1e-7) * bank_ref + 1e-7 * u
        if t == 100:
            pol.bank.scale[0] = 1.00000005e-8          # as after ~1.8e7 additive updates
            pol.bank.rows[0] = bank_ref / 1.00000005e-8
            pol.bank.sq[0] = float(pol.bank.rows[0] @ pol.bank.rows[0])
    assert pol.bank.scale[0] > 0.99                    # folded back in when it fell below 1e-8
    np.testing.assert_allclose(pol.bank.vector(0), bank_ref, atol=1e-12)


def test_integer_and_bool_sketches_are_taken_as_float64():
    pol = make("harnessbandit", n_arms=2, seed=0)
    pol.update(Feedback(arm=0, learnability=0.5, sketch=np.ones(3)))
    pol.update(Feedback(arm=1, learnability=0.5, sketch=np.full(3, 3_000_000_000)))   # int64 squares wrap
    assert pol.diagnostics()["transfer"] == pytest.approx(1.0)
    assert sketch_norm(np.ones(4, dtype=bool)) == 2.0
    assert sketch_norm(np.full(3, 3_000_000_000)) == pytest.approx(3e9 * math.sqrt(3))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_memory_cancelled_to_rounding_noise_is_zero(dtype):
    rng = np.random.default_rng(2)
    u = rng.standard_normal(8).astype(dtype)
    pol = make("harnessbandit", n_arms=2, seed=0, eta=0.5)
    pol.update(Feedback(arm=0, learnability=0.5, sketch=u))
    pol.update(Feedback(arm=0, learnability=0.5, sketch=-u))          # 0.5 u - 0.5 u = 0
    assert pol.diagnostics()["memory_norm"][0] == 0.0
    pol.update(Feedback(arm=1, learnability=0.5, sketch=rng.standard_normal(8).astype(dtype)))
    assert math.isnan(pol.diagnostics()["transfer"])                 # no non-zero other memory


def test_state_dict_rejects_other_knobs_and_works_in_warmup():
    src = make("harnessbandit", n_arms=3, seed=0, warmup_rounds=0)
    with pytest.raises(ValueError, match="warmup_rounds=0 does not match"):
        make("harnessbandit", n_arms=3, seed=0).load_state_dict(src.state_dict())
    with pytest.raises(ValueError, match="arms="):
        make("mixed", n_arms=3, seed=0).load_state_dict(make("mixed", n_arms=3, arms=[0, 1]).state_dict())
    pol = make("harnessbandit", n_arms=6, seed=2)
    _drive(pol, np.random.default_rng(0), 10)          # inside the 30-step warm-up
    fresh = make("harnessbandit", n_arms=6, seed=2)
    fresh.load_state_dict(pol.state_dict())
    a, b = _drive(pol, np.random.default_rng(1), 40), _drive(fresh, np.random.default_rng(1), 40)
    assert all((x[0] == y[0]).all() and (x[1] == y[1]).all() for x, y in zip(a, b))


def test_state_dict_is_a_copy():
    pol = make("harnessbandit", n_arms=3, seed=0)
    _drive(pol, np.random.default_rng(0), 10)
    state = pol.state_dict()
    q_before = state["state"]["q"].copy()
    mem_before = state["state"]["memory"]["rows"].copy()
    _drive(pol, np.random.default_rng(1), 10)
    np.testing.assert_array_equal(state["state"]["q"], q_before)
    np.testing.assert_array_equal(state["state"]["memory"]["rows"], mem_before)
    fresh = make("harnessbandit", n_arms=3, seed=0)
    fresh.load_state_dict(state)
    fresh.update(Feedback(arm=0, learnability=0.5, sketch=np.ones(16, np.float32)))
    np.testing.assert_array_equal(state["state"]["memory"]["rows"], mem_before)


def test_same_seed_same_draws_and_diagnostics_keys():
    a = _drive(make("harnessbandit", n_arms=6, seed=4), np.random.default_rng(0), 80)
    b = _drive(make("harnessbandit", n_arms=6, seed=4), np.random.default_rng(0), 80)
    assert all((x[1] == y[1]).all() for x, y in zip(a, b))
    keys = {"t", "arm", "learnability", "transfer", "l_norm", "t_norm", "score", "Q", "U", "n",
            "memory_norm", "memory_age", "probabilities", "missing_learnability", "missing_transfer",
            "nonfinite_signals"}
    for name in ALL:
        assert set(make(name, n_arms=3, seed=0).diagnostics()) == keys


def test_allocation_pure_helper():
    alloc = Allocation.pure(2, 4, 8)
    assert alloc.arm == 2 and alloc.counts.tolist() == [0, 0, 8, 0]
