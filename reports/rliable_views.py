"""rliable's views of a report, and the score matrices in the form rliable's functions take.

Agarwal et al. (2021), "Deep RL at the edge of the statistical precipice", and its library
`rliable`: aggregate metrics (median of the per-task means, IQM = 25% trimmed mean over
every run x task, mean, optimality gap), performance profiles (share of runs x tasks
scoring above tau), probability of improvement, and IQM over training steps, each with an
interval. rliable itself cannot be a dependency (rliable 1.2 needs arch 7.2, which fails
to import under pandas 3.1); the point estimates are rliable's definitions
(`rliable.metrics`, `rliable.library.run_score_deviation`) in numpy/scipy, in
`reports.metrics`, and `score_matrices` exports the data so that rliable can be run on it
in its own venv.

Intervals: the crossed bootstrap of `reports.bootstrap` (tasks and seeds resampled together:
new tasks and new runs), with ``min(resamples, VIEW_RESAMPLES)`` resamples from a
generator of its own (``seed`` with stream `STREAM`), so the report's other numbers do
not move. rliable's default resamples runs within each task (these tasks, new runs) and
gives narrower intervals; `rliable.library.get_interval_estimates(...,
task_bootstrap=True)` is the closer analogue. Mean, IQM and P(X > baseline) come from the
summary table (the same statistic, the summary's draws); median and optimality gap are
computed here.
"""
from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from reports.readings import intervals
from reports import bootstrap, metrics
from reports.cells import align, cell_metrics
from reports.metrics import GAMMA, TAUS

#: resamples of the views' bands (rliable's default for performance profiles is 2000)
VIEW_RESAMPLES = 2000
#: at most this many evaluation steps in the IQM-over-steps view (evenly spaced, first and last kept)
MAX_STEPS = 12
#: the views' random stream: np.random.default_rng([seed, STREAM])
STREAM = 0x726C69


# ------------------------------------------------------------------------- the views

@dataclass
class Views:
    """The tables of rliable's views and the exported score matrices.

    matrices: (suite, metric) -> {policy: (runs, tasks) array}, the final evaluation;
    steps: (suite, metric) -> (steps, {policy: (runs, tasks, steps) array});
    index: what each matrix is (seeds and tasks in row / column order)."""

    tables: dict = field(default_factory=dict)
    matrices: dict = field(default_factory=dict)
    steps: dict = field(default_factory=dict)
    index: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)


class ViewsBuilder:
    """rliable's views built suite by suite.

    ``add(suite, metrics, members, metric)`` takes one suite's all-policy rectangle (its metrics
    and policies, those of the summary table) and the metric its views are about (the
    suite's headline metric, else its first: `cells.view_metric`); with ``jobs`` 2 the suite's bootstraps run in a
    forked helper (`reports.offload`) while the caller goes on with the summary and paired
    tables. The views draw from their own generator (``seed`` with stream `STREAM`) and take
    the suites in the order given, in whichever process, so every number is the same with 1
    or 2 jobs. ``result(summary)`` waits and assembles the `Views` (IQM and mean intervals:
    the summary's); ``close()`` ends the helper.
    fr: the report's `load.Frames`; cells: the final evaluation's `cells.cell_metrics`."""

    def __init__(self, fr, cells: pd.DataFrame, baseline: str, ks, *, resamples: int, seed: int, alpha: float,
                 jobs: int = 1):
        from reports import offload

        self.fr, self.cells, self.baseline, self.ks = fr, cells, baseline, ks
        self.reps, self.alpha = min(resamples, VIEW_RESAMPLES), alpha
        self.rng = np.random.default_rng([seed, STREAM])
        # the summary's IQM replicates go there too; the views' stream follows the helper's from call to
        # call, so a dead helper's calls done here draw what they would have drawn there
        self.helper = offload.Helper(jobs, {"views": self}, carry=_stream_state, restore=_set_stream_state)
        self._parts: list = []

    def add(self, suite: str, metrics: list[str], members: list[str], metric: str) -> None:
        self._parts.append(self.helper.submit(_suite_views, suite, metrics, members, metric))

    def result(self, summary: pd.DataFrame) -> Views:
        try:
            parts = [p.result() for p in self._parts]
        finally:
            self.close()
        views = Views()
        agg, prof, steps = [], [], []
        for part, (suite, metric, shape, median) in parts:
            views.matrices.update(part.matrices)
            views.steps.update(part.steps)
            views.index.update(part.index)
            views.notes += part.notes
            summ = summary[(summary["suite"] == suite) & (summary["metric"] == metric)]
            agg.append(_aggregates(views.matrices[(suite, metric)], summ, suite, metric, shape, median))
            prof.append(part.tables["profiles"])
            steps.append(_final_step_band(part.tables["iqm_steps"], summ))
        if parts:
            views.tables = {"aggregates": pd.concat(agg, ignore_index=True),
                            "profiles": pd.concat(prof, ignore_index=True),
                            "iqm_steps": pd.concat(steps, ignore_index=True)}
        return views

    def close(self) -> None:
        self.helper.close(cancel=True)

    def _suite(self, suite: str, metrics: list[str], members: list[str], metric: str):
        """One suite's bootstraps on ``metric`` (the suite's view metric, `cells.view_metric`): (a
        Views part, (suite, metric, (seeds, tasks), the median's interval))."""
        part = Views()
        al, _ = align(self.cells, suite, members, self.baseline, metrics)
        for i, name in enumerate(al.metrics):
            part.matrices[(suite, name)] = {p: al.x[i, j].copy() for j, p in enumerate(al.policies)}
        part.index[suite] = {"seeds": [int(s) for s in al.seeds], "tasks": list(al.tasks)}
        x = al.x[al.metrics.index(metric)]  # (policies, seeds, tasks)
        reps, rng, alpha = self.reps, self.rng, self.alpha
        median = intervals.percentile_interval(
            bootstrap.crossed_bootstrap(x, bootstrap.weighted_median, resamples=reps, rng=rng), 1 - alpha)
        part.tables = {"profiles": _profiles(x, al, suite, metric, reps, rng, alpha),
                       "iqm_steps": _iqm_steps(self.fr.eval_all, al, suite, metric, self.baseline, self.ks, reps,
                                               rng, alpha, part)}
        return part, (suite, metric, (len(al.seeds), len(al.tasks)), median)


def _stream_state(state: dict) -> dict:
    """What a call in the helper changes of the builder: its random stream's state."""
    return state["views"].rng.bit_generator.state


def _set_stream_state(state: dict, carried: dict) -> None:
    state["views"].rng.bit_generator.state = carried


def _suite_views(state: dict, suite: str, metrics: list[str], members: list[str], metric: str):
    """One suite's bootstraps, in the process holding the builder (`reports.offload.Helper`)."""
    return state["views"]._suite(suite, metrics, members, metric)


def _final_step_band(steps: pd.DataFrame, summ: pd.DataFrame) -> pd.DataFrame:
    """The IQM-over-steps rows of the final evaluation's cells take the summary's IQM
    interval (the aggregates' too); the helper column goes."""
    if steps.empty:
        return steps
    band = summ.set_index("policy")[["iqm_low", "iqm_high"]]
    final = steps["final"].to_numpy(dtype=bool)
    steps = steps.drop(columns="final")
    steps.loc[final, "low"] = band["iqm_low"].reindex(steps.loc[final, "policy"]).to_numpy(dtype=float)
    steps.loc[final, "high"] = band["iqm_high"].reindex(steps.loc[final, "policy"]).to_numpy(dtype=float)
    return steps


def _aggregates(mats: dict, summ: pd.DataFrame, suite: str, metric: str, shape: tuple, median) -> pd.DataFrame:
    """Median (bootstrapped in `ViewsBuilder._suite`), IQM and mean (the summary's intervals)
    and the optimality gap: every metric lies in [0, GAMMA], so gap = GAMMA - mean exactly
    and its interval is the mean's, reflected. mats: {policy: (seeds, tasks)} of ``metric``."""
    lo, hi = median
    by = summ.set_index("policy")
    rows = []
    for j, (pol, x) in enumerate(mats.items()):
        s = by.loc[pol]
        own = {"median": (metrics.aggregate_median(x), lo[j], hi[j]),
               "iqm": (metrics.iqm(x), s["iqm_low"], s["iqm_high"]),
               "mean": (metrics.aggregate_mean(x), s["boot_low"], s["boot_high"]),
               "optimality_gap": (metrics.optimality_gap(x), GAMMA - s["boot_high"], GAMMA - s["boot_low"])}
        for name, (v, a, b) in own.items():
            rows.append({"suite": suite, "metric": metric, "policy": pol, "n_seeds": shape[0],
                         "n_tasks": shape[1], "aggregate": name, "value": float(v), "low": float(a),
                         "high": float(b)})
    return pd.DataFrame(rows)


def _profiles(x, al, suite, metric, reps, rng, alpha) -> pd.DataFrame:
    boot = bootstrap.crossed_bootstrap(x, bootstrap.weighted_profile, resamples=reps, rng=rng)  # (B, policies, taus)
    lo, hi = intervals.percentile_interval(boot, 1 - alpha)
    rows = []
    for j, pol in enumerate(al.policies):
        point = metrics.profile(x[j])
        rows += [{"suite": suite, "metric": metric, "policy": pol, "tau": float(tau), "value": float(point[k]),
                  "low": float(lo[j, k]), "high": float(hi[j, k])} for k, tau in enumerate(TAUS)]
    return pd.DataFrame(rows)


def shown_steps(steps, most: int = MAX_STEPS) -> list:
    """At most ``most`` of the sorted ``steps``, evenly spaced, the first and the last kept."""
    steps = sorted(steps)
    if len(steps) <= most:
        return steps
    return [steps[i] for i in sorted(set(np.linspace(0, len(steps) - 1, most).round().astype(int)))]


def _iqm_steps(eval_all, al, suite, metric, baseline, ks, reps, rng, alpha, views) -> pd.DataFrame:
    """IQM of ``metric`` at each evaluation step on the final rectangle's seeds and tasks.
    With one evaluation step overall that step is the final evaluation: its cells are ``al``'s."""
    steps = eval_all["step"].unique()
    if steps.size == 1:
        kept, mats, all_steps = [int(steps[0])], [al.x[al.metrics.index(metric)]], [int(steps[0])]
    else:
        kept, mats, all_steps = _step_cells(eval_all, al, suite, metric, ks, views)
    if len(all_steps) > len(shown_steps(all_steps)):
        views.notes.append(f"{suite}: IQM over steps shows {MAX_STEPS} of {len(all_steps)} evaluation steps")
    if not kept:
        return pd.DataFrame()
    x = np.stack(mats, axis=1)  # (policies, steps, seeds, tasks)
    views.steps[(suite, metric)] = (kept, {p: np.moveaxis(x[j], 0, -1).copy() for j, p in enumerate(al.policies)})
    final = al.x[al.metrics.index(metric)]
    # a step whose cells are the final evaluation's takes the summary's IQM interval (`ViewsBuilder.result`:
    # one statistic, one interval); the other steps are bootstrapped here, on the same draws as before
    others = [i for i in range(len(kept)) if not np.array_equal(x[:, i], final)]
    p, k = x.shape[0], len(others)
    boot = bootstrap.crossed_bootstrap(x[:, others].reshape(p * k, *x.shape[2:]), bootstrap.weighted_iqm, resamples=reps,
                                   rng=rng)
    lo, hi = intervals.percentile_interval(boot, 1 - alpha) if k else (np.empty(0), np.empty(0))
    rows = []
    for j, pol in enumerate(al.policies):
        for i, step in enumerate(kept):
            band = (float(lo[j * k + others.index(i)]), float(hi[j * k + others.index(i)])) if i in others \
                else (np.nan, np.nan)
            rows.append({"suite": suite, "metric": metric, "policy": pol, "step": step, "iqm": metrics.iqm(x[j, i]),
                         "low": band[0], "high": band[1], "final": i not in others})
    return pd.DataFrame(rows)


def _step_cells(eval_all, al, suite, metric, ks, views):
    """(kept steps, their (policies, seeds, tasks) matrices of ``metric``, every step) of
    the shown evaluation steps that cover the final rectangle."""
    sub = eval_all[(eval_all["suite"] == suite) & eval_all["policy"].isin(al.policies)]
    kept, mats = [], []
    idx = pd.MultiIndex.from_product([al.policies, al.seeds, al.tasks], names=["policy", "seed", "task"])
    all_steps = sorted(sub["step"].unique().tolist())
    for step in shown_steps(all_steps):
        c = cell_metrics(sub[sub["step"] == step], ks)
        v = c.set_index(["policy", "seed", "task"])[metric].reindex(idx).to_numpy(dtype=np.float64)
        if np.isnan(v).any():
            views.notes.append(f"{suite}: step {step} lacks some of the final evaluation's seeds x tasks; "
                               "left out of the IQM-over-steps view")
            continue
        kept.append(int(step))
        mats.append(v.reshape(len(al.policies), len(al.seeds), len(al.tasks)))
    return kept, mats, all_steps


# ------------------------------------------------------------------------- the export

def npz_bytes(arrays: dict) -> bytes:
    """An .npz archive (what np.savez writes) of {name: array}, any name (np.savez takes
    names as keyword arguments, so a policy called "file" would clash); np.load reads it."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, arr in arrays.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, np.ascontiguousarray(arr), allow_pickle=False)
    return buf.getvalue()


def export_files(views: Views, name) -> dict:
    """{file name: bytes} of the export: one .npz per suite x metric ({policy: (runs,
    tasks)}), one *__steps.npz per suite on its view metric ({policy: (runs, tasks,
    steps)}), and index.json describing them. ``name(suite, metric)`` makes a file stem."""
    import json

    files, index = {}, []
    for (suite, metric), mats in views.matrices.items():
        fname = f"{name(suite, metric)}.npz"
        files[fname] = npz_bytes(mats)
        index.append({"file": fname, "suite": suite, "metric": metric, "shape": "(runs, tasks)",
                      "policies": list(mats), **views.index[suite]})
    for (suite, metric), (steps, mats) in views.steps.items():
        fname = f"{name(suite, metric)}__steps.npz"
        files[fname] = npz_bytes(mats)
        index.append({"file": fname, "suite": suite, "metric": metric, "shape": "(runs, tasks, steps)",
                      "steps": steps, "policies": list(mats), **views.index[suite]})
    files["index.json"] = (json.dumps(index, indent=1) + "\n").encode()
    return files
