"""Policies without learned scores: uniform and round-robin (mixed lives in mixed.py). They
keep the base class's `update` (count the visit) and NaN-score `diagnostics`."""
from __future__ import annotations

import numpy as np

from policies.base import Policy


class Uniform(Policy):
    name = "uniform"
    summary = "pure batch; arm drawn uniformly at random each step"

    def probabilities(self) -> np.ndarray:
        return np.full(self.n_arms, 1.0 / self.n_arms)


class RoundRobin(Policy):
    name = "round_robin"
    summary = "pure batch; arm t mod H"

    def probabilities(self) -> np.ndarray:
        p = np.zeros(self.n_arms)
        p[self.t % self.n_arms] = 1.0
        return p
