"""Shared by the TRL backend and the verl sampler: a step's L from the rewards of its
groups (SPEC §2.3). numpy only (no torch, trl, transformers or verl import)."""
from __future__ import annotations

import numpy as np

from hbsim.grpo import advantages, group_stats, keep_mask, learnability


def group_signals(rewards: np.ndarray, group_size: int, kind: str = "loo",
                  keep: np.ndarray | None = None) -> tuple[float | None, int]:
    """(L, retained groups) of a step's rewards (B,) in groups of G consecutive completions:
    L = SPEC §2.3 over the groups with reward variance (LOO advantages by default), None
    when none has; groups with a non-finite reward are left out. `keep`: (groups,) the
    groups to use instead (a `hbsim.sampling.GroupFilter` mask)."""
    r = np.asarray(rewards, dtype=np.float64).reshape(-1, group_size)
    if keep is None:
        keep = keep_mask(r) & np.isfinite(r).all(axis=1)
    if not keep.any():
        return None, 0
    return learnability(advantages(r[keep], kind)), int(keep.sum())


def group_table(rewards: np.ndarray, arms: np.ndarray, group_size: int, kind: str = "loo",
                keep: np.ndarray | None = None, costs: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """A step's rows of the groups table (`hbsim.adapter.StepResult.groups`) from its rewards
    (B,) and harness of each completion (B,), in groups of G consecutive completions: arm,
    size, success, reward_mean, reward_std, mean_abs_adv (`hbsim.grpo.group_stats`, NaN for
    a group with a non-finite reward), retained (`keep`, else reward variance and finite
    rewards) and cost ((groups,) tokens; NaN when not given)."""
    r = np.asarray(rewards, dtype=np.float64).reshape(-1, group_size)
    n = r.shape[0]
    finite = np.isfinite(r).all(axis=1)
    out = {"arm": np.asarray(arms, dtype=np.int64).reshape(-1, group_size)[:, 0],
           "size": np.full(n, group_size, dtype=np.int64)}
    stats = group_stats(np.where(finite[:, None], r, 0.0), kind)
    out.update({k: np.where(finite, v, np.nan) for k, v in stats.items()})
    out["retained"] = (keep_mask(r) & finite) if keep is None else np.asarray(keep, dtype=bool)
    out["cost"] = np.full(n, np.nan) if costs is None else np.asarray(costs, dtype=np.float64)
    return out
