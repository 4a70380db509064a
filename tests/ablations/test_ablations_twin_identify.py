"""Identifiability of the twin (issue 30 item 4): logs of a known scenario -- uniform runs with
what-if probes, `hb sim --scenario NAME --counterfactual 10 --eval-every 10` with 4 seeds, run
in process -- with the world's truth removed (the fit drops every true_*, gain*, regret,
oracle_arm and cos_* column and never sees run.json) are fitted by the twin, which must

* recover the scenario's values within the tolerances of TOLERANCE (per harness: bias, core
  reading, ceiling; the scalars skill_lr, max_step, forget; dead harnesses marked dead), and
* rank seven policies (uniform, round_robin, learnability, transfer, harnessbandit, mixed,
  sec) as the true scenario does: Kendall tau >= 0.7 between the mean noise-free final
  training success over 4 other seeds (100..103) in the twin and in the scenario.

The numbers each test reaches are in docs/TWIN.md ("Identifiability"). Deterministic: fixed
seeds, so a failure is a change of the fit, not bad luck.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ablations import twin_check
from hbsim import scenarios, twin
from hbsim.experiment import resolve_config, run_config
from reports.readings.references import run_table, train_scores

pytestmark = pytest.mark.calibration

POLICIES = ("uniform", "round_robin", "learnability", "transfer", "harnessbandit", "mixed", "sec")
#: absolute tolerances: a harness's logit bias (the fitted one also absorbs the seeds' bias
#: jitter and category affinities), core reading, ceiling, and the scalars
TOLERANCE = {"bias": 0.5, "read": 0.25, "ceil": 0.2, "skill_lr": 0.35, "max_step": 0.15, "forget": 0.1}
#: the scenarios' values (their files, through the role table of hbsim.envs.scenario)
TRUTH = {
    "trap": {"bias": [-1.5] * 4 + [0.5], "read": [1.0] * 4 + [-1.5], "ceil": [1.0] * 4 + [0.6],
             "skill_lr": 1.0, "max_step": 0.3, "forget": 0.2, "dead": [False] * 5},
    "saturation": {"bias": [1.0] * 3 + [-1.5] * 3, "read": [0.0] * 3 + [0.7] * 3, "ceil": [0.6] * 3 + [1.0] * 3,
                   "skill_lr": 1.0, "max_step": 0.3, "forget": 0.2, "dead": [False] * 6},
    "dead": {"bias": [-1.5] * 2 + [None] * 4, "read": [0.7] * 2 + [None] * 4, "ceil": [1.0] * 2 + [None] * 4,
             "skill_lr": 1.0, "max_step": 0.3, "forget": 0.2, "dead": [False] * 2 + [True] * 4},
}


#: the three worlds as they were when these tolerances were set (the shipped files were recalibrated
#: off the trust region afterwards, issue 28): the fit is tested on these fixed copies
WORLDS = Path(__file__).parent / "twin_worlds"


def _world(name: str) -> str:
    return str(WORLDS / f"{name}.toml")


def _logs(name: str) -> list[dict]:
    runs = []
    for seed in range(4):
        r = run_config(resolve_config({**scenarios.scenario_config(_world(name), {"name": "uniform"}, seed=seed),
                                       "eval_every": 10, "counterfactual": 10}))
        runs.append({"train": r.train, "eval": r.eval, "counterfactual": r.counterfactual})
    return runs


def _scores(env: dict, steps: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows, metas = [], []
    for name in POLICIES:
        for seed in range(100, 104):
            r = run_config(resolve_config({"env": dict(env), "policy": {"name": name}, "seed": seed, "steps": steps}))
            rows.append(train_scores(r.train))
            metas.append(r.meta)
    return pd.concat(rows, ignore_index=True), run_table(metas)


@pytest.mark.parametrize("name", list(TRUTH))
def test_twin_recovers_the_scenario_and_its_ranking(name):
    result = twin.fit(twin.observations(_logs(name)), holdout=0.0, max_nfev=20)
    prm, truth = result.params, TRUTH[name]
    np.testing.assert_array_equal(prm.dead, truth["dead"])
    assert not prm.noise.any()
    for key in ("bias", "read", "ceil"):
        for h, want in enumerate(truth[key]):
            if want is not None:
                assert abs(getattr(prm, key)[h] - want) <= TOLERANCE[key], (key, h, getattr(prm, key)[h], want)
    for key in ("skill_lr", "max_step", "forget"):
        assert abs(getattr(prm, key) - truth[key]) <= TOLERANCE[key], (key, getattr(prm, key), truth[key])
    sc = scenarios.get(_world(name))
    fitted = twin.scenario(result, name=f"{name}_twin", target=sc.target)
    true_scores, runs = _scores(sc.env, sc.steps)
    twin_scores, _ = _scores(fitted["env"], sc.steps)
    agreement = twin_check.agreement(true_scores, twin_scores, twin_check.ranking_labels(runs), resamples=200, seed=0)
    assert agreement["policies"] == 7 and agreement["seeds"] == 4
    assert agreement["tau"] >= 0.7, agreement
