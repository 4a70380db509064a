"""The headline procedure by simulation (coverage, A/A level, power at the reported mde, the
interval / Holm consistency), and its inputs: pairing, skipped pairs, --primary, --unpaired."""
import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

import reports
from policies.errors import UserError
from hbsim.contract import EVAL_TABLE
from reports.readings import intervals
from reports import analysis, inference, stats

SD_RUN = 0.6  # per-run sd on the logit: training luck dominates


def _cubes(rng, n_seeds, effect, reps, tasks=200, diff=None):
    """(reps, arms, seeds, tasks) pass@1 of binary attempts: logit = task difficulty (fixed:
    "these tasks") + arm effect + a run effect per (arm, seed) shared by all its tasks."""
    diff = rng.normal(0, 1.2, tasks) if diff is None else diff
    eff = np.array([0.0, effect])[None, :, None, None]
    run = rng.normal(0, SD_RUN, (reps, 2, n_seeds, 1))
    p = 1 / (1 + np.exp(-(diff[None, None, None, :] + eff + run)))
    return (rng.random(p.shape) < p).astype(np.float64), diff


def _target(diff, effect):
    """delta for these tasks and new runs: mean_t E_r[sigmoid(a_t + effect + r)] - E_r[sigmoid(a_t + r)]."""
    z, w = np.polynomial.hermite_e.hermegauss(80)
    w = w / w.sum()

    def mean(e):
        return float((w[None, :] / (1 + np.exp(-(diff[:, None] + e + SD_RUN * z[None, :])))).sum(axis=1).mean())
    return mean(effect) - mean(0.0)


def _rows(x, rng, alpha=0.05):
    """The headline of one simulated experiment. x: (arms, seeds, tasks), arm 0 the baseline:
    the seed-level columns of analysis.paired_rows (p_seed, inference.seed_spread), then
    inference.headline over the candidates (one family)."""
    rows = []
    for c in range(1, x.shape[0]):
        d = (x[c] - x[0]).mean(axis=1)
        rows.append({"suite": "s", "metric": "pass@1", "role": "primary", "candidate": f"c{c}", "pairing": "paired",
                     "n_seeds": x.shape[1], "delta": float(d.mean()), "p_maxt": np.nan,
                     "p_seed": stats.sign_flip_test(d, resamples=10000, rng=rng),
                     **inference.seed_spread(x[c], x[0], False)})
    return inference.headline(pd.DataFrame(rows), alpha, 10000)


@pytest.mark.calibration
@pytest.mark.parametrize("n_seeds", [3, 5, 10])
def test_headline_interval_covers_these_tasks_new_runs_target(n_seeds):
    """Run-dominated data: the headline t interval over seeds covers the fixed-task target
    >= 0.93 (the README quotes these numbers), the raw interval before widening as well."""
    rng = np.random.default_rng(100 + n_seeds)
    reps, effect = 300, 0.3
    x, diff = _cubes(rng, n_seeds, effect, reps)
    target = _target(diff, effect)
    hit = raw = 0
    for r in range(reps):
        row = _rows(x[r], rng).iloc[0]
        hit += row["ci_low"] <= target <= row["ci_high"]
        lo, hi = intervals.t_interval(row["delta"], row["se_seed"], row["df_seed"], 0.95)
        raw += lo <= target <= hi
        assert row["ci_level"] == 0.95 and row["family"] == 1
    print(f"coverage at {n_seeds} seeds: headline {hit / reps:.3f}, before widening {raw / reps:.3f} ({reps} runs)")
    assert hit / reps >= 0.93 and raw / reps >= 0.93, (hit / reps, raw / reps)


@pytest.mark.calibration
def test_aa_level_of_the_procedure_and_interval_consistency():
    """Global null, 3 candidates at 10 seeds: the family-wise error of p_holm is <= alpha
    (binomial slack), p_seed alone rejects about alpha; every interval that excludes 0
    has p_holm < alpha, and intervals are widened exactly when they would contradict it."""
    rng = np.random.default_rng(7)
    reps = 300
    any_reject, raw_reject, contradictions = 0, 0, 0
    for _ in range(reps):
        x, diff = _cubes(rng, 10, 0.0, 2)  # the same tasks for every arm: 4 runs per seed, no effect
        arms = np.concatenate([x[0], x[1]])
        out = _rows(arms, rng)
        assert (out["family"] == 3).all()
        any_reject += bool((out["p_holm"] < 0.05).any())
        raw_reject += int((out["p_seed"] < 0.05).sum())
        excl = (out["ci_low"] > 0) | (out["ci_high"] < 0)
        contradictions += int((excl & ~(out["p_holm"] < 0.05)).sum())
        widened = out["ci_widened"]
        assert ((out.loc[widened, "ci_low"] == 0) | (out.loc[widened, "ci_high"] == 0)).all()
    print(f"A/A, 3 candidates x 10 seeds: family-wise error {any_reject / reps:.3f}, p_seed < 0.05 in "
          f"{raw_reject / (3 * reps):.3f} ({reps} runs)")
    assert contradictions == 0
    assert any_reject / reps <= 0.08, any_reject / reps       # FWER <= alpha (+ 3 binomial sd)
    assert 0.02 <= raw_reject / (3 * reps) <= 0.08, raw_reject / (3 * reps)


@pytest.mark.calibration
def test_power_at_the_reported_mde_is_about_080():
    """The reported mde (sign-flip, its floor, Holm over the family of 2) is detected by the
    headline procedure with power in [0.7, 0.9]: d_s normal with the sd the mde was computed
    from, one true effect at the mde, one null candidate."""
    n, sd, reps = 12, 0.05, 400
    d = inference.design(0.0, sd / np.sqrt(n), n - 1, n, family=2, alpha=0.05, resamples=10000)
    mde = d["mde"]
    assert 0 < mde < 1
    rng = np.random.default_rng(3)
    d_eff = rng.normal(mde, sd, (reps, n))
    d_null = rng.normal(0.0, sd, (reps, n))
    p1 = stats.sign_flip_test(d_eff, resamples=10000, rng=rng)
    p2 = stats.sign_flip_test(d_null, resamples=10000, rng=rng)
    holm = np.array([stats.adjust(np.array([a, b]), "holm")[0] for a, b in zip(p1, p2)])
    power = float((holm < 0.05).mean())
    print(f"power at the reported mde {mde:.4f} (12 seeds, family 2): {power:.3f} ({reps} runs)")
    assert 0.7 <= power <= 0.9, power
    # the unadjusted t-test mde is smaller: the old column described another test
    assert stats.mde_se(sd / np.sqrt(n), n - 1, 0.05) < mde


def test_seeds_needed_is_a_design_count_for_the_target():
    sd = 0.05
    n = int(stats.seeds_needed(0.04, sd, 0.05, family=6))
    level = stats.procedure_level(n, 0.05, 6, 10000)
    assert 0.04 / sd >= stats.mde_effect(n, level)
    less = stats.procedure_level(n - 1, 0.05, 6, 10000)
    assert 0.04 / sd < stats.mde_effect(n - 1, less)
    assert n >= 8  # floor 2/2**n < 0.05/6 needs 8 seeds


def test_sign_flip_power_at_its_floor_is_every_seed_on_one_side():
    """At one attainable step the sign-flip test rejects exactly when every d_s has the same sign:
    power Phi(e)**n + Phi(-e)**n, so at 10 seeds and Holm over 14 (level 2/1024) power 0.8 needs
    e = 2.013 sd of d_s (the t approximation at that level: 1.70, power 0.63 there)."""
    level = stats.procedure_level(10, 0.05, 14, 10000)
    assert level == 2 / 1024
    assert stats.sign_flip_power(1.0, 10, level) == pytest.approx(sps.norm.cdf(1.0) ** 10 + sps.norm.cdf(-1.0) ** 10)
    e = stats.mde_effect(10, level)
    assert e == pytest.approx(2.0128, abs=1e-3) and sps.norm.cdf(e) ** 10 == pytest.approx(0.8, abs=1e-9)
    t_approx = stats.mde_se(1 / np.sqrt(10), 9, level)
    assert t_approx == pytest.approx(1.70, abs=0.01)
    assert stats.sign_flip_power(t_approx, 10, level) == pytest.approx(0.63, abs=0.01)
    # far above the floor the t approximation is kept (it is within Monte-Carlo error of the test's power)
    assert stats.mde_effect(20, stats.procedure_level(20, 0.05, 14, 10000)) == pytest.approx(
        stats.mde_se(1 / np.sqrt(20), 19, stats.procedure_level(20, 0.05, 14, 10000)))


@pytest.mark.calibration
def test_power_at_the_printed_mde_near_the_floor_is_080():
    """10 seeds, family 14 (the audit's configuration): the mde `inference.design` prints is
    detected with power 0.8 by the procedure used -- the exact sign-flip test over the seeds,
    Holm over 14 comparisons with 13 null ones -- on fresh draws (not the draws of
    `sign_flip_power`); also at 8 seeds with family 2 (3 steps above 0) and 12 seeds with
    family 14 (7 steps). 2,000 experiments each; Monte-Carlo sd of a power of 0.8: 0.009."""
    rng = np.random.default_rng(32)
    for n, family in ((10, 14), (8, 2), (12, 14)):
        sd, reps = 0.04, 2000
        mde = inference.design(0.0, sd / np.sqrt(n), n - 1, n, family=family, alpha=0.05, resamples=10000)["mde"]
        d = np.concatenate([rng.normal(mde, sd, (reps, 1, n)), rng.normal(0.0, sd, (reps, family - 1, n))], axis=1)
        p = stats.sign_flip_test(d.reshape(-1, n), resamples=10000, rng=rng).reshape(reps, family)
        holm = np.array([stats.adjust(row, "holm")[0] for row in p])
        power = float((holm < 0.05).mean())
        print(f"power at the printed mde {mde:.4f} ({n} seeds, family {family}): {power:.3f} ({reps} runs)")
        assert abs(power - 0.8) <= 0.035, (n, family, power)


def test_max_t_sign_flip_hand_case():
    d = np.array([[0.1, 0.2, 0.3], [0.3, -0.1, 0.2]])  # 2 metrics x 3 seeds: 8 patterns
    p = stats.max_t_sign_flip(d, resamples=100, rng=np.random.default_rng(0))
    signs = 1 - 2 * ((np.arange(8)[:, None] >> np.arange(3)) & 1)
    stat = np.abs(signs @ d.T) / np.sqrt((d ** 2).sum(axis=1))
    top = stat.max(axis=1)
    obs = np.abs(d.sum(axis=1)) / np.sqrt((d ** 2).sum(axis=1))
    want = [(top >= o - 1e-12).mean() for o in obs]
    np.testing.assert_allclose(p, want)
    assert p[0] == 0.5  # metric 0 is all-positive; flipping seed 2 makes metric 1 all-positive too (4 of 8)
    single = stats.sign_flip_test(d, resamples=100, rng=np.random.default_rng(0))
    assert (p >= single - 1e-12).all()  # adjusted p is never below the raw one


def test_two_sample_permutation_hand_case():
    a, b = np.array([[1.0, 2.0, 3.0]]), np.array([[4.0, 5.0, 6.0]])
    p = stats.two_sample_permutation_test(a, b, resamples=100, rng=np.random.default_rng(0))
    assert p[0] == pytest.approx(2 / 20)  # C(6, 3) = 20 relabelings, the observed and its mirror
    assert stats.two_sample_permutation_test(a, a, resamples=100, rng=np.random.default_rng(0))[0] == 1.0


def test_holm_matches_statsmodels(monkeypatch):
    import gc

    from statsmodels.stats.multitest import multipletests

    # statsmodels' holm ends in a full gc.collect() (~50 ms a call alone, 0.5 s in the whole suite's heap)
    monkeypatch.setattr(gc, "collect", lambda *args: 0)
    rng = np.random.default_rng(0)
    for _ in range(10):
        p = rng.random(int(rng.integers(1, 12))) ** 3
        p[: len(p) // 2] = p[0]  # ties
        np.testing.assert_allclose(stats.adjust(p, "holm"), multipletests(p, method="holm")[1], rtol=0, atol=1e-15)
    assert np.isnan(stats.adjust(np.array([np.nan, 0.01]), "holm")[0])


def test_wilcoxon_never_below_its_exact_floor_with_ties():
    d = np.array([0.1, 0.1, 0.1, 0.1, 0.1])  # all tied: the normal approximation gives 0.025
    assert stats.wilcoxon_p(d) == pytest.approx(2 / 32)


def test_skewness():
    assert stats.skewness(np.array([0.0, 0.0, 0.0, 0.0, 1.0])) == pytest.approx(2.236068, rel=1e-6)
    assert np.isnan(stats.skewness(np.array([1.0, 2.0])))


# ----------------------------------------------------------------------------- end to end

def _ev(pols, seeds=6, tasks=10, effects=None, prefix=None):
    rows = []
    rng = np.random.default_rng(0)
    for pol in pols:
        for s in range(seeds):
            for t in range(tasks):
                ok = bool(rng.random() < 0.4 + (effects or {}).get(pol, 0.0))
                task = f"{(prefix or {}).get(pol, 't')}{t}"
                rows.append((f"{pol}-{s}", pol, s, 1, "s", task, "c", "h", 0, float(ok), ok))
    return pd.DataFrame(rows, columns=list(EVAL_TABLE))


def _grid(tmp_path, ev, env_of=lambda pol, seed: {"kind": "bernoulli"}):
    for run_id, g in ev.groupby("run_id"):
        d = tmp_path / "cells" / run_id
        d.mkdir(parents=True)
        g.to_parquet(d / "eval.parquet")
        pol, seed = g["policy"].iloc[0], int(g["seed"].iloc[0])
        cfg = {"env": env_of(pol, seed), "seed": seed, "policy": {"name": pol, "label": pol}}
        (d / "run.json").write_text(json.dumps({"run_id": run_id, "config": cfg, "seed": seed}))
    return tmp_path


def test_pairing_refuses_runs_without_common_random_numbers(tmp_path):
    ev = _ev(["base", "cand"])
    grid = _grid(tmp_path / "g", ev, lambda pol, seed: {"kind": "bernoulli", "noise": 2.0 if pol == "cand" and
                                                       seed == 3 else 1.0})
    with pytest.raises(UserError) as err:
        reports.build_report(grid, "base", None, ks=(1,), resamples=50)
    msg = str(err.value)
    assert "pairing: runs 'cand-3' (cand, seed 3) and 'base-3' (baseline base, seed 3)" in msg
    assert "env.noise = 2.0 vs 1.0" in msg and "--unpaired" in msg and "\n" not in msg
    res = reports.build_report(grid, "base", None, ks=(1,), resamples=50, unpaired=True)
    row = res.tables["paired"].iloc[0]
    assert row["pairing"] == "unpaired" and np.isnan(row["p_maxt"]) and np.isfinite(row["ci_low"])
    a = ev[ev["policy"] == "cand"].groupby("seed")["success"].mean().to_numpy()
    b = ev[ev["policy"] == "base"].groupby("seed")["success"].mean().to_numpy()
    se, df = inference.welch_se_df(a, b)
    assert (row["se_seed"], row["df_seed"]) == pytest.approx((se, df))
    ok = reports.build_report(_grid(tmp_path / "same", ev), "base", None, ks=(1,), resamples=50)
    assert not any(n.startswith("pairing:") for n in ok.notes)     # checked from run.json, all agree


def test_a_policy_on_other_tasks_is_skipped_in_one_line_and_the_rest_compared():
    ev = _ev(["base", "cand", "other"], prefix={"other": "x"})
    res = reports.build_report(ev, "base", None, ks=(1,), resamples=50)
    paired = res.tables["paired"]
    assert list(paired["candidate"]) == ["cand"] and len(paired) == 1
    line = [n for n in res.notes if "'other' not compared" in n]
    assert line == ["s: 'other' not compared with 'base': no common task (it was evaluated on 10 other task ids, "
                    "e.g. 'x0')"]
    assert set(res.tables["summary"]["policy"]) == {"base", "cand"}
    with pytest.raises(UserError, match="no candidate shares a seed and a task"):
        reports.build_report(ev[ev["policy"] != "cand"], "base", None, ks=(1,), resamples=50)


def test_a_run_folder_inside_an_uncollected_grid_does_not_empty_the_report(tmp_path):
    """`hb real --out GRID/r1` into a grid of cells: r1 (another label, other task ids) is
    named in one line as not compared; the grid's own comparison stands."""
    grid = _grid(tmp_path / "g", _ev(["base", "cand"]))
    r1 = grid / "r1"
    r1.mkdir()
    _ev(["real"], prefix={"real": "real-task-"}).to_parquet(r1 / "eval.parquet")
    res = reports.build_report(grid, "base", None, ks=(1,), resamples=50)
    assert list(res.tables["paired"]["candidate"]) == ["cand"]
    assert any(n.startswith("s: 'real' not compared with 'base': no common task") for n in res.notes)


def test_primary_metric_choice_and_refusal():
    from reports_synth import make_synthetic

    frames = make_synthetic({"base": 0.0, "hb": 0.8}, n_seeds=4, n_tasks=(8, 6))
    res = reports.build_report(frames, "base", None, resamples=50, primary="pass@3")
    prim = res.tables["paired"][res.tables["paired"]["role"] == "primary"]
    assert list(zip(prim["suite"], prim["metric"])) == [("heldout_harness", "pass@3")]
    assert any("heldout_tasks: the primary metric pass@3 is not computed here" in n for n in res.notes)
    with pytest.raises(UserError, match=r"--primary: got 'pass@9', allowed: one of the metrics"):
        reports.build_report(frames, "base", None, resamples=50, primary="pass@9")
    with pytest.raises(UserError, match=r"--target-delta: got 2.0"):
        reports.build_report(frames, "base", None, resamples=50, target_delta=2.0)
    res = reports.build_report(frames, "base", None, resamples=50, target_delta=0.2)
    prim = res.tables["paired"][res.tables["paired"]["role"] == "primary"]
    assert (prim["target_delta"] == 0.2).all()


def test_one_headline_decision_read_by_every_renderer(tmp_path):
    """--primary pass@3 on binary data where one suite has 1 attempt: that suite has no
    headline anywhere -- not in the conclusion, not as rows of the headline table or figure,
    not as a verdict -- and the other suite's headline is pass@3 everywhere (before, the
    conclusion said "no headline" while the headline table showed a pass@1 row with the
    verdict "not significant (Holm)")."""
    from reports import render
    from reports_synth import make_synthetic

    ev, tr = make_synthetic({"base": 0.0, "hb": 0.8}, n_seeds=4, n_tasks=(8, 6))   # heldout_tasks: 1 attempt
    ev = ev.assign(reward=ev["success"].astype(float))                               # binary rewards
    res = reports.build_report((ev, tr), "base", tmp_path / "rep", resamples=50, primary="pass@3")
    assert res.headline == {"heldout_harness": "pass@3", "heldout_tasks": None}
    assert res.metrics["heldout_tasks"] == ["pass@1"] and res.view_metric("heldout_tasks") == "pass@1"
    paired = res.tables["paired"]
    prim = paired[paired["role"] == "primary"]
    assert list(zip(prim["suite"], prim["metric"])) == [("heldout_harness", "pass@3")]
    assert "on heldout_tasks the primary metric is not computed (no headline)" in reports.conclusion(res)
    assert "on heldout_harness (pass@3)" in reports.conclusion(res)
    table = render.headline_table(res)
    assert list(zip(table["suite"], table["metric"])) == [("heldout_harness", "pass@3")]
    page = (tmp_path / "rep" / "report.md").read_text()
    head = page[:page.index("Every metric and column")]          # the first screen: conclusion, figure, table
    assert "| heldout_tasks |" not in head and "| heldout_harness | pass@3 | hb |" in head
    text = reports.headline_table(res)                                # stdout: the headline metric first
    block = text[text.index("suite heldout_harness"):]
    assert block.split("\n")[2].split()[0] == "pass@3"
    # the views follow the same decision: the headline metric, else the suite's first metric
    agg = res.tables["aggregates"]
    assert dict(zip(agg["suite"], agg["metric"])) == {"heldout_harness": "pass@3", "heldout_tasks": "pass@1"}


def test_skewed_seed_differences_are_warned_about():
    rows = []
    for pol in ("base", "cand"):
        for s in range(8):
            for t in range(10):
                # cand: one seed breaks through (+0.7), the others trail slightly (-0.1): mean 0
                ok = t < (3 + (7 if s == 0 else -1)) if pol == "cand" else t < 3
                rows.append((f"{pol}-{s}", pol, s, 1, "s", f"t{t}", "c", "h", 0, float(ok), bool(ok)))
    res = reports.build_report(pd.DataFrame(rows, columns=list(EVAL_TABLE)), "base", None, ks=(1,), resamples=50)
    row = res.tables["paired"].iloc[0]
    from scipy.stats import skew

    want = skew([1.0] + [0.0] * 7, bias=False)  # 2.83
    assert row["delta"] == pytest.approx(0.0, abs=1e-12) and row["skew_seed"] == pytest.approx(want, rel=1e-9)
    assert any(f"is skewed (skewness +{want:.2f} over 8 seeds, beyond 0.80): its t interval may undercover" in n
               and "the seed-level tests test 'no effect'" in n for n in res.notes)


def test_gee_p_is_one_for_identical_arms():
    ev = _ev(["base"])
    twin = ev.assign(policy="twin", run_id=ev["run_id"].str.replace("base", "twin"))
    res = reports.build_report(pd.concat([ev, twin], ignore_index=True), "base", None, ks=(1,), resamples=50)
    gee = res.tables["gee"].iloc[0]
    assert gee["log_odds"] == 0.0 and gee["p"] == 1.0


def test_skew_arm_keeps_means_and_skews_the_seed_differences():
    from ablations.calibrate import skew_arm

    ev = _ev(["A", "B"], seeds=400, tasks=50)
    out = skew_arm(ev, "B", 0.1, np.random.default_rng(0))
    pd.testing.assert_frame_equal(out[out["policy"] == "A"], ev[ev["policy"] == "A"])
    before = ev[ev["policy"] == "B"].groupby("seed")["success"].mean()
    after = out[out["policy"] == "B"].groupby("seed")["success"].mean()
    d = (after - before).to_numpy()
    assert abs(d.mean()) < 0.01 and stats.skewness(d) > 2 and np.median(d) < 0
    assert (out["reward"] == out["success"].astype(float)).all()


@pytest.mark.calibration
def test_skew_warning_fires_where_the_interval_undercovers():
    """d_s = a shifted exponential (skewness 2): the headline t interval (family 1, 95%) covers
    the mean below 0.93 at 10 and 20 seeds, and the skew warning (|skewness| beyond
    reports.compare.skew_limit: one standard error of the sample skewness, at least 0.8) fires in most
    of those reports (before: two standard errors, at least 1, fired in 36-70%); on normal d_s
    the interval covers about 0.95 and the warning fires in at most 30%. 4,000 reports each;
    Monte-Carlo sd of a rate: at most 0.008."""
    from reports.compare import skew_limit as _skew_limit

    rng = np.random.default_rng(11)
    reps = 4000
    for n in (10, 20):
        for name, d in (("exponential", rng.exponential(1.0, (reps, n)) - 1.0), ("normal", rng.normal(0, 1, (reps, n)))):
            m, se = d.mean(axis=1), d.std(axis=1, ddof=1) / np.sqrt(n)
            ci = np.array([intervals.t_interval(a, b, n - 1, 0.95) for a, b in zip(m, se)])
            cover = float(((ci[:, 0] <= 0) & (0 <= ci[:, 1])).mean())
            fires = float((np.abs(sps.skew(d, axis=1, bias=False)) >= _skew_limit(n)).mean())
            print(f"{n} seeds, {name} d_s: t interval covers {cover:.3f}, skew warning fires {fires:.3f}")
            if name == "exponential":
                assert cover < 0.93 and fires >= 0.6, (n, cover, fires)
            else:
                assert cover >= 0.935 and fires <= 0.3, (n, cover, fires)
