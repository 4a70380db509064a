"""The summary table of a suite: every policy's value of every metric on the all-policy
rectangle, with its crossed-bootstrap percentile interval, its IQM and P(policy > baseline),
each with an interval, all from ONE set of task and seed draws (`bootstrap_summary`); the
IQM's replicates may be computed in the report's helper process (`Later`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from reports.readings import intervals
from reports import bootstrap, metrics
from reports.cells import Aligned


def bootstrap_summary(al: Aligned, suite: str, baseline: str, *, resamples: int, rng: np.random.Generator,
                      alpha: float, progress=None, helper=None):
    """Per metric x policy: value, crossed-bootstrap percentile interval (boot_low,
    boot_high: tasks and seeds resampled together), IQM (+ interval) and P(policy >
    baseline) (+ interval), all from ONE set of task/seed draws. Not the t-interval over
    seeds of `hb sim` (reports.readings.summary): a different estimator of a different spread.

    helper: a `reports.offload.Helper`: the IQM's replicates are computed there from the
    same draws (the generator's state at the start, replayed), while this process goes on;
    the summary is then a `Later` whose ``result()`` is the table. Without: the table."""
    m, p, s, t = al.x.shape
    flat = al.x.reshape(m * p, s, t)
    b_idx = al.policies.index(baseline)

    base = np.repeat(al.x[:, b_idx:b_idx + 1], p, axis=1).reshape(m * p, s, t)
    table = bootstrap.superiority_table(flat, base)  # once: the draws only reweight it
    iqm = start = None
    if helper is not None:
        start = rng.bit_generator.state  # where this bootstrap's draws begin: the helper replays them
        iqm = helper.submit(_replayed, flat, start, resamples)

    def stat(x, ws, wt):
        parts = [bootstrap.weighted_mean(x, ws, wt), bootstrap.table_prob_improvement(table, ws, wt)]
        if iqm is None:
            parts.append(bootstrap.weighted_iqm(x, ws, wt))
        return np.stack(parts, axis=1)  # (b, 2 or 3, m*p)

    reps = bootstrap.crossed_bootstrap(flat, stat, resamples=resamples, rng=rng, progress=progress,
                                   label=f"summary {suite}")

    def finish(iqm_reps: np.ndarray) -> pd.DataFrame:
        (lo, hi), (iqm_lo, iqm_hi) = intervals.percentile_interval(reps[:, :2], 1 - alpha), \
            intervals.percentile_interval(iqm_reps, 1 - alpha)
        if s < 2:  # one seed: no interval for new runs (`analysis.one_seed_blank`)
            lo, hi, iqm_lo, iqm_hi = (np.full_like(v, np.nan, dtype=float) for v in (lo, hi, iqm_lo, iqm_hi))
        rows = []
        for i, metric in enumerate(al.metrics):
            for j, pol in enumerate(al.policies):
                f = i * p + j
                rows.append({"suite": suite, "metric": metric, "policy": pol, "n_tasks": t, "n_seeds": s,
                             "value": metrics.mean(al.x[i, j]), "boot_low": lo[0, f], "boot_high": hi[0, f],
                             "iqm": metrics.iqm(al.x[i, j]), "iqm_low": iqm_lo[f], "iqm_high": iqm_hi[f],
                             "prob_improvement": metrics.prob_improvement(al.x[i, j], al.x[i, b_idx]),
                             "pi_low": lo[1, f], "pi_high": hi[1, f], "is_baseline": pol == baseline})
        return pd.DataFrame(rows)

    if iqm is None:
        return finish(reps[:, 2])
    return Later(iqm, lambda: _replayed({}, flat, start, resamples), finish)


@dataclass
class Later:
    """A table whose last part (``future``) is computed in the helper: ``result()`` waits
    for it and ``finish``es the table (once). ``steal()``: if the part has not started
    there, it is computed here instead (``local``: the same numbers), so an idle caller
    does the helper's queued work."""

    future: object
    local: Callable
    finish: Callable
    _value: pd.DataFrame | None = None

    def steal(self) -> None:
        if self.future.cancel():
            self.future = None

    def result(self) -> pd.DataFrame:
        if self._value is None:
            self._value = self.finish(self.local() if self.future is None else self.future.result())
        return self._value


def _replayed(state: dict, x: np.ndarray, start: dict, resamples: int) -> np.ndarray:
    """The IQM's bootstrap replicates of ``x`` from the draws a generator in state ``start``
    makes (`bootstrap_summary`'s, replayed in the helper process: the same numbers)."""
    rng = np.random.Generator(getattr(np.random, start["bit_generator"])())
    rng.bit_generator.state = start
    return bootstrap.crossed_bootstrap(x, bootstrap.weighted_iqm, resamples=resamples, rng=rng)
