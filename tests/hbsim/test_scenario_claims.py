"""Every shipped scenario's claims at its shipped settings (issue 28 item 5).

1. Its structure changes the oracle's allocation relative to uniform's: the harnesses the
   oracle (aimed at the scenario's target) avoids or concentrates on, from the `arm` column
   of 2 seeds of each (uniform spreads evenly; the gaps asserted are several times the
   Monte-Carlo error of a 200-step visit share).
2. Every "X gains / loses" sentence of its paragraph (the TOML `summary`, repeated in
   docs/SCENARIOS.md) holds at the shipped settings, on the shipped seeds: a paired seed-level
   comparison on the scenario's target (noise-free truth of the final step), its t statistic
   beyond the two-sided 5% critical value of t(seeds - 1) in the claimed direction, or, for
   "captures at most a tenth", the ratio of seed means (policy - uniform) / (oracle - uniform).
3. The trust region binds on a minority of uniform's steps and the learning rate matters at
   the shipped rate (what each file's `lr_note` records, from `hb scenarios NAME --sweep`).

Simulations of the real runs (ablations.scenarios, in this process): the calibration tier.
"""
from __future__ import annotations

import functools
import re

import numpy as np
import pytest
from scipy import stats

from ablations import scenarios as measure
from policies.clairvoyant import TARGETS
from hbsim.scenarios import SCENARIOS

pytestmark = pytest.mark.calibration

@functools.cache
def shipped(name: str) -> dict:
    """The runs every test of this file reads, made once per scenario: the oracle (aimed at its
    target), uniform, then the designs its claims name (DESIGN_CLAIMS, PURE for "below-pure"), on
    the shipped seeds. {"truth": label -> final truth (seeds, 3) of the three TARGETS, "arms":
    the oracle's and uniform's `arm` columns on seeds 0 and 1, "harnesses"}."""
    labels = ["oracle", "uniform", *claimed(name)]
    policies = [measure.oracle_policy(name), {"name": "uniform"}] + [{"name": p} for p in labels[2:]]
    tables, _, harnesses = measure.runs(name, policies)
    return {"truth": {label: measure.final_of(t, harnesses) for label, t in zip(labels, tables)},
            "arms": {label: [t["arm"].to_numpy() for t in tables[k][:2]] for k, label in enumerate(labels[:2])},
            "harnesses": harnesses}


def visits(name: str, label: str, start: int = 0) -> dict[str, float]:
    """harness -> share of the steps from `start` on that chose it (pure designs), over seeds 0-1."""
    runs = shipped(name)
    arms = np.concatenate([a[start:] for a in runs["arms"][label]]).astype(int)
    return dict(zip(runs["harnesses"], np.bincount(arms, minlength=len(runs["harnesses"])) / arms.size))


def role(v: dict[str, float], prefix: str) -> float:
    """The summed share of the harnesses named after a role ("dead" -> dead1 + dead2 + ...)."""
    return sum(x for h, x in v.items() if h.rstrip("0123456789") == prefix)


def oracle_and_uniform(name: str, start: int = 0):
    return visits(name, "oracle", start), visits(name, "uniform", start)


# -- 1. the oracle's allocation ------------------------------------------------------------
def allocation_anchor(o, u):          # the anchor saturates itself: the oracle trains it only at the start
    assert o["anchor"] < 0.25 * u["anchor"]


def allocation_churn(o, u):           # checked on the steps from leave_step = arrive_step = 50 on
    assert role(o, "gone") == 0 < role(u, "gone")
    assert role(o, "late") > 1.5 * role(u, "late")


def allocation_coverage(o, u):
    assert role(o, "plateau") == 0 < role(u, "plateau")


def allocation_dead(o, u):
    assert role(o, "dead") == 0 and role(u, "dead") > 0.5


def allocation_forgetting(o, u):      # concentrates on the harnesses with the largest gain per step
    assert max(o.values()) > 1.5 * max(u.values())


def allocation_interference(o, u):    # leaves the near-saturated anchors
    assert role(o, "anchor") < 0.5 * role(u, "anchor")


def allocation_kitchen(o, u):
    assert o["dead"] == o["anchor"] == 0 and o["trap"] < 0.33 * u["trap"]
    assert role(o, "primary") > 2 * role(u, "primary")


def allocation_many(o, u):
    assert role(o, "ordinary") > 0.6 and role(u, "ordinary") < 0.35


def allocation_misaligned(o, u):      # aimed at the held-out harness: never the primaries
    assert role(o, "primary") == 0 < role(u, "primary")


def allocation_noise(o, u):
    assert role(o, "noise") == 0 < role(u, "noise")


def allocation_saturation(o, u):
    assert role(o, "plateau") < 0.5 * role(u, "plateau")


def allocation_table1(o, u):
    assert o["trap"] == o["dead"] == o["anchor"] == 0 and role(o, "primary") > 2 * role(u, "primary")


def allocation_trap(o, u):
    assert o["trap"] == 0 < u["trap"]


def allocation_unlock(o, u):          # the key first: the one-step greedy already finds it
    assert o["key"] > 2 * u["key"]


ALLOCATION = {name[len("allocation_"):]: f for name, f in globals().items() if name.startswith("allocation_")}


def test_every_scenario_has_its_allocation_check_and_at_least_8_seeds():
    assert set(ALLOCATION) == set(SCENARIOS) == set(DESIGN_CLAIMS)
    assert all(sc.seeds >= 8 for sc in SCENARIOS.values())


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_summary_names_exactly_the_designs_whose_claims_are_asserted(name):
    """The designs named after "Measured at the shipped settings:" are exactly those DESIGN_CLAIMS
    asserts (with PURE for "below-pure"), and no "should win / lose" is left in the paragraph
    (before that mark it describes the structure and the oracle, which the allocation test checks)."""
    _, sep, measured = SCENARIOS[name].summary.partition("Measured at the shipped settings:")
    assert sep and "should" not in SCENARIOS[name].summary
    named = lambda text: {p for p in DESIGNS if re.search(rf"\b{p}\b", text)}     # noqa: E731
    want = {p for p, _ in DESIGN_CLAIMS[name]} | (set(PURE) if any(c == "below-pure" for _, c in DESIGN_CLAIMS[name]) else set())
    assert named(measured) == want, named(measured)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_structure_changes_the_oracles_allocation(name):
    start = SCENARIOS[name].env.get("leave_step", 0) if name == "churn" else 0
    ALLOCATION[name](*oracle_and_uniform(name, start))


# -- 2. the summary's sentences ------------------------------------------------------------
#: scenario -> [(policy, claim)]: "gains" / "loses" (paired t over the shipped seeds beyond
#: the two-sided 5% critical value, against uniform), "tenth" (share of the oracle's gap below
#: 0.1), "below-pure" (loses to uniform and to every design of PURE). What each design achieves;
#: the checks of the worlds themselves are tests/ablations/test_ablations_scenarios.WORLD_CHECKS
DESIGN_CLAIMS = {
    "anchor": [("transfer", "loses"), ("mixed", "gains")],
    "churn": [("mixed", "gains")],
    "coverage": [("transfer", "gains"), ("learnability", "loses")],
    "dead": [("mixed", "gains")],
    "forgetting": [("mixed", "loses")],
    "interference": [("mixed", "below-pure")],
    "kitchen": [("learnability", "loses"), ("transfer", "gains")],
    "many": [("learnability", "gains"), ("transfer", "gains"), ("harnessbandit", "gains")],
    "misaligned": [("learnability", "tenth"), ("transfer", "tenth"), ("harnessbandit", "tenth")],
    "noise": [("learnability", "loses")],
    "saturation": [("learnability", "loses"), ("transfer", "gains")],
    "table1": [("learnability", "loses")],
    "trap": [("transfer", "gains"), ("mixed", "loses")],
    "unlock": [("learnability", "tenth"), ("transfer", "tenth"), ("harnessbandit", "tenth")],
}
PURE = ("round_robin", "learnability", "transfer", "harnessbandit")
DESIGNS = PURE + ("mixed",)


def claimed(name: str) -> list[str]:
    """The designs whose runs the claims of scenario `name` read (PURE too for "below-pure")."""
    claims = DESIGN_CLAIMS[name]
    return sorted({p for p, _ in claims} | (set(PURE) if any(c == "below-pure" for _, c in claims) else set()))


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_oracle_beats_uniform_by_3_mde_at_the_shipped_seeds(name):
    i = TARGETS.index(SCENARIOS[name].target)
    truth = shipped(name)["truth"]
    gap = measure.paired(truth["oracle"][:, i], truth["uniform"][:, i])
    assert gap["seeds"] == SCENARIOS[name].seeds
    assert gap["delta"] >= 3 * gap["mde"] > 0, gap


def test_oracle_gap_is_the_paired_reading_of_the_same_runs():
    """`measure.oracle_gap` (hb scenarios --check) reads what the test above reads: on seeds 0-1,
    the same runs (seeds 0-1 of the shipped ones) and the same paired comparison."""
    i = TARGETS.index(SCENARIOS["dead"].target)
    truth = shipped("dead")["truth"]
    gap = measure.oracle_gap("dead", seeds=2)
    want = measure.paired(truth["oracle"][:2, i], truth["uniform"][:2, i])
    assert {k: gap[k] for k in want} == want and gap["seeds"] == 2
    assert gap["oracle"] == truth["oracle"][:2, i].mean() and gap["uniform"] == truth["uniform"][:2, i].mean()


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_win_and_loss_sentence_holds_at_the_shipped_settings(name):
    claims = DESIGN_CLAIMS[name]
    truth = shipped(name)["truth"]                                   # keyed by position, labelled here
    i = TARGETS.index(SCENARIOS[name].target)
    base = truth["uniform"][:, i]
    gap = truth["oracle"][:, i] - base
    crit = stats.t.ppf(0.975, base.size - 1)
    assert gap.mean() > 0 and base.size == SCENARIOS[name].seeds
    for policy, claim in claims:
        d = truth[policy][:, i] - base
        t = d.mean() / (d.std(ddof=1) / np.sqrt(d.size))
        if claim == "gains":
            assert t > crit, (policy, d.mean(), t)
        elif claim in ("loses", "below-pure"):
            assert t < -crit, (policy, d.mean(), t)
        else:
            assert d.mean() / gap.mean() < 0.1, (policy, d.mean() / gap.mean())
        if claim == "below-pure":
            assert all(truth[policy][:, i].mean() < truth[p][:, i].mean() for p in PURE)


# -- 3. off the trust region, where the learning rate matters -------------------------------
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_trust_region_binds_on_a_minority_of_uniforms_steps_and_the_rate_matters(name):
    sweep = measure.sweep(name, (0.5, 1.0, 2.0), seeds=2)
    assert sweep[1.0]["bound"] < 0.5, sweep
    assert sweep[0.5]["train"] < sweep[1.0]["train"] < sweep[2.0]["train"], sweep
