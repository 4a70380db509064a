"""What a twin fit reads from run logs (hbsim.twin): the observations of R runs as arrays,
truth columns dropped first, and the task-difficulty spread."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd


#: columns a fit never reads: a synthetic world's truth
TRUTH_PREFIXES = ("true_", "gain", "regret", "oracle_arm", "cos_")
#: Gauss-Hermite nodes of the task-difficulty law
N_NODES = 9
#: a probe row of the mixed batch: `arm` < 0 (or a harness name that is not a training harness)
MIXED_ARM = -1


# -- observations ---------------------------------------------------------------------------
@dataclass
class Observations:
    """Arrays of the logs of R runs on the same H harnesses (steps padded to S).

    alloc (R, S, H) counts of each logged step; steps (R,); groups: dict of 1-D arrays r, t
    (0-based step index: the state before step t + 1), h, n, value, kind (0 = mean success of
    generated groups, 1 = retained mean reward, 2 = keep rate); evals: r, t (state after t
    steps), h (H = the held-out harness), n, value; probes: r, t, h (-1 = mixed), target
    (0 = train, 1 = held-out harness), value; t_grad (H,) mean probe T per harness (nan)."""

    harnesses: list[str]
    heldout: str | None
    alloc: np.ndarray
    steps: np.ndarray
    groups: dict
    evals: dict
    probes: dict
    group_size: int
    batch_groups: int
    t_grad: np.ndarray
    spread: float
    costs: dict = field(default_factory=dict)
    n_heldout_tasks: int = 20
    task_spread: np.ndarray | None = None
    transfer: dict = field(default_factory=lambda: {k: np.zeros(0) for k in ("r", "t", "h", "value")})


def _columns(d: dict) -> dict:
    return {k: np.asarray(v) for k, v in d.items()}


def observations(runs: list[dict], *, group_size: int | None = None, suite: str = "heldout_tasks") -> Observations:
    """runs: one dict per run, {"train", "eval", "groups" (or None), "counterfactual" (or None)}
    DataFrames of one run each (SPEC §7 tables). Truth columns are dropped first."""
    runs = [{k: (_untruthful(v) if isinstance(v, pd.DataFrame) else v) for k, v in run.items()} for run in runs]
    harnesses = [c[len("alloc_"):] for c in runs[0]["train"].columns if c.startswith("alloc_")]
    for run in runs[1:]:
        other = [c[len("alloc_"):] for c in run["train"].columns if c.startswith("alloc_")]
        if other != harnesses:
            raise ValueError(f"runs on different harnesses: {harnesses} and {other}")
    if not harnesses or any(not len(run["train"]) for run in runs):
        raise ValueError("a run without logged steps (its train table is empty or has no alloc_<harness> columns)")
    H, R = len(harnesses), len(runs)
    steps = np.array([int(run["train"]["step"].max()) for run in runs])
    S = int(steps.max())
    alloc = np.zeros((R, S, H))
    g = {k: [] for k in ("r", "t", "h", "n", "value", "kind")}
    e = {k: [] for k in ("r", "t", "h", "n", "value")}
    p = {k: [] for k in ("r", "t", "h", "target", "value")}
    tr = {k: [] for k in ("r", "t", "h", "value")}
    tg, heldout, sizes, costs, n_heldout = [], None, [], [], 0
    dispersion = []
    for r, run in enumerate(runs):
        train = run["train"].sort_values("step")
        t = train["step"].to_numpy(dtype=np.int64) - 1
        alloc[r, t] = train[[f"alloc_{h}" for h in harnesses]].to_numpy(dtype=np.float64)
        groups = run.get("groups")
        if groups is not None and len(groups):
            sizes.append(int(groups["size"].iloc[0]))
            agg = groups.assign(retained=groups["retained"].astype(float)).groupby(["step", "harness"], as_index=False).agg(
                n=("success", "size"), value=("success", "mean"), keep=("retained", "mean"))
            hidx = agg["harness"].map({h: i for i, h in enumerate(harnesses)})
            ok = hidx.notna().to_numpy()
            for kind, col in ((0, "value"), (2, "keep")):
                _extend(g, r=r, t=agg["step"].to_numpy()[ok] - 1, h=hidx.to_numpy()[ok].astype(int),
                        n=agg["n"].to_numpy()[ok], value=agg[col].to_numpy()[ok], kind=kind)
            if "cost" in groups:
                costs.append(groups.groupby("harness")["cost"].mean())
            early = groups[groups["step"] <= max(1, int(0.1 * steps[r]))]     # each group: one task, G attempts
            dispersion.append(early.assign(task=np.arange(len(early))).set_index(["harness", "task"])
                              .rename(columns={"success": "mean"})[["mean", "size"]])
        else:
            pure = train[train["arm"] >= 0]
            gen = pure["groups_generated"].to_numpy(dtype=np.float64)
            ret = pure["groups_retained"].to_numpy(dtype=np.float64)
            tt, hh = pure["step"].to_numpy() - 1, pure["arm"].to_numpy().astype(int)
            ok = gen > 0
            _extend(g, r=r, t=tt[ok], h=hh[ok], n=gen[ok], value=ret[ok] / gen[ok], kind=2)
            rew = pure["reward"].to_numpy(dtype=np.float64)
            ok = np.isfinite(rew) & (ret > 0)
            _extend(g, r=r, t=tt[ok], h=hh[ok], n=ret[ok], value=rew[ok], kind=1)
            costs.append(_train_costs(pure, harnesses))
        ev = run["eval"]
        if "budget_unit" in ev:
            ev = ev[ev["budget_unit"].isna()]
        if "step" in ev and len(ev):
            mine = ev[ev["suite"].isin([suite, "heldout_harness"])]
            held = mine["suite"] == "heldout_harness"
            if held.any():                          # several held-out harnesses (real runs): pooled as one
                heldout = "+".join(sorted(mine.loc[held, "harness"].astype(str).unique()))
                mine = mine.assign(harness=mine["harness"].astype(str).where(~held, heldout))
            names = harnesses + ([heldout] if heldout is not None else [])
            agg = mine.groupby(["step", "suite", "harness"], as_index=False).agg(
                n=("success", "size"), value=("success", "mean"))
            agg = agg[(agg["suite"] == suite) & agg["harness"].isin(harnesses)
                      | (agg["suite"] == "heldout_harness")]
            agg = agg[agg["harness"].isin(names)]
            hidx = agg["harness"].map({h: i for i, h in enumerate(names)}).to_numpy()
            _extend(e, r=r, t=agg["step"].to_numpy(), h=hidx.astype(int), n=agg["n"].to_numpy(),
                    value=agg["value"].to_numpy())
            first = mine[(mine["step"] == mine["step"].min()) & (mine["suite"] == suite)]
            if groups is None or not len(groups):        # the groups table's groups are the better sample
                dispersion.append(first.groupby(["harness", "task"])["success"].agg(["mean", "size"]))
            n_heldout = max(n_heldout, int(first.groupby("harness")["task"].nunique().max()) if len(first) else 0)
        cf = run.get("counterfactual")
        if cf is not None and len(cf):
            hidx = cf["harness"].map({h: i for i, h in enumerate(harnesses)}).fillna(MIXED_ARM).to_numpy().astype(int)
            hidx = np.where(cf["arm"].to_numpy() < 0, MIXED_ARM, hidx)
            for target, col in ((0, "real_train"), (1, "real_heldout_harness")):
                if col in cf:
                    v = cf[col].to_numpy(dtype=np.float64)
                    ok = np.isfinite(v)
                    _extend(p, r=r, t=cf["step"].to_numpy()[ok] - 1, h=hidx[ok], target=target, value=v[ok])
            if "t_grad" in cf:
                tg.append(cf[cf["arm"] >= 0].groupby("harness")["t_grad"].mean())
                v = cf["t_grad"].to_numpy(dtype=np.float64)
                ok = np.isfinite(v) & (hidx >= 0)
                _extend(tr, r=r, t=cf["step"].to_numpy()[ok] - 1, h=hidx[ok], value=v[ok])
    tgrad = (pd.concat(tg, axis=1).mean(axis=1).reindex(harnesses).to_numpy() if tg else np.full(H, np.nan))
    G = group_size or (sizes[0] if sizes else 8)
    batch = int(np.median(alloc.sum(axis=2)[alloc.sum(axis=2) > 0]))
    cost = pd.concat(costs, axis=1).mean(axis=1).reindex(harnesses) if costs else pd.Series(0.0, index=harnesses)
    cost = cost.fillna(cost.mean()).fillna(0.0).to_numpy()      # a harness never generated: the others' mean
    n_heldout = n_heldout or 20
    per_harness = np.full(H, np.nan)
    if dispersion:
        both = pd.concat(dispersion).reset_index()
        for i, name in enumerate(harnesses):
            mine = both[both["harness"] == name]
            if len(mine):
                per_harness[i] = difficulty_spread([mine.set_index(["harness", "task"])])
    return Observations(harnesses, heldout, alloc, steps, _cat(g), _cat(e), _cat(p), int(G), batch, tgrad,
                        difficulty_spread(dispersion), {"per_group": cost}, n_heldout, per_harness, _cat(tr))


def _untruthful(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[[c for c in frame.columns if not c.startswith(TRUTH_PREFIXES)]]


def _extend(store: dict, **cols) -> None:
    """Append columns to `store`; scalars are repeated to the arrays' length."""
    n = max(np.size(v) for v in cols.values() if np.ndim(v))
    for k, v in cols.items():
        store[k].append(np.broadcast_to(np.asarray(v), (n,)).copy() if np.ndim(v) == 0 else np.asarray(v))


def _cat(store: dict) -> dict:
    return {k: (np.concatenate(v) if v else np.zeros(0)) for k, v in store.items()}


def _train_costs(pure: pd.DataFrame, harnesses: list[str]) -> pd.Series:
    """Mean cost per generated group of each harness's pure steps: tokens where logged, else
    the measured rollout + tool seconds (cost_seconds where simulated)."""
    gen = pure["groups_generated"].to_numpy(dtype=np.float64)
    for col in ("tokens", "cost_seconds"):
        if col in pure and np.nansum(pure[col].to_numpy(dtype=np.float64)) > 0:
            cost = pure[col].to_numpy(dtype=np.float64)
            break
    else:
        cost = np.zeros(len(pure))
    per = np.where(gen > 0, cost / np.maximum(gen, 1), np.nan)
    return pd.Series(per, index=[harnesses[a] for a in pure["arm"]]).groupby(level=0).mean()


def difficulty_spread(tables: list[pd.DataFrame], nodes: int = N_NODES) -> float:
    """The logit std sigma of the task difficulty that best explains the spread of per-task
    success (tables: per (harness, task) mean success and attempts: the groups of the first
    10% of steps where a groups table exists, else the first evaluation):
    the marginal likelihood of a logit-normal per harness (mean fitted per harness, sigma
    shared) over a grid of sigma. 1.0 without evaluations."""
    if not tables:
        return 1.0
    data = pd.concat(tables).reset_index()
    x, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / w.sum()
    best, best_ll = 1.0, -np.inf
    for sigma in np.linspace(0.0, 4.0, 41):
        ll = 0.0
        for _, part in data.groupby("harness"):
            k = np.round(part["mean"].to_numpy() * part["size"].to_numpy())
            n = part["size"].to_numpy()
            mu_grid = np.linspace(-8, 8, 81)
            p = 1 / (1 + np.exp(-(mu_grid[:, None] + sigma * x[None, :])))          # (M, K)
            p = np.clip(p, 1e-9, 1 - 1e-9)
            lik = (p[:, None, :] ** k[None, :, None] * (1 - p[:, None, :]) ** (n - k)[None, :, None]) @ w
            ll += np.log(lik + 1e-300).sum(axis=1).max()
        if ll > best_ll + 1e-9:
            best, best_ll = float(sigma), ll
    return best
