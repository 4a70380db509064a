"""Drifting-gradient bandit (hbsim/envs/drifting.py): maths by hand, the note's §4.2
counterexample through the env's optimizer, targets/drift geometry, CRN, oracle, knobs."""
import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import hbsim
from hbsim import grpo
from hbsim.envs import CATEGORIES, make_env
from hbsim.envs.drifting import DriftingEnv, orthonormal_rows
from hbsim.grpo import Optimizer, expected_group_signal, preconditioned_direction
from policies import Allocation, make
from run_checks import check_regret

SMALL = dict(n_tasks=40, n_heldout_tasks=10)


def cos(a, b):
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


# -- pure maths ------------------------------------------------------------------------
def test_expected_group_signal_loo_is_p_one_minus_p_with_spec_keep_probability():
    p = np.array([0.0, 0.1, 0.5, 0.9, 1.0])
    sig, keep = expected_group_signal(p, 8, "loo")
    np.testing.assert_allclose(sig, p * (1 - p), atol=1e-13)
    np.testing.assert_allclose(keep, 1 - (1 - p) ** 8 - p ** 8, atol=1e-15)
    assert keep[1] == pytest.approx(0.5695, abs=5e-5)                      # SPEC §2.3


def test_expected_group_signal_large_groups_use_the_binomial_path():
    p = np.linspace(0.0, 1.0, 11)
    sig, keep = expected_group_signal(p, 12, "loo")                         # G > 10: pmf, not polynomial
    np.testing.assert_allclose(sig, p * (1 - p), atol=1e-14)
    np.testing.assert_allclose(keep, 1 - (1 - p) ** 12 - p ** 12, atol=1e-15)


def test_expected_group_signal_mean_and_grpo_by_hand():
    p = np.array([0.2, 0.7])
    sig, _ = expected_group_signal(p, 4, "mean")
    np.testing.assert_allclose(sig, 3 / 4 * p * (1 - p), atol=1e-15)      # (G-1)/G p(1-p)
    # G = 2, grpo: only k = 1 (prob 2p(1-p)) has a signal; A = +-a, a = 0.5/(0.5 + 1e-6),
    # sig = (a (1-p) + (-a)(0-p)) / 2 = a / 2
    a = 0.5 / (0.5 + grpo.GRPO_EPS)
    sig2, keep2 = expected_group_signal(p, 2, "grpo")
    np.testing.assert_allclose(sig2, 2 * p * (1 - p) * a / 2, rtol=1e-12)
    np.testing.assert_allclose(keep2, 2 * p * (1 - p), rtol=1e-12)


def test_expected_group_signal_matches_monte_carlo_for_grpo():
    rng = np.random.default_rng(0)
    p, G, n = 0.3, 8, 200_000
    r = (rng.random((n, G)) < p).astype(float)
    s = (grpo.advantages(r, "grpo") * (r - p)).mean(axis=1)
    se = s.std() / math.sqrt(n)
    sig, _ = expected_group_signal(np.array(p), G, "grpo")
    assert abs(s.mean() - float(sig)) < 4 * se


def test_adam_two_steps_by_hand():
    opt = Optimizer("adam", 2, lr=0.1, beta1=0.9, beta2=0.999, eps=0.0)
    d1 = opt.step(np.array([1.0, -2.0]))
    np.testing.assert_allclose(d1, [-0.1, 0.1], rtol=1e-12)                # first step: -lr sign(g)
    d2 = opt.step(np.array([0.5, 0.5]))
    m = np.array([0.9 * 0.1 + 0.1 * 0.5, 0.9 * -0.2 + 0.1 * 0.5])          # (0.14, -0.13)
    v = np.array([0.999 * 0.001 + 0.001 * 0.25, 0.999 * 0.004 + 0.001 * 0.25])
    expected = -0.1 * (m / (1 - 0.9 ** 2)) / np.sqrt(v / (1 - 0.999 ** 2))
    np.testing.assert_allclose(d2, expected, rtol=1e-12)
    np.testing.assert_allclose(d2, [-0.1 * 0.736842105 / 0.790450, -0.1 * -0.684210526 / 1.457416], rtol=1e-5)
    assert opt.t == 2
    sgd = Optimizer("sgd", 2, lr=0.5)
    np.testing.assert_allclose(sgd.step(np.array([1.0, -2.0])), [-0.5, 1.0])


def test_note_section_4_2_counterexample_through_the_adam_preconditioner():
    """g_j = (1, 2), g_h = (2, -0.5): raw dot 1 > 0, but with momentum = current gradient and
    D = diag(0.1, 10) the first-order interaction g_j^T D g_h = -9.8."""
    g_j, g_h = np.array([1.0, 2.0]), np.array([2.0, -0.5])
    assert g_j @ g_h == pytest.approx(1.0)
    beta2, t = 0.999, 10_000
    v_hat = np.array([100.0, 0.01])                                          # 1/sqrt(v_hat) = (0.1, 10)
    corr = 1 - beta2 ** (t + 1)
    v_prev = (v_hat * corr - (1 - beta2) * g_h ** 2) / beta2                 # second moment before the step
    assert (v_prev > 0).all()
    opt = Optimizer("adam", 2, lr=0.01, beta1=0.0, beta2=beta2, eps=1e-12)
    opt.load_state_dict({"m": np.zeros(2), "v": v_prev, "t": t})
    d = opt.direction(g_h)
    np.testing.assert_allclose(d, [0.2, -5.0], rtol=1e-9)
    assert g_j @ d == pytest.approx(-9.8, rel=1e-9)
    delta = opt.step(g_h)                                                    # the env's code path
    assert g_j @ delta == pytest.approx(0.01 * 9.8, rel=1e-9)                # L_j rises to first order
    assert np.allclose(d, preconditioned_direction(g_h, np.zeros(2), v_prev, t, 0.0, beta2, 1e-12))
    sgd = Optimizer("sgd", 2, lr=0.01)
    assert g_j @ sgd.direction(g_h) == pytest.approx(1.0)                     # SGD keeps the raw sign


def test_env_update_sketch_is_the_optimizer_step_of_its_gradient_sketch():
    env = make_env("drifting", seed=3, sketch_dim=10**6, **SMALL)
    assert isinstance(env.opt, Optimizer) and env.coords.tolist() == list(range(env.knobs["dim"]))
    for step in range(4):
        ref = Optimizer("adam", env.knobs["dim"], env.knobs["lr"])
        ref.load_state_dict(env.opt.state_dict())
        theta = env.theta.copy()
        res = env.train_step(Allocation.pure(step % 6, 6, 8))
        grad = res.sketch.astype(np.float64)
        np.testing.assert_allclose(res.update_sketch, env.theta - theta, rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(res.update_sketch, ref.peek(grad), rtol=1e-4, atol=1e-7)


# -- geometry and drift ------------------------------------------------------------------
def test_orthonormal_rows_keeps_orientation():
    F = np.array([[2.0, 0.0, 0.0], [1.0, -3.0, 0.0]])
    np.testing.assert_allclose(orthonormal_rows(F), [[1, 0, 0], [0, -1, 0]], atol=1e-12)


def test_targets_have_the_configured_cosines():
    env = make_env("drifting", seed=1, conflict_pairs="0-1,2-4", conflict_cos=-0.3, shared=0.15,
                   shared_spread=0.1, category_share=0.1, **SMALL)
    W, rho = env._W, env.rho                                                  # (C, H+1, D), (H+1,)
    np.testing.assert_allclose(np.sort(rho[:6]), [0.05, 0.09, 0.13, 0.17, 0.21, 0.25], atol=1e-12)
    assert rho[6] == 0.15
    np.testing.assert_allclose(np.linalg.norm(W, axis=2), 1.0, atol=1e-12)
    assert cos(W[0, 0], W[0, 1]) == pytest.approx(-0.3, abs=1e-12)
    assert cos(W[3, 2], W[3, 4]) == pytest.approx(-0.3, abs=1e-12)
    r3, r5 = rho[3], rho[5]
    assert cos(W[0, 3], W[0, 5]) == pytest.approx(math.sqrt(r3 * r5) + 0.1, abs=1e-12)  # shared + category
    assert cos(W[0, 3], W[1, 5]) == pytest.approx(math.sqrt(r3 * r5), abs=1e-12)        # shared only
    r0, r1 = rho[0], rho[1]
    gamma = (-0.3 - math.sqrt(r0 * r1) - 0.1) / math.sqrt((0.9 - r0) * (0.9 - r1))
    assert cos(W[0, 0], W[1, 1]) == pytest.approx(math.sqrt(r0 * r1) + math.sqrt((0.9 - r0) * (0.9 - r1)) * gamma,
                                                  abs=1e-12)
    np.testing.assert_allclose(W[2, :, :] @ orthonormal_rows(env.F)[0], np.sqrt(rho), atol=1e-12)


def test_drift_rotates_slowly_phase_changes_resample_and_do_not_depend_on_the_policy():
    kw = dict(rotation=0.05, walk=0.0, phase_steps="3", **SMALL)
    a, b = make_env("drifting", seed=2, **kw), make_env("drifting", seed=2, **kw)
    W0, F0 = a._W.copy(), a.F.copy()
    for t in range(2):
        a.train_step(Allocation.pure(0, 6, 8))
        b.train_step(Allocation.pure(5, 6, 8))
    a.success_matrix(), b.success_matrix()
    np.testing.assert_array_equal(a._W, b._W)                                 # drift = f(step) only
    np.testing.assert_allclose(np.sum(F0 * a.F, axis=1), math.cos(2 * 0.05), atol=1e-12)  # exact rotation
    assert cos(W0[0, 2], a._W[0, 2]) > 0.98
    a.train_step(Allocation.pure(0, 6, 8))                                    # now at step 3: a phase
    a.success_matrix()
    common = math.sqrt(a.rho[2] * a.rho[2]) + 0.1
    assert abs(cos(W0[0, 2], a._W[0, 2]) - common) < 0.35                     # specific part resampled
    assert cos(a._W[0, 0], a._W[0, 1]) == pytest.approx(-0.3, abs=1e-12)    # conflict kept


def test_true_gradient_is_the_mean_of_sampled_gradients_without_noise():
    env = make_env("drifting", seed=4, noise=0.0, rotation=0.0, walk=0.0, optimizer="sgd", lr=1e-9,
                   sketch_dim=10**6, oversample=4.0, **SMALL)
    g = env.true_gradients()[2]
    sketches = [env.train_step(Allocation.pure(2, 6, 8)).sketch.astype(np.float64) for _ in range(300)]
    mean = -np.mean(sketches, axis=0)
    assert cos(mean, g) > 0.99
    assert np.linalg.norm(mean) == pytest.approx(np.linalg.norm(g), rel=0.1)


# -- adapter behaviour -------------------------------------------------------------------
def test_determinism_and_crn_through_hbsim_run():
    def frames(policy, seed=0):
        res = hbsim.run(make(policy, n_arms=6, seed=seed), make_env("drifting", seed=seed, **SMALL), 30)
        train = res.train.drop(columns=[c for c in res.train if c.startswith("seconds_")])
        return train, res.eval

    t1, e1 = frames("uniform")
    t2, e2 = frames("uniform")
    pd.testing.assert_frame_equal(t1, t2)
    pd.testing.assert_frame_equal(e1, e2)
    t3, e3 = frames("round_robin")
    assert not t1["arm"].equals(t3["arm"])
    assert e1[["suite", "task", "category", "harness", "attempt"]].equals(
        e3[["suite", "task", "category", "harness", "attempt"]])
    np.testing.assert_array_equal(make_env("drifting", seed=0).success_matrix(),
                                  make_env("drifting", seed=0).success_matrix())
    assert not np.array_equal(make_env("drifting", seed=0).success_matrix(),
                              make_env("drifting", seed=1).success_matrix())
    suites = set(e1["suite"])
    assert suites == {"heldout_tasks", "heldout_harness"} and set(e1["category"]) <= set(CATEGORIES)
    assert e1["task"][e1["suite"] == "heldout_tasks"].str.contains("@").all()


def test_oracle_regret_nonnegative_and_the_oracle_arm_is_the_best_pure_gain():
    env = make_env("drifting", seed=5, **SMALL)
    rng = np.random.default_rng(0)
    for _ in range(40):
        cand = np.vstack([np.eye(6, dtype=np.int64) * 8, rng.multinomial(8, np.ones(6) / 6)[None, :]])
        gains = env.expected_gains(cand)
        res = env.train_step(Allocation(cand[-1]))
        assert res.extras["regret"] == pytest.approx(max(gains[:6].max(), gains[-1]) - gains[-1], abs=1e-15)
        assert res.extras["oracle_arm"] == int(np.argmax(gains[:6]))
        assert res.extras["gain"] == pytest.approx(gains[-1])
        assert res.extras["regret"] == pytest.approx(max(gains.max(), gains[-1]) - gains[-1])
    assert set(f"true_{h}" for h in env.harnesses + ["hx"]) <= set(res.extras)


def test_state_dict_round_trip_mid_run_is_exact():
    a = make_env("drifting", seed=6, phase_steps="8", **SMALL)
    for t in range(5):
        a.train_step(Allocation.pure(t % 6, 6, 8))
    state = a.state_dict()
    b = make_env("drifting", seed=6, phase_steps="8", **SMALL)
    b.load_state_dict(state)
    for t in range(6):
        ra, rb = a.train_step(Allocation.pure(3, 6, 8)), b.train_step(Allocation.pure(3, 6, 8))
        np.testing.assert_array_equal(ra.sketch, rb.sketch)
        np.testing.assert_array_equal(ra.update_sketch, rb.update_sketch)
        assert ra.extras == rb.extras
    pd.testing.assert_frame_equal(a.evaluate(), b.evaluate())


def test_adam_makes_raw_and_update_cosines_disagree_sgd_does_not():
    def disagreements(**kw):
        env = make_env("drifting", seed=0, **SMALL, **kw)
        out = [env.train_step(Allocation.pure(t % 6, 6, 8)) for t in range(60)]
        flips = [np.sign(cos(x.sketch, y.sketch)) != np.sign(cos(x.update_sketch, y.update_sketch))
                 for x, y in zip(out, out[1:])]
        return np.mean(flips)

    assert disagreements() > 0.2
    assert disagreements(optimizer="sgd", lr=0.15) == 0.0


def test_150_steps_of_uniform_through_hbsim_run(benchmark):
    def go():
        return hbsim.run(make("uniform", n_arms=6, seed=0), make_env("drifting", seed=0), 150)

    res = benchmark(go)
    assert len(res.train) == 150
    check_regret(res.train)
    assert res.train["true_h0"].notna().all() and res.train["learnability"].notna().mean() > 0.9
    start = make_env("drifting", seed=0).success_matrix()[:200, :6].mean()
    end = res.train[[f"true_h{i}" for i in range(6)]].iloc[-1].mean()
    assert end > start + 0.05                                                 # it learns


# -- knob validation ---------------------------------------------------------------------
@pytest.mark.parametrize("knobs, words", [
    (dict(dim=12), ["dim=12", ">= n_harnesses"]),
    (dict(shared=0.8, category_share=0.3), ["shared=0.8", "shared + shared_spread + category_share <= 1"]),
    (dict(shared=0.05), ["shared=0.05", "shared - shared_spread >= 0"]),
    (dict(conflict_cos=-0.9), ["conflict_cos=-0.9", "expected in [-0.3"]),
    (dict(conflict_pairs="0-6"), ["conflict_pairs='0-6'", "[0, 5]"]),
    (dict(conflict_pairs="0-1,1-2"), ["conflict_pairs='0-1,1-2'", "disjoint"]),
    (dict(conflict_pairs="a-b"), ["conflict_pairs='a-b'", "pairs of harness indices"]),
    (dict(phase_steps="5,x"), ["phase_steps='5,x'", "non-negative integers"]),
    (dict(phase_steps=[True]), ["phase_steps=[True]", "non-negative integers"]),
    (dict(optimizer="rmsprop"), ["optimizer='rmsprop'", "sgd, adam"]),
    (dict(lr=0.0), ["lr=0.0", "[1e-12, 100.0]"]),
    (dict(beta1=1.0), ["beta1=1.0", "0.999999"]),
    (dict(bias_low=2.0, bias_high=1.0), ["bias_low=2.0", "bias_high=1.0"]),
    (dict(rotaton=0.1), ["'rotaton'", "valid knobs"]),
])
def test_bad_knobs_raise_naming_knob_value_and_range(knobs, words):
    with pytest.raises(ValueError) as err:
        make_env("drifting", seed=0, **knobs)
    for word in words:
        assert word in str(err.value)


def test_list_knobs_resolve_to_canonical_strings():
    knobs = DriftingEnv.resolve_knobs(phase_steps=[100, 50, 50], conflict_pairs=[[2, 3], (0, 1)])
    assert knobs["phase_steps"] == "50,100" and knobs["conflict_pairs"] == "0-1,2-3"
    assert DriftingEnv.knobs()["phase_steps"] == "" and DriftingEnv.resolve_knobs(conflict_pairs="")["conflict_pairs"] == ""
    env = make_env("drifting", seed=0, conflict_pairs="", **SMALL)
    assert env.pairs == []


@pytest.mark.cli
@pytest.mark.slow
def test_hb_sim_cli_accepts_list_knobs_and_rejects_bad_ones(tmp_path):
    base = [sys.executable, "-m", "hbsim.cli", "sim", "--env", "drifting", "--policy", "uniform",
            "--seeds", "1", "--steps", "3", "--set", "env.n_tasks=20", "--set", "env.n_heldout_tasks=5"]
    ok = subprocess.run(base + ["--set", "env.phase_steps=[2]", "--set", 'env.conflict_pairs="0-1,2-3"',
                                "--out", str(tmp_path / "runs")], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "uniform" in ok.stdout
    meta = json.loads(next((tmp_path / "runs").rglob("run.json")).read_text())
    assert meta["config"]["env"]["phase_steps"] == "2" and meta["config"]["env"]["conflict_pairs"] == "0-1,2-3"
    bad = subprocess.run(base + ["--set", "env.conflict_pairs=0-9"], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "conflict_pairs='0-9'" in bad.stderr and "[0, 5]" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
