"""What the clairvoyant references (policies.clairvoyant) say about a set of runs: the best
fixed arm, and each policy's share of the achievable gain. The one implementation, used by
`reports.readings.summary` (`hb sim`, `hb grid run`), `reports.gap` (`hb report`) and `reports.stress`
(`hb stress`). It reads only the data contract: final eval scores (policy label, seed,
suite, score: `reports.readings.summary.final_scores`) and, per run, run.json's policy name and knobs
(`run_table`).

Best fixed arm (`best_fixed`): ONE arm for every seed (a scenario's harnesses keep their
roles across seeds), per suite the `fixed` arm with the largest mean final score over the
seeds all arms share -- chosen on the seeds it is then scored on, so it is in-sample (a
little optimistic at few seeds). `hb stress` chooses it on tuning seeds the test never sees
instead (the grid's `[tune]` phase, `ablations.tune`) and hands the chosen arm's test runs in
as the label `best_fixed`.

Share of the achievable gain (`share_of_gap`), per policy and target: each eval suite, and
`train` (the training objective: `train_scores`, the noise-free mean true success over
training tasks x training harnesses after the last step, from the synthetic train table):

    share = mean_s (P_s - U_s) / mean_s (R_s - U_s)

P, U: final score of the policy and of `uniform`, paired by seed; R the BEST REACHABLE
REFERENCE of that target: of the candidates that were run -- every `oracle` aimed at the
target, the best fixed arm (`best_fixed`) and every `mixed` run -- the one with the largest
mean gap over uniform on the seeds they all share (the `reference` column names it). Real runs have
no oracle: their reference is the best fixed arm or mixed, the best a real run can have. So no reference's own
share exceeds 1 (a design may: it beat every reference). `delta` is mean_s (P_s - U_s) with
the half-width of its paired 95% t-interval over seeds. The share's interval is FIELLER's on
the paired per-seed d_s = P_s - U_s and g_s = R_s - U_s (`reports.readings.intervals.fieller_interval`).
When the reference's own gap over uniform is not significant (its two-sided seed-level t
test at 1 - level, exactly where Fieller's set is unbounded) there is NO share: share and
interval are NaN and `note` says why in one line.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from hbsim.contract.labels import BEST_FIXED, FIXED, MIXED, ORACLE, UNIFORM, parse_label
from policies.clairvoyant import TARGETS
from reports.readings import intervals
#: the columns of `share_of_gap`
SHARE_COLUMNS = ["policy", "suite", "uniform", "reference", "seeds", "delta", "delta_t95", "gap", "share",
                 "share_lo", "share_hi", "note"]
#: the columns of `run_table`
RUN_COLUMNS = ["label", "name", "seed", "arm", "target"]


def run_table(metas: Iterable[dict | None]) -> pd.DataFrame:
    """run.json records (hbsim.contract.records) -> one row per run: label, name (the policy's
    registry name), seed, arm (fixed's knob, else -1), target (oracle's knob, else "")."""
    rows = []
    for meta in metas:
        if not meta:
            continue
        section = (meta.get("config") or {}).get("policy") or {}
        name = meta.get("policy") or section.get("name", "")
        rows.append({"label": meta.get("label") or section.get("label") or name, "name": name,
                     "seed": int(meta.get("seed", (meta.get("config") or {}).get("seed", 0))),
                     "arm": int(section.get("arm", 0)) if name == FIXED else -1,
                     "target": str(section.get("target", "train")) if name == ORACLE else ""})
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


def runs_from_labels(labels: Iterable[str]) -> pd.DataFrame:
    """Without run.json: each label read as `name[knob=value,...]` (a grid's default labels),
    a bare label as the policy of that name with default knobs (seed -1: every seed)."""
    rows = []
    for label in dict.fromkeys(labels):
        name, knobs = parse_label(label)
        rows.append({"label": label, "name": name, "seed": -1,
                     "arm": int(knobs.get("arm", 0)) if name == FIXED else -1,
                     "target": knobs.get("target", "train") if name == ORACLE else ""})
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


def train_scores(train_df: pd.DataFrame | None) -> pd.DataFrame:
    """The `train` target's score rows (policy, seed, suite = "train", score): at each run's
    last step, the mean true success over training tasks x training harnesses (the mean of
    the synthetic envs' `true_<harness>` columns over the harnesses of `alloc_<harness>`).
    Empty without those columns (real runs)."""
    empty = pd.DataFrame(columns=["policy", "seed", "suite", "score"])
    if train_df is None or train_df.empty or "policy" not in train_df:
        return empty
    names = [c[len("alloc_"):] for c in train_df.columns if c.startswith("alloc_")]
    cols = [f"true_{h}" for h in names]
    if not names or any(c not in train_df for c in cols):
        return empty
    last = train_df[train_df["step"] == train_df.groupby(["policy", "seed"])["step"].transform("max")]
    out = last[["policy", "seed"]].copy()
    out["suite"], out["score"] = "train", last[cols].mean(axis=1).to_numpy()
    return out.reset_index(drop=True)


def _labels(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per label (label, name, arm, target)."""
    return runs.drop_duplicates("label")[["label", "name", "arm", "target"]]


def best_fixed(scores: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The `best_fixed` pseudo-policy: per suite ONE arm, the `fixed` label with the largest
    mean final score over the seeds every fixed label has (ties: the lower arm), and its score
    per (seed, suite) (module docstring). Columns policy, seed, suite, score, arm, arms (how
    many arms were compared). Empty without fixed runs."""
    labels = _labels(runs)
    fixed = labels[labels["name"] == FIXED]
    rows = scores[scores["policy"].isin(fixed["label"])].merge(
        fixed.rename(columns={"label": "policy"})[["policy", "arm"]], on="policy")
    columns = ["policy", "seed", "suite", "score", "arm", "arms"]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    out = []
    for suite, mine in rows.groupby("suite", sort=False):
        wide = mine.pivot_table(index="seed", columns="arm", values="score").dropna()
        if wide.empty:
            continue
        means = wide.mean(axis=0)
        arm = int(means[means == means.max()].index.min())
        out.append(pd.DataFrame({"policy": BEST_FIXED, "seed": wide.index, "suite": suite,
                                 "score": wide[arm].to_numpy(), "arm": arm, "arms": wide.shape[1]}))
    return pd.concat(out, ignore_index=True)[columns] if out else pd.DataFrame(columns=columns)


def _candidates(labels: pd.DataFrame, scores: pd.DataFrame, suite: str) -> list[str]:
    """The reference candidates of a suite: the oracle labels aimed at it, `best_fixed` where
    scored, and the `mixed` labels."""
    aimed = labels[(labels["name"] == ORACLE) & (labels["target"] == suite)]["label"].tolist()
    mixed = labels[labels["name"] == MIXED]["label"].tolist()
    have = set(scores.loc[scores["suite"] == suite, "policy"])
    return [c for c in [*aimed, BEST_FIXED, *mixed] if c in have]


def _reference(labels: pd.DataFrame, scores: pd.DataFrame, suite: str) -> tuple[str | None, str | None]:
    """(uniform label, reference label) of a suite: `uniform` itself if run (else the first
    label of name uniform); the candidate (`_candidates`) with the largest mean gap over
    uniform on the seeds that uniform and every candidate share (on the seeds each shares
    with uniform where no seed is common to all: a candidate run on fewer seeds, fixed arms
    beside designs, is not chosen for its luck on those); ties: the first, oracle before
    best_fixed before mixed."""
    uni = labels[labels["name"] == UNIFORM]["label"].tolist()
    uniform = UNIFORM if UNIFORM in uni else (uni[0] if uni else None)
    cands = _candidates(labels, scores, suite)
    if uniform is None or not cands:
        return uniform, None
    wide = scores[scores["suite"] == suite].pivot_table(index="seed", columns="policy", values="score")
    if uniform not in wide:
        return uniform, None
    common = wide[[uniform, *cands]].dropna()         # compared on the same seeds where they share any
    if len(common):
        wide = common
    gaps = {c: float((wide[c] - wide[uniform]).dropna().mean()) for c in cands}
    gaps = {c: v for c, v in gaps.items() if np.isfinite(v)}
    return uniform, (max(gaps, key=lambda c: (gaps[c], -cands.index(c))) if gaps else None)


def share_of_gap(scores: pd.DataFrame, runs: pd.DataFrame, *, level: float = 0.95) -> pd.DataFrame:
    """One row per (policy label, target) with a uniform and a reference for that target
    (the eval suites of `scores`, and "train" where `scores` has `train_scores` rows), columns
    SHARE_COLUMNS: the uniform and reference labels, seeds, delta, delta_t95, gap (mean
    reference - uniform), share with Fieller's interval share_lo, share_hi, and note (why
    there is no share) (module docstring). `best_fixed` is included where fixed runs exist
    (or where `scores` already has a `best_fixed` label). Empty when no suite has both."""
    scores = scores[["policy", "seed", "suite", "score"]]
    if not (scores["policy"] == BEST_FIXED).any():
        scores = pd.concat([scores, best_fixed(scores, runs)[["policy", "seed", "suite", "score"]]],
                           ignore_index=True)
    labels = _labels(runs)
    rows = []
    for suite in TARGETS:
        uniform, reference = _reference(labels, scores, suite)
        if uniform is None or reference is None:
            continue
        mine = scores[scores["suite"] == suite]
        wide = mine.pivot_table(index="seed", columns="policy", values="score")
        for label in pd.unique(mine["policy"]):                  # in the order of the runs
            if label == uniform:
                continue
            both = wide[list(dict.fromkeys([label, uniform, reference]))].dropna()
            d = (both[label] - both[uniform]).to_numpy()
            g = (both[reference] - both[uniform]).to_numpy()
            row = {"policy": label, "suite": suite, "uniform": uniform, "reference": reference, "seeds": len(both)}
            row["delta"], row["delta_t95"] = intervals.mean_half_width(d)
            row["gap"] = float(g.mean()) if len(g) else float("nan")
            share, lo, hi, bounded = intervals.fieller_interval(d, g, level)
            row["share"], row["share_lo"], row["share_hi"] = (share, lo, hi) if bounded else (np.nan,) * 3
            row["note"] = "" if bounded else no_share_note(reference, g, level)
            rows.append(row)
    return pd.DataFrame(rows, columns=SHARE_COLUMNS)


def point_share(d: np.ndarray, g: np.ndarray) -> float:
    """The share's point estimate without its interval: mean_s d_s / mean_s g_s (NaN when the
    reference gains nothing on average)."""
    return float(np.mean(d) / np.mean(g)) if np.mean(g) else np.nan


def no_share_note(reference: str, g: np.ndarray, level: float = 0.95) -> str:
    """The one line that says why a share is not given (Fieller's set is unbounded)."""
    if len(g) < 2:
        return f"no share: {len(g)} paired seed(s), a share needs 2"
    return (f"no share: the reference {reference!r} gains {float(np.mean(g)):+.4f} over uniform, not significant "
            f"at {len(g)} seeds (two-sided seed-level t test at {1 - level:.2g}), so the ratio is unbounded")


def share_lines(table: pd.DataFrame) -> list[str]:
    """The summary's share-of-gap block: one line per policy, per suite `delta ± t95 | share
    [lo, hi]` (what `reports.readings.summary.summary_table` and `reports.gap` print)."""
    if table.empty:
        return []
    # per suite the reference's gap on the most seeds (a fixed arm run on fewer seeds pairs on fewer)
    suites = list(pd.unique(table["suite"]))
    refs = table.sort_values("seeds", ascending=False, kind="stable").drop_duplicates("suite").set_index("suite")
    refs = refs.loc[suites]
    head = ("share of the achievable gain = (policy - uniform) / (reference - uniform), final eval (train: final "
            "true training success), paired by seed; reference = the best of the oracle, the best fixed arm and "
            "mixed that were run; delta ± 95% paired t; share [95% Fieller interval]")
    lines = [head] + [f"  {s}: reference = {refs.loc[s, 'reference']!r} (gap {refs.loc[s, 'gap']:+.3f} over "
                      f"{refs.loc[s, 'uniform']!r})" for s in refs.index]
    lines += [f"  {s}: {refs.loc[s, 'note']}" for s in refs.index if refs.loc[s, "note"]]
    cells = {}
    for r in table.itertuples():
        share = f"{r.share:.2f} [{r.share_lo:.2f}, {r.share_hi:.2f}]" if np.isfinite(r.share) else "no share"
        half = f" ± {r.delta_t95:.3f}" if np.isfinite(r.delta_t95) else ""
        cells.setdefault(r.policy, {})[r.suite] = f"{r.delta:+.3f}{half} | {share}"
    suites = list(refs.index)
    header = ["policy"] + [f"{s}: delta | share" for s in suites]
    body = [[p] + [c.get(s, "-") for s in suites] for p, c in cells.items()]
    widths = [max(len(header[i]), *(len(b[i]) for b in body)) for i in range(len(header))]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return lines + [fmt(header), fmt(["-" * w for w in widths])] + [fmt(b) for b in body]
