"""Shared by the TRL backend and the verl sampler: a step's L from the rewards of its
groups (SPEC §2.3). numpy only (no torch, trl, transformers or verl import)."""
from __future__ import annotations

import numpy as np

from hbsim.grpo import advantages, keep_mask, learnability


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
