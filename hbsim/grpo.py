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
