"""Policies without learned scores: uniform and round-robin (mixed lives in mixed.py)."""
from __future__ import annotations

import numpy as np

from policies.base import Feedback, Policy
from policies.mixed import nan_diagnostics


class Uniform(Policy):
    name = "uniform"
    summary = "pure batch; arm drawn uniformly at random each step"

    def probabilities(self) -> np.ndarray:
        return np.full(self.n_arms, 1.0 / self.n_arms)

    def update(self, feedback: Feedback) -> None:
        self._record(feedback)

    def diagnostics(self) -> dict:
        return nan_diagnostics(self)


class RoundRobin(Policy):
    name = "round_robin"
    summary = "pure batch; arm t mod H"

    def probabilities(self) -> np.ndarray:
        p = np.zeros(self.n_arms)
        p[self.t % self.n_arms] = 1.0
        return p

    def update(self, feedback: Feedback) -> None:
        self._record(feedback)

    def diagnostics(self) -> dict:
        return nan_diagnostics(self)
