"""reports.readings.references: the best fixed arm in hindsight and the share of the achievable gain,
on hand-made score tables (the report's section: tests/reports/test_reports_gap.py)."""
import numpy as np
import pandas as pd
import pytest

from reports.readings import intervals, references
from reports.readings.references import best_fixed, run_table, runs_from_labels, share_of_gap
from reports.readings.summary import summarize, summary_table


def _scores(table: dict, suite: str = "heldout_harness") -> pd.DataFrame:
    """{label: [score per seed]} -> final-score rows."""
    return pd.DataFrame([{"policy": p, "seed": s, "suite": suite, "score": v}
                         for p, values in table.items() for s, v in enumerate(values)])


RUNS = pd.DataFrame([
    {"label": "uniform", "name": "uniform", "seed": -1, "arm": -1, "target": ""},
    {"label": "oracle-hx", "name": "oracle", "seed": -1, "arm": -1, "target": "heldout_harness"},
    {"label": "oracle-train", "name": "oracle", "seed": -1, "arm": -1, "target": "train"},
    {"label": "hb", "name": "harnessbandit", "seed": -1, "arm": -1, "target": ""},
    {"label": "f0", "name": "fixed", "seed": -1, "arm": 0, "target": ""},
    {"label": "f1", "name": "fixed", "seed": -1, "arm": 1, "target": ""}])


def test_share_of_gap_by_hand():
    # gaps O - U per seed: 0.2, 0.4, 0.2, 0.4 (mean 0.3); hb - U: 0.1, 0.1, 0.0, 0.2 (mean 0.1)
    scores = _scores({"uniform": [0.5, 0.4, 0.6, 0.5], "oracle-hx": [0.7, 0.8, 0.8, 0.9],
                      "oracle-train": [0.9, 0.9, 0.9, 0.9], "hb": [0.6, 0.5, 0.6, 0.7],
                      "f0": [0.4, 0.6, 0.9, 0.5], "f1": [0.8, 0.3, 0.7, 0.5]})
    table = share_of_gap(scores, RUNS).set_index("policy")
    hb = table.loc["hb"]
    # the reference: the oracle aimed at the suite (mean gap 0.3) beats the best fixed arm (f0: 0.1), and an
    # oracle aimed elsewhere is no candidate
    assert hb["reference"] == "oracle-hx" and hb["uniform"] == "uniform" and hb["seeds"] == 4 and hb["note"] == ""
    assert hb["delta"] == pytest.approx(0.1) and hb["gap"] == pytest.approx(0.3)
    d, g = np.array([0.1, 0.1, 0.0, 0.2]), np.array([0.2, 0.4, 0.2, 0.4])
    assert hb["delta_t95"] == pytest.approx(3.182446305 * d.std(ddof=1) / 2, rel=1e-6)
    share, lo, hi, _ = intervals.fieller_interval(d, g)               # Fieller on the paired per-seed values
    assert (hb["share"], hb["share_lo"], hb["share_hi"]) == pytest.approx((1 / 3, lo, hi))
    # best fixed: ONE arm for all seeds, f0 (mean 0.6 > f1's 0.575): 0.4, 0.6, 0.9, 0.5 -> minus U mean 0.1
    assert table.loc["best_fixed", "share"] == pytest.approx(0.1 / 0.3)
    assert table.loc["oracle-train", "share"] == pytest.approx(0.4 / 0.3)   # a design may exceed the reference
    assert table.loc["oracle-hx", "share"] == pytest.approx(1.0)            # the reference itself: exactly 1
    assert set(table.index) == {"oracle-hx", "oracle-train", "hb", "f0", "f1", "best_fixed"}
    # no oracle aimed at heldout_tasks: no row for that suite
    other = share_of_gap(_scores({"uniform": [0.5, 0.4], "oracle-hx": [0.7, 0.8]}, "heldout_tasks"), RUNS)
    assert other.empty


def test_the_reference_is_the_best_reachable_one():
    """mixed, then the best fixed arm, beat a weak greedy oracle: each in turn is the denominator,
    and no reference's share exceeds 1."""
    runs = pd.concat([RUNS, pd.DataFrame([{"label": "mixed", "name": "mixed", "seed": -1, "arm": -1,
                                           "target": ""}])], ignore_index=True)
    base = {"uniform": [0.5, 0.4, 0.6, 0.5], "oracle-hx": [0.6, 0.5, 0.7, 0.6], "hb": [0.6, 0.5, 0.6, 0.7]}
    table = share_of_gap(_scores({**base, "mixed": [0.8, 0.6, 0.9, 0.8]}), runs).set_index("policy")
    assert set(table["reference"]) == {"mixed"} and table.loc["hb", "gap"] == pytest.approx(0.275)
    assert table.loc["oracle-hx", "share"] == pytest.approx(0.1 / 0.275) and table.loc["mixed", "share"] == 1.0
    fixed = share_of_gap(_scores({**base, "f0": [0.9, 0.8, 0.9, 0.9], "f1": [0.1, 0.1, 0.1, 0.1]}), runs)
    assert set(fixed["reference"]) == {"best_fixed"}
    # gap of f0 (the one arm for all seeds) over uniform: 0.4, 0.4, 0.3, 0.4 (mean 0.375)
    assert dict(zip(fixed["policy"], fixed["share"].round(6))) == {
        "oracle-hx": round(0.1 / 0.375, 6), "hb": round(0.1 / 0.375, 6), "f0": 1.0, "f1": round(-0.4 / 0.375, 6),
        "best_fixed": 1.0}


def test_the_reference_is_chosen_on_the_seeds_every_candidate_has():
    """Fixed arms on 2 seeds beside mixed on 4 (real runs): on their own seeds the best fixed arm f0 gains
    0.25 and mixed 0.2, but on the 2 seeds they share mixed gains 0.35: mixed is the reference, and a
    design's share is read on every seed it shares with uniform and mixed."""
    runs = pd.concat([RUNS, pd.DataFrame([{"label": "mixed", "name": "mixed", "seed": -1, "arm": -1,
                                           "target": ""}])], ignore_index=True)
    scores = _scores({"uniform": [0.5, 0.4, 0.6, 0.5], "mixed": [0.8, 0.8, 0.6, 0.6], "hb": [0.6, 0.5, 0.7, 0.6],
                      "f0": [0.8, 0.6], "f1": [0.5, 0.5]})
    table = share_of_gap(scores, runs).set_index("policy")
    assert set(table["reference"]) == {"mixed"}
    assert table.loc["hb", "seeds"] == 4 and table.loc["hb", "gap"] == pytest.approx(0.2)
    assert table.loc["best_fixed", "seeds"] == 2 and table.loc["best_fixed", "gap"] == pytest.approx(0.35)
    # the summary's reference line gives the gap on the most seeds (4: 0.2), whichever row comes first
    first_fixed = share_of_gap(scores.sort_values("policy", key=lambda p: ~p.str.startswith("f"), kind="stable"),
                               runs)
    assert first_fixed["policy"].iloc[0] == "f0" and first_fixed["gap"].iloc[0] == pytest.approx(0.35)
    assert "  heldout_harness: reference = 'mixed' (gap +0.200 over 'uniform')" in references.share_lines(first_fixed)
    # no seed common to all (f0 only on seeds 4-5): each candidate is read on its own seeds, f0 gains 0.4
    late = _scores({"uniform": [0.5, 0.4, 0.6, 0.5, 0.5, 0.5], "mixed": [0.8, 0.8, 0.6, 0.6],
                    "f0": [np.nan] * 4 + [0.9, 0.9], "hb": [0.6] * 6}).dropna()
    assert set(share_of_gap(late, runs)["reference"]) == {"best_fixed"}


def test_no_share_where_the_reference_gap_is_not_significant():
    scores = _scores({"uniform": [0.5, 0.4, 0.6, 0.5], "oracle-hx": [1.0, -0.1, 1.0, 0.2],
                      "hb": [0.6, 0.5, 0.6, 0.7]})
    table = share_of_gap(scores, RUNS).set_index("policy")
    hb = table.loc["hb"]
    assert np.isnan(hb["share"]) and np.isnan(hb["share_lo"]) and np.isnan(hb["share_hi"])
    assert hb["delta"] == pytest.approx(0.1)                             # the raw delta stays
    assert hb["note"] == ("no share: the reference 'oracle-hx' gains +0.0250 over uniform, not significant at 4 "
                          "seeds (two-sided seed-level t test at 0.05), so the ratio is unbounded")
    lines = references.share_lines(share_of_gap(scores, RUNS))
    assert any(line.strip().startswith("heldout_harness: no share: the reference") for line in lines)
    assert "no share" in next(line for line in lines if line.startswith("hb "))


def test_best_fixed_is_one_arm_for_every_seed():
    scores = _scores({"f0": [0.4, 0.6], "f1": [0.8, 0.3], "uniform": [0.5, 0.5]})
    best = best_fixed(scores, RUNS)
    # f0 mean 0.5, f1 mean 0.55: f1 on both seeds (per seed, 0.8 and 0.6 would have mixed the arms)
    assert best[["seed", "score", "arm", "arms"]].values.tolist() == [[0, 0.8, 1, 2], [1, 0.3, 1, 2]]
    assert (best["policy"] == "best_fixed").all()
    assert best_fixed(_scores({"f0": [0.5, 0.4], "f1": [0.4, 0.5]}), RUNS)["arm"].tolist() == [0, 0]   # a tie
    assert best_fixed(_scores({"uniform": [0.5]}), RUNS).empty


def test_run_table_and_label_fallback():
    metas = [{"run_id": "a", "policy": "fixed", "label": "fixed[arm=2]", "seed": 3,
              "config": {"policy": {"name": "fixed", "label": "fixed[arm=2]", "arm": 2}, "seed": 3}},
             {"run_id": "b", "policy": "oracle", "label": "o", "seed": 0,
              "config": {"policy": {"name": "oracle", "label": "o", "target": "heldout_tasks"}}}, None]
    assert run_table(metas).values.tolist() == [["fixed[arm=2]", "fixed", 3, 2, ""],
                                                ["o", "oracle", 0, -1, "heldout_tasks"]]
    labels = runs_from_labels(["oracle[target=heldout_tasks,with_mixed=true]", "fixed[arm=4]", "oracle", "hb"])
    assert labels[["name", "arm", "target"]].values.tolist() == [
        ["oracle", -1, "heldout_tasks"], ["fixed", 4, ""], ["oracle", -1, "train"], ["hb", -1, ""]]


def test_summary_shows_best_fixed_and_the_share_block():
    rows = []
    for label, values in {"uniform": [0.5, 0.4, 0.6], "oracle-hx": [0.7, 0.8, 0.8], "hb": [0.6, 0.5, 0.6],
                          "f0": [0.4, 0.6, 0.9], "f1": [0.8, 0.3, 0.7]}.items():
        for seed, v in enumerate(values):
            for suite in ("heldout_tasks", "heldout_harness"):
                rows.append({"run_id": f"{label}{seed}", "policy": label, "seed": seed, "step": 10, "suite": suite,
                             "reward": v})
    evals = pd.DataFrame(rows)
    summ = summarize(pd.DataFrame(), evals, RUNS).set_index("policy")
    # one arm for every seed: f0 (mean 0.633) over f1 (0.6)
    assert summ.loc["best_fixed (arm 0 of 2)", "heldout_harness_mean"] == pytest.approx((0.4 + 0.6 + 0.9) / 3)
    text = summary_table(pd.DataFrame(), evals, RUNS)
    assert "share of the achievable gain" in text and "heldout_harness: reference = 'oracle-hx'" in text
    block = text.split("share of the achievable gain")[1]
    hb_line = next(line for line in block.splitlines() if line.startswith("hb "))
    # gap 0.2, 0.4, 0.2: t = 4.0 < t_{0.975, 2} = 4.30, not significant at 3 seeds: no share, said once
    assert "+0.067" in hb_line and hb_line.endswith("| no share")    # delta (0.1 + 0.1 + 0.0) / 3 stays
    assert "heldout_harness: no share: the reference 'oracle-hx' gains +0.2667" in block
    # without the oracle (real runs have none) the reference is the best of what was run: here the best fixed
    # arm f0, gap over uniform -0.1, +0.2, +0.3 (mean 0.133)
    real = summary_table(pd.DataFrame(), evals[evals.policy != "oracle-hx"], RUNS)
    assert "heldout_harness: reference = 'best_fixed' (gap +0.133 over 'uniform')" in real
    assert "heldout_tasks: reference = 'best_fixed' (gap +0.133 over 'uniform')" in real
    assert "share of the achievable gain" not in summary_table(
        pd.DataFrame(), evals[evals.policy.isin(["uniform", "hb"])], RUNS)          # no reference run at all


def test_train_target_from_the_train_table():
    import hbsim

    runs = [hbsim.run_config({"env": {"kind": "bernoulli", "n_tasks": 30, "n_heldout_tasks": 5},
                              "policy": {"name": name}, "seed": seed, "steps": 8})
            for name in ("uniform", "oracle", "mixed") for seed in (0, 1)]
    train = pd.concat([r.train for r in runs], ignore_index=True)
    scores = references.train_scores(train)
    last = runs[0].train.iloc[-1]
    assert scores.iloc[0]["score"] == pytest.approx(np.mean([last[f"true_h{i}"] for i in range(6)]), rel=1e-12)
    evals = pd.concat([r.eval for r in runs], ignore_index=True)
    text = summary_table(train, evals, run_table(r.meta for r in runs))
    assert "train: reference = " in text                  # the default oracle aims at the training objective
    table = share_of_gap(scores, run_table(r.meta for r in runs))
    assert set(table["suite"]) == {"train"} and set(table["policy"]) == {"mixed", "oracle"}
    assert table["reference"][0] in ("mixed", "oracle")         # the better of the two on these seeds
