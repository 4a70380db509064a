"""Speed of the offline laboratory (pytest-benchmark; run with --benchmark-enable to time).

With the default --benchmark-disable each runs once as a plain test."""
import numpy as np

import hbsim
from hbsim.envs import make_env
from policies import Allocation
from run_checks import check_regret


def test_bench_one_150_step_run_harnessbandit(benchmark):
    """One default bernoulli run: 6 harnesses, 200 tasks, 8 groups of G=8, 150 steps + final eval."""
    cfg = hbsim.resolve_config({"policy": {"name": "harnessbandit"}, "seed": 0, "steps": 150})
    res = benchmark(hbsim.run_config, cfg)
    assert len(res.train) == 150
    check_regret(res.train)


def test_bench_bernoulli_train_step(benchmark):
    """One env step alone (sampling, oracle over 6 candidates, update, ground truth)."""
    env = make_env("bernoulli", seed=0)
    allocs = [Allocation.pure(i % 6, 6, 8) for i in range(6)]
    state = {"i": 0}

    def step():
        state["i"] += 1
        return env.train_step(allocs[state["i"] % 6])

    res = benchmark(step)
    cost, arm = res.cost, state["i"] % 6
    assert cost.groups_scored == cost.groups_generated > 0
    # a pure batch of 8: buffered groups first, then retained fresh ones, up to 8
    assert cost.groups_optimized == min(8, cost.leftover_used + cost.groups_retained)
    assert (res.extras["regret"] == 0) == (res.extras["oracle_arm"] == arm) and np.isfinite(res.extras["regret"])


def _one_run(policy: dict, kind: str = "bernoulli"):
    cfg = hbsim.resolve_config({"env": {"kind": kind}, "policy": policy, "seed": 0, "steps": 150})
    return lambda: hbsim.run_config(cfg)


def test_bench_one_150_step_run_uniform(benchmark):
    """The reference of the oracle's cost: the same default run under `uniform`."""
    res = benchmark(_one_run({"name": "uniform"}))
    assert len(res.train) == 150


def test_bench_one_150_step_run_oracle_heldout_harness(benchmark):
    """The oracle's ground truth every step (6 candidates' expected success matrix) on the
    default run; issue 18 bounds it at 2x the uniform run (README, "Clairvoyant references")."""
    res = benchmark(_one_run({"name": "oracle", "target": "heldout_harness", "with_mixed": True}))
    assert len(res.train) == 150 and res.train["seconds_scheduler"].gt(0).all()


def test_bench_one_150_step_run_oracle_student(benchmark):
    """The same on the student env (the costliest expected step: a (n_all (H+1), D) product per candidate)."""
    res = benchmark(_one_run({"name": "oracle", "target": "heldout_harness", "with_mixed": True}, "student"))
    assert len(res.train) == 150


def test_bench_one_150_step_run_uniform_student(benchmark):
    res = benchmark(_one_run({"name": "uniform"}, "student"))
    assert len(res.train) == 150
