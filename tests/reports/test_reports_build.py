"""build_report on synthetic SPEC §7 frames: columns, pairing by ids, exclusions, flips."""
import numpy as np
import pandas as pd
import pytest

import reports
from hbsim.contract import EVAL_TABLE
from policies.errors import UserError
from reports import analysis, cells, load, stats


@pytest.fixture(scope="module")
def frames():
    from reports_synth import make_synthetic

    return make_synthetic({"base": 0.0, "hb": 0.8, "mix": -0.4}, n_seeds=3, n_tasks=(18, 12))


@pytest.fixture(scope="module")
def result(frames):
    return reports.build_report(frames, "base", None, resamples=200, seed=0)


def test_paired_table_has_exact_columns_and_consistent_values(result, frames):
    paired = result.tables["paired"]
    assert list(paired.columns) == analysis.PAIRED_COLUMNS
    assert set(paired["candidate"]) == {"hb", "mix"}
    assert sorted(paired.loc[paired["suite"] == "heldout_harness", "metric"].unique()) == \
        ["pass@1", "pass@3", "pass^3", "score"]
    assert sorted(paired.loc[paired["suite"] == "heldout_tasks", "metric"].unique()) == ["pass@1", "score"]
    np.testing.assert_allclose(paired["delta"], paired["candidate_value"] - paired["baseline_value"], atol=1e-12)
    assert ((paired["boot_low"] <= paired["delta"] + 1e-12) & (paired["delta"] <= paired["boot_high"] + 1e-12)).all()
    assert (paired["wins"] + paired["ties"] + paired["losses"] == paired["n_tasks"]).all()
    # the baseline value recomputed by hand from the raw eval rows (final step, pass@1 on heldout_tasks)
    ev = frames[0]
    base = ev[(ev["policy"] == "base") & (ev["suite"] == "heldout_tasks")]
    want = base.groupby(["seed", "task"])["success"].mean().groupby("seed").mean().mean()
    row = paired[(paired["suite"] == "heldout_tasks") & (paired["metric"] == "pass@1")].iloc[0]
    assert row["baseline_value"] == pytest.approx(want)
    # Holm over candidates x suites on the primary metric (score); secondary rows have none
    prim = paired[paired["role"] == "primary"]
    assert set(prim["metric"]) == {"score"} and len(prim) == 4 and (prim["family"] == 4).all()
    np.testing.assert_allclose(prim["p_holm"], stats.adjust(prim["p_seed"].to_numpy(), "holm"))
    assert paired.loc[paired["role"] == "secondary", "p_holm"].isna().all()
    assert (paired["pairing"] == "paired").all()
    assert ((paired["ci_low"] <= paired["delta"] + 1e-12) & (paired["delta"] <= paired["ci_high"] + 1e-12)).all()


def test_cell_metrics_hand_case():
    ev = pd.DataFrame({"run_id": "r", "policy": "a", "seed": 0, "step": 5, "suite": "s", "task": "t",
                       "category": "c", "harness": "h", "attempt": [0, 1, 2, 3],
                       "reward": [1.0, 0.0, 0.5, 1.0], "success": [True, False, False, True]})
    table = cells.cell_metrics(load.make_frames(ev).eval, (1, 3))
    r = table.iloc[0]
    assert (r["n"], r["c"], r["score"], r["pass@1"]) == (4, 2, 0.625, 0.5)
    assert r["pass@3"] == pytest.approx(1.0)  # n - c = 2 < 3
    assert r["pass^3"] == pytest.approx(0.0)


def test_shuffled_rows_give_identical_outputs(frames, result):
    ev, tr = frames
    rng = np.random.default_rng(5)
    shuffled = (ev.sample(frac=1.0, random_state=rng).reset_index(drop=True),
                tr.sample(frac=1.0, random_state=rng).reset_index(drop=True))
    again = reports.build_report(shuffled, "base", None, resamples=200, seed=0)
    for name, table in result.tables.items():
        pd.testing.assert_frame_equal(table, again.tables[name], check_exact=True, obj=name)
    assert reports.headline_table(again) == reports.headline_table(result)


def test_different_seed_changes_intervals_only(frames, result):
    other = reports.build_report(frames, "base", None, resamples=200, seed=1)
    assert len(result.config["config_hash"]) == 16 and other.config["config_hash"] != result.config["config_hash"]
    a, b = result.tables["paired"], other.tables["paired"]
    pd.testing.assert_series_equal(a["delta"], b["delta"])
    assert not np.allclose(a["boot_low"], b["boot_low"])


def test_missing_seed_and_task_are_reported_and_excluded_in_both_arms(frames):
    ev, tr = frames
    ev = ev[~((ev["policy"] == "hb") & (ev["seed"] == 2))]  # hb lacks seed 2
    lost_task = "heldo-t003"
    ev = ev[~((ev["policy"] == "mix") & (ev["task"] == lost_task) & (ev["seed"] == 0))]
    with pytest.warns(UserWarning, match="lacks"):
        res = reports.build_report((ev, tr), "base", None, resamples=200)
    joined = "\n".join(res.notes)
    assert "policy 'hb' lacks seed(s) [2]" in joined
    assert "policy 'mix' lacks 1 task(s)" in joined and lost_task in joined
    paired = res.tables["paired"]
    hb = paired[(paired["candidate"] == "hb") & (paired["suite"] == "heldout_tasks") & (paired["metric"] == "score")].iloc[0]
    mix = paired[(paired["candidate"] == "mix") & (paired["suite"] == "heldout_tasks") & (paired["metric"] == "score")].iloc[0]
    assert (hb["n_seeds"], hb["n_tasks"]) == (2, 18) and (mix["n_seeds"], mix["n_tasks"]) == (3, 17)
    base = ev[(ev["policy"] == "base") & (ev["suite"] == "heldout_tasks")]
    assert hb["baseline_value"] == pytest.approx(base[base["seed"] < 2]["reward"].mean())
    assert mix["baseline_value"] == pytest.approx(base[base["task"] != lost_task]["reward"].mean())
    summ = res.tables["summary"]
    assert set(summ.loc[summ["suite"] == "heldout_tasks", "n_tasks"]) == {17}


def test_flips_show_swaps_hidden_by_equal_counts():
    rows = []
    outcomes = {"base": [1, 1, 0, 0], "cand": [0, 1, 1, 0]}  # 2 = 2 passed, one swap
    for pol, outs in outcomes.items():
        for seed in range(3):
            for t, o in enumerate(outs):
                rows.append((f"{pol}{seed}", pol, seed, 10, "s", f"t{t}", "cat", "h", 0, float(o), bool(o)))
    ev = pd.DataFrame(rows, columns=list(EVAL_TABLE))
    res = reports.build_report(ev, "base", None, ks=(1,), resamples=100)
    counts = res.tables["flip_counts"].iloc[0]
    assert (counts["baseline_passed"], counts["candidate_passed"], counts["gained"], counts["lost"]) == (2, 2, 1, 1)
    flips = res.tables["flips"].set_index("task")["direction"].to_dict()
    assert flips == {"t0": "pass->fail", "t2": "fail->pass"}
    ps = res.tables["per_seed"]
    binary = ps[ps["metric"] == "pass@1"]
    assert len(binary) == 3 and (binary["n10"] == 1).all() and (binary["n01"] == 1).all()
    assert (binary["mcnemar_p"] == 1.0).all()
    np.testing.assert_allclose(binary["mcnemar_mid_p"], 0.5)  # 1 - P(X = 1 | 2, 1/2)
    assert ps.loc[ps["metric"] == "score", "mcnemar_p"].isna().all()  # score is not binary by construction


def test_mcnemar_only_where_binary_by_construction(result):
    ps = result.tables["per_seed"]
    has = ps.groupby(["suite", "metric"])["mcnemar_p"].apply(lambda v: v.notna().all()).to_dict()
    assert has == {("heldout_harness", "pass@1"): False, ("heldout_harness", "pass@3"): True,
                   ("heldout_harness", "pass^3"): True, ("heldout_harness", "score"): False,
                   ("heldout_tasks", "pass@1"): True, ("heldout_tasks", "score"): False}


def test_categories_gee_and_diagnostics(result):
    cats = result.tables["categories"]
    assert set(cats["category"]) == {"coding", "memory", "skills"}
    for _, g in cats.groupby(["suite", "metric", "candidate"]):
        assert g["worst"].sum() == 1 and g.loc[g["worst"], "delta"].iloc[0] == g["delta"].min()
        np.testing.assert_allclose(g["p_bh"], stats.adjust(g["p_seed"].to_numpy(), "fdr_bh"))
        np.testing.assert_allclose(g["p_task_bh"], stats.adjust(g["p_task_permutation"].to_numpy(), "fdr_bh"))
    gee = result.tables["gee"]
    assert set(gee["candidate"]) == {"hb", "mix"}
    hb = gee[(gee["candidate"] == "hb") & (gee["suite"] == "heldout_harness")].iloc[0]
    assert hb["log_odds"] > 0 and hb["n_clusters"] == 3  # clustered by seed
    diag = result.tables["diagnostics"]
    assert len(diag) == 9 and diag["rho"].between(-1, 1).all()
    assert set(result.tables["cost"]["quantity"]) >= {"generated_per_optimized", "seconds_rollout"}


def test_optional_train_columns_missing_are_notes_not_errors(frames):
    ev, tr = frames
    tr = tr.drop(columns=[c for c in tr.columns if c.startswith(("mem_", "regret", "transfer"))])
    res = reports.build_report((ev, tr), "base", None, resamples=100)
    joined = "\n".join(res.notes)
    assert "regret missing" in joined and "Spearman L-T check skipped" in joined and "memory" in joined


@pytest.mark.parametrize("mutate,match", [
    (lambda e: e.assign(reward=e["reward"].where(e.index != 3, 1.5)), "eval.reward: got 1.5"),
    (lambda e: e.drop(index=e.index[(e["suite"] == "heldout_harness")][:1]), "inconsistent attempt counts"),
    (lambda e: e.drop(columns="success"), "missing column"),
])
def test_bad_eval_tables_raise_naming_field(frames, mutate, match):
    with pytest.raises(ValueError, match=match):
        reports.build_report(mutate(frames[0]), "base", None, resamples=10)


def test_read_dir_finds_cells_and_collected(tmp_path, frames):
    from reports_synth import write_grid

    ev, tr = frames
    a = load.read_dir(write_grid(tmp_path / "cells_grid", ev, tr))
    b = load.read_dir(write_grid(tmp_path / "collected", ev, tr, collected=True))
    assert len(a.runs) == 9 and a.eval.shape == b.eval.shape
    nested = tmp_path / "nested"  # DIR/<policy>/<seed>/ run directories
    for (pol, seed), g in ev.groupby(["policy", "seed"]):
        d = nested / pol / f"seed{seed}"
        d.mkdir(parents=True)
        g.to_parquet(d / "eval.parquet")
    c = load.read_dir(nested)
    assert c.eval.shape == a.eval.shape and c.train is None
    key = ["policy", "seed", "suite", "task", "attempt"]
    pd.testing.assert_frame_equal(a.eval.sort_values(key).reset_index(drop=True),
                                  b.eval.sort_values(key).reset_index(drop=True))


def test_one_part_of_a_grid_of_parts_hand_case(tmp_path, frames):
    """A collected grid of parts: `part` keeps that part's rows, strips `[part=NAME]` from
    its labels, drops the train columns only other parts fill, keeps its runs' records."""
    from hbsim.contract.labels import part_suffix

    ev, tr = frames
    def parts(df, name):       # the same synthetic tables as part `name`, with harness columns of its own
        df = df.assign(policy=df["policy"] + part_suffix(name), part=name,
                       run_id=df["run_id"].astype(str) + "-" + name)
        return df.rename(columns={c: f"{c}_{name}" for c in df.columns if c.startswith("p_")})
    both_ev = pd.concat([parts(ev, "a"), parts(ev, "b")], ignore_index=True)
    both_tr = pd.concat([parts(tr, "a"), parts(tr, "b")], ignore_index=True)
    runs = {rid: {"run_id": rid} for rid in both_ev["run_id"].unique()}
    one_ev, one_tr, one_runs = load.one_part(both_ev, both_tr, runs, "b")
    assert len(one_ev) == len(ev) and set(one_ev["policy"]) == {"base", "hb", "mix"}
    assert one_ev["run_id"].str.endswith("-b").all() and sorted(one_runs) == sorted(one_ev["run_id"].unique())
    p_cols = sorted(c for c in one_tr.columns if c.startswith("p_"))
    assert p_cols == sorted(f"{c}_b" for c in tr.columns if c.startswith("p_")) and len(one_tr) == len(tr)
    pd.testing.assert_series_equal(one_ev["reward"], ev["reward"].reset_index(drop=True), check_names=False)
    with pytest.raises(UserError, match=r"--part: got 'c', allowed: one of \['a', 'b'\]"):
        load.one_part(both_ev, both_tr, runs, "c")
    with pytest.raises(UserError, match="has no 'part' column"):
        load.one_part(ev, tr, runs, "a")
    # the same tables on disk: a report must name its part, and the part's report is the plain one
    from reports_synth import write_grid
    grid = write_grid(tmp_path / "parts", both_ev, both_tr, collected=True)
    with pytest.raises(UserError, match=r"holds a grid of parts \(\['a', 'b'\]\)"):
        load.read_dir(grid)
    a = reports.build_report(load.read_dir(grid, part="a"), "base", None, resamples=200, seed=0)
    plain = reports.build_report(frames, "base", None, resamples=200, seed=0)
    pd.testing.assert_frame_equal(a.tables["paired"], plain.tables["paired"])
    assert a.config["part"] == "a" and plain.config["part"] is None
    with pytest.raises(UserError, match=r"report one part with --part NAME"):
        reports.build_report(load.make_frames(parts(ev, "a"), parts(tr, "a")), "base", None, resamples=20)


def test_corrupt_parquet_is_a_value_error_naming_the_file(tmp_path):
    (tmp_path / "eval.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ValueError, match="eval.parquet: .* is not a readable parquet table"):
        load.read_dir(tmp_path)


def test_final_step_only(frames):
    from reports_synth import make_synthetic

    ev, tr = make_synthetic({"base": 0.0, "hb": 0.5}, n_seeds=2, n_tasks=(6, 4), eval_steps=(5, 12))
    fr = load.make_frames(ev, tr)
    assert set(fr.eval["step"]) == {12} and set(fr.eval_all["step"]) == {5, 12}
    res = reports.build_report(fr, "base", None, resamples=50)
    assert not res.diag.eval_curves.empty


def test_single_policy_single_suite_without_train_renders(tmp_path, frames):
    ev = frames[0][frames[0]["policy"] == "base"]
    calls = []
    res = reports.build_report(ev, "base", tmp_path / "rep", suite="heldout_harness", resamples=50,
                               progress=lambda d, t, lab: calls.append((d, t, lab)))
    assert calls == [(50, 50, "[1/1] summary heldout_harness")]
    assert res.tables["paired"].empty and list(res.tables["paired"].columns) == analysis.PAIRED_COLUMNS
    assert set(res.tables["summary"]["suite"]) == {"heldout_harness"}
    assert "no train table: training diagnostics skipped" in res.notes
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "rliable_heldout_harness" in html and "(baseline)" in reports.headline_table(res)
    with pytest.raises(ValueError, match="--suite: got 'nope', allowed: one of"):
        reports.build_report(ev, "base", None, suite="nope")


def test_progress_reports_every_bootstrap_stage(frames):
    labels = []
    reports.build_report(frames, "base", None, resamples=1500,
                         progress=lambda d, t, lab: labels.append(lab) if d == t else None)
    assert labels == ["[1/6] summary heldout_harness", "[2/6] paired heldout_harness hb",
                      "[3/6] paired heldout_harness mix", "[4/6] summary heldout_tasks",
                      "[5/6] paired heldout_tasks hb", "[6/6] paired heldout_tasks mix"]


def test_category_values_are_means_over_the_category_tasks(result, frames):
    cv = result.tables["category_values"].set_index(["suite", "metric", "category", "policy"])
    ev = frames[0]
    sub = ev[(ev["suite"] == "heldout_tasks") & (ev["category"] == "memory") & (ev["policy"] == "hb")]
    assert cv.loc[("heldout_tasks", "score", "memory", "hb"), "value"] == pytest.approx(sub["reward"].mean())
    assert cv.loc[("heldout_tasks", "score", "memory", "hb"), "n_tasks"] == 6


def test_baseline_prob_improvement_is_one_half(result):
    summ = result.tables["summary"]
    base = summ[summ["is_baseline"]]
    np.testing.assert_allclose(base[["prob_improvement", "pi_low", "pi_high"]].to_numpy(), 0.5, atol=1e-12)


def test_build_report_speed(benchmark):
    from reports_synth import make_synthetic

    data = make_synthetic({f"p{i}": 0.1 * i for i in range(4)}, n_seeds=4, n_tasks=(80, 60))
    res = benchmark(lambda: reports.build_report(data, "p0", None, resamples=1000))
    assert len(res.tables["paired"]) == 3 * (2 + 4)


def test_gee_matches_marginal_odds_ratio_on_balanced_data_and_flags_separation(frames, result):
    ev = frames[0]
    gee = result.tables["gee"]
    for _, row in gee.iterrows():
        sub = ev[ev["suite"] == row["suite"]]
        p1 = sub.loc[sub["policy"] == row["candidate"], "success"].mean()
        p0 = sub.loc[sub["policy"] == "base", "success"].mean()
        # saturated mean model, every task balanced across policies: the GEE estimate is the marginal OR
        assert row["odds_ratio"] == pytest.approx((p1 / (1 - p1)) / (p0 / (1 - p0)), rel=1e-5)
        assert row["or_ci_low"] < row["odds_ratio"] < row["or_ci_high"]
    ev2 = ev.copy()
    ev2.loc[ev2["policy"] == "hb", "success"] = True
    res = reports.build_report((ev2, frames[1]), "base", None, resamples=50)
    g = res.tables["gee"].set_index(["suite", "candidate"])
    assert g.loc[("heldout_tasks", "hb"), "log_odds"] != g.loc[("heldout_tasks", "hb"), "log_odds"]  # NaN
    assert g.loc[("heldout_tasks", "mix"), "odds_ratio"] == pytest.approx(
        gee.set_index(["suite", "candidate"]).loc[("heldout_tasks", "mix"), "odds_ratio"], rel=1e-5)
    assert any("perfect separation" in n for n in res.notes)


def test_a_planted_category_regression_is_flagged():
    """By the seed-level test (8 seeds: exact sign-flip floor 2/256), BH across categories."""
    rows = []
    cats = ["coding"] * 10 + ["memory"] * 10
    for pol in ("base", "cand"):
        for seed in range(8):
            for t, cat in enumerate(cats):
                ok = not (pol == "cand" and cat == "memory") and (t + seed) % 4 != 0
                rows.append((f"{pol}{seed}", pol, seed, 1, "s", f"t{t:02d}", cat, "h", 0, float(ok), ok))
    ev = pd.DataFrame(rows, columns=list(EVAL_TABLE))
    res = reports.build_report(ev, "base", None, ks=(1,), resamples=2000)
    cats_t = res.tables["categories"].set_index(["metric", "category"])
    assert bool(cats_t.loc[("pass@1", "memory"), "regresses"]) and bool(cats_t.loc[("pass@1", "memory"), "worst"])
    assert not bool(cats_t.loc[("pass@1", "coding"), "regresses"])
    assert cats_t.loc[("pass@1", "coding"), "delta"] == 0.0 and cats_t.loc[("pass@1", "coding"), "p_bh"] == 1.0
    assert cats_t.loc[("pass@1", "memory"), "p_seed"] == pytest.approx(2 / 256)
    assert cats_t.loc[("pass@1", "memory"), "p_bh"] == pytest.approx(2 * 2 / 256)  # BH over 2 categories
    assert cats_t.loc[("pass@1", "memory"), "boot_high"] < 0


def test_a_users_own_eval_parquet_without_step_loads_and_reports(tmp_path):
    rng = np.random.default_rng(0)
    rows = []
    for pol, eff in (("base", 0.0), ("cand", 0.3)):
        for seed in range(6):
            run = rng.normal(0, 0.05)
            for t in range(12):
                for k in range(3):
                    ok = rng.random() < 0.4 + eff + run
                    rows.append((f"{pol}-{seed}", pol, seed, "mine", f"t{t}", "c", "h", k, float(ok), ok))
    cols = ["run_id", "policy", "seed", "suite", "task", "category", "harness", "attempt", "reward", "success"]
    pd.DataFrame(rows, columns=cols).to_parquet(tmp_path / "eval.parquet")  # exactly the documented columns
    res = reports.build_report(tmp_path, "base", tmp_path / "rep", resamples=200)
    row = res.tables["paired"].iloc[0]
    assert (row["n_seeds"], row["n_tasks"]) == (6, 12) and row["delta"] > 0.15
    assert list(res.tables["paired"]["metric"]) == ["pass@1", "pass@3", "pass^3"]  # score == pass@1: once
    assert any("score equals pass@1" in n for n in res.notes)
    assert (tmp_path / "rep" / "index.html").exists()


def test_umask_conclusion_and_power_warnings(tmp_path, frames):
    import os

    old = os.umask(0o027)
    try:
        res = reports.build_report(frames, "base", tmp_path / "rep", resamples=100)
    finally:
        os.umask(old)
    for name in ("index.html", "report.md", "paired.csv", "config.json"):
        assert (tmp_path / "rep" / name).stat().st_mode & 0o777 == 0o640, name
    text = reports.conclusion(res)
    # 3 seeds: the sign-flip test over seeds cannot go below 2/8; the report says so
    assert "with 3 seeds the smallest attainable p is 0.250" in text and "no policy differs detectably" in text
    assert any("smallest attainable p_seed is 0.25" in n for n in res.notes)
    assert any("sits at its floor 0.25" in n for n in res.notes)
    one = reports.build_report(frames[0][frames[0]["seed"] == 0], "base", None, resamples=50)
    assert any("only 1 seed: no interval and no p-value over seeds (boot_low/boot_high and the summary's intervals "
               "are empty too: a bootstrap of one run per policy cannot see run-to-run variation" in n for n in one.notes)
    row = one.tables["paired"].iloc[0]
    assert np.isnan(row["p_seed"]) and np.isnan(row["ci_low"]) and np.isnan(row["p_holm"]) and np.isnan(row["mde"])
    # nothing inferential at one seed: the crossed bootstrap (it would be a task bootstrap) is empty everywhere
    assert one.tables["paired"][["boot_low", "boot_high"]].isna().all().all()
    assert one.tables["categories"][["boot_low", "boot_high"]].isna().all().all()
    assert one.tables["summary"][["boot_low", "boot_high", "iqm_low", "iqm_high", "pi_low", "pi_high"]].isna().all().all()
    # and the report at 3 seeds (coverage of the bootstrap about 0.75 where runs dominate) says it undercovers
    assert any("boot_low/boot_high (the crossed bootstrap: new tasks and new runs) resample only 3 seeds and "
               "undercover there: about 75% instead of 95%" in n for n in res.notes)
    assert "with one seed there is no seed-level test" in reports.conclusion(one)


def test_conclusion_names_a_clear_winner_at_eight_seeds():
    from reports_synth import make_synthetic

    ev, tr = make_synthetic({"base": 0.0, "hb": 1.5}, n_seeds=8, n_tasks=(30, 20))
    res = reports.build_report((ev, tr), "base", None, resamples=500)
    text = reports.conclusion(res)
    assert "at 8 seeds on heldout_tasks (score), hb beats base by +0." in text
    p = res.tables["paired"]
    prim = p[p["role"] == "primary"]
    assert (p["p_seed"] == 2 / 256).all() and (prim["p_holm"] == 2 * 2 / 256).all()  # Holm over 2 suites
    assert (prim["ci_low"] > 0).all() and not prim["ci_widened"].any()


def test_axis_gives_delta_per_knob_value(tmp_path):
    from reports_synth import make_synthetic

    ev, tr = make_synthetic({"uniform": 0.0, "hb[tau=0.3]": 0.9, "hb[tau=0.1]": 0.3, "hb[tau=1]": 0.0},
                            n_seeds=3, n_tasks=(12, 8))
    ev["policy.tau"] = ev["policy"].map({"hb[tau=0.3]": 0.3, "hb[tau=0.1]": 0.1, "hb[tau=1]": 1.0})
    ev.to_parquet(tmp_path / "eval.parquet")
    res = reports.build_report(tmp_path, "uniform", tmp_path / "rep", resamples=100, axis="policy.tau")
    sens = res.tables["sensitivity"]
    sub = sens[(sens["suite"] == "heldout_tasks") & (sens["metric"] == "score")]
    assert list(sub["axis_value"]) == [0.1, 0.3, 1.0] and (sub["axis"] == "policy.tau").all()
    paired = res.tables["paired"].set_index(["suite", "metric", "candidate"])
    assert list(sub["delta"]) == [paired.loc[("heldout_tasks", "score", c), "delta"]
                                  for c in ("hb[tau=0.1]", "hb[tau=0.3]", "hb[tau=1]")]
    assert (tmp_path / "rep" / "figures" / "sensitivity_heldout_tasks.png").exists()
    with pytest.raises(ValueError, match=r"--axis: got 'policy.nope', allowed: a swept knob column .*policy.tau"):
        reports.build_report(tmp_path, "uniform", None, axis="policy.nope")


def test_default_k_follows_the_attempts_per_task():
    """Runs with one attempt per task (e.g. TRL runs) report pass@1 by default; an explicit
    k above the attempts is still refused with one clear message."""
    from reports_synth import make_synthetic

    one = make_synthetic({"base": 0.0, "hb": 0.5}, n_seeds=2, n_tasks=(8, 6), attempts=(1, 1))
    res = reports.build_report(one, "base", None, resamples=50, seed=0)
    assert res.config["ks"] == [1]
    assert "pass@3" not in set(res.tables["paired"]["metric"])
    with pytest.raises(reports.build.UserError, match=r"--k: got 3, allowed: k <= the number of attempts"):
        reports.build_report(one, "base", None, ks=(1, 3), resamples=50, seed=0)


def test_a_design_whose_filter_dropped_every_group_is_named_in_the_notes():
    """A report of zeros with no word is the 'unclear message' of issue 33: a design all of
    whose steps optimized no group gets a warning (the one wording of reports.readings.summary)."""
    from reports_synth import make_synthetic

    ev, tr = make_synthetic({"base": 0.0, "hb": 0.3}, n_seeds=3, n_tasks=(20, 10), attempts=(1, 1), eval_steps=(4,))
    tr.loc[tr["policy"] == "hb", "groups_optimized"] = 0
    res = reports.build_report((ev, tr), "base", resamples=50)
    idle = [n for n in res.notes if "optimized no group" in n]
    assert idle == ["hb: 3 of 3 runs optimized no group in any step: the group filter (equal rewards, env.keep_band, "
                    "env.min_abs_adv) dropped every group, so they did not train; loosen the filter"]
    tr["groups_optimized"] = 8
    assert not [n for n in reports.build_report((ev, tr), "base", resamples=50).notes if "optimized no group" in n]
