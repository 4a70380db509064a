"""Policies without learned scores: uniform, round-robin (mixed lives in mixed.py)."""
from __future__ import annotations

import numpy as np

from policies.base import Feedback, Policy


class Uniform(Policy):
    name = "uniform"
    summary = "pure batch; arm drawn uniformly at random each step"

    def probabilities(self) -> np.ndarray:
        return np.full(self.n_arms, 1.0 / self.n_arms)

    def update(self, feedback: Feedback) -> None:
        self._check_arm(feedback.arm)
        self.t += 1


class RoundRobin(Policy):
    name = "round_robin"
    summary = "pure batch; arm t mod H"

    def probabilities(self) -> np.ndarray:
        p = np.zeros(self.n_arms)
        p[self.t % self.n_arms] = 1.0
        return p

    def update(self, feedback: Feedback) -> None:
        self._check_arm(feedback.arm)
        self.t += 1
