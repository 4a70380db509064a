"""The GEE check's closed form (reports.gee.gee_exchangeable) equals statsmodels'
iterative GEE (logistic, exchangeable working correlation, clustered by seed) -- the fit the
report ran before -- on small balanced designs, to far below the printed precision."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from reports_synth import make_synthetic

from reports import cells, gee, load
from reports.gee import gee_exchangeable


def _statsmodels_fit(wins, total):
    """statsmodels' GEE on the attempts the counts stand for (one row per attempt)."""
    from statsmodels.genmod import cov_struct, families
    from statsmodels.genmod.generalized_estimating_equations import GEE

    y, group, cluster = [], [], []
    for i in range(total.shape[0]):
        for g in range(total.shape[1]):
            y += [1.0] * int(wins[i, g]) + [0.0] * int(total[i, g] - wins[i, g])
            group += [g] * int(total[i, g])
            cluster += [i] * int(total[i, g])
    group = np.array(group)
    exog = np.column_stack([np.ones(len(y))] + [(group == g).astype(float) for g in range(1, total.shape[1])])
    res = GEE(np.array(y), exog, groups=np.array(cluster), family=families.Binomial(),
              cov_struct=cov_struct.Exchangeable()).fit()
    return np.asarray(res.params), np.asarray(res.cov_robust), float(np.ravel(res.cov_struct.dep_params)[0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_closed_form_equals_statsmodels_gee(seed):
    rng = np.random.default_rng(seed)
    k, g, m = 4 + seed, 3, 30
    p = rng.uniform(0.2, 0.8, size=(k, g))            # cluster-level variation -> correlation
    total = np.full((k, g), m)
    wins = rng.binomial(m, p)
    params, cov, rho = gee_exchangeable(wins, total)
    ref_params, ref_cov, ref_rho = _statsmodels_fit(wins, total)
    np.testing.assert_allclose(params, ref_params, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(cov, ref_cov, rtol=1e-7, atol=1e-14)
    assert rho == pytest.approx(ref_rho, rel=1e-7, abs=1e-12)


def test_hand_computed_two_clusters():
    # 2 clusters x 2 groups x 2 attempts, successes [[2, 2], [0, 0]]: both rates 0.5, so the
    # log-odds are 0 and every Pearson residual is +1 (cluster 0) or -1 (cluster 1): per
    # cluster the residual sum R = +-4 and ssr = 4; scale = 8 / (8 - 2 parameters);
    # rho = sum((R^2 - ssr) / 2) / scale / (pairs - 2) = 12 / (4 / 3) / (12 - 2) = 0.9
    params, cov, rho = gee_exchangeable(np.array([[2, 2], [0, 0]]), np.full((2, 2), 2))
    np.testing.assert_allclose(params, [0.0, 0.0], atol=1e-15)
    assert rho == pytest.approx(0.9, rel=1e-12)
    ref_params, ref_cov, ref_rho = _statsmodels_fit(np.array([[2, 2], [0, 0]]), np.full((2, 2), 2))
    assert ref_rho == pytest.approx(0.9, rel=1e-9)
    np.testing.assert_allclose(cov, ref_cov, rtol=1e-7, atol=1e-14)


def test_unbalanced_clusters_are_refused():
    with pytest.raises(ValueError, match="unbalanced"):
        gee_exchangeable(np.array([[1, 1], [1, 1]]), np.array([[2, 2], [2, 3]]))


def test_report_rows_equal_statsmodels_to_printed_precision():
    ev, tr = make_synthetic({"p0": 0.0, "p1": 0.4, "p2": 0.9}, n_seeds=4, n_tasks=(12, 10), attempts=(1, 3))
    fr = load.make_frames(ev, tr)
    table = cells.cell_metrics(fr.eval, (1, 3))
    pols = ["p0", "p1", "p2"]
    al, _ = cells.align(table, "heldout_harness", pols, "p0", cells.metric_names((1, 3), 3))
    rows, notes = gee.gee_rows(fr.eval, al, "heldout_harness", "p0")
    got = pd.DataFrame(rows)
    sub = fr.eval[fr.eval["suite"] == "heldout_harness"]
    codes = pd.Categorical(sub["policy"], categories=pols).codes
    seeds = pd.factorize(sub["seed"])[0]
    total = np.zeros((4, 3), dtype=int)
    wins = np.zeros((4, 3), dtype=int)
    np.add.at(total, (seeds, codes), 1)
    np.add.at(wins, (seeds, codes), sub["success"].to_numpy(dtype=int))
    ref_params, ref_cov, ref_rho = _statsmodels_fit(wins, total)
    se = np.sqrt(np.diag(ref_cov)) * np.sqrt(4 / 3)          # CR1 with K = 4
    assert notes == []
    assert got["n_obs"].tolist() == [360, 360] and got["n_clusters"].tolist() == [4, 4]
    np.testing.assert_allclose(got["log_odds"], ref_params[1:], rtol=1e-9)
    np.testing.assert_allclose(got["se"], se[1:], rtol=1e-7)
    np.testing.assert_allclose(got["working_corr"], ref_rho, rtol=1e-7, atol=1e-12)
    from scipy import stats as sps
    np.testing.assert_allclose(got["p"], 2 * sps.t.sf(np.abs(ref_params[1:] / se[1:]), 3), rtol=1e-6)
