"""One suite's paired comparison of every policy against the baseline, for `build_report`:
the suite's plan (its cells aligned, metrics, headline metric: `plan_suite`), the comparison
itself (`compare_suite`: summary, per-task values, paired rows, per-seed values, categories,
flips, GEE), the pairing check, the headline's Holm and intervals (`headline_rows`), the power
notes and the page's error rate (`page_error`). `rliable_views` starts from `plan_suite`'s
rectangles before any draw.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from reports import load
from reports.cells import (align, category_values, headline_metric, metric_names, per_task_rows,
                           score_is_pass1)
from policies.errors import UserError


@dataclass
class SuitePlan:
    """What one suite compares, fixed before any random draw (`plan_suite`): its metrics,
    the headline metric (None: none), each candidate's own rectangle, the all-policy rectangle."""

    suite: str
    attempts: int
    metrics: list
    head: str | None
    cands: list
    pairs: dict
    al: object
    notes: list


def plan_suite(cells: pd.DataFrame, suite: str, attempts: int, policies: list[str], baseline: str, ks,
                primary: str) -> SuitePlan:
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
    return SuitePlan(suite, attempts, metrics, head, cands, pairs, al, notes)


def compare_suite(acc: dict, fr: load.Frames, plan: SuitePlan, baseline: str, *, rng, alpha: float,
                   resamples: int, stages: tuple[int, int], progress, unpaired: bool, helper=None,
                   gee_ok: bool = True) -> None:
    """Append every comparison table of one suite (`plan_suite`) to ``acc``: the draws of
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


def check_pairing(fr: load.Frames, cells: pd.DataFrame, baseline: str, cands: list[str], unpaired: bool) -> list[str]:
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


def integer_counts(per_seed: pd.DataFrame) -> None:
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


def concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def headline_rows(paired: pd.DataFrame, alpha: float, resamples: int, target_delta) -> pd.DataFrame:
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


def skew_limit(n: int) -> float:
    return max(SKEW_WARN, float(np.sqrt(6.0 * n * (n - 1) / ((n - 2) * (n + 1) * (n + 3))))) if n > 2 else np.inf


def power_notes(paired: pd.DataFrame, alpha: float, resamples: int) -> list[str]:
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
        skewed = prim[np.abs(prim["skew_seed"]) >= prim["n_seeds"].map(skew_limit)]
        for _, r in skewed.iterrows():
            notes.append(f"{suite}: d_s of {r['candidate']} ({r['metric']}) is skewed (skewness {r['skew_seed']:+.2f} "
                         f"over {int(r['n_seeds'])} seeds, beyond {skew_limit(int(r['n_seeds'])):.2f}): its t interval "
                         "may undercover (about 0.90-0.92 instead of 0.95 at a skewness of 2 over 10-20 seeds), and "
                         "the seed-level tests test 'no effect' (the two runs of a seed exchangeable), so a small p "
                         "says the policy changes the outcome, not that it changes the mean in the direction of "
                         "delta")
    return notes


def page_error(plans: list, baseline: str, alpha: float, resamples: int, seed: int, unpaired: bool) -> pd.DataFrame:
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
