"""The twin's fit (hbsim.twin): starting values and roles, the standardised residuals of a
parameter vector, `scipy.optimize.least_squares`, and the held-out quality table."""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from hbsim.twin.logs import Observations
from hbsim.twin.model import Params, _nodes, _sigmoid, replay, sketch_transfer
from hbsim.twin.simulate import simulate


# -- the fit ---------------------------------------------------------------------------------
#: bounds of the fitted values
BOUNDS = {"bias": (-8.0, 8.0), "read": (-8.0, 8.0), "ceil": (0.05, 1.0), "skill_lr": (0.0, 20.0),
          "max_step": (0.02, 6.0), "forget": (0.0, 10.0), "interference": (0.0, 16.0),
          "heldout_bias": (-8.0, 8.0), "heldout_read": (-8.0, 8.0), "lr": (0.02, 50.0)}
#: the sd of the prior that pulls a harness's ceiling towards 1: a ceiling below 1 must be shown by
#: the logs (a plateau), not fitted into curves that never came near it
CEILING_PRIOR_SD = 0.1
#: how much noisier than binomial a train row's keep rate is taken to be
KEEP_SD_FACTOR = 3.0
#: the fitted scalars; `lr` (the core's rate) only where the logs hold the probes' gradient T, which
#: fixes the scale of read_h (a gradient cosine knows no learning rate), and `interference` only
#: with mixed steps or a mixed probe
SCALARS = ("skill_lr", "max_step", "forget", "interference", "heldout_bias", "heldout_read", "lr")
#: |read| below this many standard errors: its sign is not identified by the logs (`Fit.unsure`)
SIGN_Z = 2.0


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

    def __init__(self, obs: Observations, layout: Layout, base: Params, cut: np.ndarray, shift: dict | None = None):
        self.obs, self.layout, self.base, self.cut = obs, layout, base, cut
        self.shift = shift        # added to the replay's quantities: simulate - replay (hbsim.twin.simulate)
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
        if self.shift is not None:
            for k, v in self.shift.items():
                if k in out and k != "T":
                    out[k] = out[k] + np.nan_to_num(np.tile(v, (P,) + (1,) * (v.ndim - 1)))
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
            tr = self.obs.transfer
            pt = T[tr["h"].astype(int)] if len(tr["h"]) else np.zeros(0)
            if self.shift is not None and "T" in self.shift and len(pt):
                pt = pt + self.shift["T"][tr["r"].astype(int), tr["t"].astype(int), tr["h"].astype(int)]
            preds.append({"groups": pg, "evals": pe, "probes": pp, "transfer": pt,
                          "ceil": prm.ceil[i][self.layout.free]})
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
                ((pr["transfer"] - o.transfer["value"]) / self.t_sd)[self.t_ok],
                (1.0 - pr["ceil"]) / CEILING_PRIOR_SD]))
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
    e = obs.evals
    held = e["h"] == H if len(e["h"]) else np.zeros(0, bool)
    hb = float(np.interp(np.clip(np.mean(e["value"][held & (e["t"] == e["t"][held].min())]), 0.005, 0.995)
                         if held.any() else 0.3, curve, grid)) if held.any() else -1.0
    ceil = np.where(dead, 0.0, 1.0)
    read = reads_from_transfer(obs.t_grad, noise, dead, np.where(noise | dead, 0.0, read))
    return Params(bias=bias, read=read, ceil=ceil, noise=noise, dead=dead,
                  noise_p=noise_p, heldout_bias=hb, spread=obs.spread)


def reads_from_transfer(t_grad: np.ndarray, noise: np.ndarray, dead: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The core readings whose sketch cosines (`sketch_transfer`) best give each harness's mean
    probe T (`t_grad`, nan where a harness was never probed): a cosine of gradients knows no
    learning rate, so T alone fixes read_h up to one sign shared by all harnesses (u -> -u
    leaves every u_h u_j unchanged; the convention: the readings sum to >= 0). `start` where
    no harness has a T."""
    ok = np.isfinite(t_grad) & ~noise & ~dead
    if ok.sum() < 2:
        return start
    from scipy.optimize import least_squares

    free = ~noise & ~dead

    def resid(r):
        read = np.where(free, 0.0, start)
        read[free] = r
        return np.concatenate([(sketch_transfer(read, noise, dead) - np.nan_to_num(t_grad))[ok] / 0.02,
                               0.01 * r])                      # a whisper of ridge: a harness T does not see stays small
    x0 = np.where(np.nan_to_num(t_grad[free]) < -0.02, -1.0, 1.0)
    sol = least_squares(resid, x0, bounds=BOUNDS["read"], method="trf")
    read = np.where(free, 0.0, start)
    read[free] = sol.x if sol.x.sum() >= 0 else -sol.x
    return read


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
    se: np.ndarray | None = None       # standard error of every fitted value (Layout.names order)

    def standard_errors(self, name: str) -> np.ndarray:
        """(H,) the standard error of each harness's fitted `name` (bias, read, ceil; nan where
        not fitted: noise, dead)."""
        out = np.full(len(self.obs.harnesses), np.nan)
        if self.se is None:
            return out
        k, j = int(self.layout.free.sum()), ("bias", "read", "ceil").index(name)
        out[self.layout.free] = self.se[j * k:(j + 1) * k]
        return out

    def unsure(self) -> list[int]:
        """The harnesses whose reading's sign the logs do not identify: |read| < SIGN_Z se."""
        se = self.standard_errors("read")
        return [h for h in range(len(se)) if np.isfinite(se[h]) and abs(self.params.read[h]) < SIGN_Z * se[h]]


#: rounds of the simulation correction (hbsim.twin.simulate) and simulations per logged run in each
SIM_ROUNDS, SIMS = 2, 3


def fit(obs: Observations, holdout: float = 0.25, max_nfev: int = 25, sim_rounds: int = SIM_ROUNDS,
        sims: int = SIMS) -> Fit:
    """Fit the twin to `obs` (module docstring): first on every run's first (1 - holdout)
    steps, scored on the rest (`quality`), then on all steps (the values returned). Each fit
    is then corrected `sim_rounds` times for the gap between the replay (the mean path) and
    the twin env's own realised paths: the replay's predictions plus simulate - replay at the
    current values (`sims` simulations per run, hbsim.twin.simulate), refitted."""
    from scipy.optimize import least_squares

    start = time.perf_counter()
    base = initial_params(obs)
    scalars = [n for n in SCALARS if (n != "interference" or _has_mixed(obs))
               and (n != "lr" or np.isfinite(obs.t_grad).sum() >= 2)]
    if not (obs.evals["h"] == len(obs.harnesses)).any() if len(obs.evals["h"]) else True:
        scalars = [n for n in scalars if not n.startswith("heldout_")]
    layout = Layout(free=~(base.noise | base.dead), scalars=tuple(scalars))
    lo, hi = layout.bounds()
    evaluations = 0

    final = {}

    probe_at = np.zeros(obs.alloc.shape[:2], bool)
    if len(obs.probes["t"]):
        probe_at[obs.probes["r"].astype(int), obs.probes["t"].astype(int)] = True

    def solve(cut, theta0, nfev):
        nonlocal evaluations
        shift = None
        for rnd in range(1 + sim_rounds):
            obj = Objective(obs, layout, base, cut, shift)
            best = None
            for x0 in theta0:
                sol = least_squares(obj.fun, np.clip(x0, lo + 1e-9, hi - 1e-9), jac=obj.jac, bounds=(lo, hi),
                                    x_scale="jac", max_nfev=nfev, method="trf")
                if best is None or sol.cost < best.cost:
                    best = sol
            evaluations += obj.evaluations
            if rnd == sim_rounds:
                break
            prm = first(layout.params(best.x, base))
            sim = simulate(prm, obs, probe_at if probe_at.any() else None, sims=sims, seed=rnd)
            mean = replay(prm, obs.alloc, obs.group_size, probe_at if probe_at.any() else None, obs.batch_groups)
            shift = {k: sim[k] - mean[k] for k in sim if k in mean}
            if "T" in sim:       # the probes' T in the twin env minus the closed form the objective uses
                closed = sketch_transfer(prm.read, prm.noise, prm.dead)
                shift["T"] = np.nan_to_num(sim["T"] - closed[None, None, :])
            theta0 = [best.x]
        final.update(sol=best, shift=shift)
        return best.x

    starts = [layout.vector(base)]
    quality = pd.DataFrame()
    if holdout > 0:
        cut = np.maximum(1, np.floor((1 - holdout) * obs.steps)).astype(int)
        theta = solve(cut, starts, max_nfev)
        quality = quality_table(obs, first(layout.params(theta, base)), cut, final.get("shift"))
        starts = [theta]
    theta = solve(obs.steps + 1, starts, max_nfev if holdout <= 0 else max(5, max_nfev // 2))
    return Fit(first(layout.params(theta, base)), obs, quality, time.perf_counter() - start, evaluations, layout,
               standard_errors(final["sol"]))


def standard_errors(sol) -> np.ndarray:
    """The Gauss-Newton standard errors of a least-squares solution of standardised residuals:
    sqrt(diag((J'J)^-1)) scaled by the residuals' own variance where it exceeds 1 (a misfit
    widens them); inf for a value the residuals do not move (a direction J'J cannot see)."""
    J, r = np.asarray(sol.jac), np.asarray(sol.fun)
    dof = max(len(r) - J.shape[1], 1)
    scale = max(float(r @ r) / dof, 1.0)
    u, sv, vt = np.linalg.svd(J, full_matrices=False)
    tiny = sv <= sv.max() * 1e-10 if sv.size else np.zeros(0, bool)
    inv = np.where(tiny, 0.0, 1.0 / np.where(tiny, 1.0, sv) ** 2)
    var = (vt.T ** 2) @ inv * scale
    blind = (np.abs(vt[tiny]) > 1e-6).any(axis=0) if tiny.any() else np.zeros(J.shape[1], bool)
    return np.where(blind, np.inf, np.sqrt(var))


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


def quality_table(obs: Observations, prm: Params, cut: np.ndarray, shift: dict | None = None) -> pd.DataFrame:
    """Per observed quantity, on the HELD-OUT steps (index >= cut of the run): n, RMSE, the
    observations' std, and R^2 = 1 - MSE / variance (<= 0: no better than their mean); the
    predictions are the replay's plus `shift` (the fit's last simulation correction)."""
    layout = Layout(free=np.zeros(len(obs.harnesses), bool), scalars=())
    obj = Objective(obs, layout, prm, cut, shift)
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
