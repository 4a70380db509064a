"""`build_report`: from run files (or frames) to tables, figures, index.html and report.md."""
from __future__ import annotations

import hashlib
import json
import platform
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from hbsim.contract.labels import has_part, part_suffix
from reports.readings.summary import untrained_lines
from reports import budget as budget_mod, gap, load
from reports.cells import cell_metrics, metric_names, view_metric
from reports.compare import check_pairing, compare_suite, concat, headline_rows, integer_counts, page_error, plan_suite, power_notes
from policies.errors import UserError

# reports.analysis / values / gee / diagnostics (scipy, statsmodels) are imported after the
# inputs are validated, so that a rejected call answers quickly.

TABLES = ("summary", "category_values", "per_task", "paired", "per_seed", "categories", "flips", "flip_counts", "gee",
          "sensitivity", "diagnostics", "cost", "visits", "aggregates", "profiles", "iqm_steps")


@dataclass
class ReportResult:
    """Everything a report shows. Tables are DataFrames named as their CSV files."""

    config: dict
    tables: dict[str, pd.DataFrame]
    diag: "diagnostics.Diagnostics"  # noqa: F821
    notes: list[str]
    suites: dict[str, int]  # suite -> attempts per task
    policies: list[str]
    #: suite -> its headline metric, decided once (`cells.headline_metric`); None: the suite lacks
    #: the --primary metric, so it has no headline row, figure or verdict. Every renderer reads it.
    headline: dict[str, str | None] = field(default_factory=dict)
    #: suite -> its metrics, in the report's order (score folded into pass@1 where they agree)
    metrics: dict[str, list[str]] = field(default_factory=dict)
    out: Path | None = None
    files: dict[str, Path] = field(default_factory=dict)
    views: "rliable_views.Views | None" = None  # noqa: F821 (rliable's views and the score matrices)

    def view_metric(self, suite: str) -> str:
        """The metric of the suite's single-metric views (`cells.view_metric`)."""
        return view_metric(self.metrics[suite], self.headline[suite])

    def __getattr__(self, name):  # result.paired, result.summary, ...
        tables = self.__dict__.get("tables", {})
        if name in tables:
            return tables[name]
        raise AttributeError(name)


def _frames(obj, extra: tuple[str, ...] = ()) -> load.Frames:
    if isinstance(obj, load.Frames):
        return obj
    if isinstance(obj, pd.DataFrame):
        return load.make_frames(obj, extra=extra)
    if isinstance(obj, dict):
        return load.make_frames(obj["eval"], obj.get("train"), extra=extra)
    if isinstance(obj, tuple):
        return load.make_frames(*obj, extra=extra)
    return load.read_dir(obj, extra=extra)


def _validate(fr: load.Frames, baseline: str, suite: str | None, ks, resamples: int, alpha: float, primary: str,
              target_delta: float | None):
    policies = sorted(fr.eval["policy"].unique().tolist())
    if baseline not in policies:
        parts = (f"; these are the labels of a grid of parts, each part its own environment: report one part with "
                 f"--part NAME (its labels without {part_suffix('NAME')})" if any(has_part(p) for p in policies) else "")
        raise UserError(f"--baseline: got {baseline!r}, allowed: one of the policy labels {policies}{parts}")
    attempts = load.attempts_per_suite(fr.eval)
    if suite is not None:
        if suite not in attempts:
            raise UserError(f"--suite: got {suite!r}, allowed: one of {sorted(attempts)}")
        attempts = {suite: attempts[suite]}
    most = max(attempts.values())
    if ks is None:                      # the default: pass@1 and pass@3 where tasks have 3 attempts
        ks = [k for k in DEFAULT_KS if k <= most]
    ks = tuple(sorted(set(int(k) for k in ks)))
    if not ks or ks[0] < 1:
        raise UserError(f"--k: got {list(ks)}, allowed: positive integers")
    if ks[-1] > most:
        raise UserError(f"--k: got {ks[-1]}, allowed: k <= the number of attempts per task "
                         f"(at most {most}: {attempts})")
    if not 0 < alpha < 1:
        raise UserError(f"--alpha: got {alpha}, allowed: 0 < alpha < 1")
    if resamples < 1:
        raise UserError(f"--resamples: got {resamples}, allowed: an integer >= 1")
    names = sorted({m for n in attempts.values() for m in metric_names(ks, n)})
    if primary not in names:
        raise UserError(f"--primary: got {primary!r}, allowed: one of the metrics of this report {names}")
    if target_delta is not None and not (np.isfinite(target_delta) and 0 < target_delta <= 1):
        raise UserError(f"--target-delta: got {target_delta!r}, allowed: a number in (0, 1] (metrics lie in [0, 1])")
    return policies, attempts, ks


#: pass@k / pass^k shown by default (those with k above the attempts per task are left out)
DEFAULT_KS = (1, 3)


def build_report(dir_or_frames, baseline: str, out=None, suite: str | None = None, ks=None,
                 resamples: int = 10000, seed: int = 0, alpha: float = 0.05,
                 progress: Callable[[int, int, str], None] | None = None, axis: str | None = None,
                 primary: str = "score", unpaired: bool = False, target_delta: float | None = None,
                 jobs: int = 1, budget: dict | None = None) -> ReportResult:
    """Paired comparison of every policy against ``baseline``; the seed is the unit of the
    tests (reports.inference). The headline: ``primary`` (score; pass@1 where the two
    agree) tested over seeds, Holm over candidates x suites, with its simultaneous t
    interval and the power of that procedure (`inference.headline`); other metrics are
    secondary (max-T over a candidate's metrics). Runs pair by seed only when their
    run.json environments agree (else UserError, unless ``unpaired``: independent-sample
    tests over seeds). target_delta: the effect `seeds_needed` plans for (default: mde).

    dir_or_frames: a grid/run directory, a `load.Frames`, an eval DataFrame, a dict
    {"eval": df, "train": df} or a tuple (eval_df, train_df). out: directory to write
    index.html, report.md, figures (PNG) and CSVs into (None: compute only).
    progress(done, total, label) is called while the bootstraps run. axis: a swept knob
    column of a collected grid (e.g. "policy.tau"): adds the `sensitivity` table (delta
    against the baseline per knob value) and its figure. jobs: 2 runs rliable's views, the
    summary's IQM replicates and half the figures in a forked helper process
    (`reports.offload`; the same numbers and files as 1). budget: `reports.budget.frames_at`'s
    selection (with its Frames as dir_or_frames): every section at exactly that milestone.
    """
    from reports import offload

    offload.check_jobs(jobs)
    fr = _frames(dir_or_frames, (axis,) if axis else ())
    policies, attempts, ks = _validate(fr, baseline, suite, ks, resamples, alpha, primary, target_delta)
    axis_values = load.axis_values(fr.eval, axis) if axis else None

    rng = np.random.default_rng(seed)
    cells = budget_mod.cells_at(fr, budget, ks) if budget else cell_metrics(fr.eval, ks)
    notes = _short_attempts(attempts, ks)
    notes += check_pairing(fr, cells, baseline, [p for p in policies if p != baseline], unpaired)
    load.release_arrow()  # the group-bys' freed string buffers (load.release_arrow)
    plans = [plan_suite(cells, s, attempts[s], policies, baseline, ks, primary) for s in sorted(attempts)]
    load.release_arrow()
    tables, views = _compare(fr, cells, plans, policies, baseline, ks, notes, rng=rng, seed=seed, alpha=alpha,
                             resamples=resamples, progress=progress, unpaired=unpaired, target_delta=target_delta,
                             jobs=jobs, budget=budget)
    diag, budget_cfg = _more_tables(tables, notes, fr, cells, plans, baseline, ks, seed=seed, alpha=alpha,
                                    resamples=resamples, unpaired=unpaired, axis=axis, axis_values=axis_values,
                                    budget=budget)
    for line in notes:
        if "excluded" in line or "lacks" in line:
            warnings.warn(line, stacklevel=2)
    config = _config(fr, baseline=baseline, suite=suite, ks=ks, resamples=resamples, seed=seed, alpha=alpha, axis=axis,
                     primary=primary, unpaired=unpaired, target_delta=target_delta, budget_cfg=budget_cfg)
    result = ReportResult(config, tables, diag, notes, attempts, policies, views=views,
                          headline={p.suite: p.head for p in plans}, metrics={p.suite: p.metrics for p in plans})
    if out is not None:
        from reports import render, validity
        page = validity.write_page_if_any(fr.source if fr.source != "frames" else None, Path(out))  # validity.html
        if page is not None:
            result.files["validity"] = page          # index.html links it
        render.write(result, Path(out), jobs=jobs)
    return result


def _short_attempts(attempts: dict, ks) -> list[str]:
    """A note per k for the suites with fewer than k attempts per task (no pass@k there)."""
    notes = []
    for k in ks:
        short = [s for s, n in attempts.items() if n < k]
        if short:
            notes.append(f"pass@{k}/pass^{k} not computed for suite(s) {short}: fewer than {k} attempts per task")
    return notes


def _compare(fr: load.Frames, cells: pd.DataFrame, plans: list, policies: list[str], baseline: str, ks,
             notes: list[str], *, rng, seed: int, alpha: float, resamples: int, progress, unpaired: bool,
             target_delta, jobs: int, budget: dict | None):
    """(tables, rliable's views): every suite's comparison against the baseline (`compare_suite`,
    on `rng`) and rliable's views, started first (in the helper process with jobs 2: they draw
    from a generator of their own and need only the all-policy rectangles); notes appended."""
    from reports import values
    acc = {name: [] for name in TABLES}
    stages = len(plans) * len(policies)
    from reports import rliable_views
    # rliable's views of every suite start first (in the helper process with jobs 2): they draw from a
    # generator of their own and need only the all-policy rectangles
    builder = rliable_views.ViewsBuilder(budget_mod.views_frames(fr) if budget else fr, cells, baseline, ks,
                                         resamples=resamples, seed=seed, alpha=alpha, jobs=jobs)
    try:
        for plan in plans:
            if plan.al.tasks and plan.al.seeds:
                builder.add(plan.suite, plan.metrics, [p for p in policies if p in set(plan.al.policies)],
                            view_metric(plan.metrics, plan.head))
        helper = builder.helper if builder.helper.forked else None  # the summaries' IQM replicates
        interpolated = bool(budget) and bool((budget["table"]["rule"] == "interpolated").any())
        for si, plan in enumerate(plans):
            compare_suite(acc, fr, plan, baseline, rng=rng, alpha=alpha, resamples=resamples,
                           stages=(si * len(policies), stages), progress=progress, unpaired=unpaired,
                           helper=helper, gee_ok=not interpolated)
            if interpolated:
                plan.notes.append(f"{plan.suite}: GEE not fitted: it models single binary attempts, and the runs are "
                                  "read between two evaluations (interpolated at the budget milestone)")
            notes += plan.notes
        later = [part for part in acc["summary"] if isinstance(part, values.Later)]
        for part in reversed(later):  # what the helper has not started yet is done here, now idle
            part.steal()
        acc["summary"] = [part.result() if isinstance(part, values.Later) else part for part in acc["summary"]]
        tables = {name: concat(frames) for name, frames in acc.items() if frames or name in _COMPARISON}
        tables["paired"] = headline_rows(tables["paired"], alpha, resamples, target_delta)
        if tables["paired"].empty and len(policies) > 1:
            raise UserError(f"--baseline {baseline!r}: no candidate shares a seed and a task with it in any suite, "
                            "so nothing can be compared: " + "; ".join(n for n in notes if "not compared" in n))
        views = builder.result(tables["summary"])
    finally:
        builder.close()
    tables.update(views.tables)
    notes += views.notes
    return tables, views


def _more_tables(tables: dict, notes: list[str], fr: load.Frames, cells: pd.DataFrame, plans: list, baseline: str,
                 ks, *, seed: int, alpha: float, resamples: int, unpaired: bool, axis, axis_values,
                 budget: dict | None):
    """The tables beside the comparison (power notes, the page's error rate, sensitivity,
    diagnostics, the share of the gap, a budget report's cost and ranking), into `tables`
    and `notes` -> (diagnostics, the budget's config or None)."""
    from reports import analysis, diagnostics

    notes += power_notes(tables["paired"], alpha, resamples)
    tables["page_error"] = page_error(plans, baseline, alpha, resamples, seed, unpaired)
    if axis:
        tables["sensitivity"] = analysis.sensitivity_rows(tables["paired"], axis, axis_values, baseline)
    integer_counts(tables["per_seed"])
    diag = diagnostics.compute(fr.train, fr.eval_all)
    notes += diag.notes
    notes += [line.removeprefix("warning: ") for line in untrained_lines(fr.train)]  # a filter that dropped every group
    tables["diagnostics"], tables["cost"], tables["visits"] = diag.spearman, diag.cost, diag.visits
    # share of the achievable gain (reports.gap), in a budget report at the milestone
    tables["gap"] = gap.gap_table(fr, budget_mod.run_scores(cells) if budget else None,
                                  budget_mod.train_at(fr.train, budget["unit"], budget["at"]) if budget else None)
    budget_cfg = None
    if budget:
        tables["budget"] = budget["table"]
        steps_cells = cell_metrics(budget["steps"], ks)
        tables["ranking"] = budget_mod.ranking_rows(steps_cells, cells, alpha, resamples=resamples,
                                                    rng=np.random.default_rng(seed))
        budget_cfg = {"unit": budget["unit"], "at": budget["at"], "largest": budget["largest"],
                      "tolerance": budget["tolerance"], "rule": budget_mod.RULES["interpolated"],
                      "lines": budget_mod.ranking_lines(steps_cells, cells, budget, alpha, tables["ranking"])}
    return diag, budget_cfg


def _config(fr: load.Frames, *, baseline, suite, ks, resamples, seed, alpha, axis, primary, unpaired, target_delta,
            budget_cfg) -> dict:
    """The report's resolved config (report.json) and its hash over the keys that change the numbers."""
    config = {"baseline": baseline, "suite": suite, "ks": list(ks), "resamples": resamples, "seed": seed,
              "alpha": alpha, "axis": axis, "primary": primary, "unpaired": unpaired, "target_delta": target_delta,
              "source": fr.source, "part": fr.part, "versions": _versions(), "runs": _runs(fr)}
    if budget_cfg:
        config["budget"] = budget_cfg
    tuning = budget_mod.tuned_lines(fr.source) if fr.source != "frames" and Path(fr.source).is_dir() else []
    if tuning:
        config["tuning"] = tuning                 # DIR/tune.json's selection, on the page and in report.md
    keyed = {k: config[k] for k in ("baseline", "suite", "ks", "resamples", "seed", "alpha", "axis", "primary",
                                    "unpaired", "target_delta", "runs")}
    if budget_cfg:
        keyed["budget"] = {k: v for k, v in budget_cfg.items() if k != "lines"}
    canonical = json.dumps(keyed,
                           sort_keys=True, separators=(",", ":"))
    config["config_hash"] = hashlib.sha256(canonical.encode()).hexdigest()[:16]
    return config


_COMPARISON = ("summary", "category_values", "per_task", "paired", "per_seed", "categories", "flips", "flip_counts", "gee")


def _versions() -> dict:
    import matplotlib
    import scipy
    import statsmodels

    return {"python": platform.python_version(), "numpy": np.__version__, "pandas": pd.__version__,
            "scipy": scipy.__version__, "statsmodels": statsmodels.__version__,
            "matplotlib": matplotlib.__version__}


def _runs(fr: load.Frames) -> dict:
    """run_id -> (policy, seed, config_hash) of the runs in the final evaluation."""
    ids = fr.eval[["run_id", "policy", "seed"]].drop_duplicates().sort_values(["policy", "seed", "run_id"])
    out = {}
    for run_id, pol, seed in ids.itertuples(index=False):
        meta = fr.runs.get(run_id, {})
        out[run_id] = {"policy": pol, "seed": int(seed), "config_hash": meta.get("config_hash")}
    digest = hashlib.sha256(json.dumps(out, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]
    return {"hash": digest, "runs": out}
