"""GRPO maths (SPEC §2.1-2.3): advantages, the dynamic-sampling keep mask, learnability.

Pure numpy functions, vectorised over leading axes, no state and no randomness.

Shapes: `rewards` is (..., G) -- any leading axes (steps, groups, ...) and the G rollouts
of one group last. Token-level advantages are (groups, G, T) with a token mask of the same
shape.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from policies.errors import UserError

#: Added to the population std by the "grpo" advantage (SPEC §2.1).
GRPO_EPS = 1e-6


def _loo(rewards: np.ndarray) -> np.ndarray:
    g = rewards.shape[-1]
    if g < 2:
        raise UserError(f"group size G={g} is not allowed for kind='loo': expected G >= 2")
    return g / (g - 1) * (rewards - rewards.mean(axis=-1, keepdims=True))


def _grpo(rewards: np.ndarray) -> np.ndarray:
    centred = rewards - rewards.mean(axis=-1, keepdims=True)
    return centred / (rewards.std(axis=-1, keepdims=True) + GRPO_EPS)


def _mean(rewards: np.ndarray) -> np.ndarray:
    return rewards - rewards.mean(axis=-1, keepdims=True)


#: kind -> advantage function (..., G) -> (..., G)
ADVANTAGES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "loo": _loo,    # r_i - mean_{j != i} r_j = G/(G-1) (r_i - mean r); the paper's default
    "grpo": _grpo,  # (r_i - mean r) / (population std + 1e-6)
    "mean": _mean,  # r_i - mean r
}


def advantages(rewards: np.ndarray, kind: str = "loo") -> np.ndarray:
    """Group-relative advantages of `rewards` (..., G) along the last axis; same shape.

    kind: "loo" (default), "grpo" or "mean" (SPEC §2.1); anything else raises ValueError.
    """
    if kind not in ADVANTAGES:
        raise UserError(f"advantage kind={kind!r} is unknown; valid kinds: {', '.join(ADVANTAGES)}")
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim < 1 or r.shape[-1] < 1:
        raise ValueError(f"rewards shape={r.shape} is not allowed: expected (..., G) with G >= 1")
    return ADVANTAGES[kind](r)


def keep_mask(rewards: np.ndarray) -> np.ndarray:
    """Dynamic-sampling mask (SPEC §2.2): rewards (..., G) -> (...,) bool, False where every
    reward of the group equals the first (zero variance)."""
    r = np.asarray(rewards)
    return (r != r[..., :1]).any(axis=-1)


#: a rollout succeeds when its reward reaches 1 (the eval tables' `success`, real and synthetic)
SUCCESS_REWARD = 1.0


def group_stats(rewards: np.ndarray, kind: str = "loo") -> dict[str, np.ndarray]:
    """Per-group statistics of `rewards` (n, G), each an (n,) array: `success` (mean of
    reward >= 1), `reward_mean`, `reward_std` (population std), `mean_abs_adv` (mean |A_i|
    of the advantage `kind`; 0 for a zero-variance group under every kind)."""
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 2:
        raise ValueError(f"rewards shape={r.shape} is not allowed: expected (groups, G)")
    if r.shape[0] == 0:
        empty = np.zeros(0)
        return {"success": empty, "reward_mean": empty, "reward_std": empty, "mean_abs_adv": empty}
    return {"success": (r >= SUCCESS_REWARD).mean(axis=-1), "reward_mean": r.mean(axis=-1),
            "reward_std": r.std(axis=-1), "mean_abs_adv": np.abs(advantages(r, kind)).mean(axis=-1)}


def trajectory_mean_abs(adv: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """l_i of SPEC §2.3. adv (groups, G) -> itself in absolute value; adv (groups, G, T) with
    mask (groups, G, T) -> sum_t M|A| / sum_t M, shape (groups, G). A trajectory with no valid
    token gets nan (and is skipped by `learnability`)."""
    a = np.abs(np.asarray(adv, dtype=np.float64))
    if mask is None:
        if a.ndim == 3:
            return a.mean(axis=-1)
        return a
    m = np.asarray(mask, dtype=np.float64)
    if m.shape != a.shape or a.ndim != 3:
        raise ValueError(f"mask shape={m.shape} is not allowed: expected the advantages' shape "
                         f"(groups, G, T)={a.shape}")
    valid = m.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(valid > 0, (m * a).sum(axis=-1) / valid, np.nan)


def learnability(adv: np.ndarray, mask: np.ndarray | None = None) -> float | None:
    """Hierarchical mean absolute advantage L (SPEC §2.3) of the retained groups of a batch.

    adv: (groups, G) outcome advantages, or (groups, G, T) token advantages with `mask`
    (groups, G, T) marking valid tokens. L = mean over groups of (mean over i of l_i), with
    l_i = sum_t M|A| / sum_t M. Trajectories without valid tokens are left out of their group's
    mean, groups without any valid trajectory are left out. Returns None when no group
    remains (the signal is missing, never 0 or nan).
    """
    a = np.asarray(adv, dtype=np.float64)
    if a.ndim not in (2, 3):
        raise ValueError(f"advantages shape={a.shape} is not allowed: expected (groups, G) or (groups, G, T)")
    if a.shape[0] == 0:
        return None
    if mask is None and a.ndim == 2 and a.shape[1] > 0 and np.isfinite(a).all():
        return float(np.abs(a).mean())        # equal-size groups: mean of means = overall mean
    per_traj = trajectory_mean_abs(a, mask)                     # (groups, G)
    ok = np.isfinite(per_traj)
    n_ok = ok.sum(axis=-1)
    per_group = np.where(ok, per_traj, 0.0).sum(axis=-1)
    groups = n_ok > 0
    if not groups.any():
        return None
    return float(np.mean(per_group[groups] / n_ok[groups]))


def binary_group_learnability(k: np.ndarray | int, group_size: int) -> np.ndarray:
    """Closed form L(k) = 2k(G-k) / (G(G-1)) of one LOO group with k successes of G."""
    k = np.asarray(k, dtype=np.float64)
    return 2.0 * k * (group_size - k) / (group_size * (group_size - 1))


# -- oracle and optimizer maths of the synthetic environments (hbsim.envs): the ONE home
# -- of the exact expected group signal and of the SGD/Adam step --------------------------
#: up to this G, E[sig](p) is evaluated as a monomial polynomial by Horner's rule (well
#: conditioned for small G); above it, the exact binomial sum
POLY_MAX_G = 10

OPTIMIZERS = ("sgd", "adam")


def _int_power(x: np.ndarray, n: int) -> np.ndarray:
    """x ** n for an integer n >= 1 by repeated squaring (float `**` is slow)."""
    result, base = None, x
    while n:
        if n & 1:
            result = base if result is None else result * base
        n >>= 1
        if n:
            base = base * base
    return result


def group_signal_table(group_size: int, kind: str = "loo") -> tuple[np.ndarray, np.ndarray]:
    """(s_y, s_1), each (G+1,): mean_i A_i r_i and mean_i A_i of a binary group with k
    successes (row k), A = advantages(r, kind)."""
    G = int(group_size)
    canon = (np.arange(G)[None, :] < np.arange(G + 1)[:, None]).astype(np.float64)  # row k: k ones
    adv = advantages(canon, kind)
    return (adv * canon).mean(axis=1), adv.mean(axis=1)


def _signal_polynomial(G: int, kind: str) -> np.ndarray:
    """Monomial coefficients (low to high) of E[sig](p) = sum_k Binom(k; G, p) (s_y[k] - p s_1[k]);
    coefficients below 1e-12 of the largest are rounding noise and set to 0 (LOO: p - p^2)."""
    from math import comb
    P = np.polynomial.polynomial
    s_y, s_1 = group_signal_table(G, kind)
    coef = np.zeros(G + 2)
    for k in range(G + 1):
        bern = comb(G, k) * P.polymul(P.polypow([0.0, 1.0], k), P.polypow([1.0, -1.0], G - k))
        term = P.polysub(s_y[k] * bern, s_1[k] * P.polymul([0.0, 1.0], bern))
        coef[: term.size] += term
    coef[np.abs(coef) < 1e-12 * np.abs(coef).max(initial=0.0)] = 0.0
    return np.trim_zeros(coef, "b") if coef.any() else np.zeros(1)


_POLY_CACHE: dict[tuple[int, str], np.ndarray] = {}


def expected_group_signal(p: np.ndarray, group_size: int, kind: str = "loo") -> tuple[np.ndarray, np.ndarray]:
    """Exact expectations for one group of G binary rollouts with success probability p.

    p: any shape. Returns (E[sig], keep), both p's shape: sig = mean_i A_i (r_i - p) with
    A = advantages(r, kind), keep = P(the group has non-zero variance) = 1 - p^G - (1-p)^G.
    For kind="loo", E[sig] = p (1 - p). G <= POLY_MAX_G: Horner on the exact polynomial;
    larger G: the binomial sum.
    """
    G = int(group_size)
    p = np.asarray(p, dtype=np.float64)
    if G <= POLY_MAX_G:
        key = (G, kind)
        if key not in _POLY_CACHE:
            _POLY_CACHE[key] = _signal_polynomial(G, kind)
        poly = _POLY_CACHE[key]
        es = np.full_like(p, poly[-1])
        for c in poly[-2::-1]:
            es *= p
            es += c
        return es, 1.0 - _int_power(p, G) - _int_power(1.0 - p, G)
    from scipy.special import comb
    s_y, s_1 = group_signal_table(G, kind)
    ks = np.arange(G + 1, dtype=np.float64)
    pk = p[..., None]
    pmf = comb(G, ks) * pk ** ks * (1.0 - pk) ** (G - ks)                        # (..., G+1)
    return pmf @ s_y - p * (pmf @ s_1), 1.0 - p ** G - (1.0 - p) ** G


def preconditioned_direction(grad: np.ndarray, m: np.ndarray, v: np.ndarray, t: int,
                             beta1: float, beta2: float, eps: float) -> np.ndarray:
    """Adam's direction d for loss gradient `grad` from state (m, v, t) BEFORE the step:
    the update is Delta theta = -lr d, d = m_hat / (sqrt(v_hat) + eps) with
    m' = beta1 m + (1-beta1) grad, v' = beta2 v + (1-beta2) grad^2, hats = bias-corrected
    at t' = t + 1. Broadcasts over leading axes of grad."""
    t1 = t + 1
    m1 = beta1 * m + (1.0 - beta1) * grad
    v1 = beta2 * v + (1.0 - beta2) * grad * grad
    return (m1 / (1.0 - beta1 ** t1)) / (np.sqrt(v1 / (1.0 - beta2 ** t1)) + eps)


class Optimizer:
    """SGD (Delta theta = -lr grad) or Adam over a dim-vector; state m, v, t.

    `peek(grad)` returns the update without changing the state; `step(grad)` applies it.
    """

    def __init__(self, kind: str, dim: int, lr: float, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-8):
        if kind not in OPTIMIZERS:
            raise UserError(f"env knob optimizer={kind!r} is not allowed: expected one of {', '.join(OPTIMIZERS)}")
        self.kind, self.lr, self.beta1, self.beta2, self.eps = kind, lr, beta1, beta2, eps
        self.m, self.v, self.t = np.zeros(dim), np.zeros(dim), 0

    def direction(self, grad: np.ndarray) -> np.ndarray:
        if self.kind == "sgd":
            return np.asarray(grad, dtype=np.float64)
        return preconditioned_direction(grad, self.m, self.v, self.t, self.beta1, self.beta2, self.eps)

    def peek(self, grad: np.ndarray) -> np.ndarray:
        return -self.lr * self.direction(grad)

    def step(self, grad: np.ndarray) -> np.ndarray:
        delta = self.peek(grad)
        if self.kind == "adam":
            self.m = self.beta1 * self.m + (1.0 - self.beta1) * grad
            self.v = self.beta2 * self.v + (1.0 - self.beta2) * grad * grad
            self.t += 1
        return delta

    def state_dict(self) -> dict:
        return {"m": self.m.copy(), "v": self.v.copy(), "t": self.t}

    def load_state_dict(self, state: dict) -> None:
        self.m, self.v = np.array(state["m"], dtype=np.float64), np.array(state["v"], dtype=np.float64)
        self.t = int(state["t"])
