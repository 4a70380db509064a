"""One plain sentence per suite opens every view of the report (`reports.text.suite_sentences`):
the best design on the suite's headline metric, its delta over the baseline with the headline
interval, and whether it passes Holm's correction; read from the paired rows, never recomputed."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd

from reports.text import suite_sentences


def _row(suite, cand, delta, lo, hi, p_holm, metric="pass@1", seeds=8, family=4, role="primary"):
    return dict(suite=suite, candidate=cand, metric=metric, role=role, delta=delta, ci_low=lo, ci_high=hi,
                p_holm=p_holm, p_maxt=np.nan, n_seeds=seeds, family=family)


def _result(rows, headline, baseline="uniform", alpha=0.05):
    return SimpleNamespace(tables={"paired": pd.DataFrame(rows)}, config={"baseline": baseline, "alpha": alpha},
                           headline=headline)


def test_one_sentence_per_suite_names_the_best_delta_its_interval_and_holm():
    rows = [_row("heldout_tasks", "a", +0.120, +0.050, +0.190, 0.004),
            _row("heldout_tasks", "b", +0.300, -0.100, +0.700, 0.210),      # the largest delta, not significant
            _row("heldout_tasks", "b", +0.900, +0.800, +1.000, 0.001, metric="pass@3", role="secondary"),
            _row("heldout_harness", "a", -0.020, -0.050, +0.010, 0.600),
            _row("heldout_harness", "b", -0.080, -0.120, -0.040, 0.001),
            _row("heldout_harness", "oracle[target=train]", +0.400, +0.3, +0.5, 0.001),   # a reference: not a design
            _row("heldout_harness", "fixed[arm=1]", +0.100, +0.05, +0.15, 0.001)]
    got = suite_sentences(_result(rows, {"heldout_tasks": "pass@1", "heldout_harness": "pass@1"}))
    assert got == [
        "On heldout_harness (pass@1, 8 seeds), no design beats the baseline uniform; the closest, a, trails it by "
        "-0.020 [-0.050, +0.010] (95% simultaneous interval), not significant after Holm's correction over 4 "
        "comparisons (p_holm = 0.600, alpha = 0.05).",
        "On heldout_tasks (pass@1, 8 seeds), the best design is b: +0.300 over the baseline uniform [-0.100, +0.700] "
        "(95% simultaneous interval), not significant after Holm's correction over 4 comparisons (p_holm = 0.210, "
        "alpha = 0.05)."]


def test_a_significant_best_a_single_seed_and_a_suite_without_headline():
    rows = [_row("s1", "a", +0.250, +0.100, +0.400, 0.0004, family=1),
            _row("s2", "a", +0.100, np.nan, np.nan, np.nan, seeds=1),
            _row("s3", "a", +0.500, +0.1, +0.9, 0.01, metric="pass@3", role="secondary")]
    got = suite_sentences(_result(rows, {"s1": "pass@1", "s2": "pass@1", "s3": None}, baseline="mixed-2", alpha=0.1))
    assert got == [
        "On s1 (pass@1, 8 seeds), the best design is a: +0.250 over the baseline mixed-2 [+0.100, +0.400] "
        "(90% simultaneous interval), significant after Holm's correction over 1 comparison (p_holm = 4.0e-04, "
        "alpha = 0.1).",
        "On s2 (pass@1, 1 seed), the best design is a: +0.100 over the baseline mixed-2, with one seed: no interval "
        "and no test.",
        "s3: no headline comparison (the primary metric is not computed on this suite)."]
    assert suite_sentences(_result([], {})) == []
    only = _result([_row("s1", "oracle", +0.2, +0.1, +0.3, 0.01)], {"s1": "pass@1"})
    assert suite_sentences(only)[0].startswith("On s1 (pass@1, 8 seeds), the best design is oracle: +0.200 ")
    budget = _result(rows[:1], {"s1": "pass@1"}, baseline="mixed-2")
    budget.config["budget"] = {"unit": "tokens", "at": 8000.0}
    assert suite_sentences(budget)[0].startswith("On s1 (pass@1, 8 seeds, at tokens = 8000), the best design is a: ")
