"""Synthetic environment base (sampling, ledger, leftovers, CRN, eval, state) and the
bernoulli env (knobs, learning rule, oracle)."""
import numpy as np
import pytest

from hbsim import grpo
from hbsim.adapter import TrainingAdapter
from hbsim.contract import EVAL_COLUMNS
from hbsim.envs import CATEGORIES, ENVS, make_env
from hbsim.envs.base import Batch
from policies import Allocation

SMALL = dict(n_tasks=40, n_heldout_tasks=6)
FLAT = dict(difficulty_mean=0.0, difficulty_std=0.0, harness_offset_mean=0.0, harness_std=0.0,
            n_saturating=0, n_zero=0, drift=0.0)


def pure(h, H=6, B=8):
    return Allocation.pure(h, H, B)


def strip_seconds(d: dict) -> dict:
    return {k: v for k, v in d.items() if not k.startswith("seconds")}


# -- registry and knobs ------------------------------------------------------------------
def test_registry_and_unknown_kind():
    assert list(ENVS) == ["bernoulli", "drifting", "student", "scenario", "twin"]
    with pytest.raises(ValueError, match=r"kind='nope'.*valid kinds: bernoulli, drifting, student, scenario"):
        make_env("nope")


def test_knobs_defaults_and_validation():
    knobs = ENVS["bernoulli"].knobs()
    assert knobs["n_harnesses"] == 6 and knobs["n_tasks"] == 200 and knobs["group_size"] == 8
    assert knobs["oversample"] == 1.5 and knobs["advantage"] == "loo" and knobs["negative_fraction"] == 0.2
    env = make_env("bernoulli", seed=0)
    # the group filter's, cost and validation-split knobs are recorded only when set (hbsim.sampling.when_set)
    unset = ("keep_band", "min_abs_adv", "n_validation_tasks", "group_tokens", "group_tool_seconds", "token_seconds")
    assert env.config() == {"kind": "bernoulli", **{k: v for k, v in knobs.items() if k not in unset}}
    assert make_env("bernoulli", seed=0, group_tokens=[5, 5, 5, 5, 5, 7]).config()["group_tokens"] == "5,5,5,5,5,7"
    assert isinstance(env, TrainingAdapter)
    assert env.harnesses == ["h0", "h1", "h2", "h3", "h4", "h5"]
    with pytest.raises(ValueError, match=r"env kind 'bernoulli' has no knob 'lrate'; valid knobs: n_harnesses, .*lr"):
        make_env("bernoulli", lrate=1.0)
    for bad, match in [(dict(lr=-1.0), "lr=-1.0 is out of range"), (dict(group_size=1), "group_size=1"),
                       (dict(n_tasks=1.5), "env.n_tasks=1.5 is not allowed: expected an integer in \\[1, 100000\\]"),
                       (dict(advantage="ppo"), "one of loo, grpo, mean"), (dict(oversample=float("nan")), "oversample"),
                       (dict(n_harnesses=2, n_saturating=2, n_zero=1), "n_saturating=2 \\+ n_zero=1"),
                       (dict(drift=True), "drift=True")]:
        with pytest.raises(ValueError, match=match):
            make_env("bernoulli", **bad)
    assert make_env("bernoulli", lr=2).knobs["lr"] == 2.0          # ints accepted for floats
    with pytest.raises(ValueError, match="seed=-1"):
        make_env("bernoulli", seed=-1)


# -- common random numbers -------------------------------------------------------------
def test_same_seed_same_structure_and_initial_success():
    a, b, c = make_env("bernoulli", seed=3), make_env("bernoulli", seed=3), make_env("bernoulli", seed=4)
    np.testing.assert_array_equal(a.success_matrix(), b.success_matrix())
    np.testing.assert_array_equal(a.task_category, b.task_category)
    assert not np.array_equal(a.success_matrix(), c.success_matrix())
    s = a.success_matrix()
    assert s.shape == (250, 7) and (s >= 0).all() and (s <= 1).all()


def test_per_harness_streams_do_not_shift():
    """Training on harness 0 first must not change what harness 1 draws."""
    a, b = make_env("bernoulli", seed=5), make_env("bernoulli", seed=5)
    a.train_step(pure(0))
    a.train_step(pure(1))
    b.train_step(pure(1))
    assert a._cursors[1] == b._cursors[1]
    np.testing.assert_array_equal(a._pools[1], b._pools[1])
    assert a._reward_rngs[1].bit_generator.state == b._reward_rngs[1].bit_generator.state


def test_drift_noise_is_common_to_every_history():
    """With learning switched off, the competence path is the same whatever is trained --
    also when a step optimizes nothing (the zero-success harness)."""
    a = make_env("bernoulli", seed=8, lr=0.0, task_lr=0.0, drift=0.1, forget=0.02, zero_offset=-50.0)
    b = make_env("bernoulli", seed=8, lr=0.0, task_lr=0.0, drift=0.1, forget=0.02, zero_offset=-50.0)
    zero = int(np.flatnonzero(a.roles == 1)[0])
    for i in range(5):
        a.train_step(pure(zero))
        b.train_step(pure((zero + 1 + i) % 6))
    np.testing.assert_array_equal(a.z, b.z)
    assert np.abs(a.z).max() > 0.05


def test_roles_zero_and_saturating_harnesses():
    env = make_env("bernoulli", seed=0, n_saturating=2, n_zero=1)
    truth = env.success_matrix()[: env.n_tasks].mean(axis=0)
    assert (env.roles[:6] == 1).sum() == 1 and (env.roles[:6] == 0).sum() == 2
    assert truth[env.roles == 1].max() < 0.01                       # starts at (near) zero
    assert env.success_matrix()[:, env.roles == 0].max() <= 0.7     # plateau at the ceiling
    assert (env.M[np.arange(6), np.arange(6)] == 1).all() and (env.M < 0).any()


# -- dynamic sampling and ledger -------------------------------------------------------
def test_ledger_leftovers_and_ages():
    env = make_env("bernoulli", seed=0, oversample=2.0, n_tasks=50, **FLAT)   # p = 0.5 everywhere
    r1 = env.train_step(pure(0))
    c1 = r1.cost
    assert c1.groups_generated == 16 and c1.groups_scored == 16       # one round of ceil(8 * 2)
    assert c1.groups_optimized == 8 and c1.leftover_used == 0 and np.isnan(c1.leftover_age)
    assert c1.leftover_size == c1.groups_retained - 8 > 0
    r2 = env.train_step(pure(1))
    assert r2.cost.leftover_size == c1.leftover_size + r2.cost.groups_retained - 8
    r3 = env.train_step(pure(0))
    used = min(8, c1.leftover_size)
    assert r3.cost.leftover_used == used and r3.cost.leftover_age == 2.0
    assert r3.cost.groups_generated == (0 if used == 8 else int(np.ceil((8 - used) * 2.0)))
    for r in (r1, r2, r3):
        assert set(r.cost.seconds) >= {"rollout", "backward"}
        assert r.learnability is not None and 0 < r.learnability <= 4 / 7


def test_leftover_max_age_expires_groups():
    used = {}
    for max_age in (1, 2, 0):               # 0 = no age limit
        env = make_env("bernoulli", seed=0, oversample=2.0, leftover_max_age=max_age, **FLAT)
        r = env.train_step(pure(0))
        assert r.cost.leftover_size > 0
        env.train_step(pure(1))
        used[max_age] = env.train_step(pure(0)).cost.leftover_used   # harness 0's leftovers are 2 steps old
    assert used[1] == 0 and used[2] > 0 and used[0] == used[2]


def test_zero_success_harness_gives_missing_learnability_and_full_rounds():
    env = make_env("bernoulli", seed=0, n_harnesses=2, n_zero=2, n_saturating=0, zero_offset=-50.0)
    r = env.train_step(pure(0, H=2))
    # 4 rounds of ceil(8 * 1.5) = 12 groups, none retained
    assert r.cost.groups_generated == 48 and r.cost.groups_retained == 0 and r.cost.groups_optimized == 0
    assert r.learnability is None and r.sketch is None and np.isnan(r.reward)


def test_mixed_allocation_and_bad_counts():
    env = make_env("bernoulli", seed=0)
    r = env.train_step(Allocation(np.array([2, 2, 1, 1, 1, 1])))
    gains = [make_env("bernoulli", seed=0).train_step(pure(h)).extras["gain"] for h in range(6)]   # same pre-state
    assert r.extras["oracle_arm"] == int(np.argmax(gains))
    assert r.extras["regret"] == pytest.approx(max(gains) - r.extras["gain"]) and r.extras["regret"] > 0
    for bad in (np.array([8, 0]), np.zeros(6, np.int64), np.array([1.0] * 6), np.array([-1, 9, 0, 0, 0, 0])):
        with pytest.raises(ValueError, match="allocation counts"):
            env.train_step(Allocation(bad))


# -- learning rule ---------------------------------------------------------------------
def test_learn_rule_hand_computed():
    env = make_env("bernoulli", seed=1, drift=0.0, grad_noise=0.0, noise_dims=2)
    t, h = 7, 2
    c = env.task_category[t]
    rewards = np.array([[1.0, 0, 0, 0, 0, 0, 0, 0]])
    batch = Batch(tasks=np.array([t]), harnesses=np.array([h]), rewards=rewards,
                  advantages=grpo.advantages(rewards), p=np.array([0.3]), born=np.array([0]))
    z0, u0 = env.z.copy(), env.u.copy()
    sketch, upd = env._learn(batch, np.random.default_rng(0))
    # s = mean_i A_i (r_i - p) = L/2 for LOO binary rewards; L(1) = 2*1*7/56 = 0.25
    s = 0.125
    expected_z = z0.copy()
    expected_z[c] += env.knobs["lr"] * s * env.M[h]
    np.testing.assert_allclose(env.z, expected_z, rtol=0, atol=1e-15)
    assert env.u[t] == pytest.approx(u0[t] + env.knobs["task_lr"] * s, rel=1e-14)
    assert upd is None and sketch.dtype == np.float32
    assert sketch.shape == (len(CATEGORIES) * 7 + env.n_tasks + 2,)
    np.testing.assert_allclose(sketch[c * 7:(c + 1) * 7], s * env.M[h], rtol=1e-6)
    np.testing.assert_array_equal(sketch[-2:], 0.0)


def test_training_improves_success():
    env = make_env("bernoulli", seed=2, drift=0.0)
    before = env.success_matrix()[: env.n_tasks, :6].mean()
    for i in range(60):
        env.train_step(pure(i % 6))
    assert env.success_matrix()[: env.n_tasks, :6].mean() > before + 0.05


# -- oracle ----------------------------------------------------------------------------
@pytest.mark.calibration
def test_expected_update_matches_monte_carlo():
    """The oracle's expected step equals the average realised step (exact, linear)."""
    env = make_env("bernoulli", seed=4, drift=0.0, forget=0.0, n_tasks=60, **{"n_zero": 0})
    h = int(np.flatnonzero(env.roles[:6] == 2)[0])
    dz, du = env.expected_update(np.eye(6, dtype=np.int64)[[h]] * 8)
    state = env.state_dict()
    z0 = env.z.copy()
    reps = 1200
    draws = np.empty((reps,) + z0.shape)
    for i in range(reps):
        env.load_state_dict(state)
        env._reward_rngs[h] = np.random.default_rng(i)
        env._pools[h] = np.random.default_rng(10**6 + i).permutation(env.n_tasks)
        env.train_step(pure(h))
        draws[i] = env.z - z0
    mean, se = draws.mean(axis=0), draws.std(axis=0, ddof=1) / np.sqrt(reps)
    assert np.all(np.abs(mean - dz[0]) <= 4 * se + 1e-12)
    assert np.abs(dz[0]).max() > 10 * se.max()          # the test has power


def test_expected_gain_matches_mean_realised_gain():
    """The oracle's gain of a pure step ~ the average realised change of mean training success."""
    env = make_env("bernoulli", seed=4, drift=0.0, n_tasks=80)
    for i in range(12):
        env.train_step(pure(i % 6))
    arms = np.flatnonzero(env.roles[:6] == 2)[:2]
    gains = env.expected_gains(np.eye(6, dtype=np.int64)[arms] * 8)
    state, before = env.state_dict(), env.success_matrix()[: env.n_tasks, :6].mean()
    for h, gain in zip(arms, gains):
        realised = []
        for r in range(200):
            env.load_state_dict(state)
            env._reward_rngs[h] = np.random.default_rng(r)
            env._pools[h] = np.random.default_rng(10**6 + r).permutation(env.n_tasks)
            env._sampler.buffers[h] = []
            env.train_step(pure(int(h)))
            realised.append(env.success_matrix()[: env.n_tasks, :6].mean() - before)
        se = np.std(realised, ddof=1) / np.sqrt(len(realised))
        assert abs(np.mean(realised) - gain) < 4 * se + 0.03 * abs(gain)
        assert gain > 10 * se


@pytest.mark.parametrize("forget", [0.0, 0.05])
def test_expected_gains_apply_the_expected_update(forget):
    """gain(candidate) = mean training success after applying the expected update - before."""
    env = make_env("bernoulli", seed=6, forget=forget, **SMALL)
    for i in range(4):
        env.train_step(pure(i))
    cands = np.vstack([np.eye(6, dtype=np.int64) * 8, [[3, 0, 0, 5, 0, 0]]])
    gains = env.expected_gains(cands)
    dz, du = env.expected_update(cands)
    state = env.state_dict()
    before = env.success_matrix()[: env.n_tasks, :6].mean()
    for k in range(len(cands)):
        env.load_state_dict(state)
        env._load_model_state({"z": (1 - forget) * (env.z + dz[k]), "u": (1 - forget) * (env.u + du[k])})
        assert gains[k] == pytest.approx(env.success_matrix()[: env.n_tasks, :6].mean() - before, abs=1e-14)
    # a mixed batch's expected update is the count-weighted mix of the pure ones
    np.testing.assert_allclose(dz[6], (3 * dz[0] + 5 * dz[3]) / 8, atol=1e-15)


def test_oracle_regret_and_extras():
    env = make_env("bernoulli", seed=0)
    for i in range(12):
        pre = env.expected_gains(np.eye(6, dtype=np.int64) * 8)        # the pre-step state's pure gains
        assert pre.shape == (6,)
        r = env.train_step(pure(i % 6))
        assert r.extras["regret"] == pytest.approx(pre.max() - pre[i % 6], abs=1e-15)
        assert 0 <= r.extras["oracle_arm"] < 6
        assert set(r.extras) >= {"oracle_arm", "regret", "gain"} | {f"true_{h}" for h in env.harnesses + ["hx"]}
    # regret = best pure gain - chosen gain, computed from the pre-step state
    env2 = make_env("bernoulli", seed=0)
    pre = env2.expected_gains(np.eye(6, dtype=np.int64) * 8)
    r = env2.train_step(pure(3))
    assert r.extras["oracle_arm"] == int(np.argmax(pre))
    assert r.extras["regret"] == pytest.approx(pre.max() - pre[3], abs=1e-15)
    assert r.extras["gain"] == pytest.approx(pre[3], abs=1e-15)


# -- evaluation ------------------------------------------------------------------------
def test_evaluate_suites_and_columns():
    env = make_env("bernoulli", seed=0, k_attempts=2, **SMALL)
    ev = env.evaluate()
    assert tuple(ev.columns) == EVAL_COLUMNS
    tasks = ev[ev.suite == "heldout_tasks"]
    harn = ev[ev.suite == "heldout_harness"]
    assert len(tasks) == 6 * 6 * 2 and len(harn) == 6 * 2
    assert tasks.task.iloc[0] == "e0000@h0" and set(tasks.harness) == set(env.harnesses)
    assert set(harn.harness) == {"hx"} and set(harn.task) == {f"e{i:04d}" for i in range(6)}
    assert set(ev.category) <= set(CATEGORIES)
    assert ev.reward.between(0, 1).all() and (ev.success == (ev.reward == 1.0)).all()
    assert ev.attempt.tolist()[:4] == [0, 1, 0, 1]
    # same step -> same uniforms -> same frame; differs after a step
    assert ev.equals(env.evaluate())


def test_evaluate_matches_true_success():
    env = make_env("bernoulli", seed=0, k_attempts=2000, n_heldout_tasks=3)
    ev = env.evaluate()
    s = env.success_matrix()[env.n_tasks:]
    got = ev[ev.suite == "heldout_harness"].groupby("task").reward.mean().to_numpy()
    np.testing.assert_allclose(got, s[:, 6], atol=4 * np.sqrt(0.25 / 2000))


def test_evaluate_crn_across_histories():
    """At the same step, two envs share eval uniforms whatever they trained on."""
    a, b = make_env("bernoulli", seed=9, **SMALL), make_env("bernoulli", seed=9, **SMALL)
    a.train_step(pure(0))
    b.train_step(pure(5))
    ea, eb = a.evaluate(), b.evaluate()
    assert ea[["suite", "task", "harness", "attempt"]].equals(eb[["suite", "task", "harness", "attempt"]])
    # same uniforms: where both true probabilities are equal-ordered the outcomes are monotone
    sa, sb = a.success_matrix()[a.n_tasks:], b.success_matrix()[b.n_tasks:]
    higher = np.repeat((sa[:, :6] >= sb[:, :6]).reshape(-1), 3)
    ra = ea[ea.suite == "heldout_tasks"].reward.to_numpy()
    rb = eb[eb.suite == "heldout_tasks"].reward.to_numpy()
    assert np.all(ra[higher] >= rb[higher])


# -- state -----------------------------------------------------------------------------
def test_state_dict_round_trip_exact():
    a = make_env("bernoulli", seed=11, **SMALL)
    for i in range(5):
        a.train_step(pure(i % 3))
    state = a.state_dict()
    tail_a = [a.train_step(pure(i % 6)) for i in range(6)]
    b = make_env("bernoulli", seed=11, **SMALL)
    b.load_state_dict(state)
    tail_b = [b.train_step(pure(i % 6)) for i in range(6)]
    for x, y in zip(tail_a, tail_b):
        assert x.learnability == y.learnability and x.reward == y.reward or np.isnan(x.reward)
        np.testing.assert_array_equal(x.sketch, y.sketch)
        assert strip_seconds(x.cost.as_row()) == pytest.approx(strip_seconds(y.cost.as_row()), nan_ok=True)
        assert x.extras == y.extras
    assert a.evaluate().equals(b.evaluate())
    with pytest.raises(ValueError, match="does not match"):
        make_env("bernoulli", seed=11).load_state_dict(state)
