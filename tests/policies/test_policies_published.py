"""The published schedulers (policies.published): sec, tac, variance -- hand-computed
select/update sequences, the differential relations between them, exact state round trips,
knob validation, and `hb policies` / `hb sim --policy` in this process."""
import math

import numpy as np
import pytest

from policies import POLICIES, Feedback, make
from policies.errors import UserError
from policies.signals import inverse_cdf_draw

R2 = 1.0 / math.sqrt(2.0)


def softmax(q, tau=1.0):
    z = np.exp((np.asarray(q, dtype=float) - max(q)) / tau)
    return z / z.sum()


def gen(rows):
    return np.array(rows, dtype=float)


# -- sec ----------------------------------------------------------------------------------
def test_sec_hand_computed_observed_sequence_and_draws():
    pol = make("sec", n_arms=3, seed=4)
    np.testing.assert_array_equal(pol.probabilities(), [1 / 3] * 3)     # Q = 0: no warm-up, no floor
    u = np.random.default_rng(4).random()
    assert pol.select(8).arm == inverse_cdf_draw(np.full(3, 1 / 3), u)   # one draw of the policy's generator
    steps = [(1, 0.4, [0.0, 0.2, 0.0]),        # Q1 = 0.5 * 0.4
             (1, None, [0.0, 0.1, 0.0]),       # no group kept: L = 0
             (0, 0.8, [0.4, 0.1, 0.0])]
    for arm, L, q in steps:
        pol.update(Feedback(arm=arm, learnability=L))
        np.testing.assert_allclose(pol.diagnostics()["Q"], q, rtol=0, atol=1e-15)
        np.testing.assert_allclose(pol.probabilities(), softmax(q), rtol=1e-15)
    assert pol.diagnostics()["n"].tolist() == [1, 2, 0] and pol.t == 3


def test_sec_update_all_moves_unsampled_arms_towards_zero_and_tau():
    pol = make("sec", n_arms=3, seed=0, update="all", lr=0.5, tau=0.2)
    for arm, L, q in [(1, 0.4, [0.0, 0.2, 0.0]), (1, None, [0.0, 0.1, 0.0]), (0, 0.8, [0.4, 0.05, 0.0]),
                      (2, 0.6, [0.2, 0.025, 0.3])]:
        pol.update(Feedback(arm=arm, learnability=L))
        np.testing.assert_allclose(pol.diagnostics()["Q"], q, atol=1e-15)
        np.testing.assert_allclose(pol.probabilities(), softmax(q, 0.2), rtol=1e-14)


def test_sec_nonfinite_learnability_is_zero_and_counted_and_mixed_feedback():
    pol = make("sec", n_arms=3, seed=0)
    pol.update(Feedback(arm=0, learnability=float("nan")))
    assert pol.diagnostics()["nonfinite_signals"] == 1 and pol.q.tolist() == [0.0, 0.0, 0.0]
    pol.update(Feedback(arm=None, counts=np.array([4, 0, 4]), learnability=0.2))     # forced mixed batch
    assert pol.q.tolist() == [0.1, 0.0, 0.1] and pol.diagnostics()["n"].tolist() == [2, 0, 1]
    with pytest.raises(ValueError, match="only allowed with feedback.counts"):
        pol.update(Feedback(arm=None))
    assert pol.t == 2 and pol.q.tolist() == [0.1, 0.0, 0.1]                # a refused feedback changes nothing


# -- tac -----------------------------------------------------------------------------------
def test_tac_hand_computed_with_transfer():
    pol = make("tac", n_arms=2, seed=0)          # lr 0.5, tau 1, transfer_weight 1, eta 0.3
    pol.update(Feedback(arm=0, learnability=0.2, sketch=np.array([1.0, 0.0])))     # no other memory: r = L
    d = pol.diagnostics()
    assert math.isnan(d["transfer"]) and d["score"] == 0.2 and d["Q"].tolist() == [0.1, 0.0]
    pol.update(Feedback(arm=1, learnability=0.4, sketch=np.array([2.0, 2.0])))     # T = cos(g, m0) = 1/sqrt 2
    d = pol.diagnostics()
    assert d["transfer"] == pytest.approx(R2, abs=1e-15)
    np.testing.assert_allclose(d["Q"], [0.1, 0.5 * (0.4 + R2)], atol=1e-15)
    pol.update(Feedback(arm=0, learnability=None, sketch=np.array([0.0, 3.0])))    # T vs m1 = (1, 1)/sqrt 2
    d = pol.diagnostics()
    np.testing.assert_allclose(d["Q"], [0.5 * R2 + 0.05, 0.5 * (0.4 + R2)], atol=1e-15)
    np.testing.assert_allclose(pol.probabilities(), softmax(d["Q"]), rtol=1e-15)
    # m0 = 0.7 (1, 0) + 0.3 (0, 1): its norm
    np.testing.assert_allclose(d["memory_norm"], [math.hypot(0.7, 0.3), 1.0], rtol=1e-12)
    assert d["missing_transfer"] == 1


def test_tac_without_transfer_is_sec():
    tac, sec = make("tac", n_arms=4, seed=3, transfer_weight=0.0), make("sec", n_arms=4, seed=3)
    rng = np.random.default_rng(0)
    for _ in range(40):
        a, b = tac.select(8), sec.select(8)
        assert a.arm == b.arm
        fb = Feedback(arm=a.arm, learnability=float(rng.random()), sketch=rng.standard_normal(8))
        tac.update(fb)
        sec.update(fb)
        np.testing.assert_array_equal(tac.probabilities(), sec.probabilities())


def test_tac_sketch_shape_errors():
    pol = make("tac", n_arms=2)
    pol.update(Feedback(arm=0, learnability=0.1, sketch=np.ones(4)))
    with pytest.raises(ValueError, match="length 3: expected 4"):
        pol.update(Feedback(arm=1, learnability=0.1, sketch=np.ones(3)))


# -- variance -----------------------------------------------------------------------------
def test_variance_hand_computed_proportional_and_sees_dead_harnesses():
    pol = make("variance", n_arms=3, seed=0, memory=0.5, epsilon=0.1)
    np.testing.assert_allclose(pol.probabilities(), [1 / 3] * 3)            # never generated: 1/4 each
    # h0 half solved, h2 dead (every group fails: dynamic sampling keeps none of them)
    pol.update(Feedback(arm=0, learnability=0.5, generated=gen([[16, 8], [0, 0], [16, 0]])))
    np.testing.assert_allclose(pol.diagnostics()["Q"], [0.25, 0.25, 0.0])
    np.testing.assert_allclose(pol.probabilities(), 0.9 * np.array([0.5, 0.5, 0.0]) + 0.1 / 3, rtol=1e-15)
    pol.update(Feedback(arm=0, learnability=0.4, generated=gen([[8, 8], [0, 0], [0, 0]])))
    # h0: N = 0.5 * 16 + 8 = 16, S = 0.5 * 8 + 8 = 12 -> p = 0.75, score 0.1875; h2 untouched
    d = pol.diagnostics()
    np.testing.assert_allclose(d["U"], [0.75, np.nan, 0.0])
    np.testing.assert_allclose(d["Q"], [0.1875, 0.25, 0.0])
    np.testing.assert_allclose(pol.probabilities(), 0.9 * np.array([0.1875, 0.25, 0.0]) / 0.4375 + 0.1 / 3,
                               rtol=1e-15)
    assert d["score"] == 0.1875 and d["learnability"] == 0.4


def test_variance_topk_and_one_hot_law_uses_no_randomness():
    pol = make("variance", n_arms=3, seed=0, rule="topk", top_k=2, epsilon=0.3)
    pol.update(Feedback(arm=0, generated=gen([[10, 5], [10, 1], [10, 10]])))   # scores .25, .09, 0
    np.testing.assert_allclose(pol.probabilities(), [0.35 + 0.1, 0.35 + 0.1, 0.1])
    one = make("variance", n_arms=3, seed=0, rule="topk", top_k=1, epsilon=0.0)
    one.update(Feedback(arm=0, generated=gen([[10, 5], [10, 1], [10, 10]])))
    state = one._rng.bit_generator.state
    assert [one.select(4).arm for _ in range(3)] == [0, 0, 0] and one._rng.bit_generator.state == state


def test_variance_missing_generated_is_counted_and_shape_checked():
    pol = make("variance", n_arms=2)
    pol.update(Feedback(arm=1, learnability=0.3))
    assert pol.diagnostics()["missing_learnability"] == 1 and pol.probabilities().tolist() == [0.5, 0.5]
    with pytest.raises(ValueError, match=r"feedback.generated has shape \(3, 2\)"):
        pol.update(Feedback(arm=1, generated=np.zeros((3, 2))))


# -- the family's checks ------------------------------------------------------------------
def _drive(pol, rng, steps, d=8):
    out = []
    for _ in range(steps):
        p = pol.probabilities()
        alloc = pol.select(8)
        g = np.column_stack([rng.integers(0, 3, pol.n_arms) * 8.0, rng.integers(0, 9, pol.n_arms)]).astype(float)
        g[:, 1] = np.minimum(g[:, 1], g[:, 0])
        out.append((p.copy(), alloc.counts.copy()))
        pol.update(Feedback(arm=alloc.arm, counts=alloc.counts, learnability=float(rng.random()),
                            sketch=rng.standard_normal(d).astype(np.float32), generated=g))
    return out


@pytest.mark.parametrize("name,knobs", [("sec", {}), ("sec", {"update": "all", "tau": 0.2}), ("tac", {}),
                                        ("variance", {}), ("variance", {"rule": "topk", "top_k": 2})])
def test_state_dict_round_trip_is_exact(name, knobs):
    pol = make(name, n_arms=5, seed=11, **knobs)
    _drive(pol, np.random.default_rng(0), 23)
    fresh = make(name, n_arms=5, seed=999, **knobs)
    fresh.load_state_dict(pol.state_dict())
    a, b = _drive(pol, np.random.default_rng(5), 30), _drive(fresh, np.random.default_rng(5), 30)
    for (pa, ca), (pb, cb) in zip(a, b):
        np.testing.assert_array_equal(pa, pb)
        np.testing.assert_array_equal(ca, cb)
    da, db = pol.diagnostics(), fresh.diagnostics()
    for k in da:
        np.testing.assert_array_equal(np.asarray(da[k]), np.asarray(db[k]))
    with pytest.raises(ValueError, match="does not match"):
        make(name, n_arms=5, seed=0, **{**knobs, "tau" if name != "variance" else "epsilon": 0.5}).load_state_dict(
            pol.state_dict())


@pytest.mark.parametrize("name,knob,value,needle", [
    ("sec", "lr", 0, "policy.lr=0 is out of range"), ("sec", "lr", 1.5, "policy.lr=1.5"),
    ("sec", "tau", -1, "policy.tau=-1"), ("sec", "update", "some", "policy.update='some' is not allowed"),
    ("tac", "transfer_weight", -0.1, "policy.transfer_weight=-0.1"), ("tac", "eta", 0, "policy.eta=0"),
    ("tac", "update", "all", "policy 'tac' has no knob 'update'"),
    ("variance", "memory", 1.0, "policy.memory=1.0"), ("variance", "rule", "max", "policy.rule='max'"),
    ("variance", "top_k", 0, "policy.top_k=0"), ("variance", "epsilon", 2, "policy.epsilon=2"),
])
def test_bad_knobs_are_one_line_user_errors(name, knob, value, needle):
    with pytest.raises(UserError, match="^" + needle.replace("(", r"\(").replace(".", r"\.")) as err:
        make(name, n_arms=3, **{knob: value})
    assert "\n" not in str(err.value)


def test_docstrings_and_hb_policies_show_rule_source_and_departures(capsys):
    from hbsim.cli import main
    for name in ("sec", "variance", "tac"):
        cls = POLICIES[name]
        assert cls.source and cls.departures and "Source: " in cls.__doc__ and "Departures:" in cls.__doc__
        assert "Knobs:" in cls.__doc__
    assert "arXiv 2505.14970" in POLICIES["sec"].source and "arXiv 2606.25178" in POLICIES["tac"].source
    assert main(["policies"]) == 0
    out = capsys.readouterr().out
    assert "source: Chen et al. 2025" in out and "  lr = 0.5: TD(0) step" in out
    assert "  tau = 1.0: Boltzmann temperature" in out and "  update = 'observed'" in out
    shown = ("sec", "variance", "tac", "harnessbandit_robust")   # every policy with departures from a source
    assert out.count("departure: ") == sum(len(POLICIES[n].departures) for n in shown)


def test_hb_sim_runs_each_published_policy_and_bad_knob_exits_2(tmp_path, capsys):
    from hbsim.cli import main
    from hbsim.contract.records import read_run
    args = ["sim", "--env", "bernoulli", "--seeds", "1", "--steps", "6", "--jobs", "1", "--out", str(tmp_path / "s")]
    for name in ("sec", "variance", "tac"):
        args += ["--policy", name]
    assert main(args) == 0
    out = capsys.readouterr().out
    for name in ("sec", "variance", "tac"):
        assert f"\n{name} " in out
        train = read_run(tmp_path / "s" / name / "seed0").train
        assert len(train) == 6 and np.isfinite(train[[c for c in train if c.startswith("q_")]].to_numpy()).all()
    assert main(["sim", "--policy", "sec", "--set", "policy.tau=0", "--seeds", "1", "--steps", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "policy.tau=0 is out of range" in err
