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

from reports import gap, load
from reports.text import conclusion, headline_table  # noqa: F401 (public: reports.headline_table)
from policies.errors import UserError

# reports.analysis / reports.diagnostics (scipy, statsmodels) are imported after the
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
    out: Path | None = None
    files: dict[str, Path] = field(default_factory=dict)
    views: "rliable_views.Views | None" = None  # noqa: F821 (rliable's views and the score matrices)

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


def _validate(fr: load.Frames, baseline: str, suite: str | None, ks, resamples: int, alpha: float):
    policies = sorted(fr.eval["policy"].unique().tolist())
    if baseline not in policies:
        raise UserError(f"--baseline: got {baseline!r}, allowed: one of the policy labels {policies}")
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
    return policies, attempts, ks


#: pass@k / pass^k shown by default (those with k above the attempts per task are left out)
DEFAULT_KS = (1, 3)


def build_report(dir_or_frames, baseline: str, out=None, suite: str | None = None, ks=None,
                 resamples: int = 10000, seed: int = 0, alpha: float = 0.05,
                 progress: Callable[[int, int, str], None] | None = None, axis: str | None = None) -> ReportResult:
    """Paired comparison of every policy against ``baseline``; the seed is the unit of the
    tests (reports.inference), the crossed bootstrap gives the intervals.

    dir_or_frames: a grid/run directory, a `load.Frames`, an eval DataFrame, a dict
    {"eval": df, "train": df} or a tuple (eval_df, train_df). out: directory to write
    index.html, report.md, figures (PNG) and CSVs into (None: compute only).
    progress(done, total, label) is called while the bootstraps run. axis: a swept knob
    column of a collected grid (e.g. "policy.tau"): adds the `sensitivity` table (delta
    against the baseline per knob value) and its figure.
    """
    fr = _frames(dir_or_frames, (axis,) if axis else ())
    policies, attempts, ks = _validate(fr, baseline, suite, ks, resamples, alpha)
    axis_values = load.axis_values(fr.eval, axis) if axis else None
    from reports import analysis, diagnostics

    rng = np.random.default_rng(seed)
    cells = analysis.cell_metrics(fr.eval, ks)
    notes: list[str] = []
    for k in ks:
        short = [s for s, n in attempts.items() if n < k]
        if short:
            notes.append(f"pass@{k}/pass^{k} not computed for suite(s) {short}: fewer than {k} attempts per task")
    acc = {name: [] for name in TABLES}
    stages = len(attempts) * len(policies)
    for si, s in enumerate(sorted(attempts)):
        notes += _compare_suite(acc, fr, cells, s, attempts[s], policies, baseline, ks, rng=rng, alpha=alpha,
                                resamples=resamples, stages=(si * len(policies), stages), progress=progress)
    tables = {name: _concat(frames) for name, frames in acc.items() if frames or name in _COMPARISON}
    tables["paired"] = _holm(tables["paired"])
    from reports import rliable_views
    views = rliable_views.compute(fr, cells, tables["summary"], policies, baseline, ks, resamples=resamples, seed=seed,
                                  alpha=alpha)
    tables.update(views.tables)
    notes += views.notes
    notes += _power_notes(tables["paired"], alpha)
    if axis:
        tables["sensitivity"] = analysis.sensitivity_rows(tables["paired"], axis, axis_values, baseline)
    _integer_counts(tables["per_seed"])
    diag = diagnostics.compute(fr.train, fr.eval_all)
    notes += diag.notes
    tables["diagnostics"], tables["cost"], tables["visits"] = diag.spearman, diag.cost, diag.visits
    tables["gap"] = gap.gap_table(fr)                         # share of the achievable gain (reports.gap)
    for line in notes:
        if "excluded" in line or "lacks" in line:
            warnings.warn(line, stacklevel=2)
    config = {"baseline": baseline, "suite": suite, "ks": list(ks), "resamples": resamples, "seed": seed,
              "alpha": alpha, "axis": axis, "source": fr.source, "versions": _versions(), "runs": _runs(fr)}
    canonical = json.dumps({k: config[k] for k in ("baseline", "suite", "ks", "resamples", "seed", "alpha", "axis",
                                                   "runs")},
                           sort_keys=True, separators=(",", ":"))
    config["config_hash"] = hashlib.sha256(canonical.encode()).hexdigest()[:16]
    result = ReportResult(config, tables, diag, notes, attempts, policies, views=views)
    if out is not None:
        from reports import render, validity
        page = validity.write_page_if_any(fr.source if fr.source != "frames" else None, Path(out))  # validity.html
        if page is not None:
            result.files["validity"] = page          # index.html links it
        render.write(result, Path(out))
    return result


_COMPARISON = ("summary", "category_values", "per_task", "paired", "per_seed", "categories", "flips", "flip_counts", "gee")


def _compare_suite(acc: dict, fr: load.Frames, cells: pd.DataFrame, suite: str, attempts: int, policies: list[str],
                   baseline: str, ks, *, rng, alpha: float, resamples: int, stages: tuple[int, int],
                   progress) -> list[str]:
    """Append every comparison table of one suite to ``acc``; return the notes."""
    from reports import analysis

    metrics = analysis.metric_names(ks, attempts)
    notes = []
    if analysis.score_is_pass1(cells, suite):
        metrics.remove("score")
        notes.append(f"{suite}: score equals pass@1 on every task (rewards are 1 for a success, else 0); "
                     "shown once, as pass@1")
    al, align_notes = analysis.align(cells, suite, policies, baseline, metrics)
    notes += align_notes
    if not al.tasks or not al.seeds:
        return notes + [f"{suite}: no complete seeds x tasks rectangle; suite skipped"]
    first, total = stages
    kw = dict(resamples=resamples, rng=rng, alpha=alpha)
    acc["summary"].append(analysis.bootstrap_summary(al, suite, baseline, progress=_stage(progress, first + 1, total),
                                                     **kw))
    acc["per_task"].append(analysis.per_task_rows(al, suite))
    acc["category_values"].append(analysis.category_values(al, suite))
    gee, gee_notes = analysis.gee_rows(fr.eval, al, suite, baseline)
    acc["gee"].append(pd.DataFrame(gee))
    notes += gee_notes
    for ci, cand in enumerate(p for p in policies if p != baseline):
        pal, _ = analysis.align(cells, suite, [cand, baseline], baseline, metrics)
        if not pal.tasks or not pal.seeds:
            notes.append(f"{suite}: {cand!r} shares no complete seeds x tasks with the baseline; not compared")
            continue
        stage = _stage(progress, first + 2 + ci, total)
        acc["paired"].append(pd.DataFrame(analysis.paired_rows(pal, suite, cand, baseline, progress=stage, **kw)))
        acc["per_seed"].append(pd.DataFrame(analysis.per_seed_rows(pal, suite, cand, baseline, attempts)))
        acc["categories"].append(pd.DataFrame(analysis.category_rows(pal, suite, cand, baseline, **kw)))
        flips, counts = analysis.flip_rows(pal, suite, cand, baseline)
        acc["flips"].append(pd.DataFrame(flips))
        acc["flip_counts"].append(pd.DataFrame(counts))
    return notes


def _integer_counts(per_seed: pd.DataFrame) -> None:
    """McNemar counts as nullable integers (blank where the metric is not binary)."""
    if per_seed.empty:
        return
    for col in ("n11", "n10", "n01", "n00"):
        per_seed[col] = per_seed[col].astype("Int64")
    for col in ("mcnemar_p", "mcnemar_mid_p"):
        per_seed[col] = per_seed[col].astype(float)


def _stage(progress, stage: int, stages: int):
    if progress is None:
        return None
    return lambda done, total, label: progress(done, total, f"[{stage}/{stages}] {label}")


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _holm(paired: pd.DataFrame) -> pd.DataFrame:
    """Holm over all candidates x metrics of each suite, applied to p_seed (the seed-level
    sign-flip test: the replication unit of a training method is the seed)."""
    from reports import analysis, stats

    if paired.empty:
        return pd.DataFrame(columns=analysis.PAIRED_COLUMNS)
    paired = paired.copy()
    for _, idx in paired.groupby("suite").groups.items():
        paired.loc[idx, "p_holm"] = stats.adjust(paired.loc[idx, "p_seed"].to_numpy(), "holm")
    return paired[analysis.PAIRED_COLUMNS]


def _power_notes(paired: pd.DataFrame, alpha: float) -> list[str]:
    """Warnings: one seed (no seed-level test); p_seed at its floor (the test cannot say
    how small p really is); a floor above alpha (nothing can be significant)."""
    notes = []
    for suite, g in paired.groupby("suite", sort=True):
        n_s = int(g["n_seeds"].min())
        floor = float(g["p_floor"].iloc[0])
        if n_s < 2:
            notes.append(f"{suite}: only {n_s} seed: no seed-level test is possible (p_seed = 1, no t-test); "
                         "the task-level tests are conditional on this one trained model per policy")
        elif floor >= alpha:
            notes.append(f"{suite}: with {n_s} seeds the smallest attainable p_seed is {floor:.4g} >= alpha = "
                         f"{alpha}: no comparison can be significant; see mde and seeds_needed in paired.csv")
        at = g[np.isclose(g["p_seed"], floor, rtol=1e-9, atol=0)]
        if n_s >= 2 and len(at):
            pairs = ", ".join(f"{c} {m}" for c, m in zip(at["candidate"], at["metric"]))
            notes.append(f"{suite}: p_seed sits at its floor {floor:.4g} (every seed on the same side) for {pairs}; "
                         "the true p may be smaller, only more seeds can show it")
    return notes


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
