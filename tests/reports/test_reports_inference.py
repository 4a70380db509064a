"""The seed is the replication unit: seed-level tests hold their level under strong
per-run effects, task-level tests do not; power columns; the FPR table."""
import numpy as np
import pytest
from scipy import stats as sps

from reports import bootstrap, inference, stats


def _null_blocks(rng, blocks=80, seeds=8, tasks=60, run_sd=0.15, noise_sd=0.1):
    """A/A difference cubes (blocks, seeds, tasks): each run (arm, seed) has its own
    random effect shared by ALL its tasks (the model that run trained), plus task noise.
    No true difference between the arms."""
    run = rng.normal(0, run_sd, (blocks, 2, seeds, 1))  # (blocks, arm, seeds, 1)
    task = rng.normal(0, 0.3, (blocks, 1, 1, tasks))  # shared by both arms (same tasks)
    x = 0.5 + run + task + rng.normal(0, noise_sd, (blocks, 2, seeds, tasks))
    return x[:, 1] - x[:, 0]


@pytest.mark.calibration
def test_seed_level_tests_hold_alpha_where_task_level_tests_do_not():
    diff = _null_blocks(np.random.default_rng(2024))
    p = inference.paired_tests(diff, resamples=500, rng=np.random.default_rng(0))
    fpr = {name: float((v < 0.05).mean()) for name, v in p.items()}
    assert len(p["p_seed"]) == 80
    for name in ("p_seed", "p_seed_t", "p_seed_wilcoxon"):
        assert fpr[name] <= 0.10, (name, fpr)
    # every task of a run shares the run's luck: the task-level tests see 60 "replications"
    for name in ("p_task_permutation", "p_task_wilcoxon", "p_task_sign"):
        assert fpr[name] >= 0.5, (name, fpr)
    table = inference.false_positive_rates(p, 0.05).set_index("test")
    k = int(table.loc["p_seed", "rejections"])
    lo, hi = sps.binomtest(k, 80).proportion_ci(0.95)
    assert (table.loc["p_seed", "fpr_low"], table.loc["p_seed", "fpr_high"]) == pytest.approx((lo, hi))
    assert table.loc["p_task_permutation", "fpr_low"] > 0.05  # clearly anti-conservative


def test_paired_tests_hand_case_and_rows_are_independent():
    # 2 seeds x 3 tasks; d_s = (0.2, 0.1): sign flips over 2 seeds -> exact p = 2/4
    diff = np.array([[[0.3, 0.1, 0.2], [0.0, 0.2, 0.1]]])
    p = inference.paired_tests(diff, resamples=100, rng=np.random.default_rng(0))
    assert p["p_seed"][0] == pytest.approx(0.5)
    assert p["p_seed_t"][0] == pytest.approx(sps.ttest_1samp([0.2, 0.1], 0).pvalue)
    assert p["p_task_sign"][0] == pytest.approx(0.25)  # 3 wins of 3: 2 * 1/8
    rng = np.random.default_rng(5)
    cube = rng.normal(0.05, 0.1, (3, 6, 20))
    together = inference.paired_tests(cube, resamples=300, rng=np.random.default_rng(1))
    alone = inference.paired_tests(cube[1:2], resamples=300, rng=np.random.default_rng(1))
    for name in ("p_seed", "p_seed_t", "p_seed_wilcoxon", "p_task_wilcoxon", "p_task_sign"):
        assert together[name][1] == pytest.approx(alone[name][0]), name


def test_design_columns_hand_case():
    # 5 seeds: exact sign-flip floor 2/32 = 0.0625 >= 0.05, no rejection possible: mde = inf, and the
    # design asks for the seeds at which the procedure detects the stated default target, 0.02
    se = 0.01
    d = inference.design(0.03, se, 4.0, 5, family=1, alpha=0.05, resamples=10000)
    assert d["mde"] == float("inf") and d["p_floor"] == pytest.approx(2 / 32)
    assert d["target_delta"] == inference.DEFAULT_TARGET_DELTA == 0.02
    # 0.02 / 0.0224 = 0.89 sd of d_s; at 11 and 12 seeds the level is 51 and 102 steps of 2 / 2**n wide (t approx.)
    assert d["seeds_needed"] == stats.seeds_needed(0.02, se * np.sqrt(5), 0.05) == 12
    e = 0.02 / (se * np.sqrt(5))
    assert stats._power_nc(e * np.sqrt(12), 11, stats.procedure_level(12, 0.05, 1, 10000)) >= 0.8 > \
        stats._power_nc(e * np.sqrt(11), 10, stats.procedure_level(11, 0.05, 1, 10000))
    # 10 seeds, family 3: the level is the largest multiple of 2/1024 below 0.05/3 (8 steps: the sign-flip
    # test's own power, not the t approximation)
    d = inference.design(0.03, se, 9.0, 10, family=3, alpha=0.05, resamples=10000)
    level = 2 / 1024 * 8  # 0.015625 < 0.016667 <= 0.017578
    assert d["mde"] == pytest.approx(stats.mde_effect(10, level) * se * np.sqrt(10))
    assert d["mde"] > stats.mde_se(se, 9, level)
    assert d["seeds_needed"] == stats.seeds_needed(0.02, se * np.sqrt(10), 0.05, family=3) != 10.0
    assert inference.design(0.03, se, 9.0, 10, family=3, alpha=0.05, resamples=10000, target=0.05)[
        "target_delta"] == 0.05
    big = inference.design(0.0, 0.5, 1.0, 2, family=1, alpha=0.05, resamples=10000)
    assert big["mde"] == float("inf")  # 2 seeds: floor 0.5; also above a bounded metric's range
    one = inference.design(0.1, np.nan, np.nan, 1, family=1, alpha=0.05, resamples=10000)
    assert np.isnan(one["mde"]) and np.isnan(one["seeds_needed"])


def test_paired_tests_speed(benchmark):
    diff = _null_blocks(np.random.default_rng(0), blocks=4, seeds=5, tasks=200)
    out = benchmark(lambda: inference.paired_tests(diff, resamples=10000, rng=np.random.default_rng(0)))
    assert out["p_task_permutation"].shape == (4,)


def _aa_attempts(rng, seeds=6, tasks=40, run_sd=0.6):
    """One A/A block of binary attempts: logit = task effect + a run effect per (arm, seed)
    shared by all tasks of that run; no true difference between the arms."""
    import pandas as pd

    task = rng.normal(0.0, 1.0, tasks)
    run = rng.normal(0.0, run_sd, (2, seeds))
    logit = task[None, None, :] + run[:, :, None]                      # (arm, seeds, tasks)
    success = rng.random(logit.shape) < 1.0 / (1.0 + np.exp(-logit))
    arm, seed, tk = np.meshgrid(["A", "B"], np.arange(seeds), np.arange(tasks), indexing="ij")
    return pd.DataFrame({"policy": arm.ravel(), "seed": seed.ravel(), "task": [f"t{t}" for t in tk.ravel()],
                         "suite": "s", "attempt": 0, "success": success.ravel()})


@pytest.mark.calibration
def test_gee_clustered_by_seed_holds_alpha_with_few_seeds():
    """The CR1-scaled robust variance with a t(K-1) reference keeps the level at 4 seeds; the
    plain sandwich with a normal reference (what statsmodels gives by default) does not."""
    from statsmodels.genmod import cov_struct, families
    from statsmodels.genmod.generalized_estimating_equations import GEE

    from reports.cells import Aligned
    from reports.gee import gee_rows

    rng = np.random.default_rng(7)
    ours, plain = [], []
    for _ in range(60):
        final = _aa_attempts(rng, seeds=4)
        al = Aligned(policies=["A", "B"], seeds=list(range(4)), tasks=sorted(final["task"].unique()),
                     categories=np.array([]), metrics=["pass@1"], x=np.zeros((1, 2, 4, 40)))
        rows, _ = gee_rows(final, al, "s", "A")
        ours.append(rows[0]["p"])
        sub = final.sort_values(["seed", "policy", "task", "attempt"], kind="stable")
        exog = np.column_stack([np.ones(len(sub)), (sub["policy"] == "B").to_numpy(dtype=np.float64)])
        fit = GEE(sub["success"].to_numpy(dtype=np.float64), exog, groups=sub["seed"].to_numpy(),
                  family=families.Binomial(), cov_struct=cov_struct.Exchangeable()).fit()
        plain.append(float(np.asarray(fit.pvalues)[1]))
    ours, plain = np.array(ours), np.array(plain)
    assert np.isfinite(ours).all()
    assert (ours < 0.05).mean() <= 0.10, (ours < 0.05).mean()
    assert (plain < 0.05).mean() >= 0.12, (plain < 0.05).mean()   # the uncorrected test over-rejects here
    assert (ours >= plain).mean() > 0.9                            # and the correction only makes p larger


def test_percentile_coverage_of_the_crossed_bootstrap_by_hand():
    # 2 F_t(1.96 sqrt((n - 1) / n); n - 1) - 1
    assert bootstrap.percentile_coverage(5) == pytest.approx(2 * sps.t.cdf(1.959964 * np.sqrt(0.8), 4) - 1, abs=1e-6)
    assert [round(bootstrap.percentile_coverage(n), 3) for n in (5, 10, 20, 25)] == [0.846, 0.904, 0.929, 0.933]
    assert np.isnan(bootstrap.percentile_coverage(1))


@pytest.mark.calibration
def test_the_bootstrap_note_stands_where_its_coverage_is_below_093():
    """Run-dominated data (per-run sd 1.0 on the logit, task sd 0.3, 200 tasks, effect 0.3, new
    tasks and new runs each experiment): the crossed bootstrap's 95% interval of delta covers
    the population delta below 0.93 at 8 seeds, where the report notes it (percentile_coverage
    0.891), and at least 0.93 (less 2.5 Monte-Carlo sd) at 25 seeds, where it does not (0.933).
    300 experiments each; Monte-Carlo sd of a coverage of 0.93: 0.015."""
    from hbsim import intervals

    sd_run, sd_task, eff, tasks, reps = 1.0, 0.3, 0.3, 200, 300
    z, w = np.polynomial.hermite_e.hermegauss(60)
    w = w / w.sum()

    def pop(e):
        return float((w[:, None] * w[None, :] / (1 + np.exp(-(sd_task * z[:, None] + sd_run * z[None, :] + e)))).sum())
    target = pop(eff) - pop(0.0)
    rng = np.random.default_rng(3)
    cover = {}
    for n in (8, 25):
        hit = 0
        for _ in range(reps):
            a = rng.normal(0, sd_task, tasks)
            run = rng.normal(0, sd_run, (2, n, 1))
            p = 1 / (1 + np.exp(-(a[None, None, :] + np.array([0.0, eff])[:, None, None] + run)))
            x = (rng.random(p.shape) < p).astype(float)
            draws = bootstrap.crossed_bootstrap((x[1] - x[0])[None], bootstrap.weighted_mean, resamples=1000, rng=rng)
            lo, hi = intervals.percentile_interval(draws, 0.95)
            hit += lo[0] <= target <= hi[0]
        cover[n] = hit / reps
    print(f"crossed bootstrap coverage, run-dominated: 8 seeds {cover[8]:.3f} (approximation "
          f"{bootstrap.percentile_coverage(8):.3f}), 25 seeds {cover[25]:.3f} ({bootstrap.percentile_coverage(25):.3f})")
    mc = np.sqrt(0.93 * 0.07 / reps)
    assert bootstrap.percentile_coverage(8) < 0.93 <= bootstrap.percentile_coverage(25)
    assert cover[8] < 0.93 and cover[25] >= 0.93 - 2.5 * mc
