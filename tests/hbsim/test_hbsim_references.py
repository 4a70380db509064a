"""hbsim.references: the best fixed arm in hindsight and the share of the achievable gain,
on hand-made score tables (the report's section: tests/reports/test_reports_gap.py)."""
import numpy as np
import pandas as pd
import pytest

from hbsim import references
from hbsim.references import best_fixed, run_table, runs_from_labels, share_of_gap
from hbsim.summary import summarize, summary_table


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
    # the oracle is the one aimed at the suite, not the better train-target oracle
    assert hb["oracle"] == "oracle-hx" and hb["uniform"] == "uniform" and hb["seeds"] == 4
    assert hb["delta"] == pytest.approx(0.1) and hb["gap"] == pytest.approx(0.3)
    assert hb["share"] == pytest.approx(1 / 3)
    d = np.array([0.1, 0.1, 0.0, 0.2])
    assert hb["delta_t95"] == pytest.approx(3.182446305 * d.std(ddof=1) / 2, rel=1e-6)
    assert hb["share_lo"] < 1 / 3 < hb["share_hi"] and hb["share_lo"] >= 0.0
    # best fixed per seed: 0.8, 0.6, 0.9, 0.5 -> minus U: 0.3, 0.2, 0.3, 0.0 (mean 0.2)
    assert table.loc["best_fixed", "share"] == pytest.approx(0.2 / 0.3)
    assert table.loc["oracle-train", "share"] == pytest.approx(0.4 / 0.3)   # > 1: the greedy oracle is no bound
    assert set(table.index) == {"oracle-train", "hb", "f0", "f1", "best_fixed"}
    # no oracle aimed at heldout_tasks: no row for that suite
    other = share_of_gap(_scores({"uniform": [0.5, 0.4], "oracle-hx": [0.7, 0.8]}, "heldout_tasks"), RUNS)
    assert other.empty


def test_best_fixed_per_seed_and_suite():
    scores = _scores({"f0": [0.4, 0.6], "f1": [0.8, 0.3], "uniform": [0.5, 0.5]})
    best = best_fixed(scores, RUNS)
    assert best[["seed", "score", "arm", "arms"]].values.tolist() == [[0, 0.8, 1, 2], [1, 0.6, 0, 2]]
    assert (best["policy"] == "best_fixed").all()
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
    assert summ.loc["best_fixed (2 arms)", "heldout_harness_mean"] == pytest.approx((0.8 + 0.6 + 0.9) / 3)
    text = summary_table(pd.DataFrame(), evals, RUNS)
    assert "share of the achievable gain" in text and "heldout_harness: oracle = 'oracle-hx'" in text
    block = text.split("share of the achievable gain")[1]
    hb_line = next(line for line in block.splitlines() if line.startswith("hb "))
    assert "+0.067" in hb_line and "| 0.25 [" in hb_line           # (0.1 + 0.1 + 0.0) / (0.2 + 0.4 + 0.2)
    assert "share of the achievable gain" not in summary_table(pd.DataFrame(), evals[evals.policy != "oracle-hx"],
                                                                RUNS)


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
    assert "train: oracle = 'oracle'" in text               # the default oracle aims at the training objective
    table = share_of_gap(scores, run_table(r.meta for r in runs))
    assert table["suite"].tolist() == ["train"] and table["policy"].tolist() == ["mixed"]
