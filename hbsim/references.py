"""What the clairvoyant references (policies.clairvoyant) say about a set of runs: the best
fixed arm in hindsight, and each policy's share of the achievable gain. The one
implementation, used by `hbsim.summary` (`hb sim`, `hb grid run`) and `reports.gap`
(`hb report`). It reads only the data contract: final eval scores (policy label, seed,
suite, score: `hbsim.summary.final_scores`) and, per run, run.json's policy name and knobs
(`run_table`).

Best fixed arm in hindsight (`best_fixed`): from the `fixed` runs (one per arm), per seed and
suite, the arm whose final score is the largest -- per seed, because each seed is its own
world (harness roles are drawn per seed); a pseudo-policy `best_fixed` with one score per
(seed, suite), over the arms that were run.

Share of the achievable gain (`share_of_gap`), per policy and oracle target: each eval suite,
and `train` (the training objective: `train_scores`, the noise-free mean true success over
training tasks x training harnesses after the last step, from the synthetic train table):

    share = mean_s (P_s - U_s) / mean_s (O_s - U_s)

P, U, O: final score of the policy, of `uniform` and of the oracle aimed at that suite
(`oracle` runs whose knob `target` is the suite or `train`; of several such labels the one with the
best mean), on the seeds all three have (paired by seed). `delta` is mean_s (P_s - U_s) with
the half-width of its paired 95% t-interval over seeds. The interval of the share is a
percentile SEED BOOTSTRAP of the ratio of means: N_BOOT resamples of the seeds with
replacement (the same resamples for every policy; generator `default_rng(BOOT_SEED)`), the
ratio recomputed in each: `hbsim.intervals.ratio_interval`; where more than (1 - level) / 2 of the resamples have an oracle
gap <= 0 the ratio is unbounded and the interval is reported as NaN (and printed as
"unbounded"). share = 1: the policy gains what the one-step oracle gains; 0: no more than
uniform; > 1 is possible (the oracle is greedy, not optimal).
"""
from __future__ import annotations

import re
from typing import Iterable

import numpy as np
import pandas as pd

from hbsim import intervals
from hbsim.envs.base import TARGETS

ORACLE, FIXED, UNIFORM, BEST_FIXED = "oracle", "fixed", "uniform", "best_fixed"
N_BOOT = 2000
BOOT_SEED = 0
#: the columns of `run_table`
RUN_COLUMNS = ["label", "name", "seed", "arm", "target"]


def run_table(metas: Iterable[dict | None]) -> pd.DataFrame:
    """run.json records (hbsim.records) -> one row per run: label, name (the policy's
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
        match = re.fullmatch(r"([^\[]+)(?:\[(.*)\])*", str(label))
        name = match.group(1) if match else str(label)
        knobs = dict(kv.split("=", 1) for kv in re.findall(r"[\w.]+=[^,\]]+", str(label)))
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
    """The `best_fixed` pseudo-policy: per (seed, suite) the largest final score over the
    `fixed` labels, with its arm (module docstring). Empty without fixed runs."""
    labels = _labels(runs)
    fixed = labels[labels["name"] == FIXED]
    rows = scores[scores["policy"].isin(fixed["label"])].merge(
        fixed.rename(columns={"label": "policy"})[["policy", "arm"]], on="policy")
    if rows.empty:
        return pd.DataFrame(columns=["policy", "seed", "suite", "score", "arm", "arms"])
    rows = rows.sort_values(["seed", "suite", "score", "arm"], ascending=[True, True, False, True])
    best = rows.groupby(["seed", "suite"], as_index=False).first()
    best["arms"] = rows.groupby(["seed", "suite"])["arm"].nunique().to_numpy()
    best["policy"] = BEST_FIXED
    return best[["policy", "seed", "suite", "score", "arm", "arms"]]


def _reference(labels: pd.DataFrame, scores: pd.DataFrame, suite: str) -> tuple[str | None, str | None]:
    """(uniform label, oracle label) of a suite: `uniform` itself if run (else the first
    label of name uniform); the oracle label aimed at the suite with the best mean."""
    uni = labels[labels["name"] == UNIFORM]["label"].tolist()
    uniform = UNIFORM if UNIFORM in uni else (uni[0] if uni else None)
    oracles = labels[(labels["name"] == ORACLE) & (labels["target"] == suite)]["label"].tolist()
    mine = scores[(scores["suite"] == suite) & scores["policy"].isin(oracles)]
    oracle = mine.groupby("policy")["score"].mean().idxmax() if not mine.empty else None
    return uniform, oracle


def share_of_gap(scores: pd.DataFrame, runs: pd.DataFrame, *, level: float = 0.95, n_boot: int = N_BOOT,
                 boot_seed: int = BOOT_SEED) -> pd.DataFrame:
    """One row per (policy label, target) with a uniform and an oracle for that target
    (the eval suites of `scores`, and "train" where `scores` has `train_scores` rows):
    policy, suite, uniform, oracle (their labels), seeds, delta, delta_t95, gap (mean oracle
    - uniform), share, share_lo, share_hi (module docstring). `best_fixed` is included where
    fixed runs exist. Empty when no suite has both references."""
    scores = pd.concat([scores[["policy", "seed", "suite", "score"]],
                        best_fixed(scores, runs)[["policy", "seed", "suite", "score"]]], ignore_index=True)
    labels = _labels(runs)
    rows = []
    for suite in TARGETS:
        uniform, oracle = _reference(labels, scores, suite)
        if uniform is None or oracle is None:
            continue
        mine = scores[scores["suite"] == suite]
        wide = mine.pivot_table(index="seed", columns="policy", values="score")
        for label in pd.unique(mine["policy"]):                  # in the order of the runs
            if label in (uniform, oracle):
                continue
            both = wide[[label, uniform, oracle]].dropna()
            d = (both[label] - both[uniform]).to_numpy()
            g = (both[oracle] - both[uniform]).to_numpy()
            row = {"policy": label, "suite": suite, "uniform": uniform, "oracle": oracle, "seeds": len(both)}
            row["delta"], row["delta_t95"] = intervals.mean_half_width(d)
            row["gap"] = float(g.mean()) if len(g) else float("nan")
            row["share"], row["share_lo"], row["share_hi"] = intervals.ratio_interval(d, g, level, n_boot=n_boot,
                                                                                      seed=boot_seed)
            rows.append(row)
    return pd.DataFrame(rows, columns=["policy", "suite", "uniform", "oracle", "seeds", "delta", "delta_t95",
                                       "gap", "share", "share_lo", "share_hi"])


def share_lines(table: pd.DataFrame) -> list[str]:
    """The summary's share-of-gap block: one line per policy, per suite `delta ± t95 | share
    [lo, hi]` (what `hbsim.summary.summary_table` and `reports.gap` print)."""
    if table.empty:
        return []
    refs = table.drop_duplicates("suite").set_index("suite")
    head = ("share of the achievable gain = (policy - uniform) / (oracle - uniform), final eval (train: final true "
            "training success), paired by seed; "
            "delta ± 95% paired t; share [95% seed-bootstrap interval of the ratio of means]")
    lines = [head] + [f"  {s}: oracle = {refs.loc[s, 'oracle']!r} (gap {refs.loc[s, 'gap']:+.3f} over "
                      f"{refs.loc[s, 'uniform']!r})" for s in refs.index]
    cells = {}
    for r in table.itertuples():
        ci = ("[unbounded]" if not np.isfinite(r.share_lo) else f"[{r.share_lo:.2f}, {r.share_hi:.2f}]")
        share = f"{r.share:.2f} {ci}" if np.isfinite(r.share) else "-"
        half = f" ± {r.delta_t95:.3f}" if np.isfinite(r.delta_t95) else ""
        cells.setdefault(r.policy, {})[r.suite] = f"{r.delta:+.3f}{half} | {share}"
    suites = list(refs.index)
    header = ["policy"] + [f"{s}: delta | share" for s in suites]
    body = [[p] + [c.get(s, "-") for s in suites] for p, c in cells.items()]
    widths = [max(len(header[i]), *(len(b[i]) for b in body)) for i in range(len(header))]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return lines + [fmt(header), fmt(["-" * w for w in widths])] + [fmt(b) for b in body]
