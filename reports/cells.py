"""The cells of a report and their rectangles: one row per (policy, seed, suite, task)
with its metrics (`cell_metrics`), the metrics of a suite and its headline metric (decided
here, once: `headline_metric`), and the complete seeds x tasks rectangle of a comparison
(`align`) with the all-policy tables read straight off it (`per_task_rows`,
`category_values`).

Decisions (each visible in the report):
* Joining is by ids (policy, seed, suite, task), never by row order.
* Analysis sets: the baseline defines the seeds and tasks of a suite. A pair
  (candidate, baseline) uses the complete seeds x tasks rectangle of both arms; the
  all-policy summary uses the rectangle common to every policy. Whatever is dropped is
  named in a note (and a warning) -- never silently.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from reports import passk

CELL_KEYS = ["policy", "seed", "suite", "task"]


def metric_names(ks: tuple[int, ...], n: int) -> list[str]:
    """Metrics of a suite with n attempts: score, pass@1, then pass@k, pass^k for k <= n."""
    names = ["score", "pass@1"]
    for k in ks:
        if 1 < k <= n:
            names += [f"pass@{k}", f"pass^{k}"]
    return names


def cell_metrics(final: pd.DataFrame, ks: tuple[int, ...]) -> pd.DataFrame:
    """One row per (policy, seed, suite, task): category, n, c, score and pass metrics.

    pass@k / pass^k are NaN in suites with fewer than k attempts.
    """
    g = final.groupby(CELL_KEYS, sort=True)
    cells = g.agg(category=("category", "first"), n=("success", "size"), c=("success", "sum"),
                  score=("reward", "mean")).reset_index()
    n, c = cells["n"].to_numpy(), cells["c"].to_numpy()
    cells["pass@1"] = c / n
    for k in sorted(set(ks) - {1}):
        ok = n >= k
        for name, fn in ((f"pass@{k}", passk.pass_at_k), (f"pass^{k}", passk.pass_hat_k)):
            col = np.full(len(cells), np.nan)
            if ok.any():
                col[ok] = fn(n[ok], c[ok], k)
            cells[name] = col
    return cells


def score_is_pass1(cells: pd.DataFrame, suite: str) -> bool:
    """True when score and pass@1 agree on every cell of ``suite`` (binary rewards): the
    report then shows that metric once."""
    sub = cells[cells["suite"] == suite]
    return bool(len(sub)) and bool(np.allclose(sub["score"], sub["pass@1"], rtol=0, atol=1e-12))


@dataclass
class Aligned:
    """The complete rectangle of one comparison. x: (metrics, policies, seeds, tasks)."""

    policies: list[str]
    seeds: list[int]
    tasks: list[str]
    categories: np.ndarray  # (tasks,)
    metrics: list[str]
    x: np.ndarray


def align(cells: pd.DataFrame, suite: str, policies: list[str], baseline: str,
          metrics: list[str]) -> tuple[Aligned, list[str]]:
    """Seeds x tasks of ``suite`` present for every policy; notes name what was dropped.

    The baseline defines the reference sets: seeds/tasks that only a candidate has are
    excluded; a seed a policy lacks entirely is dropped for all arms, then a task missing
    in any remaining (policy, seed) is dropped for all arms.
    """
    sub = cells[(cells["suite"] == suite) & cells["policy"].isin(policies)]
    base = sub[sub["policy"] == baseline]
    seeds = sorted(base["seed"].unique().tolist())
    tasks = sorted(base["task"].unique().tolist())
    notes = []
    mine = {pol: sub[sub["policy"] == pol] for pol in policies}
    for pol in policies:
        extra_s = sorted(set(mine[pol]["seed"].unique().tolist()) - set(seeds))   # unique first: no
        extra_t = sorted(set(mine[pol]["task"].unique().tolist()) - set(tasks))   # per-row iteration
        if extra_s or extra_t:
            notes.append(f"{suite}: policy {pol!r} has seeds {extra_s} / {len(extra_t)} task(s) the baseline "
                         f"{baseline!r} lacks; excluded")
    for pol in policies:
        has = set(mine[pol]["seed"].unique().tolist())
        lost = [s for s in seeds if s not in has]
        if lost:
            notes.append(f"{suite}: policy {pol!r} lacks seed(s) {lost} that the baseline has; "
                         "excluded in both arms of its comparison and from the all-policy summary")
            seeds = [s for s in seeds if s not in lost]
    for pol in policies:
        rows = mine[pol][mine[pol]["seed"].isin(seeds)]
        complete = rows.groupby("task")["seed"].nunique()
        complete = set(complete.index[complete == len(seeds)].tolist())
        lost = [t for t in tasks if t not in complete] if seeds else []
        if lost:
            shown = ", ".join(lost[:5]) + (" ..." if len(lost) > 5 else "")
            notes.append(f"{suite}: policy {pol!r} lacks {len(lost)} task(s) the baseline has ({shown}); "
                         "excluded in both arms of its comparison and from the all-policy summary")
            tasks = [t for t in tasks if t not in lost]
    x = np.full((len(metrics), len(policies), len(seeds), len(tasks)), np.nan)
    pos = [pd.Index(v).get_indexer(sub[k]) for k, v in (("policy", policies), ("seed", seeds), ("task", tasks))]
    keep = (pos[0] >= 0) & (pos[1] >= 0) & (pos[2] >= 0)
    for i, m in enumerate(metrics):
        x[i, pos[0][keep], pos[1][keep], pos[2][keep]] = sub[m].to_numpy(dtype=np.float64)[keep]
    cat = base.drop_duplicates("task").set_index("task")["category"].reindex(tasks).to_numpy()
    return Aligned(list(policies), seeds, tasks, cat, list(metrics), x), notes


def headline_metric(metrics: list[str], primary: str) -> str | None:
    """The metric a suite's headline is about -- decided here, once; the report carries it
    (`build.ReportResult.headline`) and the paired rows' role, the conclusion, the headline
    table and figure and the verdicts all read it: ``primary`` when the suite computes it;
    "score" folded into "pass@1" (binary rewards, `score_is_pass1`) -> "pass@1"; None when
    the suite lacks it (fewer attempts than its k): every metric of that suite is
    secondary, and the suite has no headline row, figure or verdict."""
    if primary in metrics:
        return primary
    if primary == "score" and "pass@1" in metrics:
        return "pass@1"
    return None


def view_metric(metrics: list[str], headline: str | None) -> str:
    """The one metric of a suite's single-metric views (rliable's views, the per-category
    deltas): its headline metric, else (no headline) its first metric."""
    return metrics[0] if headline is None else headline


def per_task_rows(al: Aligned, suite: str) -> pd.DataFrame:
    """Seed-averaged value of every metric per (policy, task) on the aligned set."""
    m, p, s, t = al.x.shape
    vals = al.x.mean(axis=2)  # (metrics, policies, tasks)
    idx = pd.MultiIndex.from_product([al.metrics, al.policies, al.tasks], names=["metric", "policy", "task"])
    out = pd.DataFrame({"value": vals.ravel()}, index=idx).reset_index()
    out.insert(0, "suite", suite)
    out["category"] = np.tile(al.categories, m * p)
    return out


def category_values(al: Aligned, suite: str) -> pd.DataFrame:
    """Value of every policy per category (mean over seeds and the category's tasks)."""
    rows = []
    for cat in sorted(set(al.categories.tolist())):
        mask = al.categories == cat
        for i, metric in enumerate(al.metrics):
            for j, pol in enumerate(al.policies):
                rows.append({"suite": suite, "metric": metric, "category": cat, "n_tasks": int(mask.sum()),
                             "policy": pol, "value": float(al.x[i, j][..., mask].mean())})
    return pd.DataFrame(rows)
