"""Compact per-policy summary of train + eval frames (used by `hb sim` and the grid runner).

Per policy label, over seeds: final held-out score of each suite (mean reward of the
final-step eval rows of a seed, then mean over seeds ± the half-width of the two-sided 95%
Student t-interval over seeds, `reports.readings.intervals.mean_half_width` -- not the reports' crossed
bootstrap CI), cumulative
regret (sum over steps, mean over seeds), how often a pure policy picked the oracle's
one-step best harness (oracle%) -- regret and oracle measure the TRAINING OBJECTIVE (mean
true success on training tasks x training harnesses), hence the `[train]` in their
headers; per-target oracles and regret (held-out tasks, held-out harness) come from
`--counterfactual` runs through `hb validity`, mean visits per harness (steps with groups on the
harness), and groups generated per optimized group (ratio of sums).

With `fixed` runs a `best_fixed` row follows (per suite ONE arm for all seeds, the best mean
over these seeds: reports.readings.references.best_fixed); with `uniform` and a reference (an `oracle`
aimed at an eval suite or the training objective, knob `target`, the best fixed arm, `mixed`),
a block of each policy's share of the achievable gain follows the table
(reports.readings.references.share_of_gap: the ratio, its Fieller interval, the raw delta).
The policy name and knobs of a label come from run.json (`runs`, reports.readings.references.run_table);
without it, from the label (`name[knob=value]`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from hbsim.contract import BUDGET_UNIT, ROW_KEYS, SUITES
from hbsim.contract.labels import BEST_FIXED
from reports.readings import intervals, references

#: the eval columns `summary_table` reads (a caller may read just these: the eval table is the large one)
EVAL_COLUMNS_READ = [*ROW_KEYS, "suite", "reward"]


def summary_rows(train_df: pd.DataFrame, eval_df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """What `summarize` reads of one run: its train rows and the EVAL_COLUMNS_READ of its
    final evaluation (a grid worker returns them, so the wrap-up reads no cell files)."""
    if BUDGET_UNIT in eval_df.columns:      # budget evaluations (eval_budget) are not the final one
        eval_df = eval_df[eval_df[BUDGET_UNIT].isna()]
    if eval_df.empty:
        return train_df, eval_df.loc[:, [c for c in EVAL_COLUMNS_READ if c in eval_df.columns]]
    final = eval_df[eval_df["step"] == eval_df["step"].max()]
    return train_df, final.loc[:, EVAL_COLUMNS_READ].reset_index(drop=True)


def final_scores(eval_df: pd.DataFrame) -> pd.DataFrame:
    """(policy, seed, suite) -> mean reward of the final evaluation (largest step) of each run."""
    if BUDGET_UNIT in eval_df.columns:      # budget evaluations (eval_budget) are not the final one
        eval_df = eval_df[eval_df[BUDGET_UNIT].isna()]
    if eval_df.empty:
        return pd.DataFrame(columns=["policy", "seed", "suite", "score"])
    last = eval_df.groupby(["policy", "seed"])["step"].transform("max")
    final = eval_df[eval_df["step"] == last]
    return final.groupby(["policy", "seed", "suite"], as_index=False)["reward"].mean().rename(
        columns={"reward": "score"})


def summarize(train_df: pd.DataFrame, eval_df: pd.DataFrame, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per policy label: <suite>_mean, <suite>_t95_seeds (half-width of the 95%
    t-interval over seeds), regret, regret_t95_seeds, seeds,
    oracle_share (nan for mixed batches), gen_per_opt, visits_<harness>; then `best_fixed`
    (suite columns only) where there are fixed runs. runs: `references.run_table` (default:
    read from the labels)."""
    scores = final_scores(eval_df)
    if "policy" not in train_df:  # runs of 0 steps have an empty train table without columns
        train_df = pd.DataFrame(columns=["policy", "seed", "arm", "groups_generated", "groups_optimized"])
    alloc_cols = [c for c in train_df.columns if c.startswith("alloc_")]
    rows = []
    for label in dict.fromkeys([*pd.unique(train_df["policy"]), *pd.unique(scores["policy"])]):
        tr = train_df[train_df["policy"] == label]
        seeds = pd.concat([tr["seed"], scores.loc[scores["policy"] == label, "seed"]])
        row = {"policy": label, "seeds": int(seeds.nunique())}
        for suite in SUITES:
            vals = scores[(scores["policy"] == label) & (scores["suite"] == suite)]["score"].to_numpy()
            row[f"{suite}_mean"], row[f"{suite}_t95_seeds"] = intervals.mean_half_width(vals)
        if "regret" in tr:
            per_seed = tr.groupby("seed")["regret"].sum().to_numpy()
            row["regret"], row["regret_t95_seeds"] = intervals.mean_half_width(per_seed)
        if "oracle_arm" in tr:
            hit = (tr["arm"] == tr["oracle_arm"]).where(tr["arm"] >= 0)
            row["oracle_share"] = float(hit.groupby(tr["seed"]).mean().mean())
        opt = tr["groups_optimized"].sum()
        row["gen_per_opt"] = float(tr["groups_generated"].sum() / opt) if opt else float("nan")
        for col in alloc_cols:
            row[f"visits_{col[len('alloc_'):]}"] = float((tr[col] > 0).groupby(tr["seed"]).sum().mean())
        rows.append(row)
    best = references.best_fixed(scores, _runs(runs, scores))
    if not best.empty:
        arms = int(best["arms"].max())
        chosen = "/".join(str(a) for a in dict.fromkeys(best["arm"]))    # per suite: one arm for all seeds
        row = {"policy": f"{BEST_FIXED} (arm {chosen} of {arms})",
               "seeds": int(best["seed"].nunique())}
        for suite in SUITES:
            scores_ = best.loc[best["suite"] == suite, "score"]
            row[f"{suite}_mean"], row[f"{suite}_t95_seeds"] = intervals.mean_half_width(scores_)
        rows.append(row)
    return pd.DataFrame(rows)


def _runs(runs: pd.DataFrame | None, scores: pd.DataFrame) -> pd.DataFrame:
    return references.runs_from_labels(scores["policy"]) if runs is None else runs


def _pm(mean: float, half: float, digits: int = 3) -> str:
    if not np.isfinite(mean):
        return "-"
    return f"{mean:.{digits}f}" + (f" ± {half:.{digits}f}" if np.isfinite(half) else "")


def _pct(share: float) -> str:
    return f"{100 * share:.0f}%" if np.isfinite(share) else "-"


def summary_table(train_df: pd.DataFrame, eval_df: pd.DataFrame, runs: pd.DataFrame | None = None) -> str:
    """Fixed-width text table, one line per policy label, then the share-of-gap block where
    the references were run (see the module docstring)."""
    summ = summarize(train_df, eval_df, runs)
    if summ.empty:
        return "(no runs)"
    visit_cols = [c for c in summ.columns if c.startswith("visits_")]
    header = (["policy", "seeds"] + [f"{s} (± 95% t-interval over seeds)" for s in SUITES]
              + ["cum. regret[train] (± t-int.)", "oracle%[train]", "gen/opt",
                 "visits " + "/".join(c[7:] for c in visit_cols)])
    lines = []
    for _, r in summ.iterrows():
        lines.append([str(r["policy"]), str(r["seeds"])]
                     + [_pm(r[f"{s}_mean"], r[f"{s}_t95_seeds"]) for s in SUITES]
                     + [_pm(r.get("regret", np.nan), r.get("regret_t95_seeds", np.nan), 3),
                        _pct(r.get("oracle_share", np.nan)), _num(r.get("gen_per_opt", np.nan), "{:.2f}"),
                        "/".join(_num(r[c], "{:.0f}") for c in visit_cols)])
    widths = [max(len(header[i]), *(len(line[i]) for line in lines)) for i in range(len(header))]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    scores = final_scores(eval_df)
    both = pd.concat([references.train_scores(train_df), scores], ignore_index=True)
    shares = references.share_lines(references.share_of_gap(both, _runs(runs, scores)))
    idle = untrained_lines(train_df)
    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(line) for line in lines]
                     + ([""] + shares if shares else []) + ([""] + idle if idle else []))


def untrained_lines(train_df: pd.DataFrame) -> list[str]:
    """One warning per policy label some of whose runs optimized no group in any step (the
    group filter, `env.keep_band` / `env.min_abs_adv`, dropped every group: its numbers are
    those of the untrained start, not of a design); [] when every run trained."""
    if train_df is None or train_df.empty or "groups_optimized" not in train_df:
        return []
    per_run = train_df.groupby(["policy", "seed"], observed=True)["groups_optimized"].sum()
    idle = per_run[per_run == 0]
    lines = []
    for policy, seeds in idle.groupby(level=0, observed=True):
        n = len(seeds)
        lines.append(f"warning: {policy}: {n} of {int((per_run.index.get_level_values(0) == policy).sum())} runs "
                     "optimized no group in any step: the group filter (equal rewards, env.keep_band, env.min_abs_adv) dropped "
                     "every group, so they did not train; loosen the filter")
    return lines


def _num(value, spec: str) -> str:
    return spec.format(value) if np.isfinite(value) else "-"
