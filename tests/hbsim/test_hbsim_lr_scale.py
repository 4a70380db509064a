"""Optimizer fairness (issue 18 item 6): the `update_norm` train column and the per-design
learning-rate multiplier `lr_scale` (policies.base.LR_SCALE, applied by the adapter)."""
import numpy as np
import pytest

import hbsim
from ablations.spec import parse_spec, plan_cells
from hbsim.cli import main
from hbsim.contract import UPDATE_NORM
from hbsim.envs import make_env
from hbsim.experiment import resolve_config
from hbsim.loop import Loop
from hbsim.contract.records import config_hash
from policies import make
from policies.errors import UserError

SMALL = dict(n_tasks=20, n_heldout_tasks=4, drift=0.0)


def _bernoulli_step(scale: float):
    env = make_env("bernoulli", seed=3, **SMALL)
    env.set_lr_scale(scale)
    z0, u0 = env.z.copy(), env.u.copy()
    res = env.train_step(make("fixed", n_arms=6, arm=2).select())
    return env.z - z0, env.u - u0, res


def test_bernoulli_update_norm_is_the_applied_step_and_lr_scale_scales_it_exactly():
    dz, du, res = _bernoulli_step(1.0)
    assert res.cost.groups_optimized > 0
    assert res.update_norm == pytest.approx(np.sqrt((dz ** 2).sum() + (du ** 2).sum()), rel=1e-12)
    dz2, du2, res2 = _bernoulli_step(2.0)
    np.testing.assert_array_equal(dz2, 2.0 * dz)             # lr 1 and task_lr 0.5: powers of two, exact
    np.testing.assert_array_equal(du2, 2.0 * du)
    assert res2.update_norm == 2.0 * res.update_norm


@pytest.mark.parametrize("kind", ["drifting", "student"])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_gradient_env_update_norm_and_exact_scale(kind, optimizer):
    def step(scale):
        env = make_env(kind, seed=1, n_tasks=20, n_heldout_tasks=4, optimizer=optimizer)
        env.set_lr_scale(scale)
        assert env.opt.lr == env.knobs["lr"] * scale
        theta0 = env.theta.copy()
        res = env.train_step(make("fixed", n_arms=6, arm=1).select())
        return env.theta - theta0, res, env

    d1, r1, env = step(1.0)
    assert r1.update_norm == pytest.approx(np.linalg.norm(d1), rel=1e-9)
    np.testing.assert_allclose(r1.update_sketch, d1[env.coords].astype(np.float32), rtol=1e-5, atol=1e-9)
    d2, r2, _ = step(2.0)
    assert r2.update_norm == 2.0 * r1.update_norm           # the delta is -lr x scale x direction
    np.testing.assert_allclose(d2, 2.0 * d1, rtol=1e-12, atol=1e-15)


def test_an_empty_step_has_update_norm_zero():
    env = make_env("bernoulli", seed=0, n_harnesses=2, n_tasks=5, n_heldout_tasks=2, n_zero=1, n_saturating=0,
                   max_rounds=1, zero_offset=-50.0)
    zero = int(np.flatnonzero(env.roles[:2] == 1)[0])
    res = env.train_step(make("fixed", n_arms=2, arm=zero).select())
    assert res.cost.groups_optimized == 0 and res.update_norm == 0.0


def test_the_loop_applies_lr_scale_and_writes_update_norm():
    cfg = {"env": {"kind": "bernoulli", **SMALL}, "policy": {"name": "fixed", "arm": 2}, "seed": 3, "steps": 1}
    one = hbsim.run_config(cfg)
    scaled = hbsim.run_config({**cfg, "policy": {"name": "fixed", "arm": 2, "lr_scale": 2.0}})
    assert UPDATE_NORM in one.train.columns
    _, _, res = _bernoulli_step(1.0)
    assert one.train[UPDATE_NORM].iloc[0] == res.update_norm
    assert scaled.train[UPDATE_NORM].iloc[0] == 2.0 * res.update_norm
    assert scaled.meta["config"]["policy"]["lr_scale"] == 2.0


def test_lr_scale_is_recorded_only_where_it_is_not_one():
    base = {"env": {"kind": "bernoulli"}, "policy": {"name": "uniform"}}
    default = resolve_config(base)
    assert "lr_scale" not in default["policy"]                       # configs hash as before the knob
    spelled = resolve_config({**base, "policy": {"name": "uniform", "lr_scale": 1.0}})
    assert config_hash(spelled) == config_hash(default)
    with pytest.raises(UserError, match=r"^policy.lr_scale=0 is out of range|^policy.lr_scale=0 is not allowed"):
        resolve_config({**base, "policy": {"name": "uniform", "lr_scale": 0}})


def test_lr_scale_per_design_in_a_grid():
    spec = parse_spec({"name": "g", "steps": 2, "seeds": 1, "env": {"kind": "bernoulli"},
                       "policies": [{"name": "uniform"}, {"name": "uniform", "lr_scale": 1.5},
                                    {"name": "mixed", "label": "mixed-1", "lr_scale": 1.0}],
                       "sweep": {}})
    cells = plan_cells(spec)
    assert [c.label for c in cells] == ["uniform", "uniform[lr_scale=1.5]", "mixed-1"]
    assert "lr_scale" not in cells[0].config["policy"] and cells[1].config["policy"]["lr_scale"] == 1.5
    assert "lr_scale" not in cells[2].config["policy"]
    swept = plan_cells(parse_spec({"name": "s", "steps": 2, "seeds": 1, "env": {"kind": "bernoulli"},
                                   "policies": [{"name": "uniform"}], "sweep": {"policy.lr_scale": [1.0, 2.0]}}))
    assert [c.config["policy"].get("lr_scale", 1.0) for c in swept] == [1.0, 2.0]


class Plain:
    """A trainer without set_lr_scale (and without ground truth)."""

    def __init__(self, env):
        self._env, self.harnesses = env, env.harnesses
        self.train_step, self.evaluate, self.config = env.train_step, env.evaluate, env.config
        self.state_dict, self.load_state_dict = env.state_dict, env.load_state_dict


def test_a_trainer_without_set_lr_scale_runs_only_scale_one():
    env = make_env("bernoulli", seed=0, **SMALL)
    with pytest.raises(UserError, match=r"^policy.lr_scale=1.5 is not allowed here: this trainer cannot scale"):
        Loop(make("uniform", n_arms=6, lr_scale=1.5), Plain(env))
    Loop(make("uniform", n_arms=6), Plain(env))


def test_state_round_trip_with_lr_scale():
    def loop():
        return Loop(make("harnessbandit", n_arms=6, seed=4, lr_scale=1.5),
                    make_env("drifting", seed=4, n_tasks=20, n_heldout_tasks=4), seed=4)

    straight = loop()
    straight.run(6)
    first = loop()
    first.run(3)
    state = first.state_dict()
    second = loop()
    second.load_state_dict(state)
    second.run(6)
    a, b = (np.array([[r[UPDATE_NORM], r["reward"], r["arm"]] for r in x.rows]) for x in (straight, second))
    np.testing.assert_array_equal(a, b)
    assert second.adapter.opt.lr == 1.5 * second.adapter.knobs["lr"]


def test_hb_sim_set_lr_scale(capsys):
    assert main(["sim", "--env", "bernoulli", "--policy", "uniform", "--seeds", "1", "--steps", "2", "--jobs", "1",
                 "--set", "policy.lr_scale=1.5", "--set", "env.n_tasks=20", "--set", "env.n_heldout_tasks=4"]) == 0
    assert "uniform" in capsys.readouterr().out


def test_lr_scale_is_tunable_per_design_by_a_tune_table():
    from ablations import tune

    spec = parse_spec({"name": "t", "steps": 2, "seeds": [0], "env": {"kind": "bernoulli", "n_validation_tasks": 4},
                       "policies": [{"name": "uniform"}, {"name": "mixed"}],
                       "tune": {"seeds": [100], "knobs": {"policy.lr_scale": [1.0, 1.5]}}})
    cells = tune.tuning_cells(spec)
    scales = sorted((label, c.config["policy"].get("lr_scale", 1.0)) for label, cs in cells.items() for c in cs)
    assert [s for _, s in scales] == [1.0, 1.5, 1.0, 1.5]


def test_scenario_env_applies_lr_scale_to_both_rates_exactly():
    def step(scale, **knobs):
        env = make_env("scenario", seed=2, n_tasks=20, n_heldout_tasks=4, n_harnesses=3, roles="ordinary*3", max_step=0.0,
                       forget=0.0, **knobs)
        env.set_lr_scale(scale)
        z0, s0 = env.z.copy(), env.s.copy()
        res = env.train_step(make("fixed", n_arms=3, arm=1).select())
        return env.z - z0, env.s - s0, res

    dz, ds, res = step(1.0)
    assert res.cost.groups_optimized > 0 and np.abs(dz).sum() > 0 and np.abs(ds).sum() > 0
    dz2, ds2, _ = step(2.0)
    np.testing.assert_array_equal(dz2, 2.0 * dz)        # no trust region, no forgetting: exactly twice the step
    np.testing.assert_array_equal(ds2, 2.0 * ds)
    dz_lr, ds_lr, _ = step(1.0, lr=4.0, skill_lr=4.0)   # x2 = the rates doubled (the scenario default is 2)
    np.testing.assert_array_equal(dz2, dz_lr)
    np.testing.assert_array_equal(ds2, ds_lr)
