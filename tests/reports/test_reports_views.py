"""rliable's views (reports.rliable_views) against rliable's documented definitions, the
export in rliable's input form, and the one-screen layout of index.html (reports.render, reports.page)."""
import json
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

import reports
from reports import bootstrap, cells, metrics, page, render, rliable_views as rv, sections, text

# rliable 1.2's definitions (rliable.metrics, rliable.library.run_score_deviation), written
# out from its documentation: the export must give these numbers when rliable is run on it
RLIABLE = {
    "mean": lambda x: np.mean(np.mean(x, axis=0)),
    "median": lambda x: np.median(np.mean(x, axis=0)),
    "iqm": lambda x: sps.trim_mean(x, proportiontocut=0.25, axis=None),
    "optimality_gap": lambda x, gamma=1.0: gamma - np.mean(np.minimum(x, gamma)),
}


def test_point_estimates_hand_case_and_rliable_definitions():
    x = np.array([[0.0, 1.0, 0.5, 1.0], [1.0, 1.0, 0.0, 0.0]])  # 2 runs x 4 tasks; task means .5 1 .25 .5
    assert metrics.aggregate_mean(x) == pytest.approx(0.5625)
    assert metrics.aggregate_median(x) == pytest.approx(0.5)
    assert metrics.iqm(x) == pytest.approx(0.625)  # sorted 0 0 0 .5 1 1 1 1, positions 2..5
    assert metrics.optimality_gap(x) == pytest.approx(0.4375)
    np.testing.assert_allclose(metrics.profile(x, [0.0, 0.5, 1.0]), [5 / 8, 4 / 8, 0.0])
    rng = np.random.default_rng(3)
    for x in (rng.random((5, 7)), rng.integers(0, 4, (3, 10)) / 3):
        for name, f in (("mean", metrics.aggregate_mean), ("median", metrics.aggregate_median), ("iqm", metrics.iqm),
                        ("optimality_gap", metrics.optimality_gap)):
            assert f(x) == pytest.approx(RLIABLE[name](x), abs=1e-12), name
        np.testing.assert_allclose(metrics.profile(x), [np.mean(x > t) for t in metrics.TAUS])
    assert metrics.optimality_gap(np.array([[0.5, 2.0]]), gamma=1.0) == pytest.approx(0.25)  # clipped at gamma


def test_headline_metric_view_metric_and_shown_steps():
    assert cells.headline_metric(["score", "pass@1", "pass@3"], "score") == "score"
    assert cells.headline_metric(["pass@1", "pass@3"], "score") == "pass@1"  # score folded into pass@1
    assert cells.headline_metric(["pass@1", "pass@3"], "pass@3") == "pass@3"
    assert cells.headline_metric(["pass@1"], "pass@3") is None                # not computed: no headline
    assert cells.view_metric(["pass@1", "pass^3"], None) == "pass@1"
    assert cells.view_metric(["pass@1", "pass^3"], "pass^3") == "pass^3"
    assert rv.shown_steps([3, 1, 2]) == [1, 2, 3]
    assert rv.shown_steps(range(0, 1000, 10), most=4) == [0, 330, 660, 990]


def test_npz_takes_any_policy_name(tmp_path):
    arrays = {"file": np.arange(6.0).reshape(2, 3), "hb[tau=0.3]": np.ones((2, 3)), "allow_pickle": np.zeros(1)}
    (tmp_path / "a.npz").write_bytes(rv.npz_bytes(arrays))
    back = dict(np.load(tmp_path / "a.npz"))
    assert list(back) == list(arrays)
    for k in arrays:
        np.testing.assert_array_equal(back[k], arrays[k])


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from reports_synth import make_synthetic

    ev, tr = make_synthetic({"base": 0.0, "hb": 0.8, "mix": -0.4}, n_seeds=4, n_tasks=(18, 12), eval_steps=(4, 8, 12))
    out = tmp_path_factory.mktemp("views") / "report"
    return ev, reports.build_report((ev, tr), "base", out, resamples=300, seed=0)


def test_export_is_rliables_input_form_and_gives_the_reported_point_estimates(report):
    ev, res = report
    folder = res.out / page.EXPORT_DIR
    index = json.loads((folder / "index.json").read_text())
    finals = [e for e in index if e["shape"] == "(runs, tasks)"]
    assert {(e["suite"], e["metric"]) for e in finals} == {
        ("heldout_tasks", "score"), ("heldout_tasks", "pass@1"), ("heldout_harness", "score"),
        ("heldout_harness", "pass@1"), ("heldout_harness", "pass@3"), ("heldout_harness", "pass^3")}
    entry = next(e for e in finals if (e["suite"], e["metric"]) == ("heldout_tasks", "score"))
    scores = dict(np.load(folder / entry["file"]))  # {algorithm: (num_runs, num_tasks)}
    assert sorted(scores) == ["base", "hb", "mix"] and entry["seeds"] == [0, 1, 2, 3]
    for arr in scores.values():
        assert arr.shape == (4, 18) and arr.dtype == np.float64
    # a cell by hand from the raw rows: mean reward of (hb, seed 2, the 5th task) at the final step
    task = entry["tasks"][4]
    raw = ev[(ev["policy"] == "hb") & (ev["seed"] == 2) & (ev["suite"] == "heldout_tasks") & (ev["task"] == task)
             & (ev["step"] == 12)]
    assert scores["hb"][2, 4] == pytest.approx(raw["reward"].mean())
    agg = res.tables["aggregates"]
    sub = agg[(agg["suite"] == "heldout_tasks")].set_index(["policy", "aggregate"])
    assert set(agg["metric"]) == {"score"}  # the views are of the primary metric
    for pol, x in scores.items():
        for name, f in RLIABLE.items():
            assert sub.loc[(pol, name), "value"] == pytest.approx(f(x), abs=1e-12), (pol, name)
            assert sub.loc[(pol, name), "low"] <= sub.loc[(pol, name), "value"] + 1e-12
            assert sub.loc[(pol, name), "value"] <= sub.loc[(pol, name), "high"] + 1e-12
    prof = res.tables["profiles"]
    got = prof[(prof["suite"] == "heldout_tasks") & (prof["policy"] == "mix")]["value"].to_numpy()
    np.testing.assert_allclose(got, [np.mean(scores["mix"] > t) for t in metrics.TAUS])


def test_iqm_over_steps_matches_the_step_matrices_and_the_summary(report):
    _, res = report
    folder = res.out / page.EXPORT_DIR
    index = json.loads((folder / "index.json").read_text())
    entry = next(e for e in index if e["shape"] == "(runs, tasks, steps)" and e["suite"] == "heldout_harness")
    assert entry["steps"] == [4, 8, 12] and entry["metric"] == "score"
    cube = dict(np.load(folder / entry["file"]))
    assert cube["hb"].shape == (4, 12, 3)
    final = dict(np.load(folder / f"{page.export_stem('heldout_harness', 'score')}.npz"))
    np.testing.assert_array_equal(cube["hb"][..., -1], final["hb"])
    steps = res.tables["iqm_steps"].set_index(["suite", "policy", "step"])
    for k, step in enumerate(entry["steps"]):
        assert steps.loc[("heldout_harness", "hb", step), "iqm"] == pytest.approx(RLIABLE["iqm"](cube["hb"][..., k]))
    summ = res.tables["summary"].set_index(["suite", "metric", "policy"])
    assert steps.loc[("heldout_harness", "hb", 12), "iqm"] == pytest.approx(
        summ.loc[("heldout_harness", "score", "hb"), "iqm"])


def test_the_top_of_the_page_is_the_conclusion_one_figure_and_one_table(report):
    _, res = report
    page = (res.out / "index.html").read_text()
    top = page[:page.index("<details")]
    assert top.count("<img") == 1 and 'alt="headline"' in top and top.count("<table>") == 1
    assert "Conclusion (seed-level sign-flip test" in top and "<pre>" not in top
    table = render.headline_table(res)
    assert list(table["candidate"]) == ["hb", "mix", "hb", "mix"]  # suites x candidates, primary metric only
    assert set(table["metric"]) == {"score"}
    paired = res.tables["paired"].set_index(["suite", "metric", "candidate"])
    r = table.iloc[0]
    want = paired.loc[(r["suite"], "score", "hb")]
    # values from the pair's own rectangle, the interval of its delta
    assert (r["candidate value"], r["baseline value"], r["delta"]) == (
        want["candidate_value"], want["baseline_value"], want["delta"])
    assert r["95% simultaneous CI"] == f"[{want['ci_low']:+.3f}, {want['ci_high']:+.3f}]"  # the headline t interval
    assert "not distinguishable: |delta| is below" not in page  # the sentences became the verdict column
    assert page.count("<details>") >= 10
    md = (res.out / "report.md").read_text()
    assert md.startswith("# 2 candidate(s) against the baseline base") and "rliable's views" in md


def test_wide_tables_are_cut_into_column_groups_repeating_the_keys():
    assert page.column_groups(list("kabcd"), [100, 500, 500, 500, 100], keys=1, budget=1150) == \
        [[0, 1, 2], [0, 3, 4]]
    assert page.column_groups(list("ka"), [100, 5000], keys=1, budget=1150) == [[0, 1]]  # one column too wide
    df = pd.DataFrame({"metric": ["score"], "candidate": ["hb"], **{f"seed {i}": [0.1234] for i in range(40)}})
    out = page.html_table(df, keys=2)
    tables = re.findall(r"<table>.*?</table>", out)
    assert len(tables) > 1 and all(t.count("<th>") <= 2 + 40 for t in tables)
    assert all("<th>metric</th><th>candidate</th>" in t for t in tables)
    heads = sum(t.count("<th>seed") for t in tables)
    assert heads == 40  # every column once


def test_wording_of_cells_and_notes():
    assert text.fmt_mde(3.6) == "> 1 (none)" and text.fmt_mde(0.0712) == "0.071" and text.fmt_mde(np.nan) == "n/a"
    row = {"candidate": "c", "metric": "pass@1", "gained": 4, "lost": 7, "baseline_passed": 36, "candidate_passed": 33}
    assert sections.swap_note(row) == "c pass@1: 36 -> 33 tasks passed: the net change of -3 is 4 gained minus 7 lost."
    row.update(gained=3, lost=3, candidate_passed=36)
    assert "equal counts hide a swap" in sections.swap_note(row)
    assert sections.swap_note({**row, "lost": 0}) is None
    one = {"n_seeds": 1, "p_holm": np.nan, "delta": 0.2, "mde": np.nan}
    assert text.verdict(one, 0.05) == "one seed: no test"
    assert text.verdict({**one, "n_seeds": 8, "p_holm": 0.01}, 0.05) == "ahead"
    assert text.verdict({**one, "n_seeds": 8, "p_holm": 0.5, "mde": 0.3}, 0.05) == "not detectable (|delta| < MDE)"
    # a secondary row reads its own test (p_maxt), never p_holm (empty there), and never contradicts its interval
    sec = {**one, "n_seeds": 10, "role": "secondary", "p_maxt": 0.012, "delta": -0.025, "ci_low": -0.044,
           "ci_high": -0.007, "mde": 0.03}
    assert text.verdict(sec, 0.05) == "behind"
    assert text.verdict({**sec, "ci_high": 0.001}, 0.05) == "behind by the max-T test; its t interval reaches 0"
    assert text.verdict({**sec, "p_maxt": 0.2, "ci_high": 0.01}, 0.05) == "not detectable (|delta| < MDE)"
    assert text.verdict({**sec, "p_maxt": 0.2, "ci_high": 0.01, "mde": 0.02}, 0.05) == "not significant (max-T)"
    assert text.verdict({**sec, "p_maxt": np.nan}, 0.05) == "descriptive (no test)"


def test_the_headline_interval_is_read_from_ci_columns_when_paired_has_them():
    paired = pd.DataFrame(columns=["boot_low", "boot_high"])
    assert render.interval_columns(paired, 0.95) == ("boot_low", "boot_high", "95% crossed-bootstrap CI")
    assert render.interval_columns(paired.assign(ci_low=[], ci_high=[]), 0.9) == ("ci_low", "ci_high",
                                                                                   "90% simultaneous CI")


def test_render_speed(benchmark, report, tmp_path):
    _, res = report
    benchmark(lambda: render.write(res, tmp_path / "again"))
    assert (tmp_path / "again" / "index.html").exists()
