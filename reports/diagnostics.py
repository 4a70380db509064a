"""Training diagnostics from the train tables (SPEC §7), per policy over seeds.

Traces are summarised per (policy, step) as the mean over seeds with a band of
mean ± one standard deviation over seeds (sd = 0 with one seed). Optional columns that
are missing are skipped with a note naming them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats as sps

PHASES = ("rollout", "tools", "backward", "sketch", "scheduler", "optimizer")


@dataclass
class Diagnostics:
    """Long tables for figures/CSV. Empty frames where the data are absent."""

    harnesses: list[str]
    selection: pd.DataFrame  # policy, step, harness, mean, low, high
    visits: pd.DataFrame  # policy, harness, visits, visits_sd, groups, groups_sd
    signals: pd.DataFrame  # policy, step, signal, mean, low, high
    spearman: pd.DataFrame  # run_id, policy, seed, n_steps, rho, p, mean_l, mean_t
    memory: pd.DataFrame  # policy, step, quantity, mean, low, high
    cost: pd.DataFrame  # policy, quantity, mean, sd
    regret: pd.DataFrame  # policy, step, mean, low, high (cumulative regret)
    eval_curves: pd.DataFrame  # policy, suite, step, mean, low, high
    notes: list[str] = field(default_factory=list)


def band(df: pd.DataFrame, value: str, by: list[str]) -> pd.DataFrame:
    """Mean over seeds with mean ± sd band. df has `by` + seed + value columns."""
    g = df.groupby(by, sort=True)[value]
    out = g.agg(mean="mean", sd="std").reset_index()
    out["sd"] = out["sd"].fillna(0.0)
    out["low"], out["high"] = out["mean"] - out["sd"], out["mean"] + out["sd"]
    return out.drop(columns="sd")


def _long(train: pd.DataFrame, cols: dict[str, str], name: str) -> pd.DataFrame:
    """Melt columns {column: label} into (policy, seed, step, <name>, value)."""
    sub = train[["policy", "seed", "step"] + list(cols)].rename(columns=cols)
    return sub.melt(id_vars=["policy", "seed", "step"], var_name=name, value_name="value")


def spearman_per_run(train: pd.DataFrame) -> pd.DataFrame:
    """Spearman correlation of raw learnability and transfer over the steps of each run."""
    rows = []
    for (run, pol, seed), g in train.groupby(["run_id", "policy", "seed"], sort=True):
        l_, t_ = g["learnability"].to_numpy(float), g["transfer"].to_numpy(float)
        ok = np.isfinite(l_) & np.isfinite(t_)
        rho = p = np.nan
        if ok.sum() >= 3 and np.ptp(l_[ok]) > 0 and np.ptp(t_[ok]) > 0:
            res = sps.spearmanr(l_[ok], t_[ok])
            rho, p = float(res.statistic), float(res.pvalue)
        rows.append({"run_id": run, "policy": pol, "seed": seed, "n_steps": int(ok.sum()), "rho": rho, "p": p,
                     "mean_l": float(np.nanmean(l_)) if ok.any() else np.nan,
                     "mean_t": float(np.nanmean(t_)) if ok.any() else np.nan})
    return pd.DataFrame(rows)


def cost_ledger(train: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Per policy (mean, sd over seeds): groups generated per optimized group, total
    generated groups, tokens, and seconds per phase summed over each run."""
    notes, per_run = [], train.groupby(["policy", "seed", "run_id"], sort=True)
    q = pd.DataFrame(index=per_run.size().index)
    if {"groups_generated", "groups_optimized"} <= set(train.columns):
        sums = per_run[["groups_generated", "groups_optimized"]].sum()
        q["generated_per_optimized"] = sums["groups_generated"] / sums["groups_optimized"].where(
            sums["groups_optimized"] > 0)
        q["groups_generated"] = sums["groups_generated"]
    else:
        notes.append("cost: groups_generated/groups_optimized missing; generated-per-optimized skipped")
    if "tokens" in train.columns:
        q["tokens"] = per_run["tokens"].sum()
    for phase in PHASES:
        if f"seconds_{phase}" in train.columns:
            q[f"seconds_{phase}"] = per_run[f"seconds_{phase}"].sum()
    if q.shape[1] == 0:
        return pd.DataFrame(columns=["policy", "quantity", "mean", "sd"]), notes
    long = q.reset_index().melt(id_vars=["policy", "seed", "run_id"], var_name="quantity")
    out = long.groupby(["policy", "quantity"], sort=True)["value"].agg(mean="mean", sd="std").reset_index()
    out["sd"] = out["sd"].fillna(0.0)
    return out, notes


def _empty(*cols: str) -> pd.DataFrame:
    return pd.DataFrame(columns=list(cols))


def compute(train: pd.DataFrame | None, eval_all: pd.DataFrame) -> Diagnostics:
    """All training diagnostics; every missing optional column gives a note, not an error."""
    notes: list[str] = []
    curves = _eval_curves(eval_all, notes)
    if train is None or train.empty:
        notes.append("no train table: training diagnostics skipped")
        e = _empty("policy", "step", "mean", "low", "high")
        return Diagnostics([], e, _empty("policy", "harness"), e, _empty("run_id", "rho"), e,
                           _empty("policy", "quantity", "mean", "sd"), e, curves, notes)
    hs = [c[2:] for c in train.columns if c.startswith("p_")]
    selection = _traces(train, {f"p_{h}": h for h in hs}, "harness", notes, "selection probabilities (p_*)")
    signal_cols = {c: c for c in ("learnability", "transfer", "l_norm", "t_norm") if c in train.columns}
    signals = _traces(train, signal_cols, "signal", notes, "signals (learnability/transfer/l_norm/t_norm)")
    if {"learnability", "transfer"} <= set(train.columns):
        spearman = spearman_per_run(train)
    else:
        spearman, _ = _empty("run_id", "policy", "seed", "rho", "p"), notes.append(
            "learnability/transfer missing: Spearman L-T check skipped")
    mem = train[["policy", "seed", "step"]].copy()
    for kind in ("mem_age", "mem_norm"):
        cols = [f"{kind}_{h}" for h in hs if f"{kind}_{h}" in train.columns]
        if cols:
            mem[kind] = train[cols].mean(axis=1)
    memory = _traces(mem, {k: k for k in ("mem_age", "mem_norm") if k in mem.columns}, "quantity", notes,
                     "memory age/norm (mem_age_*, mem_norm_*)")
    cost, cost_notes = cost_ledger(train)
    notes += cost_notes
    return Diagnostics(hs, selection, _visits(train, hs), signals, spearman, memory, cost,
                       _regret(train, notes), curves, notes)


def _traces(train: pd.DataFrame, cols: dict[str, str], name: str, notes: list[str], what: str) -> pd.DataFrame:
    if not cols:
        notes.append(f"{what} missing: skipped")
        return _empty("policy", "step", name, "mean", "low", "high")
    return band(_long(train, cols, name), "value", ["policy", name, "step"])


def _visits(train: pd.DataFrame, hs: list[str]) -> pd.DataFrame:
    if not hs or "arm" not in train.columns:
        return _empty("policy", "harness", "visits", "visits_sd", "groups", "groups_sd")
    rows = []
    for (pol, seed), g in train.groupby(["policy", "seed"], sort=True):
        arm = g["arm"].to_numpy()
        for i, h in enumerate(hs):
            groups = g[f"alloc_{h}"].sum() if f"alloc_{h}" in g.columns else np.nan
            rows.append({"policy": pol, "seed": seed, "harness": h, "visits": int((arm == i).sum()),
                         "groups": float(groups)})
    df = pd.DataFrame(rows)
    out = df.groupby(["policy", "harness"], sort=False).agg(
        visits=("visits", "mean"), visits_sd=("visits", "std"), groups=("groups", "mean"),
        groups_sd=("groups", "std")).reset_index()
    return out.fillna({"visits_sd": 0.0, "groups_sd": 0.0})


def _regret(train: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    if "regret" not in train.columns:
        notes.append("regret missing (real runs have no oracle): regret curves skipped")
        return _empty("policy", "step", "mean", "low", "high")
    df = train[["policy", "seed", "run_id", "step", "regret"]].copy()
    df["regret"] = df["regret"].fillna(0.0)
    df["cumulative"] = df.groupby("run_id")["regret"].cumsum()
    return band(df, "cumulative", ["policy", "step"])


def _eval_curves(eval_all: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    if eval_all["step"].nunique() < 2:
        notes.append("one evaluation step only: eval curves over steps skipped")
        return _empty("policy", "suite", "step", "mean", "low", "high")
    per_run = eval_all.groupby(["policy", "seed", "suite", "step"], sort=True)["reward"].mean().reset_index()
    return band(per_run, "reward", ["policy", "suite", "step"])
