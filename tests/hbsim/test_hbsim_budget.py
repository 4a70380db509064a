"""Equal-cost evaluation: the synthetic cost knobs, `eval_budget` milestones, and the
validation split (hand-computed ledgers, determinism, resume)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hbsim.contract import BUDGET_COLUMNS, VALIDATION_SUITE
from hbsim.envs import make_env
from hbsim.experiment import resolve_config, run_config
from hbsim.run_knobs import RUN_KNOBS
from policies.errors import UserError

SMALL = {"kind": "bernoulli", "n_harnesses": 3, "n_saturating": 0, "n_zero": 0, "n_tasks": 40,
         "n_heldout_tasks": 10, "k_attempts": 2}


def test_cost_ledger_is_per_harness_tokens_and_tool_seconds():
    env = make_env("bernoulli", seed=1, **{k: v for k, v in SMALL.items() if k != "kind"},
                   group_tokens="100,1000,10000", group_tool_seconds=[0.5, 0, 2], token_seconds=0.001)
    for arm, tokens, tool in ((0, 100, 0.5), (1, 1000, 0.0), (2, 10000, 2.0)):
        counts = np.zeros(3, dtype=np.int64)
        counts[arm] = 4
        row = env.train_step(counts).cost.as_row()
        n = row["groups_generated"]
        assert n >= 4
        assert row["tokens"] == n * tokens
        assert row["cost_seconds"] == pytest.approx(n * tokens * 0.001 + n * tool)
        assert row["seconds_tools"] == 0.0                 # wall-clock phases stay wall clock


def test_default_costs_are_zero_and_eval_has_no_budget_columns():
    res = run_config({"env": SMALL, "policy": {"name": "uniform"}, "steps": 4, "seed": 0})
    assert (res.train["tokens"] == 0).all() and (res.train["cost_seconds"] == 0.0).all()
    assert not set(BUDGET_COLUMNS) & set(res.eval.columns)
    assert "eval_budget" not in res.meta["config"]             # unset: the config hashes as before
    assert set(res.eval["suite"]) == {"heldout_tasks", "heldout_harness"}


def test_budget_milestones_evaluate_when_first_crossed():
    cfg = {"env": SMALL, "policy": {"name": "uniform"}, "steps": 12, "seed": 3, "eval_budget": "groups:10,30,31,1e6"}
    res = run_config(cfg)
    cum = res.train["groups_generated"].cumsum().to_numpy()
    budget = res.eval[res.eval["budget_unit"].notna()]
    got = budget.drop_duplicates("budget_value")[["budget_value", "step", "cost_reached"]].to_numpy().tolist()
    want = []
    for m in (10, 30, 31):
        s = int(np.argmax(cum >= m))                  # first step (0-based) whose cumulative cost crosses m
        want.append([float(m), s + 1, float(cum[s])])
    assert got == want                                # 1e6 is never reached: no rows
    # the same evaluation an ordinary one at that step would give (stateless eval stream per step)
    every = run_config({**cfg, "eval_every": 1, "eval_budget": None}).eval
    for m, step, _ in want:
        a = budget[budget["budget_value"] == m].drop(columns=list(BUDGET_COLUMNS)).drop(columns="run_id")
        b = every[every["step"] == step].drop(columns="run_id")
        pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True), check_dtype=False)
    plain = res.eval[res.eval["budget_unit"].isna()]
    assert sorted(set(plain["step"])) == [12]        # the ordinary final evaluation, once


def test_budget_resume_matches_an_uninterrupted_run():
    cfg = {"env": SMALL, "policy": {"name": "harnessbandit"}, "steps": 10, "seed": 2, "eval_budget": "groups:15,40"}
    whole = run_config(cfg)
    saved = {}

    def stop(loop):
        if loop.t == 4:
            saved["state"] = loop.state_dict()
            return True
    run_config(cfg, checkpoint=stop)
    resumed = run_config(cfg, state=saved["state"])
    pd.testing.assert_frame_equal(whole.eval, resumed.eval)


@pytest.mark.parametrize("value, canonical", [("groups:30,10,30.0", None), ("tokens:1e3,500", "tokens:500,1000"),
                                              ({"unit": "seconds", "at": [2.5, 1]}, "seconds:1,2.5")])
def test_eval_budget_canonical(value, canonical):
    if canonical is None:
        with pytest.raises(UserError, match="eval_budget"):
            RUN_KNOBS["eval_budget"].check("eval_budget", value)        # a repeated milestone
    else:
        env = {"group_tokens": 100}     # a tokens budget needs a world whose token cost is not zero
        assert resolve_config({"eval_budget": value, "env": env})["eval_budget"] == canonical


def test_tokens_budget_on_a_world_without_token_cost_is_refused():
    with pytest.raises(UserError, match=r"^eval_budget='tokens:500' is not allowed on this world: its token cost is "
                                        r"zero \(env.group_tokens is unset or 0\)"):
        resolve_config({"eval_budget": "tokens:500"})
    assert resolve_config({"eval_budget": "groups:500"})["eval_budget"] == "groups:500"


@pytest.mark.parametrize("value", ["groups", "steps:10", "groups:0", "groups:-1,2", "groups:", 5, "groups:x"])
def test_eval_budget_bad_values(value):
    with pytest.raises(UserError, match=r"^eval_budget=.*is not allowed: expected"):
        resolve_config({"eval_budget": value})


def test_validation_split_is_never_trained_and_kept_apart():
    env = make_env("bernoulli", seed=0, **{k: v for k, v in SMALL.items() if k != "kind"}, n_validation_tasks=8)
    plain = make_env("bernoulli", seed=0, **{k: v for k, v in SMALL.items() if k != "kind"})
    assert all(pool.max() < 32 and pool.size == 32 for pool in env._pools)
    first = env.evaluate()
    val = first[first["suite"] == VALIDATION_SUITE]
    assert len(val) == 8 * 3 * 2
    assert sorted(set(val["task"].str.split("@").str[0])) == [f"t{i:04d}" for i in range(32, 40)]
    # the held-out suites are untouched by the split (same structure, their own eval stream)
    pd.testing.assert_frame_equal(first[first["suite"] != VALIDATION_SUITE].reset_index(drop=True),
                                  plain.evaluate().reset_index(drop=True))
    trained = set()
    for _ in range(20):
        env.train_step(np.array([3, 3, 2]))
        trained |= {int(t) for pool in env._pools for t in pool}
    assert max(trained) < 32


@pytest.mark.parametrize("knobs, field", [({"n_validation_tasks": 40}, "n_validation_tasks"),
                                          ({"group_tokens": "1,2"}, "group_tokens"),
                                          ({"group_tool_seconds": "-1"}, "group_tool_seconds"),
                                          ({"token_seconds": -1.0}, "token_seconds")])
def test_bad_cost_and_split_knobs(knobs, field):
    with pytest.raises(UserError, match=f"env.{field}="):
        resolve_config({"env": {**SMALL, **knobs}})


def test_seconds_budget_counts_measured_time_where_nothing_is_simulated():
    from hbsim.adapter import CostLedger
    from hbsim.loop import step_cost

    real = CostLedger(groups_generated=3, seconds={"rollout": 1.5, "tools": 0.25, "backward": 9.0}).as_row()
    assert np.isnan(real["cost_seconds"])                      # a real run: nothing simulated, reproducible nan
    assert step_cost(real, "seconds") == 1.75 and step_cost(real, "groups") == 3.0
    assert step_cost({**real, "cost_seconds": 4.0}, "seconds") == 4.0
