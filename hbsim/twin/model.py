"""The twin's model (hbsim.twin): the scenario env's expected step on Gauss-Hermite nodes of the
task difficulty, the categories pooled, vectorised over runs (and over stacked parameter
sets), and the closed-form T of its gradient sketch."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from hbsim.grpo import expected_group_signal
from hbsim.twin.logs import N_NODES

#: the scenario model's categories (z is their symmetric mean) and the sampler's defaults
N_CATEGORIES, OVERSAMPLE, MAX_ROUNDS = 5, 1.5, 4


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
    forgetting), the categories pooled, times the probability that the batch is not empty."""
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
    # a batch with no retained group is an empty step (it moves nothing): the sampler generates up
    # to oversample x max_rounds groups per requested one, so P(empty) = prod_h (1 - q_h)^(that many);
    # the scenario env's oracle leaves this out, the realised runs a twin is fitted to do not
    with np.errstate(divide="ignore"):
        log_miss = np.log(np.clip(1.0 - parts["q"], 0.0, 1.0))
    nonempty = 1.0 - np.exp(np.where(counts > 0, counts * OVERSAMPLE * MAX_ROUNDS * log_miss, 0.0).sum(axis=-1))
    clip = clip * nonempty
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
