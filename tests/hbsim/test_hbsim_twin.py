"""hbsim.twin and the `twin` env kind (issue 30): the parse of per-harness values, the kind's
success matrix, the closed-form sketch T, the replay against the scenario env's own expected
dynamics, the difficulty spread, the truth columns the fit never reads, the world distance."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hbsim import scenarios, twin
from hbsim.counterfactual import cosine_matrix
from hbsim.envs import make_env
from hbsim.envs.twin import per_harness_values
from hbsim.experiment import resolve_config, run_config
from policies.errors import UserError


def test_per_harness_values_parse():
    assert per_harness_values("env.harness_bias", "-1.5, 0.25,2") == "-1.5,0.25,2.0"
    assert per_harness_values("env.harness_bias", [1, -2]) == "1.0,-2.0"
    assert per_harness_values("env.harness_bias", "") == ""
    for bad in ("1,x", [True], "1e9", float("nan"), 3):
        with pytest.raises(UserError, match=r"env.harness_bias=.* is not allowed: expected one number in \[-1000, 1000\]"):
            per_harness_values("env.harness_bias", bad)


def test_twin_kind_success_is_the_given_values():
    """No spread, no jitter, no affinity: success = ceil * sigmoid(bias) on every task, the
    dead harness 0, the noise harness noise_p; names as given."""
    env = make_env("twin", seed=3, n_harnesses=4, roles="ordinary,ordinary,noise,dead", harness_bias="-1,0.5,0,0",
                   harness_read="1,-1,0,0", harness_ceiling="1,0.6,1,1", harness_names="a,b,c,d", noise_p=0.4,
                   difficulty_std=0.0, bias_jitter=0.0, affinity_std=0.0, n_tasks=10, n_heldout_tasks=5)
    p = env.success_matrix()
    expect = np.array([1 / (1 + np.exp(1.0)), 0.6 / (1 + np.exp(-0.5)), 0.4, 0.0])
    np.testing.assert_allclose(p[:, :4], np.broadcast_to(expect, (15, 4)), rtol=0, atol=1e-12)
    assert env.harnesses == ["a", "b", "c", "d"]
    np.testing.assert_array_equal(env.read, [1.0, -1.0, 0.0, 0.0])
    with pytest.raises(UserError, match=r"env.harness_bias='1.0,2.0' is not allowed: expected n_harnesses=4 values, got 2"):
        make_env("twin", n_harnesses=4, roles="ordinary*4", harness_bias="1,2")
    with pytest.raises(UserError, match=r"harness_ceiling=.* expected values in \[0, 1\]"):
        make_env("twin", n_harnesses=2, roles="ordinary*2", harness_ceiling="1,2")


def test_twin_kind_without_values_is_the_scenario_kind():
    knobs = {"n_harnesses": 5, "roles": "ordinary*4,trap", "n_tasks": 20, "n_heldout_tasks": 5}
    np.testing.assert_array_equal(make_env("twin", seed=2, **knobs).success_matrix(),
                                  make_env("scenario", seed=2, **knobs).success_matrix())


def test_sketch_transfer_hand_computed():
    read = np.array([1.0, 1.0, -1.5])
    c_oo, c_ot = 0.2 / 1.2, -0.3 / np.sqrt(1.2 * 1.45)          # (r_h r_j / C) / sqrt((r_h^2/C + 1)(r_j^2/C + 1))
    got = twin.sketch_transfer(read, np.zeros(3, bool), np.zeros(3, bool))
    np.testing.assert_allclose(got, [(c_oo + c_ot) / 2, (c_oo + c_ot) / 2, c_ot], rtol=1e-12)
    # a dead harness has no sketch (not averaged over); a noise harness's cosine is 0
    got = twin.sketch_transfer(read, np.array([False, True, False]), np.array([False, False, True]))
    np.testing.assert_allclose(got, [0.0, 0.0, (c_ot + 0.0) / 2], rtol=1e-12, atol=1e-15)


def test_sketch_transfer_matches_the_scenario_envs_true_directions():
    """The closed form is the cosine of ScenarioEnv.true_directions with the categories pooled:
    on the trap scenario within 0.02 (the categories' task counts differ)."""
    sc = scenarios.SCENARIOS["trap"]
    knobs = dict(sc.env)
    env = make_env(knobs.pop("kind"), seed=0, **knobs)
    cos = cosine_matrix(env.true_directions())
    H = env.H
    truth = np.array([np.mean([cos[h, j] for j in range(H) if j != h]) for h in range(H)])
    got = twin.sketch_transfer(env.read, env.noisy, np.zeros(H, bool))
    np.testing.assert_allclose(got, truth, atol=0.02)


def test_replay_follows_the_scenario_envs_expected_dynamics():
    """The replay's mean training success under a schedule is the env's own expected step
    iterated (ScenarioEnv.expected_state), within 0.03 after 40 steps (the tasks replaced by
    quadrature nodes, the categories pooled), jitter and affinity off."""
    knobs = {"n_harnesses": 3, "roles": "ordinary,ordinary,trap", "n_tasks": 200, "n_heldout_tasks": 5,
             "bias_jitter": 0.0, "affinity_std": 0.0, "max_step": 0.3, "forget": 0.2, "trap_read": -1.5,
             "ordinary_read": 1.0, "ordinary_bias": -1.0, "difficulty_std": 1.0}
    env = make_env("scenario", seed=0, **knobs)
    arms = np.random.default_rng(1).integers(3, size=40)
    for a in arms:
        cand = np.zeros((1, 3), dtype=np.int64)
        cand[0, a] = 8
        z, s = env.expected_state(cand)
        env.z, env.s, env._p = z[0], s[0], None
    alloc = np.zeros((1, 40, 3))
    alloc[0, np.arange(40), arms] = 8
    prm = twin.Params(bias=np.array([-1.0, -1.0, 0.5]), read=np.array([1.0, 1.0, -1.5]), ceil=np.array([1, 1, 0.6]),
                      noise=np.zeros(3, bool), dead=np.zeros(3, bool), noise_p=np.zeros(3), skill_lr=2.0,
                      max_step=0.3, forget=0.2, spread=1.0, lr=2.0)
    out = twin.replay(prm, alloc, 8)
    np.testing.assert_allclose(out["p"][0, -1, :3], env.success_matrix()[:200, :3].mean(axis=0), atol=0.03)
    np.testing.assert_allclose(out["p"][0, 0, :3], make_env("scenario", seed=0, **knobs).success_matrix()[:200, :3]
                               .mean(axis=0), atol=0.03)


def test_difficulty_spread_recovers_a_logit_normal():
    rng = np.random.default_rng(0)
    frames = []
    for h, mu in (("a", -0.5), ("b", 1.0)):
        p = 1 / (1 + np.exp(-(mu + 1.5 * rng.standard_normal(400))))
        k = rng.binomial(3, p)
        frames.append(pd.DataFrame({"harness": h, "task": np.arange(400), "mean": k / 3, "size": 3}))
    table = pd.concat(frames).set_index(["harness", "task"])
    assert abs(twin.difficulty_spread([table]) - 1.5) <= 0.3
    assert twin.difficulty_spread([]) == 1.0


def _logs(name: str, seeds: int = 2) -> list[dict]:
    runs = []
    for seed in range(seeds):
        cfg = resolve_config({**scenarios.scenario_config(name, {"name": "uniform"}, seed=seed), "steps": 30,
                              "eval_every": 10, "counterfactual": 10})
        r = run_config(cfg)
        runs.append({"train": r.train, "eval": r.eval, "counterfactual": r.counterfactual})
    return runs


def test_observations_never_read_the_worlds_truth():
    runs = _logs("trap")
    stripped = [{k: v[[c for c in v.columns if not c.startswith(twin.TRUTH_PREFIXES)]] for k, v in run.items()}
                for run in runs]
    assert any(c.startswith("true_") for c in runs[0]["train"].columns)
    a, b = twin.observations(runs), twin.observations(stripped)
    for field in ("groups", "evals", "probes", "transfer"):
        for key in getattr(a, field):
            np.testing.assert_array_equal(getattr(a, field)[key], getattr(b, field)[key])
    np.testing.assert_array_equal(a.alloc, b.alloc)
    assert a.harnesses == ["ordinary1", "ordinary2", "ordinary3", "ordinary4", "trap"] and a.group_size == 8
    assert a.batch_groups == 8 and a.n_heldout_tasks == 20 and a.heldout == "unseen"
    # eval rows: the state after t steps, t in {0, 10, 20, 30}; 5 harnesses + the held-out one
    assert sorted(set(a.evals["t"].tolist())) == [0, 10, 20, 30] and set(a.evals["h"].tolist()) == set(range(6))


def test_world_distance_is_zero_for_the_same_world_and_picks_trap_for_trap():
    q = {n: twin.world_quantities(sc.env) for n, sc in scenarios.SCENARIOS.items()}
    assert twin.world_distance(q["trap"], q["trap"]) == 0.0
    five = [n for n, sc in scenarios.SCENARIOS.items() if sc.env.get("n_harnesses", 6) == 5]
    assert min((twin.world_distance(q["trap"], q[n]), n) for n in five)[1] == "trap"
    assert twin.world_distance(q["trap"], q["anchor"]) > 0.5
    T = q["trap"]["transfer"]
    assert T.shape == (5, 6) and (np.diag(T[:, :5]) > 0).all() and (T[4, :4] < 0).all()   # the trap hurts the others


def test_observations_read_the_groups_table_where_a_run_has_one():
    """groups.parquet (one row per generated group before the filter; the real runs' table):
    per (step, harness) the mean success and keep rate, G from `size`, the cost per group."""
    runs = _logs("trap", seeds=1)
    rows = []
    for step, arm in zip(runs[0]["train"]["step"], runs[0]["train"]["arm"]):
        for h, name in enumerate(["ordinary1", "ordinary2", "ordinary3", "ordinary4", "trap"]):
            for g, (success, kept) in enumerate([(0.25, True), (0.0, False)] if h == arm else [(0.5, True)]):
                rows.append({"step": step, "harness": name, "arm": h, "group": g, "size": 4, "success": success,
                             "retained": kept, "chosen": h == arm, "cost": 10.0 * (h + 1)})
    runs[0]["groups"] = pd.DataFrame(rows)
    obs = twin.observations(runs)
    g = obs.groups
    assert obs.group_size == 4 and set(g["kind"].tolist()) == {0, 2}              # no train-row estimates
    first = (g["t"] == 0) & (g["h"] == runs[0]["train"]["arm"].iloc[0])
    np.testing.assert_allclose(np.sort(g["value"][first]), [0.125, 0.5])             # mean success, keep rate
    other = (g["t"] == 0) & (g["h"] != runs[0]["train"]["arm"].iloc[0])
    assert set(g["value"][other].tolist()) == {0.5, 1.0}
    np.testing.assert_allclose(obs.costs["per_group"], [10, 20, 30, 40, 50])


def test_a_mixed_probe_row_is_read_as_the_mixed_batch_and_frees_interference():
    """A counterfactual row with arm < 0 (the mixed batch's what-if step) is a probe of the
    even mixed batch (h = -1, no T row), and interference becomes a fitted value; without
    mixed steps or such a row it stays 0 (not identified)."""
    runs = _logs("trap", seeds=1)
    cf = runs[0]["counterfactual"]
    assert (cf["arm"] == -1).any()                     # hb sim --counterfactual writes the mixed row (hbsim.counterfactual)
    runs[0]["counterfactual"] = cf = cf[cf["arm"] >= 0].reset_index(drop=True)
    assert not twin.fitting._has_mixed(twin.observations(runs))
    mixed = cf[cf["arm"] == 0].assign(arm=-1, harness="mixed", t_grad=float("nan"))
    runs[0]["counterfactual"] = pd.concat([cf, mixed], ignore_index=True)
    obs = twin.observations(runs)
    assert (obs.probes["h"] == -1).sum() == 2 * len(mixed)                    # real_train, real_heldout_harness
    assert (obs.transfer["h"] >= 0).all() and twin.fitting._has_mixed(obs)


def test_standard_errors_of_a_linear_fit_hand_computed():
    """For residuals J x - y with J'J = diag(4, 1/4) the Gauss-Newton standard errors are
    1/2 and 2 (residual variance below 1: not inflated); a column the residuals ignore has an
    infinite one; a misfit (residual variance 9 per degree of freedom) triples them."""
    class Sol:
        pass

    sol = Sol()
    sol.jac = np.array([[2.0, 0.0], [0.0, 0.5], [0.0, 0.0]])
    sol.fun = np.zeros(3)
    np.testing.assert_allclose(twin.standard_errors(sol), [0.5, 2.0], rtol=1e-12)
    sol.fun = np.array([3.0, 0.0, 0.0])                          # r'r / (3 - 2) = 9
    np.testing.assert_allclose(twin.standard_errors(sol), [1.5, 6.0], rtol=1e-12)
    sol.jac, sol.fun = np.array([[1.0, 0.0], [1.0, 0.0]]), np.zeros(2)
    se = twin.standard_errors(sol)
    assert se[0] == pytest.approx(np.sqrt(0.5)) and se[1] == np.inf


def test_reads_from_transfer_invert_the_sketch_cosines():
    """T made by the closed form of known readings gives those readings back (the sign shared
    by all is the convention: readings summing to >= 0); a noise or dead harness keeps its
    start value, and without two probed harnesses the start is returned unchanged."""
    read = np.array([1.2, 0.8, 1.0, -2.5])
    none = np.zeros(4, bool)
    T = twin.sketch_transfer(read, none, none)
    got = twin.reads_from_transfer(T, none, none, np.full(4, 0.5))
    np.testing.assert_allclose(got, read, atol=0.02)
    got = twin.reads_from_transfer(-np.abs(T) * 0 + T, none, none, np.full(4, -0.5))
    assert got.sum() >= 0
    dead = np.array([False, False, False, True])
    T3 = twin.sketch_transfer(read, none, dead)
    got = twin.reads_from_transfer(np.where(dead, np.nan, T3), none, dead, np.array([0.5, 0.5, 0.5, 0.0]))
    assert got[3] == 0.0
    start = np.array([0.5, 0.5, 0.5, 0.5])
    np.testing.assert_array_equal(twin.reads_from_transfer(np.array([0.1, np.nan, np.nan, np.nan]), none, none, start),
                                  start)


def _trap_runs(seeds: int = 2, steps: int = 30) -> list[dict]:
    runs = []
    for seed in range(seeds):
        cfg = {**scenarios.scenario_config("trap", {"name": "uniform"}, seed=seed), "steps": steps, "eval_every": 10,
               "counterfactual": 10}
        r = run_config(resolve_config(cfg))
        runs.append({"train": r.train, "eval": r.eval, "counterfactual": r.counterfactual, "groups": r.groups})
    return runs


def test_simulate_is_the_twin_env_on_the_logged_schedule():
    """At the start, the simulation's mean success is the twin env's own (every task); it is
    deterministic in its seed; the probes' T of the simulated env is finite from the second
    probe on and has the trap's sign (negative) where the trap reads the core negatively."""
    obs = twin.observations(_trap_runs())
    prm = twin.Params(bias=np.array([-1.5] * 4 + [0.5]), read=np.array([1.0] * 4 + [-3.0]),
                      ceil=np.array([1.0] * 4 + [0.6]), noise=np.zeros(5, bool), dead=np.zeros(5, bool),
                      noise_p=np.zeros(5), lr=2.0, skill_lr=2.0, max_step=1.2, forget=0.2, spread=1.0)
    probe_at = np.zeros(obs.alloc.shape[:2], bool)
    probe_at[obs.probes["r"].astype(int), obs.probes["t"].astype(int)] = True
    a = twin.simulate(prm, obs, probe_at, sims=2, seed=0)
    b = twin.simulate(prm, obs, probe_at, sims=2, seed=0)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    from hbsim.experiment import resolve_synthetic
    knobs = resolve_synthetic(twin.twin_env(prm, obs))
    env = make_env(knobs.pop("kind"), seed=0, **knobs)
    np.testing.assert_allclose(a["p"][:, 0], np.broadcast_to(env.success_matrix().mean(axis=0), (2, 6)), atol=0.08)
    later = probe_at & (np.arange(probe_at.shape[1]) > 10)[None]
    T = a["T"][later]
    assert np.isfinite(T).all() and (T[:, 4] < 0).all() and (T[:, :4] > 0).all()


def test_the_fit_reports_a_standard_error_per_reading_and_flags_an_unidentified_sign():
    """Every fitted reading has a finite standard error; a harness the fit cannot see (its
    reading's standard error made huge) is named by `unsure`."""
    obs = twin.observations(_trap_runs())
    result = twin.fit(obs, holdout=0.0, max_nfev=5, sim_rounds=0)
    se = result.standard_errors("read")
    assert se.shape == (5,) and np.isfinite(se).all() and (se > 0).all()
    assert result.unsure() == [h for h in range(5) if abs(result.params.read[h]) < twin.SIGN_Z * se[h]]
    k = int(result.layout.free.sum())
    result.se = result.se.copy()
    result.se[k + 2] = 100.0                                     # read of harness 2
    assert 2 in result.unsure()
