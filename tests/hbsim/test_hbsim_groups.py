"""The groups table (groups.parquet, hbsim.contract.GROUP_COLUMNS): one row per group generated
at a step, before the group filter, for every backend that samples groups."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import hbsim
from hbsim import grpo
from hbsim.contract import GROUP_COLUMNS
from hbsim.envs import make_env
from hbsim.experiment import run_config
from hbsim.loop import Loop
from hbsim.sampling import DynamicSampler
from policies import make

SMALL = {"n_tasks": 40, "n_heldout_tasks": 10, "k_attempts": 2}


def test_group_stats_by_hand():
    r = np.array([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.5, 1.0, 0.0, 0.25]])
    s = grpo.group_stats(r, "loo")
    np.testing.assert_allclose(s["success"], [0.5, 1.0, 0.25])
    np.testing.assert_allclose(s["reward_mean"], [0.5, 1.0, 0.4375])
    np.testing.assert_allclose(s["reward_std"], [0.5, 0.0, np.sqrt(np.mean((r[2] - 0.4375) ** 2))])
    # loo: A = G/(G-1) (r - mean) = 4/3 * 0.5 for every rollout of the first group
    np.testing.assert_allclose(s["mean_abs_adv"][:2], [2 / 3, 0.0])
    np.testing.assert_allclose(grpo.group_stats(r, "mean")["mean_abs_adv"][0], 0.5)
    # G = 8, k = 4 successes: the SPEC's maximum 4/7
    assert grpo.group_stats(np.array([[1.0] * 4 + [0.0] * 4]))["mean_abs_adv"][0] == pytest.approx(4 / 7)
    assert all(v.shape == (0,) for v in grpo.group_stats(np.zeros((0, 4))).values())


def test_sampler_keeps_every_fresh_block_in_generation_order():
    sampler = DynamicSampler(2, oversample=1.0, max_rounds=2)
    blocks = iter([{0: (["a", "b"], np.array([[1.0, 0.0], [1.0, 1.0]])), 1: (["c"], np.array([[0.0, 1.0]]))},
                   {0: (["d"], np.array([[0.0, 1.0]]))}])
    sample = sampler.collect({0: 2, 1: 1}, 0, lambda requests: next(blocks))
    table = sample.groups("mean", lambda h, block: np.full(len(block), 10.0 * (h + 1)))
    np.testing.assert_array_equal(table["arm"], [0, 0, 1, 0])
    np.testing.assert_array_equal(table["retained"], [True, False, True, True])
    np.testing.assert_array_equal(table["cost"], [10.0, 10.0, 20.0, 10.0])
    np.testing.assert_allclose(table["success"], [0.5, 1.0, 0.5, 0.5])
    np.testing.assert_array_equal(table["size"], [2, 2, 2, 2])


@pytest.mark.parametrize("kind", ["bernoulli", "scenario"])
@pytest.mark.parametrize("policy", ["harnessbandit", "mixed"])
def test_the_groups_table_agrees_with_the_train_ledger(kind, policy):
    res = run_config({"env": {"kind": kind, **SMALL}, "policy": {"name": policy}, "seed": 2, "steps": 12})
    g, train = res.groups, res.train
    assert tuple(g.columns) == GROUP_COLUMNS
    assert (g["run_id"] == res.meta["run_id"]).all() and (g["policy"] == train["policy"].iloc[0]).all()
    per_step = g.groupby("step").agg(n=("group", "size"), kept=("retained", "sum"))
    per_step = per_step.reindex(train["step"], fill_value=0)
    np.testing.assert_array_equal(per_step["n"], train["groups_generated"])
    np.testing.assert_array_equal(per_step["kept"], train["groups_retained"])
    for step, part in g.groupby("step"):       # group = 0..n-1 within each step
        np.testing.assert_array_equal(part["group"], np.arange(len(part)))
    env = make_env(kind, seed=2, **SMALL)
    assert (g["harness"] == np.asarray(env.harnesses, dtype=object)[g["arm"]]).all()
    alloc = train.set_index("step")[[f"alloc_{h}" for h in env.harnesses]].to_numpy()
    chosen = alloc[g["step"].to_numpy() - 1, g["arm"].to_numpy()] > 0
    np.testing.assert_array_equal(g["chosen"], chosen)
    assert g["chosen"].all()          # groups are generated only for allocated harnesses
    assert ((g["success"] >= 0) & (g["success"] <= 1)).all() and (g["size"] == 8).all()
    # a retained group has reward variance: never a zero std or a zero mean |advantage|
    assert (g.loc[g["retained"], "reward_std"] > 0).all() and (g.loc[~g["retained"], "reward_std"] == 0).all()


def test_the_groups_table_sums_to_the_generated_rewards_the_policy_sees():
    env = make_env("bernoulli", seed=5, **SMALL)
    seen = []
    pol = make("uniform", n_arms=6, seed=5)
    update = pol.update
    pol.update = lambda fb: (seen.append(fb.generated), update(fb))[-1]
    res = hbsim.run(pol, env, 6, seed=5)
    for step, generated in enumerate(seen, start=1):
        part = res.groups[res.groups["step"] == step]
        rollouts = part.groupby("arm")["size"].sum().reindex(range(6), fill_value=0)
        total = (part["size"] * part["reward_mean"]).groupby(part["arm"]).sum().reindex(range(6), fill_value=0.0)
        np.testing.assert_allclose(rollouts, generated[:, 0])
        np.testing.assert_allclose(total, generated[:, 1], rtol=1e-12)


def test_costs_are_the_envs_group_tokens():
    res = run_config({"env": {"kind": "bernoulli", **SMALL, "group_tokens": "10,20,30,40,50,60"},
                      "policy": {"name": "round_robin"}, "seed": 0, "steps": 6})
    np.testing.assert_array_equal(res.groups["cost"], 10.0 * (res.groups["arm"] + 1))
    assert res.groups.groupby("step")["cost"].sum().tolist() == res.train["tokens"].tolist()


def test_a_resumed_loop_has_the_groups_of_the_uninterrupted_one():
    def loop():
        return Loop(make("harnessbandit", n_arms=6, seed=1, warmup_rounds=1), make_env("drifting", seed=1, **SMALL),
                    seed=1)
    straight = loop()
    straight.run(8)
    first = loop()
    first.run(8, checkpoint=lambda lp: lp.t == 4)
    second = loop()
    second.load_state_dict(first.state_dict())
    second.run(8)
    pd.testing.assert_frame_equal(straight.result().groups, second.result().groups)


def test_an_adapter_without_groups_writes_no_groups_table():
    env = make_env("bernoulli", seed=0, **SMALL)
    step = env.train_step
    env.train_step = lambda alloc: (lambda res: (setattr(res, "groups", None), res)[-1])(step(alloc))
    assert hbsim.run(make("uniform", n_arms=6, seed=0), env, 3).groups is None
