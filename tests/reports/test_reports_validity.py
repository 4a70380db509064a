"""reports.validity: hand-computed statistics of `hb validity` on small synthetic
counterfactual tables, file loading, and the page."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from hbsim.contract import COUNTERFACTUAL_FILE
from policies.errors import UserError
from reports import validity as v


def _frame(seeds=(0, 1), steps=(1, 2, 3), gains=((0.1, 0.4, 0.2, 0.3),), flip=False, env="bernoulli"):
    rows = []
    for seed in seeds:
        for step in steps:
            g = np.asarray(gains[(step - 1) % len(gains)]) * (1 + seed)
            for arm, gain in enumerate(g):
                sig = -gain if flip else gain
                rows.append({"env": env, "policy": "p", "seed": seed, "step": step, "arm": arm, "train_arm": 0,
                             "learnability": sig, "t_grad": sig, "t_update": np.nan, "score": sig,
                             "true_t": sig, "gain_train": gain, "gain_heldout_tasks": gain,
                             "gain_heldout_harness": -gain})
    return pd.DataFrame(rows)


def test_spearman_and_top1_by_hand():
    assert v.spearman(np.array([1.0, 2, 3]), np.array([3.0, 2, 1])) == pytest.approx(-1.0)
    # ranks x = (1, 2.5, 2.5, 4), y = (1, 2, 3, 4): r = 0.9486832980505138
    assert v.spearman(np.array([1.0, 2, 2, 5]), np.array([1.0, 2, 3, 4])) == pytest.approx(0.9486832980505138)
    assert math.isnan(v.spearman(np.array([1.0, np.nan, 3]), np.array([1.0, 2, 3])))       # < 3 pairs
    assert math.isnan(v.spearman(np.array([1.0, 1, 1]), np.array([1.0, 2, 3])))            # constant
    assert v.top1(np.array([0.1, 0.5, 0.2]), np.array([1.0, 3, 2])) == 1.0
    assert v.top1(np.array([0.1, 0.5, 0.2]), np.array([3.0, 1, 2])) == 0.0
    assert v.top1(np.array([np.nan, 0.5, 0.9]), np.array([9.0, 1, 2])) == 1.0      # the finite signals only
    assert math.isnan(v.top1(np.full(3, np.nan), np.ones(3)))


def test_bootstrap_mean_over_seeds():
    rng = np.random.default_rng(0)
    assert v.bootstrap_mean(np.array([0.3]), rng)[0] == 0.3 and math.isnan(v.bootstrap_mean(np.array([0.3]), rng)[1])
    np.testing.assert_allclose(v.bootstrap_mean(np.array([0.2, 0.2, 0.2]), rng), 0.2, rtol=1e-15)
    a = v.bootstrap_mean(np.array([0.0, 1.0, 0.5, np.nan]), np.random.default_rng(1), 500)
    b = v.bootstrap_mean(np.array([0.0, 1.0, 0.5]), np.random.default_rng(1), 500)
    assert a == b and a[0] == 0.5 and 0.0 <= a[1] < 0.5 < a[2] <= 1.0


def test_validity_table_perfect_and_reversed_signals():
    good = v.validity_table(v.per_step(_frame()), resamples=100)
    row = good[(good.signal == "L") & (good.target == "training objective")].iloc[0]
    assert (row.rho, row.top1, row.chance, row.n_seeds, row.n_steps) == (1.0, 1.0, 0.25, 2, 6)
    held = good[(good.signal == "L") & (good.target == "held-out harness")].iloc[0]
    assert held.rho == -1.0 and held.top1 == 0.0
    assert good[good.signal == "T(update)"]["n_steps"].eq(0).all()          # a missing signal: no steps
    bad = v.validity_table(v.per_step(_frame(flip=True), min_step=1), resamples=100)
    row = bad[(bad.signal == "fused S") & (bad.target == "held-out tasks")].iloc[0]
    assert row.rho == -1.0 and row.top1 == 0.0 and row.n_steps == 4         # steps 2 and 3 of 2 seeds


def test_regret_and_oracle_agreement_per_target_by_hand():
    cf = _frame(seeds=(0,), steps=(1,), gains=((0.1, 0.4, 0.2, 0.3),))
    table = v.regret_table(cf).set_index("target")
    assert table.loc["training objective", "regret_per_step"] == pytest.approx(0.3)      # 0.4 - 0.1
    assert table.loc["held-out harness", "regret_per_step"] == pytest.approx(0.0)        # -0.1 is the max
    assert table.loc["training objective", "train_oracle_agrees"] == 1.0
    assert table.loc["held-out harness", "train_oracle_agrees"] == 0.0


def test_calibration_bins_are_monotone_for_a_perfect_signal():
    cal = v.calibration(_frame(seeds=(0, 1, 2)), bins=4)
    g = cal[(cal.signal == "L") & (cal.target == "training objective")].sort_values("bin")
    assert len(g) >= 3 and g["gain_mean"].is_monotonic_increasing and g["n"].sum() == 3 * 3 * 4


def _write_run(path, env: dict, cf: pd.DataFrame) -> None:
    path.mkdir(parents=True)
    cf.drop(columns=["env", "train_arm"]).to_parquet(path / COUNTERFACTUAL_FILE)
    pd.DataFrame({"step": [1, 2, 3], "arm": [0, 1, -1]}).to_parquet(path / "train.parquet")
    (path / "run.json").write_text(json.dumps({"config": {"env": env}}))


def test_load_labels_envs_and_joins_the_runs_choice(tmp_path):
    _write_run(tmp_path / "a" / "seed0", {"kind": "drifting", "optimizer": "adam", "lr": 1}, _frame(seeds=(0,)))
    _write_run(tmp_path / "b" / "seed0", {"kind": "drifting", "optimizer": "sgd", "lr": 1}, _frame(seeds=(0,)))
    cf = v.load(tmp_path)
    assert set(cf["env"]) == {"drifting[optimizer=adam]", "drifting[optimizer=sgd]"}
    assert cf.groupby("step")["train_arm"].first().tolist() == [0, 1, -1]
    tables = v.analyse(tmp_path, min_step=0, resamples=50)
    text = v.text_tables(tables)
    assert "drifting[optimizer=sgd]" in text and "+1.00" in text and "T(update)" not in text
    paths = v.write(tables, tmp_path / "out")
    page = paths["html"].read_text()
    assert "<svg" in page and "Signal validity" in page
    assert pd.read_csv(paths["validity"]).shape[0] == len(tables["validity"])
    with pytest.raises(UserError, match="no counterfactual.parquet"):
        v.load(tmp_path / "out")


@pytest.mark.slow
def test_reports_validity_reads_only_the_data_contract():
    code = "import sys, reports.validity; print(sorted(m for m in sys.modules " \
           "if m.split('.')[0] in ('hbsim', 'ablations', 'real_runs')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['hbsim', 'hbsim.contract.atomic', 'hbsim.contract', 'hbsim.contract.records', 'hbsim.contract.shapes']"


def test_report_page_only_where_counterfactual_files_exist(tmp_path):
    assert v.write_page_if_any(tmp_path, tmp_path / "report") is None
    assert v.write_page_if_any(None, tmp_path / "report") is None
    _write_run(tmp_path / "r", {"kind": "student"}, _frame(seeds=(0,)))      # 3 steps: none after min_step 30
    page = v.write_page_if_any(tmp_path, tmp_path / "report")
    assert page.is_file() and "Signal validity" in page.read_text()
    assert pd.read_csv(tmp_path / "report" / "regret.csv").empty


def test_hb_report_links_the_validity_page_of_runs_with_counterfactual_files(tmp_path):
    from hbsim.experiment import run_config
    from hbsim.contract.records import write_run
    from reports import build_report
    env = {"kind": "bernoulli", "n_tasks": 20, "n_heldout_tasks": 6, "k_attempts": 2}
    for policy in ("mixed", "uniform"):
        for seed in (0, 1):
            res = run_config({"env": env, "policy": {"name": policy}, "seed": seed, "steps": 32, "counterfactual": 8})
            write_run(res, tmp_path / "runs" / policy / f"seed{seed}")
    result = build_report(tmp_path / "runs", "mixed", tmp_path / "report", ks=(1,), resamples=50)
    assert result.files["validity"] == tmp_path / "report" / "validity.html" and result.files["validity"].is_file()
    assert '<a href="validity.html">' in (tmp_path / "report" / "index.html").read_text()
    assert "(validity.html)" in (tmp_path / "report" / "report.md").read_text()
