"""Logistic student (hbsim/envs/student.py): features and the REINFORCE step by hand, the
oracle against Monte Carlo, harness regimes, determinism, CRN, round trips, knobs."""
import numpy as np
import pandas as pd
import pytest
from scipy.special import expit

import hbsim
from hbsim import grpo
from hbsim.envs import CATEGORIES, Batch, make_env
from hbsim.grpo import Optimizer
from hbsim.envs.student import StudentEnv, student_features
from policies import Allocation, make
from run_checks import check_regret

SMALL = dict(n_tasks=40, n_heldout_tasks=10)


def test_student_features_by_hand():
    x = np.array([[1.0, 2.0]])                                  # one task, dx = 2
    v = np.array([[3.0], [-1.0]])                               # two harnesses, dv = 1
    phi = student_features(x, v, 0.5)
    assert phi.shape == (1, 2, 2 + 2 + 1 + 2)
    np.testing.assert_array_equal(phi[0, 0], [1, 2, 1, 0, 3, 1.5, 3])
    np.testing.assert_array_equal(phi[0, 1], [1, 2, 0, 1, -1, -0.5, -1])
    v2 = np.array([[1.0, -2.0]])                                 # dv = 2: row-major outer product
    np.testing.assert_array_equal(student_features(x, v2, 1.0)[0, 0], [1, 2, 1, 1, -2, 1, -2, 2, -4])


def test_feature_layout_and_initial_theta_of_the_env():
    env = make_env("student", seed=0, n_task_features=3, n_harness_features=2, **SMALL)
    C, H = len(CATEGORIES), 6
    dx, dv = C + 3, 2
    assert env.phi.shape == (50, H + 1, dx + H + 1 + dv + dx * dv) and env.dim == env.phi.shape[2]
    np.testing.assert_array_equal(env.phi[:, :, :C].argmax(axis=2), np.repeat(env.task_category[:, None], H + 1, 1))
    np.testing.assert_array_equal(env.phi[7, :, dx: dx + H + 1], np.eye(H + 1))      # harness one-hot
    bias = env.theta0[dx: dx + H + 1]
    np.testing.assert_allclose(np.sort(bias[:H]), np.linspace(-5.0, 4.0, H))
    assert bias[H] == -1.0 and (env.theta0[dx + H + 1: dx + H + 1 + dv] == 0).all()
    np.testing.assert_allclose(env.success_matrix(), expit(env.phi @ env.theta0))


def test_reinforce_step_by_hand():
    env = make_env("student", seed=1, n_tasks=3, n_heldout_tasks=2, n_harnesses=2, group_size=4,
                   optimizer="sgd", lr=0.1, sketch_dim=10**6)
    r = np.array([[1.0, 0.0, 0.0, 1.0]])
    adv = grpo.advantages(r, "loo")                              # (2/3, -2/3, -2/3, 2/3)
    np.testing.assert_allclose(adv, [[2 / 3, -2 / 3, -2 / 3, 2 / 3]])
    # sig = mean_i A_i (r_i - p) = (4/3 (1-p) + 4/3 p) / 4 = 1/3 whatever p is
    batch = Batch(tasks=np.array([0]), harnesses=np.array([1]), rewards=r, advantages=adv,
                  p=np.array([0.5]), born=np.array([0]))
    theta0, phi = env.theta.copy(), env.phi[0, 1]
    sketch, update = env._learn(batch, np.random.default_rng(0))
    np.testing.assert_allclose(sketch, -phi / 3, rtol=1e-6)
    np.testing.assert_allclose(env.theta, theta0 + 0.1 * phi / 3, rtol=1e-12)
    np.testing.assert_allclose(update, 0.1 * phi / 3, rtol=1e-6)
    # two groups, "mean" advantages: g = sum_g mean_i A_gi (r_gi - p_g) phi_g / 2
    r2 = np.array([[1.0, 1.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0]])
    adv2 = grpo.advantages(r2, "mean")
    b2 = Batch(tasks=np.array([2, 1]), harnesses=np.array([0, 1]), rewards=r2, advantages=adv2,
               p=np.zeros(2), born=np.zeros(2, np.int64))
    p_now = expit(np.array([env.phi[2, 0] @ env.theta, env.phi[1, 1] @ env.theta]))
    sig = np.array([(0.25 * (1 - p_now[0]) * 3 + (-0.75) * (0 - p_now[0])) / 4,
                    (0.75 * (1 - p_now[1]) + (-0.25) * (0 - p_now[1]) * 3) / 4])
    np.testing.assert_allclose(sig, [3 / 16, 3 / 16])
    sketch2, _ = env._learn(b2, np.random.default_rng(0))
    np.testing.assert_allclose(sketch2, -(sig[0] * env.phi[2, 0] + sig[1] * env.phi[1, 1]) / 2, rtol=1e-6)


def test_adam_is_the_default_optimizer_and_sketches_use_fixed_coordinates():
    env = make_env("student", seed=2, **SMALL)
    assert env.opt.kind == "adam" and env.dim == 76 and env.coords.size == 64
    coords = env.coords.copy()
    ref = Optimizer("adam", coords.size, env.knobs["lr"])               # Adam is coordinate-wise
    theta = env.theta.copy()
    res = env.train_step(Allocation.pure(3, 6, 8))
    # Adam's first step moves each coordinate by -lr sign(grad)
    moved = env.theta - theta
    np.testing.assert_allclose(res.update_sketch, moved[coords], rtol=1e-6)
    nz = res.sketch != 0
    np.testing.assert_allclose(res.update_sketch[nz], ref.peek(res.sketch.astype(float))[nz], rtol=1e-5)
    np.testing.assert_array_equal(env.coords, coords)
    assert np.array_equal(make_env("student", seed=2, **SMALL).coords, coords)


def test_expected_gradient_matches_monte_carlo_of_sampled_batches():
    env = make_env("student", seed=3, optimizer="sgd", lr=1e-12, sketch_dim=10**6, **SMALL)
    h = int(np.argsort(env.success_matrix()[:40, :6].mean(axis=0))[3])           # a middling harness
    g = env.true_gradients()[h]
    sketches = [env.train_step(Allocation.pure(h, 6, 8)).sketch.astype(np.float64) for _ in range(300)]
    mean = -np.mean(sketches, axis=0)
    assert mean @ g / np.linalg.norm(mean) / np.linalg.norm(g) > 0.99
    assert np.linalg.norm(mean) == pytest.approx(np.linalg.norm(g), rel=0.1)


def test_some_harnesses_start_near_zero_and_some_saturate():
    for seed in range(3):
        start = make_env("student", seed=seed).success_matrix()[:200, :6].mean(axis=0)
        assert start.min() < 0.05 and start.max() > 0.95


def test_oracle_regret_nonnegative_and_gain_consistent_with_an_sgd_step():
    env = make_env("student", seed=4, **SMALL)
    rng = np.random.default_rng(0)
    for _ in range(40):
        cand = np.vstack([np.eye(6, dtype=np.int64) * 8, rng.multinomial(8, np.ones(6) / 6)[None, :]])
        gains = env.expected_gains(cand)
        res = env.train_step(Allocation(cand[-1]))
        assert res.extras["oracle_arm"] == int(np.argmax(gains[:6]))
        assert res.extras["regret"] == pytest.approx(max(gains[:6].max(), gains[-1]) - gains[-1], abs=1e-15)
    # with SGD the expected gain is the success change of theta + lr * E[g] (by hand)
    sgd = make_env("student", seed=4, optimizer="sgd", lr=0.5, **SMALL)
    g = sgd.true_gradients()[2]
    p0 = sgd.success_matrix()[:40, :6].mean()
    p1 = expit(sgd.phi[:40, :6] @ (sgd.theta + 0.5 * g)).mean()
    assert sgd.expected_gains(np.eye(6, dtype=np.int64)[[2]] * 8)[0] == pytest.approx(p1 - p0, rel=1e-12)


def test_determinism_crn_and_state_round_trip_through_the_loop():
    def run(policy, steps=30):
        res = hbsim.run(make(policy, n_arms=6, seed=0), make_env("student", seed=0, **SMALL), steps)
        return res.train.drop(columns=[c for c in res.train if c.startswith("seconds_")]), res.eval

    t1, e1 = run("harnessbandit")
    t2, e2 = run("harnessbandit")
    pd.testing.assert_frame_equal(t1, t2)
    pd.testing.assert_frame_equal(e1, e2)
    t3, e3 = run("uniform")
    cols = ["suite", "task", "category", "harness", "attempt"]
    assert e1[cols].equals(e3[cols]) and not e1["reward"].equals(e3["reward"])
    np.testing.assert_array_equal(make_env("student", seed=0).success_matrix(),
                                  make_env("student", seed=0).success_matrix())
    # resume mid-run
    loop = hbsim.Loop(make("harnessbandit", n_arms=6, seed=0), make_env("student", seed=0, **SMALL), seed=0)
    loop.run(12)
    state = loop.state_dict()
    loop2 = hbsim.Loop(make("harnessbandit", n_arms=6, seed=0), make_env("student", seed=0, **SMALL), seed=0)
    loop2.load_state_dict(state)
    loop2.run(30)
    t4 = loop2.result().train
    pd.testing.assert_frame_equal(t4.drop(columns=[c for c in t4 if c.startswith("seconds_")]).drop(columns="run_id"),
                                  t1.drop(columns="run_id"))


def test_150_steps_of_uniform_through_hbsim_run(benchmark):
    def go():
        return hbsim.run(make("uniform", n_arms=6, seed=0), make_env("student", seed=0), 150)

    res = benchmark(go)
    train = res.train
    assert len(train) == 150
    check_regret(train)
    true = train[[f"true_h{i}" for i in range(6)]]
    start = make_env("student", seed=0).success_matrix()[:200, :6].mean()
    assert true.iloc[-1].mean() > start + 0.05                                   # it learns
    L = train["learnability"].dropna()
    assert 0 < L.min() and L.max() <= 4 / 7 + 1e-12                              # SPEC §2.3 bound
    assert set(res.eval["suite"]) == {"heldout_tasks", "heldout_harness"}
    assert res.eval["reward"].between(0, 1).all() and res.eval["success"].dtype == bool


@pytest.mark.parametrize("knobs, words", [
    (dict(bias_low=1.0, bias_high=0.0), ["bias_low=1.0", "bias_high=0.0"]),
    (dict(n_task_features=-1), ["n_task_features=-1", "[0, 4096]"]),
    (dict(interaction="big"), ["interaction='big'", "a finite number in [0.0, 100.0]"]),
    (dict(optimizer="adagrad"), ["optimizer='adagrad'", "sgd, adam"]),
    (dict(advantage="ppo"), ["advantage='ppo'", "loo"]),
    (dict(sketch_dim=0), ["sketch_dim=0", "[1, 10000000]"]),
    (dict(lr=float("nan")), ["lr=nan", "a finite number in [1e-12, 100.0]"]),
])
def test_bad_knobs_raise_naming_knob_value_and_range(knobs, words):
    with pytest.raises(ValueError) as err:
        make_env("student", seed=0, **knobs)
    for word in words:
        assert word in str(err.value)


def test_every_knob_is_documented_in_the_class_docstring():
    from hbsim.envs.drifting import DriftingEnv
    for cls in (StudentEnv, DriftingEnv):
        for name, spec in cls.KNOBS.items():
            assert spec.doc and f"{name} = {spec.default!r}: {spec.doc}" in cls.__doc__
