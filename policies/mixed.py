"""`mixed`: every step splits the batch evenly over a configured harness subset (the
paper's 2- and 6-harness mixed-batch baselines).

Remainder rule: with B groups over k listed arms, every listed arm gets B // k groups
and the r = B % k remaining groups go to r consecutive listed arms (in the order of
`arms`, cyclically), starting at position (t * r) mod k, where t counts updates. The
remainder therefore rotates, and over k steps every listed arm receives the same
number of groups. `probabilities()` returns the long-run batch fractions, 1/k on each
listed arm. No randomness is used.
"""
from __future__ import annotations

import numpy as np

from dataclasses import dataclass

from policies.base import Allocation, Feedback, Policy, check_range
from policies.errors import UserError


@dataclass(frozen=True)
class MixedConfig:
    arms: list[int] | None = None       # the harness subset (None: all harnesses)


class Mixed(Policy):
    name = "mixed"
    summary = "mixed batch: every step splits the groups evenly over `arms` (default all)"
    mixed = True
    Config = MixedConfig

    def __init__(self, n_arms: int, seed: int = 0, **knobs):
        super().__init__(n_arms, seed)
        arms = self.make_config(knobs).arms
        if arms is None:
            arms = list(range(self.n_arms))
        if not isinstance(arms, (list, tuple, np.ndarray)) or len(arms) == 0:
            raise UserError(f"arms={arms!r} is not allowed: expected a non-empty list of distinct harness "
                             f"indices in [0, {self.n_arms - 1}]")
        for a in arms:
            if not isinstance(a, (int, np.integer)) or isinstance(a, bool) or not 0 <= a < self.n_arms:
                raise UserError(f"arms={list(arms)!r} is not allowed: expected distinct harness indices "
                                 f"in [0, {self.n_arms - 1}]")
        if len(set(int(a) for a in arms)) != len(arms):
            raise UserError(f"arms={list(arms)!r} is not allowed: indices must be distinct")
        self.arms = [int(a) for a in arms]

    def config(self) -> dict:
        return {**super().config(), "arms": list(self.arms)}

    def probabilities(self) -> np.ndarray:
        p = np.zeros(self.n_arms)
        p[self.arms] = 1.0 / len(self.arms)
        return p

    def select(self, batch_groups: int = 8) -> Allocation:
        check_range("batch_groups", batch_groups, 1, 10**9, integer=True)
        k = len(self.arms)
        base, rem = divmod(int(batch_groups), k)
        counts = np.zeros(self.n_arms, dtype=np.int64)
        counts[self.arms] = base
        start = (self.t * rem) % k
        for i in range(rem):
            counts[self.arms[(start + i) % k]] += 1
        return Allocation(counts)

    def update(self, feedback: Feedback) -> None:
        self._record(feedback)

    def diagnostics(self) -> dict:
        return nan_diagnostics(self)


def nan_diagnostics(policy: Policy) -> dict:
    """The diagnostics keys of docs/ARCHITECTURE.md for policies without learned scores."""
    nan = float("nan")
    h = policy.n_arms
    return {"t": policy.t, "arm": policy._last_arm, "learnability": nan, "transfer": nan, "l_norm": nan, "t_norm": nan,
            "score": nan, "Q": np.full(h, nan), "U": np.full(h, nan), "n": np.asarray(policy._visits).copy(),
            "memory_norm": np.full(h, nan), "memory_age": np.full(h, nan),
            "probabilities": policy.probabilities(), "missing_learnability": 0, "missing_transfer": 0,
            "nonfinite_signals": 0}
