"""Runs read at equal cost: each run at a milestone M of a cost unit, by linear
interpolation in its cumulative cost (the one reading; `hb report --budget`,
`reports.budget`, and the equal-groups reading of `scripts/robust_claim.py` and
`scripts/robust_tune.py` use it).

The cost of a run after each train step is the cumulative sum of one cost-ledger column
(`step_costs`: `hbsim.contract.BUDGET_UNITS`, step 0 costing 0). A value v recorded after
each step (any column: the exact expected score of a target, the `true_*` columns, ...) is
read at M as follows (`value_at`): i = the first step whose cumulative cost is >= M; the
value there when i is the first step (nothing below M to interpolate from) or when no step
reaches M (the last step's: the run never got there); else

    v(M) = (1 - w) v_{i-1} + w v_i,   w = (M - c_{i-1}) / (c_i - c_{i-1})   (`weight`)

so a run whose cost is flat at M (steps that generated nothing, trained on leftovers) is
read at the FIRST step that reached M, as `hb report --budget`'s evaluations are (the loop
evaluates when a milestone is first crossed). `runs_at` applies it to every run of a train
table; `common_milestone` is the largest cost every run reached.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from hbsim.contract import BUDGET_UNITS


def step_costs(train: pd.DataFrame | None, unit: str) -> pd.DataFrame:
    """(run_id, step, cost): the cumulative cost of each run after each train step, step 0
    (cost 0) included; a step's cost is `hbsim.loop.step_cost`'s (the ledger column; for
    `seconds` without simulated cost_seconds, seconds_rollout + seconds_tools)."""
    cols = ["run_id", "step", "cost"]
    if train is None or train.empty:
        return pd.DataFrame(columns=cols)
    col = BUDGET_UNITS[unit]
    value = pd.to_numeric(train[col], errors="coerce") if col in train else pd.Series(0.0, index=train.index)
    if unit == "seconds":
        other = sum(pd.to_numeric(train[c], errors="coerce").fillna(0.0) if c in train else 0.0
                    for c in ("seconds_rollout", "seconds_tools"))
        value = value.where(np.isfinite(value), other)
    tr = train[["run_id", "step"]].assign(cost=value.fillna(0.0).to_numpy(dtype=float))
    tr = tr.sort_values(["run_id", "step"], kind="stable")
    tr["cost"] = tr.groupby("run_id")["cost"].cumsum()
    zero = pd.DataFrame({"run_id": tr["run_id"].unique(), "step": 0, "cost": 0.0})
    return pd.concat([zero, tr], ignore_index=True)[cols]


def weight(milestone: float, c_lo: float, c_hi: float) -> float:
    """The weight on the upper reading (cost c_hi >= M) of the pair that brackets M."""
    return (milestone - c_lo) / (c_hi - c_lo) if c_hi > c_lo else 1.0


def crossing(cost: np.ndarray, milestone: float) -> int:
    """The index of the first step whose cumulative cost is >= M (the last when none is)."""
    hit = np.flatnonzero(np.asarray(cost) >= milestone)
    return int(hit[0]) if hit.size else len(cost) - 1


def value_at(cost: np.ndarray, values: np.ndarray, milestone: float):
    """The value (a row of `values`, (steps, ...)) of one run at exactly the milestone (module doc)."""
    cost = np.asarray(cost, dtype=float)
    i = crossing(cost, milestone)
    if i == 0 or cost[i] < milestone:
        return values[i]
    w = weight(milestone, float(cost[i - 1]), float(cost[i]))
    return (1 - w) * values[i - 1] + w * values[i]


def common_milestone(costs: pd.DataFrame) -> float:
    """The largest cost every run reached: the smallest final cumulative cost (`step_costs`' table)."""
    return float(costs.groupby("run_id")["cost"].max().min())


def runs_at(train: pd.DataFrame, unit: str, milestone: float, columns: list[str]) -> pd.DataFrame:
    """The train table reduced to one row per run (in run_id order) at exactly the milestone:
    `columns` read by `value_at`, every other column from the step that crossed it."""
    costs = step_costs(train, unit).merge(train, on=["run_id", "step"], how="inner")
    out = []
    for _, g in costs.groupby("run_id", sort=True):
        i = crossing(g["cost"].to_numpy(), milestone)
        row = g.iloc[i].copy()
        for c in columns:
            row[c] = value_at(g["cost"].to_numpy(), g[c].to_numpy(dtype=float), milestone)
        out.append(row)
    return pd.DataFrame(out).drop(columns=["cost"]).reset_index(drop=True)
