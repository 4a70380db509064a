"""Each bootstrap statistic's plain function (reports.metrics) is its definition; its fast
form over bootstrap counts (reports.bootstrap, registered in `bootstrap.FAST`) must give the
definition's value on every replicate, the replicate written out as an explicit array
(`bootstrap.resample`): bit for bit, or within the tolerance it is registered with."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from reports import bootstrap, metrics

FORMS = list(bootstrap.FAST.values())


def test_the_registry_holds_every_fast_form_of_the_reports():
    assert {f.definition for f in FORMS} == {metrics.mean, metrics.aggregate_median, metrics.iqm,
                                            metrics.prob_improvement, metrics.profile}
    assert {f.fast for f in FORMS} == {bootstrap.weighted_mean, bootstrap.weighted_median, bootstrap.weighted_iqm,
                                      bootstrap.weighted_prob_improvement, bootstrap.weighted_profile}


def test_resample_is_the_replicate_of_the_counts():
    x = np.arange(6.0).reshape(2, 3)                          # (seeds, tasks)
    r = bootstrap.resample(x, np.array([0.0, 2.0]), np.array([1.0, 0.0, 2.0]))
    assert r.tolist() == [[3.0, 5.0, 5.0], [3.0, 5.0, 5.0]]   # seed 1 twice; task 0 once, task 2 twice


def _cube(kind: str, rng, policies: int, seeds: int, tasks: int) -> np.ndarray:
    x = rng.random((policies, seeds, tasks))
    if kind == "binary":
        return (x < 0.4).astype(np.float64)
    if kind == "thirds":                                      # pass@1 of 3 attempts: 4 levels
        return np.floor(4 * x) / 3
    return x                                                  # continuous: every value distinct


def _equal(got, want, rtol: float) -> bool:
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return bool(np.array_equal(got, want) if rtol == 0 else np.allclose(got, want, rtol=rtol, atol=0))


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f.definition.__name__)
@pytest.mark.parametrize("kind", ["binary", "thirds", "continuous"])
@pytest.mark.parametrize("shape", [(3, 4, 9), (2, 7, 80)])
def test_fast_form_equals_its_definition_on_random_resamples(form, kind, shape):
    rng = np.random.default_rng([len(kind), *shape])
    x = _cube(kind, rng, *shape)
    p, s, t = shape
    ws, wt = bootstrap.draw_counts(rng, 9, s), bootstrap.draw_counts(rng, 9, t)
    rtol = form.rtol
    if form.definition in (metrics.mean, metrics.aggregate_median) and kind == "binary":
        rtol = 0.0                                            # integer sums: exact in any order
    if form.arity == 2:                                       # every policy against policy 0, the same draws
        got = form.fast(x, x[[0] * p], ws, wt)
    else:
        got = form.fast(x, ws, wt)
    assert got.shape[:2] == (9, p)
    for b in range(9):
        r = bootstrap.resample(x, ws[b], wt[b])
        for j in range(p):
            want = form.definition(r[j], r[0]) if form.arity == 2 else form.definition(r[j])
            assert _equal(got[b, j], want, rtol), (b, j, got[b, j], want)


def test_iqm_fast_form_is_bit_for_bit_below_max_levels():
    """weighted_iqm's tolerance is for > max_levels distinct values (float32); binary and
    few-level metrics take the exact integer path."""
    rng = np.random.default_rng(11)
    x = np.floor(5 * rng.random((2, 6, 40))) / 4
    ws, wt = bootstrap.draw_counts(rng, 20, 6), bootstrap.draw_counts(rng, 20, 40)
    got = bootstrap.weighted_iqm(x, ws, wt)
    want = [[sps.trim_mean(bootstrap.resample(x[j], ws[b], wt[b]).ravel(), 0.25) for j in range(2)]
            for b in range(20)]
    assert np.array_equal(got, np.array(want))


def test_a_wrong_fast_form_is_caught():
    """The check can fail: a fast form that ignores the seed counts differs from its definition."""
    rng = np.random.default_rng(2)
    x = rng.random((1, 5, 12))
    ws, wt = bootstrap.draw_counts(rng, 4, 5), bootstrap.draw_counts(rng, 4, 12)
    wrong = bootstrap.weighted_mean(x, np.ones_like(ws), wt)
    assert not all(_equal(wrong[b, 0], metrics.mean(bootstrap.resample(x[0], ws[b], wt[b])), 1e-13)
                   for b in range(4))
