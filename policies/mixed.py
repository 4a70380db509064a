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

from policies.base import BATCH_GROUPS, Allocation, Policy, checked_batch_groups
from policies.knobs import Knob, Knobs, int_list


class Mixed(Policy):
    name = "mixed"
    summary = "mixed batch: every step splits the groups evenly over `arms` (default all)"
    mixed = True
    KNOBS = Knobs({"arms": Knob(None, "the harness subset (none: all harnesses)", parse=int_list(0, min_len=1),
                                optional=True)})

    def __init__(self, n_arms: int, seed: int = 0, **knobs):
        super().__init__(n_arms, seed, **knobs)
        arms = self.cfg.arms
        if arms is None:
            arms = list(range(self.n_arms))
        elif max(arms) >= self.n_arms:                  # the table's check, bounded by this n_arms
            int_list(0, self.n_arms - 1, min_len=1)(self.KNOBS.key("arms"), arms)
        self.arms = arms

    def config(self) -> dict:
        return {**super().config(), "arms": list(self.arms)}

    def probabilities(self) -> np.ndarray:
        p = np.zeros(self.n_arms)
        p[self.arms] = 1.0 / len(self.arms)
        return p

    def select(self, batch_groups: int = BATCH_GROUPS.default) -> Allocation:
        return Allocation(even_split(self.arms, self.n_arms, checked_batch_groups(batch_groups), self.t))


def even_split(arms: list[int], n_arms: int, batch_groups: int, t: int) -> np.ndarray:
    """(n_arms,) int counts of a batch of `batch_groups` split evenly over `arms` at update t
    (the remainder rule of the module docstring)."""
    k = len(arms)
    base, rem = divmod(batch_groups, k)
    counts = np.zeros(n_arms, dtype=np.int64)
    counts[arms] = base
    start = (t * rem) % k
    for i in range(rem):
        counts[arms[(start + i) % k]] += 1
    return counts
