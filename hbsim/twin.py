"""The twin fit (issue 30, `hb twin fit`): run logs in, a `twin`-kind scenario out. Pure: tables
in, a scenario dict out (reading folders and writing files is `ablations.twin_cli`).

What it reads -- only what a real run can log (SPEC §7, §10): the train table's allocation
(`alloc_<harness>`), groups generated / retained and the retained groups' mean `reward`; the
groups table (`groups.parquet`, one row per generated group before the filter: harness,
size, success, retained, cost) where the run wrote one; the eval table (held-out tasks per
training harness, the held-out harness); the what-if probes' realised changes
(`counterfactual.parquet`: `real_train`, `real_heldout_harness`, `t_grad`); harness names and
costs. Never a synthetic world's truth: no `true_*`, `gain*`, `regret`, `oracle_arm` column,
no `cos_*`, no env section of run.json.

The model it fits is the scenario model (hbsim/envs/scenario.py) with one bias b_h, core
reading read_h and ceiling ceil_h per harness (hbsim/envs/twin.py), the core's rate fixed at
lr = 1 (only lr read_h read_j is identified: (lr, read) and (lr c^2, read / c) give the same
worlds), the harness x category affinity and the bias jitter 0 (absorbed into b_h), and the
held-out harness's coverage and alignment 0. Fitted: b_h, read_h, ceil_h, skill_lr,
max_step, forget, interference (only with mixed steps or a mixed probe), heldout_bias,
heldout_read; estimated apart: the task-difficulty spread (difficulty_std, from the
dispersion of per-task eval success), noise and dead harnesses (below), costs per harness.

The fit replays the LOGGED schedule of every run through the scenario model's expected step
(`replay`: the env's own `expected_state` equations, the tasks replaced by K Gauss-Hermite
nodes of the difficulty law, the categories by their symmetric mean, so the core z is one
number per run) and minimises the standardised residuals of every observation
(`scipy.optimize.least_squares`):

    groups     mean success of each step's generated groups per harness (groups table), or
               the retained groups' mean reward (train table: E[p - p^G] / E[keep]) and
               the keep rate groups_retained / groups_generated of a pure step
    eval       mean success per harness (held-out tasks) and of the held-out harness
    probes     real_train and real_heldout_harness of every what-if step (pure and mixed)
               against the expected one-step change from the replayed state

A noise harness (success flat, between 0.15 and 0.85, whatever is trained) gets role `noise`
(noise_p its mean success); a harness that never succeeds gets role `dead`. Fit quality
(`quality`) is measured on HELD-OUT steps: the fit sees the first (1 - holdout) of every
run's steps, the table scores its predictions of the rest (the twin written is then refitted
on all steps). The world's quantities (`world_quantities`): initial success per harness,
ceilings, the one-step transfer matrix (expected change of harness j's success from a pure
step on h), forgetting, interference, spread, costs, pool-size-to-steps ratio; the same
function, applied to any scenario's env section, gives the features of the distance that
picks the closest shipped scenario (`world_distance`).
"""
from __future__ import annotations

import time
from functools import lru_cache
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from hbsim import contract
from hbsim.grpo import expected_group_signal

#: the groups table of a run directory (hbsim.contract.GROUPS_FILE where the contract has it)
GROUPS_FILE = getattr(contract, "GROUPS_FILE", "groups.parquet")
#: columns a fit never reads: a synthetic world's truth
TRUTH_PREFIXES = ("true_", "gain", "regret", "oracle_arm", "cos_")
#: the scenario model's categories (z is their symmetric mean) and the sampler's defaults
N_CATEGORIES, OVERSAMPLE, MAX_ROUNDS = 5, 1.5, 4
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
    cost = pd.concat(costs, axis=1).mean(axis=1).reindex(harnesses).fillna(0.0).to_numpy() if costs else np.zeros(H)
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


# -- the model -------------------------------------------------------------------------------
@dataclass
class Params:
    """One twin's values (module docstring): per harness (H,) bias, read, ceil; noise, dead
    (H,) bool with noise_p (H,); the scalars."""

    bias: np.ndarray
    read: np.ndarray
    ceil: np.ndarray
    noise: np.ndarray
    dead: np.ndarray
    noise_p: np.ndarray
    skill_lr: float = 1.0
    max_step: float = 0.3
    forget: float = 0.1
    interference: float = 0.0
    heldout_bias: float = -1.0
    heldout_read: float = 0.5
    spread: float = 1.0
    lr: float = 1.0


@lru_cache(maxsize=4)
def _hermite(n: int) -> tuple[np.ndarray, np.ndarray]:
    x, w = np.polynomial.hermite_e.hermegauss(n)
    return x, w / w.sum()


def _nodes(spread: float) -> tuple[np.ndarray, np.ndarray]:
    """The N_NODES Gauss-Hermite nodes of N(0, spread^2) and their weights (summing to 1)."""
    x, w = _hermite(N_NODES)
    return spread * x, w


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def per_run(prm: Params, R: int) -> Params:
    """`prm` with every value as a per-run array (R, H) or (R,) (values may already be per run:
    the fit stacks parameter sets along the run axis)."""
    H = np.shape(prm.noise)[-1]
    out = {}
    for name in ("bias", "read", "ceil", "noise", "dead", "noise_p"):
        out[name] = np.broadcast_to(getattr(prm, name), (R, H))
    for name in ("skill_lr", "max_step", "forget", "interference", "heldout_bias", "heldout_read", "spread", "lr"):
        out[name] = np.broadcast_to(np.asarray(getattr(prm, name), dtype=np.float64), (R,))
    return Params(**out)


def state_parts(prm: Params, z: np.ndarray, s: np.ndarray, G: int) -> dict:
    """Per-run expectations at state (z (R,), s (R, H)) of per-run values `prm` (`per_run`):
    mean success `p` (R, H+1, the held-out harness last), keep probability `q`, signal per
    retained group `d`, retained mean reward `mean`, within-group variance `within`, batch
    fill `fill` (R, H) -- the scenario env's `_compute_parts` with the tasks replaced by the
    difficulty nodes."""
    x, w = _nodes(1.0)
    x = prm.spread[:, None] * x[None, :]                                                  # (R, K)
    logit = (prm.bias[:, None, :] + x[:, :, None] + (prm.read * z[:, None])[:, None, :] + s[:, None, :])
    p = prm.ceil[:, None, :] * _sigmoid(logit)                                           # (R, K, H)
    p = np.where(prm.noise[:, None, :], prm.noise_p[:, None, :], p)
    es, keep = expected_group_signal(p, G)
    q = np.einsum("rkh,k->rh", keep, w)
    ok = q > 1e-12
    safe = np.where(ok, q, 1.0)
    d = np.where(ok & ~prm.noise, np.einsum("rkh,k->rh", es, w) / safe, 0.0)
    mean = np.where(ok, np.einsum("rkh,k->rh", p - p ** G, w) / safe, 0.0)
    within = np.where(ok, np.einsum("rkh,k->rh", p * (1 - p), w) * (G - 1) / G / safe, 0.0)
    fill = 1.0 - (1.0 - q) ** (OVERSAMPLE * MAX_ROUNDS)
    px = _sigmoid(prm.heldout_bias[:, None] + x + (prm.heldout_read * z)[:, None]) @ w    # (R,)
    pbar = np.concatenate([np.einsum("rkh,k->rh", p, w), px[:, None]], axis=1)
    return {"p": pbar, "q": q, "d": d, "mean": mean, "within": within, "fill": fill}


def expected_step(prm: Params, z, s, counts, parts: dict):
    """(z, s) after the expected step of `counts` (..., R, H) from state (z (R,), s (R, H)) of
    per-run values `prm`: the scenario env's `expected_state` (kappa, trust region,
    forgetting), the categories pooled."""
    opt = counts * parts["fill"]
    n = opt.sum(axis=-1, keepdims=True)
    share = np.divide(opt, n, out=np.zeros_like(opt), where=n > 0)
    m = (share * parts["mean"]).sum(axis=-1)
    total = m * (1.0 - m)
    ratio = np.divide((share * parts["within"]).sum(axis=-1), total, out=np.ones_like(m), where=total > 0)
    kappa = np.clip(ratio, 0.0, 1.0) ** (prm.interference / 2)
    sig = share * parts["d"]                                                              # (..., R, H)
    dz = prm.lr * kappa * (sig * prm.read).sum(axis=-1) / N_CATEGORIES
    ds = (prm.skill_lr * kappa)[..., None] * sig
    moved = N_CATEGORIES * np.abs(dz) + np.abs(ds).sum(axis=-1)
    bound = np.where(prm.max_step > 0, prm.max_step, np.inf)
    clip = np.minimum(1.0, bound / np.maximum(moved, 1e-300))
    dz, ds, moved = dz * clip, ds * clip[..., None], moved * clip
    s_new = (s + ds) * np.exp(-prm.forget[..., None] * (1.0 - share) * moved[..., None])
    return z + dz, s_new


def sketch_transfer(read: np.ndarray, noise: np.ndarray, dead: np.ndarray) -> np.ndarray:
    """The T (SPEC §2.5) the twin's gradient sketch gives each harness: (..., H) the mean over the
    other harnesses j with a sketch (not dead) of cos(g_h, g_j), where a pure step's sketch is
    (read_h d / C on each of the C core coordinates, d on its own skill coordinate), so

        cos(g_h, g_j) = (read_h read_j / C) / sqrt((read_h^2 / C + 1) (read_j^2 / C + 1))

    and 0 for a noise harness (its core push is a random direction). read, noise, dead (..., H)."""
    C = N_CATEGORIES
    r = np.where(noise, 0.0, read)
    u = r / np.sqrt(C) / np.sqrt(r ** 2 / C + 1.0)                                         # (..., H)
    cos = u[..., :, None] * u[..., None, :]
    H = read.shape[-1]
    other = ~np.eye(H, dtype=bool) & ~np.asarray(dead)[..., None, :]
    cos = np.where(other, cos, 0.0)
    return cos.sum(axis=-1) / np.maximum(other.sum(axis=-1), 1)


def replay(prm: Params, alloc: np.ndarray, G: int, probe_at: np.ndarray | None = None, batch: int = 8) -> dict:
    """The expected trajectory of every run under its logged schedule.

    alloc (R, S, H) -> "p" (R, S+1, H+1) mean success before step t+1 (t = 0..S; the held-out
    harness last), "q", "mean" (R, S+1, H); with probe_at (R, S) bool: "gain" (R, S, H+1, 2)
    the expected change of the training mean and of the held-out harness's success from a
    pure `batch`-group step on each harness (and the even mixed batch, index H) from the
    state before step t+1."""
    R, S, H = alloc.shape
    prm = per_run(prm, R)
    z, s = np.zeros(R), np.zeros((R, H))
    out = {k: np.zeros((R, S + 1, H + (k == "p"))) for k in ("p", "q", "mean")}
    gain = np.full((R, S, H + 1, 2), np.nan) if probe_at is not None else None
    cand = np.vstack([np.eye(H) * batch, np.full(H, batch / H)])[:, None, :]               # (H+1, 1, H)
    for t in range(S + 1):
        parts = state_parts(prm, z, s, G)
        for k in out:
            out[k][:, t] = parts[k]
        if t == S:
            break
        if probe_at is not None and probe_at[:, t].any():
            zc, sc = expected_step(prm, z, s, np.broadcast_to(cand, (H + 1, R, H)), parts)
            after = np.stack([state_parts(prm, zc[i], sc[i], G)["p"] for i in range(H + 1)])   # (H+1, R, H+1)
            now = parts["p"]
            gain[:, t, :, 0] = (after[:, :, :H].mean(axis=2) - now[:, :H].mean(axis=1)[None]).T
            gain[:, t, :, 1] = (after[:, :, H] - now[None, :, H]).T
        z, s = expected_step(prm, z, s, alloc[:, t], parts)
    if gain is not None:
        out["gain"] = gain
    return out


# -- the fit ---------------------------------------------------------------------------------
#: bounds of the fitted values
BOUNDS = {"bias": (-8.0, 8.0), "read": (-4.0, 4.0), "ceil": (0.05, 1.0), "skill_lr": (0.0, 10.0),
          "max_step": (0.02, 3.0), "forget": (0.0, 10.0), "interference": (0.0, 16.0),
          "heldout_bias": (-8.0, 8.0), "heldout_read": (-4.0, 4.0)}
#: how much noisier than binomial a train row's keep rate is taken to be
KEEP_SD_FACTOR = 3.0
SCALARS = ("skill_lr", "max_step", "forget", "interference", "heldout_bias", "heldout_read")


@dataclass
class Layout:
    """Which values the parameter vector holds: `free` (H,) bool harnesses with bias/read/ceil
    (not noise, not dead), `scalars` the fitted scalars."""

    free: np.ndarray
    scalars: tuple

    def names(self, harnesses: list[str]) -> list[str]:
        idx = np.flatnonzero(self.free)
        return ([f"bias_{harnesses[i]}" for i in idx] + [f"read_{harnesses[i]}" for i in idx]
                + [f"ceil_{harnesses[i]}" for i in idx] + list(self.scalars))

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        k = int(self.free.sum())
        pairs = [BOUNDS["bias"]] * k + [BOUNDS["read"]] * k + [BOUNDS["ceil"]] * k + [BOUNDS[n] for n in self.scalars]
        lo, hi = np.array(pairs).T
        return lo, hi

    def vector(self, prm: Params) -> np.ndarray:
        f = self.free
        return np.concatenate([prm.bias[f], prm.read[f], prm.ceil[f], [getattr(prm, n) for n in self.scalars]])

    def params(self, theta: np.ndarray, base: Params) -> Params:
        """theta (P, n) -> Params whose values are (P, H) / (P,) stacks."""
        theta = np.atleast_2d(theta)
        P, k, f = theta.shape[0], int(self.free.sum()), self.free
        out = {}
        for j, name in enumerate(("bias", "read", "ceil")):
            arr = np.tile(np.asarray(getattr(base, name), dtype=np.float64), (P, 1))
            arr[:, f] = theta[:, j * k:(j + 1) * k]
            out[name] = arr
        for name in ("noise", "dead", "noise_p"):
            out[name] = np.tile(np.asarray(getattr(base, name)), (P, 1))
        for name in ("skill_lr", "max_step", "forget", "interference", "heldout_bias", "heldout_read", "spread", "lr"):
            out[name] = np.full(P, float(getattr(base, name)))
        for i, name in enumerate(self.scalars):
            out[name] = theta[:, 3 * k + i]
        return replace(base, **out)


def _sd(value: np.ndarray, n: np.ndarray, extra: float, per: float = 1.0) -> np.ndarray:
    return np.sqrt((value * (1 - value) / per + extra) / np.maximum(n, 1))


class Objective:
    """The standardised residuals of a Layout's parameter vectors against the observations
    whose step index is below each run's `cut` (module docstring)."""

    def __init__(self, obs: Observations, layout: Layout, base: Params, cut: np.ndarray):
        self.obs, self.layout, self.base, self.cut = obs, layout, base, cut
        g, e, p = obs.groups, obs.evals, obs.probes
        G = obs.group_size
        self.g_ok = g["t"] < cut[g["r"].astype(int)] if len(g["t"]) else np.zeros(0, bool)
        self.e_ok = e["t"] <= cut[e["r"].astype(int)] if len(e["t"]) else np.zeros(0, bool)
        self.p_ok = p["t"] < cut[p["r"].astype(int)] if len(p["t"]) else np.zeros(0, bool)
        kind = g["kind"]
        # the keep rate of a train row is a sequential sampler's ratio (it stops once the batch
        # is full): noisier than its binomial sd, so it is down-weighted
        self.g_sd = np.where(kind == 2, KEEP_SD_FACTOR * _sd(g["value"], g["n"], 0.01), _sd(g["value"], g["n"], 0.03, G))
        self.e_sd = 1.3 * _sd(e["value"], e["n"], 0.01)
        self.p_sd = np.zeros(len(p["value"]))
        for target in (0, 1):
            m = p["target"] == target
            if m.any():
                self.p_sd[m] = max(0.25 * float(np.std(p["value"][m])), 1e-5)
        tr = obs.transfer
        self.t_ok = tr["t"] < cut[tr["r"].astype(int)] if len(tr["t"]) else np.zeros(0, bool)
        self.t_sd = np.full(len(tr["value"]), 0.05)
        for h in np.unique(tr["h"]).astype(int):
            m = tr["h"] == h
            self.t_sd[m] = max(float(np.std(tr["value"][m])), 0.02)
        R, S, _ = obs.alloc.shape
        self.probe_at = np.zeros((R, S), bool)
        if len(p["t"]):
            self.probe_at[p["r"].astype(int), p["t"].astype(int)] = True
        self.evaluations = 0

    def predictions(self, theta: np.ndarray) -> list[dict]:
        """One dict of predicted observation arrays ("groups", "evals", "probes") per row of theta."""
        theta = np.atleast_2d(theta)
        P = theta.shape[0]
        R = self.obs.alloc.shape[0]
        prm = self.layout.params(theta, self.base)
        stacked = Params(**{k: (np.repeat(v, R, axis=0) if np.ndim(v) else v) for k, v in vars(prm).items()})
        alloc = np.tile(self.obs.alloc, (P, 1, 1))
        probe_at = np.tile(self.probe_at, (P, 1)) if self.probe_at.any() else None
        out = replay(stacked, alloc, self.obs.group_size, probe_at, self.obs.batch_groups)
        self.evaluations += P
        g, e, p = self.obs.groups, self.obs.evals, self.obs.probes
        preds = []
        for i in range(P):
            off = i * R
            gi = {0: out["p"], 1: out["mean"], 2: out["q"]}
            gr, gt, gh = g["r"].astype(int) + off, g["t"].astype(int), g["h"].astype(int)
            pg = np.select([g["kind"] == 0, g["kind"] == 1], [gi[0][gr, gt, gh], gi[1][gr, gt, gh]], gi[2][gr, gt, gh]) \
                if len(gr) else np.zeros(0)
            pe = out["p"][e["r"].astype(int) + off, e["t"].astype(int), e["h"].astype(int)] if len(e["r"]) else np.zeros(0)
            if len(p["r"]):
                ph = np.where(p["h"] < 0, len(self.obs.harnesses), p["h"]).astype(int)
                pp = out["gain"][p["r"].astype(int) + off, p["t"].astype(int), ph, p["target"].astype(int)]
            else:
                pp = np.zeros(0)
            T = sketch_transfer(prm.read[i], prm.noise[i], prm.dead[i])
            pt = T[self.obs.transfer["h"].astype(int)] if len(self.obs.transfer["h"]) else np.zeros(0)
            preds.append({"groups": pg, "evals": pe, "probes": pp, "transfer": pt})
        return preds

    def residuals(self, theta: np.ndarray) -> np.ndarray:
        """(P, N) standardised residuals of the fitted observations."""
        rows = []
        for pr in self.predictions(theta):
            o = self.obs
            rows.append(np.concatenate([
                ((pr["groups"] - o.groups["value"]) / self.g_sd)[self.g_ok],
                ((pr["evals"] - o.evals["value"]) / self.e_sd)[self.e_ok],
                ((pr["probes"] - o.probes["value"]) / np.maximum(self.p_sd, 1e-12))[self.p_ok],
                ((pr["transfer"] - o.transfer["value"]) / self.t_sd)[self.t_ok]]))
        return np.nan_to_num(np.vstack(rows), nan=0.0)

    def fun(self, theta):
        return self.residuals(theta[None])[0]

    def jac(self, theta):
        """Forward differences, every perturbed vector replayed in ONE stacked replay."""
        lo, hi = self.layout.bounds()
        step = 1e-4 * np.maximum(1.0, np.abs(theta))
        step = np.where(theta + step > hi, -step, step)
        thetas = np.vstack([theta, theta[None] + np.diag(step)])
        res = self.residuals(thetas)
        return ((res[1:] - res[0][None]) / step[:, None]).T


def _harness_series(obs: Observations, h: int) -> tuple[np.ndarray, np.ndarray]:
    """(steps, success) of every observation of harness h's mean success (generated groups or
    the held-out-task evaluations)."""
    g, e = obs.groups, obs.evals
    mg = (g["h"] == h) & (g["kind"] == 0) if len(g["h"]) else np.zeros(0, bool)
    me = e["h"] == h if len(e["h"]) else np.zeros(0, bool)
    if not mg.any() and not me.any():                      # train table only: the retained mean reward
        mg = (g["h"] == h) & (g["kind"] == 1) if len(g["h"]) else np.zeros(0, bool)
    return (np.concatenate([g["t"][mg], e["t"][me]]).astype(np.float64),
            np.concatenate([g["value"][mg], e["value"][me]]))


def initial_params(obs: Observations) -> Params:
    """Starting values and roles (module docstring): each harness's bias from its initial
    success, its reading's sign from the probes' T, dead and noise harnesses marked."""
    H = len(obs.harnesses)
    S = float(obs.steps.max())
    bias, read = np.zeros(H), np.full(H, 0.5)
    dead, noise, noise_p = np.zeros(H, bool), np.zeros(H, bool), np.zeros(H)
    x, w = _nodes(obs.spread)
    grid = np.linspace(-8, 8, 321)
    curve = _sigmoid(grid[:, None] + x[None, :]) @ w
    for h in range(H):
        t, v = _harness_series(obs, h)
        if not len(v) or np.nanmax(v) < 0.01:
            dead[h] = True
            continue
        early = v[t <= max(np.min(t), 0.1 * S)]
        p0 = float(np.clip(np.mean(early), 0.005, 0.995))
        bias[h] = float(np.interp(p0, curve, grid))
        slope = np.polyfit(t, v, 1)[0] if len(np.unique(t)) > 1 else 0.0
        if abs(slope * S) < 0.04 and 0.15 < np.mean(v) < 0.85 and _flat_tasks(obs, h):
            noise[h], noise_p[h] = True, float(np.mean(v))
        if np.isfinite(obs.t_grad[h]) and obs.t_grad[h] < -0.05:
            read[h] = -0.7
    e = obs.evals
    held = e["h"] == H if len(e["h"]) else np.zeros(0, bool)
    hb = float(np.interp(np.clip(np.mean(e["value"][held & (e["t"] == e["t"][held].min())]), 0.005, 0.995)
                         if held.any() else 0.3, curve, grid)) if held.any() else -1.0
    ceil = np.where(dead, 0.0, 1.0)
    return Params(bias=bias, read=np.where(noise | dead, 0.0, read), ceil=ceil, noise=noise, dead=dead,
                  noise_p=noise_p, heldout_bias=hb, spread=obs.spread)


def _flat_tasks(obs: Observations, h: int) -> bool:
    """Whether harness h's per-task success shows no more spread than binomial noise: a noise
    harness succeeds with one probability on every task. Recorded by `observations` per harness
    (`obs.costs['task_spread']`); True when unknown."""
    spread = obs.task_spread
    return True if spread is None or not np.isfinite(spread[h]) else bool(spread[h] < 0.5 * max(obs.spread, 0.6))


@dataclass
class Fit:
    """A fitted twin: its values, the observations, the held-out quality table and timing."""

    params: Params
    obs: Observations
    quality: pd.DataFrame
    seconds: float
    evaluations: int
    layout: Layout


def fit(obs: Observations, holdout: float = 0.25, max_nfev: int = 25) -> Fit:
    """Fit the twin to `obs` (module docstring): first on every run's first (1 - holdout)
    steps, scored on the rest (`quality`), then on all steps (the values returned)."""
    from scipy.optimize import least_squares

    start = time.perf_counter()
    base = initial_params(obs)
    scalars = [n for n in SCALARS if n != "interference" or _has_mixed(obs)]
    if not (obs.evals["h"] == len(obs.harnesses)).any() if len(obs.evals["h"]) else True:
        scalars = [n for n in scalars if not n.startswith("heldout_")]
    layout = Layout(free=~(base.noise | base.dead), scalars=tuple(scalars))
    lo, hi = layout.bounds()
    evaluations = 0

    def solve(cut, theta0, nfev):
        nonlocal evaluations
        obj = Objective(obs, layout, base, cut)
        best = None
        for x0 in theta0:
            sol = least_squares(obj.fun, np.clip(x0, lo + 1e-9, hi - 1e-9), jac=obj.jac, bounds=(lo, hi),
                                x_scale="jac", max_nfev=nfev, method="trf")
            if best is None or sol.cost < best.cost:
                best = sol
        evaluations += obj.evaluations
        return best.x

    starts = [layout.vector(base)]
    quality = pd.DataFrame()
    if holdout > 0:
        cut = np.maximum(1, np.floor((1 - holdout) * obs.steps)).astype(int)
        theta = solve(cut, starts, max_nfev)
        quality = quality_table(obs, first(layout.params(theta, base)), cut)
        starts = [theta]
    theta = solve(obs.steps + 1, starts, max_nfev if holdout <= 0 else max(5, max_nfev // 2))
    return Fit(first(layout.params(theta, base)), obs, quality, time.perf_counter() - start, evaluations, layout)


def first(prm: Params) -> Params:
    """The first of a stack of values (`Layout.params`) as one Params."""
    return Params(**{k: (np.asarray(v)[0] if np.ndim(v) == (2 if k in ("bias", "read", "ceil", "noise", "dead", "noise_p")
                                                             else 1) else v) for k, v in vars(prm).items()})


def _has_mixed(obs: Observations) -> bool:
    mixed_steps = ((obs.alloc > 0).sum(axis=2) > 1).any()
    return bool(mixed_steps or (len(obs.probes["h"]) and (obs.probes["h"] < 0).any()))


QUANTITIES = {(0, "groups"): "success of generated groups", (1, "groups"): "retained groups' mean reward",
              (2, "groups"): "keep rate", ("train", "evals"): "eval success per harness",
              ("heldout", "evals"): "held-out harness eval", (0, "probes"): "what-if change (train)",
              (1, "probes"): "what-if change (held-out harness)", ("T", "probes"): "what-if gradient T"}


def quality_table(obs: Observations, prm: Params, cut: np.ndarray) -> pd.DataFrame:
    """Per observed quantity, on the HELD-OUT steps (index >= cut of the run): n, RMSE, the
    observations' std, and R^2 = 1 - MSE / variance (<= 0: no better than their mean)."""
    layout = Layout(free=np.zeros(len(obs.harnesses), bool), scalars=())
    obj = Objective(obs, layout, prm, cut)
    pred = obj.predictions(np.zeros((1, 0)))[0]
    H, rows = len(obs.harnesses), []
    g, e, p = obs.groups, obs.evals, obs.probes
    blocks = []
    for kind in (0, 1, 2):
        if len(g["t"]):
            m = (g["kind"] == kind) & (g["t"] >= cut[g["r"].astype(int)])
            blocks.append(((kind, "groups"), g["value"][m], pred["groups"][m]))
    if len(e["t"]):
        later = e["t"] > cut[e["r"].astype(int)]
        blocks.append((("train", "evals"), e["value"][later & (e["h"] < H)], pred["evals"][later & (e["h"] < H)]))
        blocks.append((("heldout", "evals"), e["value"][later & (e["h"] == H)], pred["evals"][later & (e["h"] == H)]))
    for target in (0, 1):
        if len(p["t"]):
            m = (p["target"] == target) & (p["t"] >= cut[p["r"].astype(int)])
            blocks.append(((target, "probes"), p["value"][m], pred["probes"][m]))
    tr = obs.transfer
    if len(tr["t"]):
        m = tr["t"] >= cut[tr["r"].astype(int)]
        blocks.append((("T", "probes"), tr["value"][m], pred["transfer"][m]))
    for key, y, yhat in blocks:
        ok = np.isfinite(y) & np.isfinite(yhat)
        if ok.sum() < 2:
            continue
        y, yhat = y[ok], yhat[ok]
        mse, var = float(np.mean((y - yhat) ** 2)), float(np.var(y))
        rows.append({"quantity": QUANTITIES[key], "n": int(ok.sum()), "rmse": np.sqrt(mse), "std": np.sqrt(var),
                     "r2": 1 - mse / var if var > 0 else float("nan"),
                     "corr": float(np.corrcoef(y, yhat)[0, 1]) if np.std(yhat) > 0 and var > 0 else float("nan")})
    return pd.DataFrame(rows, columns=["quantity", "n", "rmse", "std", "r2", "corr"])


# -- the twin as a scenario ------------------------------------------------------------------
def _floats(values) -> str:
    return ",".join(f"{float(v):.4g}" for v in values)


def scenario(result: Fit, *, name: str, target: str = "heldout_tasks", pool_size: int | None = None,
             seeds: int = 2, k_attempts: int | None = None, sources: str = "") -> dict:
    """The fitted twin as a scenario file's table (hbsim.scenarios: name, summary, target,
    seeds, steps, batch_groups, lr_note, [env] of kind `twin`)."""
    prm, obs = result.params, result.obs
    H = len(obs.harnesses)
    roles = ["dead" if d else "noise" if n else "ordinary" for d, n in zip(prm.dead, prm.noise)]
    steps = int(obs.steps.max())
    env = {"kind": "twin", "n_harnesses": H, "n_tasks": int(pool_size or DEFAULT_POOL),
           "n_heldout_tasks": int(obs.n_heldout_tasks), "group_size": int(obs.group_size),
           "roles": ",".join(roles), "harness_names": ",".join(obs.harnesses),
           "harness_bias": _floats(np.where(prm.dead, 0.0, prm.bias)), "harness_read": _floats(prm.read),
           "harness_ceiling": _floats(np.where(prm.dead, 0.0, prm.ceil)),
           "lr": 1.0, "skill_lr": round(float(prm.skill_lr), 4), "max_step": round(float(prm.max_step), 4),
           "forget": round(float(prm.forget), 4), "interference": round(float(prm.interference), 4),
           "heldout_bias": round(float(prm.heldout_bias), 4), "heldout_read": round(float(prm.heldout_read), 4),
           "coverage": 0.0, "difficulty_std": round(float(prm.spread), 4), "affinity_std": 0.0, "bias_jitter": 0.0}
    if prm.noise.any():
        env["noise_p"] = round(float(prm.noise_p[prm.noise].mean()), 4)
    if k_attempts:
        env["k_attempts"] = int(k_attempts)
    cost = obs.costs.get("per_group")
    if cost is not None and np.nansum(cost) > 0:
        env["group_tokens"] = _floats(np.maximum(cost, 0.0))
    described = ", ".join(f"{h} ({r})" for h, r in zip(obs.harnesses, roles))
    summary = (f"A twin fitted by `hb twin fit` to {len(obs.steps)} runs of {steps} steps{sources}: harnesses "
               f"{described}; the scenario model with one bias, core reading and ceiling per harness, fitted "
               "to the logged success of every step's groups, the evaluations and the what-if probes "
               "(docs/TWIN.md).")
    note = (f"Learning rates fitted (the core's rate fixed at lr = 1: only lr x read is identified): skill_lr "
            f"{env['skill_lr']}, trust region max_step {env['max_step']}, forget {env['forget']}.")
    return {"name": name, "summary": summary, "target": target, "seeds": max(2, int(seeds)), "steps": steps,
            "batch_groups": int(obs.batch_groups), "lr_note": note, "env": env}


#: the training-task pool of a twin whose logs do not say how many tasks the run had
DEFAULT_POOL = 60


def world_quantities(env: dict, seeds: tuple = (0, 1), batch: int = 8) -> dict:
    """What a world's exact model says, from its env section (any synthetic kind): per harness
    the initial training success `initial` (H,), the one-step `transfer` matrix (H, H+1):
    the expected change of harness j's success (column H: the held-out harness) from a pure
    `batch`-group step on harness h at the start, `mixed_ratio` the even mixed batch's gain over
    the mean pure gain (interference), `ceiling` (H,); averaged over `seeds`."""
    from hbsim.envs import make_env
    from hbsim.experiment import resolve_synthetic

    knobs = resolve_synthetic(dict(env))
    kind = knobs.pop("kind")
    init, transfer, mixed, ceil = [], [], [], []
    for seed in seeds:
        world = make_env(kind, seed=seed, **knobs)
        H, n = world.H, world.n_tasks
        now = world.success_matrix()[:n]                                             # (n, H+1)
        cand = np.vstack([np.eye(H, dtype=np.int64) * batch, _even(H, batch)])
        after = world.expected_success(cand, tasks=slice(0, n))                      # (H+1, n, H+1)
        gain = after.mean(axis=1) - now.mean(axis=0)[None]                            # (H+1, H+1)
        init.append(now[:, :H].mean(axis=0))
        transfer.append(gain[:H])
        pure = gain[:H, :H].mean(axis=1).mean()
        mixed.append(gain[H, :H].mean() / pure if abs(pure) > 1e-9 else 1.0)
        ceil.append(np.asarray(getattr(world, "ceil", np.ones(H + 1)))[:H])
    return {"initial": np.mean(init, axis=0), "transfer": np.mean(transfer, axis=0),
            "mixed_ratio": float(np.mean(mixed)), "ceiling": np.mean(ceil, axis=0)}


def _even(H: int, batch: int) -> np.ndarray:
    counts = np.full(H, batch // H, dtype=np.int64)
    counts[: batch % H] += 1
    if counts.sum() == 0 or (counts == 0).any():
        counts = np.ones(H, dtype=np.int64)
    return counts[None]


#: quantiles at which the sorted per-harness features are compared (worlds of any H)
FEATURE_QUANTILES = np.linspace(0.0, 1.0, 6)


def world_features(q: dict) -> np.ndarray:
    """The distance's features of `world_quantities` (docs/TWIN.md): the quantiles of the
    sorted initial success, of each harness's own one-step gain (x 100) and of its mean effect
    on the OTHER training harnesses (x 100), and the mixed batch's gain ratio (clipped to
    [-2, 2])."""
    T = q["transfer"]
    H = T.shape[0]
    own = np.diag(T[:, :H])
    cross = (T[:, :H].sum(axis=1) - own) / max(H - 1, 1)
    quant = lambda v: np.quantile(np.sort(v), FEATURE_QUANTILES)   # noqa: E731
    return np.concatenate([quant(q["initial"]), 100 * quant(own), 100 * quant(cross),
                           [np.clip(q["mixed_ratio"], -2, 2)]])


def world_distance(a: dict, b: dict) -> float:
    """Euclidean distance of two worlds' `world_features` (a, b: `world_quantities`)."""
    return float(np.linalg.norm(world_features(a) - world_features(b)))
