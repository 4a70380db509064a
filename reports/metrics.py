"""The aggregate metrics of one policy's scores, each a plain function that IS its
definition (rliable's, `rliable.metrics`): a ``(runs, tasks)`` matrix (runs = seeds) in, a
number out; no bootstrap, no weights. Their fast forms over bootstrap weights live in
`reports.bootstrap`, registered against these (`bootstrap.FAST`) and tested equal to them
on random resamples (tests/reports/test_reports_fast_forms.py).
"""
from __future__ import annotations

import numpy as np
from scipy import stats as sps

#: optimality gap threshold: every metric of the report lies in [0, 1]
GAMMA = 1.0
#: performance-profile thresholds (scores lie in [0, 1])
TAUS = np.round(np.linspace(0.0, 1.0, 21), 10)


def mean(x: np.ndarray) -> float:
    """The value of a policy: the mean over every run and task of x (runs, tasks) (with a
    complete matrix, rliable's mean of the per-task means, `aggregate_mean`, to rounding)."""
    return float(np.mean(x))


def aggregate_mean(x: np.ndarray) -> float:
    """Mean of the per-task means. x: (runs, tasks)."""
    return float(np.mean(np.mean(x, axis=0)))


def aggregate_median(x: np.ndarray) -> float:
    """Median of the per-task means (over runs). x: (runs, tasks)."""
    return float(np.median(np.mean(x, axis=0)))


def iqm(values: np.ndarray) -> float:
    """Interquartile mean (scipy trim_mean 0.25) of all values (runs x tasks, any shape)."""
    return float(sps.trim_mean(np.ravel(values), 0.25))


def optimality_gap(x: np.ndarray, gamma: float = GAMMA) -> float:
    """gamma - mean of min(x, gamma) over every run and task."""
    return float(gamma - np.mean(np.minimum(x, gamma)))


def profile(x: np.ndarray, taus=TAUS) -> np.ndarray:
    """Score distribution: share of runs x tasks with a score above each tau. -> (taus,)."""
    x = np.asarray(x, dtype=np.float64).ravel()
    return (x[:, None] > np.asarray(taus)[None, :]).mean(axis=0)


def superiority(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """g[..., i, j, t] = 1 if x[..., i, t] > y[..., j, t], 0.5 if equal (within 1e-12, so
    that means summed in another order still tie), else 0. x, y: (..., seeds, tasks)."""
    diff = x[..., :, None, :] - y[..., None, :, :]
    eq = np.abs(diff) < 1e-12
    return ((diff > 0) & ~eq) + 0.5 * eq


def prob_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """rliable's P(X > Y): per task the Mann-Whitney probability that a run of X beats a
    run of Y (ties count 1/2), averaged over tasks. x, y: (seeds, tasks)."""
    return float(superiority(x, y).mean())
