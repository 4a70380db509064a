"""Framework-free pieces shared by the TRL backend (`real_runs.trl_backend`) and the verl
design (`real_runs.trl_verl`): per-harness row pools, a step's L from its rewards, and the
global raw gradient sketch. numpy and torch only (no trl, transformers or verl import).
"""
from __future__ import annotations

import copy

import numpy as np
import torch

from hbsim.grpo import advantages, keep_mask, learnability
from policies.errors import UserError
from real_runs.sketch import all_reduce_sum


class HarnessSampler:
    """Per-harness shuffled pools of dataset row indices, reshuffled after each pass; the
    generators come from the run seed, so every rank draws the same rows."""

    def __init__(self, harness_column: list[str], harnesses: list[str], seed: int):
        column = np.asarray(harness_column, dtype=object)
        self.rows = [np.flatnonzero(column == h) for h in harnesses]
        for h, rows in zip(harnesses, self.rows):
            if rows.size == 0:
                raise UserError(f"harness={h!r} has no row in the dataset's `harness` column; "
                                f"present are {sorted(set(column.tolist()))}")
        self._rng = [np.random.default_rng([int(seed), 23, h]) for h in range(len(harnesses))]
        self._pool = [rng.permutation(rows) for rng, rows in zip(self._rng, self.rows)]
        self._pos = [0] * len(harnesses)

    def draw(self, h: int, n: int) -> list[int]:
        out = []
        while len(out) < n:
            if self._pos[h] >= len(self._pool[h]):
                self._pool[h] = self._rng[h].permutation(self.rows[h])
                self._pos[h] = 0
            out.append(int(self._pool[h][self._pos[h]]))
            self._pos[h] += 1
        return out

    def state_dict(self) -> dict:
        return {"pool": [p.copy() for p in self._pool], "pos": list(self._pos),
                "rng": [copy.deepcopy(r.bit_generator.state) for r in self._rng]}

    def load_state_dict(self, state: dict) -> None:
        self._pool = [np.asarray(p).copy() for p in state["pool"]]
        self._pos = list(state["pos"])
        for rng, s in zip(self._rng, state["rng"]):
            rng.bit_generator.state = copy.deepcopy(s)


def group_signals(rewards: np.ndarray, group_size: int, kind: str = "loo") -> tuple[float | None, int]:
    """(L, retained groups) of a step's rewards (B,) in groups of G consecutive completions:
    L = SPEC §2.3 over the groups with reward variance (LOO advantages by default), None
    when none has; groups with a non-finite reward are left out."""
    r = np.asarray(rewards, dtype=np.float64).reshape(-1, group_size)
    keep = keep_mask(r) & np.isfinite(r).all(axis=1)
    if not keep.any():
        return None, 0
    return learnability(advantages(r[keep], kind)), int(keep.sum())


def global_sketch(local: torch.Tensor, grads_synced: bool) -> torch.Tensor:
    """The raw sketch of the global gradient from this rank's sketch (SPEC §2.4): gradients
    already averaged by DDP are global, so their sketch is used as is (summing again would
    count it once per rank); local gradients are SUMmed over ranks before normalising."""
    return local if grads_synced else all_reduce_sum(local)
