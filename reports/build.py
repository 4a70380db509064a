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
from reports.cells import (align, category_values, cell_metrics, headline_metric, metric_names, per_task_rows,
                           score_is_pass1, view_metric)
from reports.text import conclusion, headline_table  # noqa: F401 (public: reports.headline_table)
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
    from reports import analysis, diagnostics, values

    rng = np.random.default_rng(seed)
    cells = budget_mod.cells_at(fr, budget, ks) if budget else cell_metrics(fr.eval, ks)
    notes: list[str] = []
    for k in ks:
        short = [s for s, n in attempts.items() if n < k]
        if short:
            notes.append(f"pass@{k}/pass^{k} not computed for suite(s) {short}: fewer than {k} attempts per task")
    notes += _check_pairing(fr, cells, baseline, [p for p in policies if p != baseline], unpaired)
    load.release_arrow()  # the group-bys' freed string buffers (load.release_arrow)
    acc = {name: [] for name in TABLES}
    stages = len(attempts) * len(policies)
    from reports import rliable_views
    plans = [_plan_suite(cells, s, attempts[s], policies, baseline, ks, primary) for s in sorted(attempts)]
    load.release_arrow()
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
            _compare_suite(acc, fr, plan, baseline, rng=rng, alpha=alpha, resamples=resamples,
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
        tables = {name: _concat(frames) for name, frames in acc.items() if frames or name in _COMPARISON}
        tables["paired"] = _headline(tables["paired"], alpha, resamples, target_delta)
        if tables["paired"].empty and len(policies) > 1:
            raise UserError(f"--baseline {baseline!r}: no candidate shares a seed and a task with it in any suite, "
                            "so nothing can be compared: " + "; ".join(n for n in notes if "not compared" in n))
        views = builder.result(tables["summary"])
    finally:
        builder.close()
    tables.update(views.tables)
    notes += views.notes
    notes += _power_notes(tables["paired"], alpha, resamples)
    tables["page_error"] = _page_error(plans, baseline, alpha, resamples, seed, unpaired)
    if axis:
        tables["sensitivity"] = analysis.sensitivity_rows(tables["paired"], axis, axis_values, baseline)
    _integer_counts(tables["per_seed"])
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
    for line in notes:
        if "excluded" in line or "lacks" in line:
            warnings.warn(line, stacklevel=2)
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
    result = ReportResult(config, tables, diag, notes, attempts, policies, views=views,
                          headline={p.suite: p.head for p in plans}, metrics={p.suite: p.metrics for p in plans})
    if out is not None:
        from reports import render, validity
        page = validity.write_page_if_any(fr.source if fr.source != "frames" else None, Path(out))  # validity.html
        if page is not None:
            result.files["validity"] = page          # index.html links it
        render.write(result, Path(out), jobs=jobs)
    return result


_COMPARISON = ("summary", "category_values", "per_task", "paired", "per_seed", "categories", "flips", "flip_counts", "gee")


@dataclass
class _SuitePlan:
    """What one suite compares, fixed before any random draw (`_plan_suite`): its metrics,
    the headline metric (None: none), each candidate's own rectangle, the all-policy rectangle."""

    suite: str
    attempts: int
    metrics: list
    head: str | None
    cands: list
    pairs: dict
    al: object
    notes: list


def _plan_suite(cells: pd.DataFrame, suite: str, attempts: int, policies: list[str], baseline: str, ks,
                primary: str) -> _SuitePlan:
    """Every pair (candidate, baseline) with a non-empty seeds x tasks rectangle is compared on
    its own rectangle; a pair without one is named in one line, with why. The all-policy
    tables (summary, per-task, categories' values, GEE, rliable's views) use the rectangle
    common to the baseline and the comparable candidates; a candidate that would empty it is
    left out of them (one line each)."""
    metrics = metric_names(ks, attempts)
    notes = []
    if score_is_pass1(cells, suite):
        metrics.remove("score")
        notes.append(f"{suite}: score equals pass@1 on every task (rewards are 1 for a success, else 0); "
                     "shown once, as pass@1")
    head = headline_metric(metrics, primary)
    if head is None:
        notes.append(f"{suite}: the primary metric {primary} is not computed here (fewer attempts per task); "
                     "every metric of this suite is secondary")
    cands = [p for p in policies if p != baseline]
    pairs, sizes = {}, {}
    for cand in cands:
        pal, _ = align(cells, suite, [cand, baseline], baseline, metrics)
        if pal.tasks and pal.seeds:
            pairs[cand], sizes[cand] = pal, len(pal.tasks) * len(pal.seeds)
        else:
            notes.append(f"{suite}: {cand!r} not compared with {baseline!r}: {_why_empty(cells, suite, cand, baseline)}")
    members = [baseline] + list(pairs)
    while True:
        al, align_notes = align(cells, suite, members, baseline, metrics)
        if (al.tasks and al.seeds) or len(members) <= 2:
            break
        drop = min(members[1:], key=lambda c: (sizes[c], c))
        members.remove(drop)
        notes.append(f"{suite}: {drop!r} left out of the all-policy tables (summary, per-task, GEE): no seeds x tasks "
                     "are common to every policy with it; its paired comparison stands")
    notes += align_notes
    if not (al.tasks and al.seeds):
        notes.append(f"{suite}: the baseline {baseline!r} has no complete seeds x tasks rectangle; suite skipped")
    return _SuitePlan(suite, attempts, metrics, head, cands, pairs, al, notes)


def _compare_suite(acc: dict, fr: load.Frames, plan: _SuitePlan, baseline: str, *, rng, alpha: float,
                   resamples: int, stages: tuple[int, int], progress, unpaired: bool, helper=None,
                   gee_ok: bool = True) -> None:
    """Append every comparison table of one suite (`_plan_suite`) to ``acc``: the draws of
    the report's generator ``rng``, in a fixed order (helper: `values.bootstrap_summary`'s)."""
    from reports import analysis, gee, values

    suite, al, first, total = plan.suite, plan.al, *stages
    kw = dict(resamples=resamples, rng=rng, alpha=alpha)
    if al.tasks and al.seeds:
        acc["summary"].append(values.bootstrap_summary(al, suite, baseline, helper=helper,
                                                         progress=_stage(progress, first + 1, total), **kw))
        acc["per_task"].append(per_task_rows(al, suite))
        acc["category_values"].append(category_values(al, suite))
        if gee_ok:
            rows, gee_notes = gee.gee_rows(fr.eval, al, suite, baseline)
            acc["gee"].append(pd.DataFrame(rows))
            plan.notes += gee_notes
    for ci, cand in enumerate(plan.cands):
        if cand not in plan.pairs:
            continue
        pal = plan.pairs[cand]
        stage = _stage(progress, first + 2 + ci, total)
        acc["paired"].append(pd.DataFrame(analysis.paired_rows(pal, suite, cand, baseline, progress=stage,
                                                               primary=plan.head, unpaired=unpaired, **kw)))
        acc["per_seed"].append(pd.DataFrame(analysis.per_seed_rows(pal, suite, cand, baseline, plan.attempts)))
        acc["categories"].append(pd.DataFrame(analysis.category_rows(pal, suite, cand, baseline, unpaired=unpaired,
                                                                     **kw)))
        flips, counts = analysis.flip_rows(pal, suite, cand, baseline)
        acc["flips"].append(pd.DataFrame(flips))
        acc["flip_counts"].append(pd.DataFrame(counts))


def _why_empty(cells: pd.DataFrame, suite: str, cand: str, baseline: str) -> str:
    """One clause: why a pair has no common seeds x tasks rectangle."""
    sub = cells[cells["suite"] == suite]
    mine, base = sub[sub["policy"] == cand], sub[sub["policy"] == baseline]
    if mine.empty:
        return f"it has no evaluation on this suite"
    if base.empty:
        return "the baseline has no evaluation on this suite"
    seeds = sorted(set(mine["seed"]) & set(base["seed"]))
    if not seeds:
        return (f"no common seed (its seeds {sorted(set(mine['seed']))[:6]}, the baseline's "
                f"{sorted(set(base['seed']))[:6]})")
    if not set(mine["task"]) & set(base["task"]):
        return (f"no common task (it was evaluated on {mine['task'].nunique()} other task ids, e.g. "
                f"{sorted(set(mine['task']))[0]!r})")
    return "no task is complete on a common seed in both arms"


def _check_pairing(fr: load.Frames, cells: pd.DataFrame, baseline: str, cands: list[str], unpaired: bool) -> list[str]:
    """Common random numbers: runs pair by seed only when their run.json environments agree
    (checked for the candidates that share a task with the baseline). A disagreement is a
    UserError naming the two runs, unless --unpaired."""
    pairs = cells[["policy", "suite", "task"]].drop_duplicates()  # who has which (suite, task): no row loop
    shared = pairs[pairs["policy"] == baseline][["suite", "task"]]
    sharing = set(pairs.merge(shared, on=["suite", "task"])["policy"])
    comparable = [c for c in cands if c in sharing]
    problems, unchecked = load.pairing_problems(fr.eval, fr.runs, baseline, comparable)
    notes = []
    if problems and not unpaired:
        more = f" (and {len(problems) - 1} more pair(s))" if len(problems) > 1 else ""
        raise UserError(f"pairing: {problems[0]}{more}; runs pair by seed only on the same environment and seed "
                        "(common random numbers); pass --unpaired to compare them as independent runs")
    if unpaired:
        notes.append("--unpaired: the seed-level tests compare the two arms' per-seed means as independent samples "
                     "(two-sample permutation, Welch, Mann-Whitney); secondary metrics are descriptive")
    elif unchecked:
        notes.append(f"pairing: {unchecked} (candidate, seed) pair(s) have no environment config in run.json; "
                     "they are paired by seed label only (common random numbers not checked)")
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


def _headline(paired: pd.DataFrame, alpha: float, resamples: int, target_delta) -> pd.DataFrame:
    """paired.csv's headline columns (inference.headline: Holm over candidates x suites on
    the primary metric, its simultaneous t interval, the power of that procedure)."""
    from reports import analysis, inference

    if paired.empty:
        return pd.DataFrame(columns=analysis.PAIRED_COLUMNS)
    return inference.headline(paired, alpha, resamples, target_delta)[analysis.PAIRED_COLUMNS]


#: the crossed bootstrap's coverage (`bootstrap.percentile_coverage`) below which a note says it undercovers
BOOT_NOTE_COVERAGE = 0.93
#: |skewness of d_s| from which the report warns: at least this, and at least one standard error
#: of the sample skewness at S seeds (sqrt(6 S (S - 1) / ((S - 2) (S + 1) (S + 3))): 0.69 at 10
#: seeds). Calibrated by simulation (`test_skew_warning_fires_where_the_interval_undercovers`):
#: the t interval's coverage falls below 0.93 at a population skewness of about 1.4 (10-20
#: seeds), where the sample skewness is typically 0.8-1.0; at skewness 2 (coverage 0.90-0.92)
#: this limit warns in about 70-90% of reports, normal d_s in about 12-25% (the limit of 2
#: standard errors warned in 36-70% there, which the audit saw as silence)
SKEW_WARN = 0.8


def _skew_limit(n: int) -> float:
    return max(SKEW_WARN, float(np.sqrt(6.0 * n * (n - 1) / ((n - 2) * (n + 1) * (n + 3))))) if n > 2 else np.inf


def _power_notes(paired: pd.DataFrame, alpha: float, resamples: int) -> list[str]:
    """Warnings: one seed (no interval, no p-value); the floor of the seed test above its
    Holm threshold; p_seed at its floor; the bootstrap interval below 5 seeds; skewed d_s."""
    from reports import bootstrap, inference

    notes = []
    for suite, g in paired.groupby("suite", sort=True):
        n_s = int(g["n_seeds"].min())
        prim = g[g["role"] == "primary"]
        if n_s < 2:
            notes.append(f"{suite}: only {n_s} seed: no interval and no p-value over seeds (boot_low/boot_high and "
                         "the summary's intervals are empty too: a bootstrap of one run per policy cannot see "
                         "run-to-run variation, so it could not target new runs); at least two seeds (training runs) "
                         "per policy are needed; the task-level tests are conditional on this one trained model per "
                         "policy")
            continue
        floor = float(g["p_floor"].iloc[0])
        family = int(prim["family"].iloc[0]) if len(prim) else 1
        if floor >= alpha / family:
            notes.append(f"{suite}: with {n_s} seeds the smallest attainable p_seed is {floor:.4g} >= alpha / "
                         f"{family} = {alpha / family:.4g} (Holm's first step over {family} comparisons): no "
                         "comparison can be significant; mde is inf, see seeds_needed in paired.csv")
        at = g[np.isclose(g["p_seed"], floor, rtol=1e-9, atol=0)]
        if len(at):
            pairs = ", ".join(f"{c} {m}" for c, m in zip(at["candidate"], at["metric"]))
            paired_ = bool((g["pairing"] == "paired").all())
            exact = inference.floor_of(n_s, resamples, not paired_)[1]
            why = ("every seed on the same side" if exact and paired_ else
                   "no random sign pattern reached the observed statistic" if paired_ else
                   "the arms' per-seed means do not overlap" if exact else
                   "no random relabeling of the runs reached the observed difference")
            notes.append(f"{suite}: p_seed sits at its floor {floor:.4g} ({why}) for {pairs}; "
                         "the true p may be smaller, only more seeds can show it")
        cover = bootstrap.percentile_coverage(n_s, 1 - alpha)
        if cover < BOOT_NOTE_COVERAGE:
            notes.append(f"{suite}: boot_low/boot_high (the crossed bootstrap: new tasks and new runs) resample only "
                         f"{n_s} seeds and undercover there: about {cover:.0%} instead of {1 - alpha:.0%} where "
                         "run-to-run variation dominates (bootstrap.percentile_coverage); read ci_low/ci_high")
        skewed = prim[np.abs(prim["skew_seed"]) >= prim["n_seeds"].map(_skew_limit)]
        for _, r in skewed.iterrows():
            notes.append(f"{suite}: d_s of {r['candidate']} ({r['metric']}) is skewed (skewness {r['skew_seed']:+.2f} "
                         f"over {int(r['n_seeds'])} seeds, beyond {_skew_limit(int(r['n_seeds'])):.2f}): its t interval "
                         "may undercover (about 0.90-0.92 instead of 0.95 at a skewness of 2 over 10-20 seeds), and "
                         "the seed-level tests test 'no effect' (the two runs of a seed exchangeable), so a small p "
                         "says the policy changes the outcome, not that it changes the mean in the direction of "
                         "delta")
    return notes


def _page_error(plans: list, baseline: str, alpha: float, resamples: int, seed: int, unpaired: bool) -> pd.DataFrame:
    """`inference.page_error_rate` on the all-policy rectangles (a generator of its own, so no
    other number moves); empty when unpaired or when nothing is tested."""
    from reports import inference

    suites = [inference.SuiteFamilies(p.al.x, p.al.policies.index(baseline),
                                      p.al.metrics.index(p.head) if p.head in p.al.metrics else None, p.al.categories)
              for p in plans if p.al.tasks and len(p.al.seeds) >= 2 and len(p.al.policies) > 1]
    if unpaired or not suites:
        return pd.DataFrame(columns=["rate", "rate_table", "rate_categories", "draws", "mc_sd"])
    rate = inference.page_error_rate(suites, alpha, resamples=min(resamples, 1000),
                                     rng=np.random.default_rng([seed, 32]))
    return pd.DataFrame([rate])


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
