"""The role-structured env `scenario` (hbsim.envs.scenario): roles by name, each structure
from the ground truth, the oracle maths against realised steps, exact state round trips."""
from __future__ import annotations

import numpy as np
import pytest

from hbsim.envs import make_env
from hbsim.envs.scenario import ScenarioEnv, expand_roles, forgetting, harness_names, trust_region
from policies.errors import UserError

SMALL = {"n_tasks": 40, "n_heldout_tasks": 10}


def env(seed=0, **knobs):
    return make_env("scenario", seed=seed, **{**SMALL, **knobs})


def pure(e, h, B=8):
    return np.eye(e.H, dtype=np.int64)[h] * B


def test_roles_expand_and_name_the_harnesses_the_same_in_every_seed():
    assert expand_roles("primary*2, anchor") == ["primary", "primary", "anchor"]
    assert harness_names(["primary", "primary", "anchor"]) == ["primary1", "primary2", "anchor"]
    a, b = env(0), env(1)
    assert a.harnesses == b.harnesses == ["primary1", "primary2", "anchor", "trap", "noise", "dead"]
    assert a.heldout_harness == "unseen"
    assert not np.allclose(a.a, b.a)                       # the noise (task difficulty) stays seeded
    assert ScenarioEnv.resolve_knobs(roles=["anchor", "trap*5"])["roles"] == "anchor,trap,trap,trap,trap,trap"


@pytest.mark.parametrize("knobs, needle", [
    ({"roles": "anchor*5"}, "expected n_harnesses=6 roles"),
    ({"roles": "wizard*6"}, "from ordinary, primary"),
    ({"roles": "locked,ordinary*5"}, "needs a key harness"),
])
def test_bad_roles_are_user_errors(knobs, needle):
    with pytest.raises(UserError, match=needle):
        env(**knobs)


def test_dead_never_yields_a_retained_group_and_noise_has_nothing_to_learn():
    e = env(lr=5.0, skill_lr=5.0)
    dead, noise = e.harnesses.index("dead"), e.harnesses.index("noise")
    for _ in range(5):
        res = e.train_step(pure(e, dead))
        assert res.cost.groups_retained == 0 and res.cost.groups_optimized == 0 and res.learnability is None
    assert np.all(e.success_matrix()[:, dead] == 0.0)
    assert e.expected_gains(pure(e, noise)[None])[0] == pytest.approx(0.0, abs=1e-12)
    for _ in range(5):
        e.train_step(pure(e, noise))
    assert np.all(e.success_matrix()[:, noise] == 0.5)
    assert e.train_step(pure(e, noise)).learnability > 0.4           # high variance, nothing to learn


def test_trap_transfers_negatively_and_the_anchor_positively():
    e = env()
    cos = _cos(e.true_directions())
    trap, anchor = e.harnesses.index("trap"), e.harnesses.index("anchor")
    others = [e.harnesses.index(h) for h in ("primary1", "primary2", "anchor")]
    assert all(cos[trap, j] < -0.1 for j in others if j != trap)
    assert all(cos[anchor, j] > 0.1 for j in others if j != anchor)
    after = e.expected_success(pure(e, trap)[None])[0]
    before = e.success_matrix()
    assert (after[: e.n_tasks, others] - before[: e.n_tasks, others]).mean() < 0      # the trap hurts the others


def _cos(d):
    n = np.linalg.norm(d, axis=1, keepdims=True)
    unit = np.divide(d, n, out=np.zeros_like(d), where=n > 0)
    return unit @ unit.T


def test_interference_makes_a_mixed_batch_worse_than_the_pure_steps_it_averages():
    e = env(roles="anchor,ordinary*5", interference=12.0, ordinary_bias=-2.0)
    mixed = np.array([[4, 4, 0, 0, 0, 0]])
    pures = e.expected_gains(np.vstack([pure(e, 0), pure(e, 1)]))
    assert e.expected_gains(mixed)[0] < pures.mean()
    plain = env(roles="anchor,ordinary*5", ordinary_bias=-2.0)
    assert plain.expected_gains(mixed)[0] > e.expected_gains(mixed)[0] > 0


def test_forgetting_is_schedule_dependent_and_an_empty_step_forgets_nothing():
    assert forgetting(0.5, np.array([1.0, 0.0]), 2.0).tolist() == pytest.approx([1.0, np.exp(-1.0)])
    e = env(roles="ordinary*5,dead", forget=1.0)
    for _ in range(10):
        e.train_step(pure(e, 0))
    s0 = e.s[0]
    e.train_step(pure(e, 5))                                          # empty step: nothing moves
    assert e.s[0] == s0
    e.train_step(pure(e, 1))
    assert e.s[0] < s0
    kept = env(roles="ordinary*5,dead")
    for _ in range(10):
        kept.train_step(pure(kept, 0))
    s1 = kept.s[0]
    kept.train_step(pure(kept, 1))
    assert kept.s[0] == s1


def test_trust_region_clips_every_step():
    assert trust_region(0.3, np.array([0.1, 0.6])).tolist() == [1.0, 0.5]
    e = env(lr=50.0, skill_lr=50.0, max_step=0.3)
    for h in range(4):
        res = e.train_step(pure(e, h))
        assert np.abs(res.update_sketch).sum() <= 0.3 + 1e-5


def test_trust_bound_says_whether_the_trust_region_clipped_the_step():
    """trust_bound = 1 exactly when the unclipped L1 move exceeded max_step: always at lr 50 and
    max_step 0.3, never without a trust region or when the bound is far above the move, and 0
    on an empty step (the default roles' harness 5 is dead)."""
    e = env(lr=50.0, skill_lr=50.0, max_step=0.3)
    assert [e.train_step(pure(e, h)).extras["trust_bound"] for h in range(4)] == [1.0] * 4
    assert e.train_step(pure(e, 5)).extras["trust_bound"] == 0.0
    for knobs in ({"max_step": 0.0}, {"max_step": 1000.0}):
        e = env(lr=50.0, skill_lr=50.0, **knobs)
        assert [e.train_step(pure(e, h)).extras["trust_bound"] for h in range(4)] == [0.0] * 4
    moved = float(np.abs(env().train_step(pure(env(), 0)).update_sketch.astype(np.float64)).sum())   # unclipped
    for bound, clipped in ((moved * 1.01, 0.0), (moved * 0.99, 1.0)):  # the first step, just above / below it
        e = env(max_step=bound)
        assert e.train_step(pure(e, 0)).extras["trust_bound"] == clipped


def test_heldout_success_follows_the_coverage_of_trained_formats():
    e = env(roles="ordinary*6", coverage=1.0, coverage_scale=0.3, heldout_read=0.0)
    spread = e._success(np.zeros((1, 5)), np.array([[1.0, 1.0, 1.0, 0, 0, 0]]))[0, e.n_tasks:, e.H].mean()
    focus = e._success(np.zeros((1, 5)), np.array([[3.0, 0, 0, 0, 0, 0]]))[0, e.n_tasks:, e.H].mean()
    assert spread > focus + 0.05
    m = env(roles="primary*3,ordinary*3", primary_align=-0.6)
    gains = m.target_gains(np.vstack([pure(m, 0), pure(m, 3)]), "heldout_harness")
    assert gains[0] < 0 < gains[1]                                    # negative alignment


def test_unlock_and_availability():
    e = env(roles="key,locked,ordinary*4", unlock_at=1.0, unlock_gap=8.0)
    assert e.success_matrix()[: e.n_tasks, 1].mean() < 0.02
    opened = e._success(e.z[None], np.array([[3.0, 0, 0, 0, 0, 0]]))[0]
    assert opened[: e.n_tasks, 1].mean() > 0.2
    c = env(roles="late,gone,ordinary*4", arrive_step=3, leave_step=3)
    assert c.train_step(pure(c, 0)).cost.groups_retained == 0         # not arrived yet
    assert c.train_step(pure(c, 1)).cost.groups_retained > 0
    c.train_step(pure(c, 2))
    assert c.available().tolist() == [True, False, True, True, True, True]
    assert c.train_step(pure(c, 0)).cost.groups_retained > 0
    assert c.train_step(pure(c, 1)).cost.groups_retained == 0         # gone


def test_expected_gain_matches_the_mean_realised_gain():
    exp, real = [], []
    for seed in range(40):
        e = env(seed, roles="ordinary*3,anchor,trap,noise", n_tasks=60)
        before = e.success_matrix()[: e.n_tasks, : e.H].mean()
        exp.append(e.expected_gains(pure(e, 0)[None])[0])
        e.train_step(pure(e, 0))
        real.append(e.success_matrix()[: e.n_tasks, : e.H].mean() - before)
    assert np.mean(exp) > 0.005
    assert np.mean(real) == pytest.approx(np.mean(exp), rel=0.15)


def test_state_round_trip_is_exact():
    a = env(forget=0.5, interference=4.0, max_step=0.3)
    for h in (0, 1, 4, 3):
        a.train_step(pure(a, h))
    state = a.state_dict()
    ra = [a.train_step(np.array([2, 2, 1, 1, 1, 1])).sketch for _ in range(3)]
    b = env(forget=0.5, interference=4.0, max_step=0.3)
    b.load_state_dict(state)
    rb = [b.train_step(np.array([2, 2, 1, 1, 1, 1])).sketch for _ in range(3)]
    assert all(np.array_equal(x, y) for x, y in zip(ra, rb))
    assert np.array_equal(a.success_matrix(), b.success_matrix())


def test_target_gains_agree_with_expected_success_and_leave_the_state():
    from hbsim.envs.base import target_means
    from policies.clairvoyant import TARGETS
    e = env(1, forget=0.5, interference=4.0, max_step=0.3, coverage=0.5)
    for h in (0, 2, 3):
        e.train_step(pure(e, h))
    cand = np.vstack([np.eye(6, dtype=np.int64) * 8, [[2, 2, 1, 1, 1, 1]]])
    before = e.success_matrix().copy()
    means = target_means(e.expected_success(cand), e.n_tasks, 6) - target_means(before, e.n_tasks, 6)
    for i, target in enumerate(TARGETS):
        np.testing.assert_allclose(e.target_gains(cand, target), means[:, i], rtol=1e-9, atol=1e-13)
    np.testing.assert_array_equal(e.success_matrix(), before)
