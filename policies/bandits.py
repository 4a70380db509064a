"""Classic bandit rules on the same signals (SPEC §4, "beyond the paper").

Each class reuses `ScoredPolicy`'s signal pipeline (pooled windows, transfer memories,
fusion; the per-step reward of an arm is the fused score S in [0, 1]) and its
round-robin warm-up, and writes only its own index / law:

* `exp3s` — Exp3.S (Auer et al. 2002), as used for automated curricula by Graves et
  al. 2017: p = (1 - gamma) w / sum w + gamma / H, importance-weighted reward S / p_h,
  weights mixed towards uniform by `share` for non-stationarity.
* `ucb1` — UCB1 (Auer et al. 2002): argmax of mean S + ucb_c * sqrt(2 ln t / m_h), m_h
  the scored visits; unscored arms first (lowest index first).
* `dts` — discounted Thompson sampling (Raj & Kalyani 2017): Beta(a + 1, b + 1)
  posteriors, every step a, b <- ts_gamma * (a, b), then a_h += S, b_h += 1 - S.
  `probabilities()` is the exact law of the Thompson draw, P(arm h has the largest
  posterior sample), integrated numerically on a grid; `select` draws from it, which is
  the same distribution as sampling the posteriors and taking the argmax.
* `rank` — rank-based prioritisation as in Prioritized Level Replay (Jiang et al. 2021):
  P = (1 - rho) P_score + rho P_staleness, P_score ∝ rank(Q')^(-1/beta),
  P_staleness ∝ steps since the arm was last chosen.
"""
from __future__ import annotations

import math

import numpy as np

from policies.knobs import Knob
from policies.scored import SCORED_KNOBS, ScoredPolicy
from policies.signals import undefined_q_fill

#: the signal pipeline's knobs without the softmax selection's (an index policy has its own law)
INDEX_KNOBS = SCORED_KNOBS.without("bonus_c", "tau", "epsilon", "undefined_q", "q_prior", "prior_decay")


class Exp3S(ScoredPolicy):
    name = "exp3s"
    summary = "Exp3.S on the fused score (Graves et al. 2017 curricula); knobs gamma, share"
    KNOBS = INDEX_KNOBS | {"gamma": Knob(0.1, "uniform mixing of the law", 0.0, 1.0, low_open=True),
                           "share": Knob(1e-3, "weight sharing towards uniform", 0.0, 1.0)}
    _ARRAYS = ("log_w",)

    def _reset_state(self) -> None:
        super()._reset_state()
        self.log_w = np.zeros(self.n_arms)

    def _index_law(self):
        w = np.exp(self.log_w - self.log_w.max())
        gamma = self.cfg.gamma
        return (1.0 - gamma) * w / w.sum() + gamma / self.n_arms, self.log_w.copy()

    def _learn(self, arm: int, score: float) -> None:
        """Weights learn only after the warm-up: warm-up draws are deterministic, so they
        have no importance weight."""
        super()._learn(arm, score)
        if math.isnan(score) or self.in_warmup():
            return
        p_arm = self._law()[0][arm]
        k = self.n_arms
        reward = np.zeros(k)
        reward[arm] = score / p_arm
        shift = self.log_w.max()
        w = np.exp(self.log_w - shift)
        w = w * np.exp(self.cfg.gamma * reward / k) + math.e * self.cfg.share / k * w.sum()
        self.log_w = np.log(w) + shift


class UCB1(ScoredPolicy):
    name = "ucb1"
    summary = "UCB1 on the mean fused score; knob ucb_c"
    KNOBS = INDEX_KNOBS.without("q_decay") | {"ucb_c": Knob(1.0, "exploration bonus scale", 0.0, 1e9)}
    _ARRAYS = ("score_sum", "scored")

    def _reset_state(self) -> None:
        super()._reset_state()
        self.score_sum = np.zeros(self.n_arms)
        self.scored = np.zeros(self.n_arms, dtype=np.int64)

    def _index_law(self):
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = self.score_sum / self.scored
            bonus = self.cfg.ucb_c * np.sqrt(2.0 * math.log(max(self.scored.sum(), 1)) / self.scored)
        index = np.where(self.scored > 0, mean + bonus, np.inf)
        p = np.zeros(self.n_arms)
        p[int(np.argmax(index))] = 1.0
        return p, index

    def _learn(self, arm: int, score: float) -> None:
        super()._learn(arm, score)
        if not math.isnan(score):
            self.score_sum[arm] += score
            self.scored[arm] += 1


def thompson_argmax_law(a: np.ndarray, b: np.ndarray, grid: int = 2001) -> np.ndarray:
    """P(arm h draws the largest sample) for independent Beta(a_h + 1, b_h + 1), (H,).

    Midpoint rule on `grid` cells of (0, 1): densities normalised numerically, CDFs by
    cumulative sums; exact up to the grid resolution. With discounting (ts_gamma < 1)
    the pseudo-counts stay below 1 / (1 - ts_gamma), where 2,001 cells resolve the
    posteriors well (at counts of 5e4 the error reaches ~2e-3).
    """
    x = (np.arange(grid) + 0.5) / grid                              # (G,)
    log_pdf = a[:, None] * np.log(x) + b[:, None] * np.log1p(-x)     # (H, G)
    pdf = np.exp(log_pdf - log_pdf.max(axis=1, keepdims=True))
    pdf /= pdf.sum(axis=1, keepdims=True)                           # cell masses
    cdf = np.cumsum(pdf, axis=1) - 0.5 * pdf                         # P(X_j < cell centre)
    log_cdf = np.log(np.clip(cdf, 1e-300, None))
    total = log_cdf.sum(axis=0)                                     # (G,)
    p = (pdf * np.exp(total[None, :] - log_cdf)).sum(axis=1)
    return p / p.sum()


class DiscountedTS(ScoredPolicy):
    name = "dts"
    summary = "discounted Thompson sampling on the fused score; knob ts_gamma"
    KNOBS = INDEX_KNOBS | {"ts_gamma": Knob(0.95, "posterior discount per step", 0.0, 1.0, low_open=True,
                                            high_open=True)}
    _ARRAYS = ("a", "b")

    def _reset_state(self) -> None:
        super()._reset_state()
        self.a = np.zeros(self.n_arms)
        self.b = np.zeros(self.n_arms)

    def _index_law(self):
        return thompson_argmax_law(self.a, self.b), (self.a + 1) / (self.a + self.b + 2)

    def _learn(self, arm: int, score: float) -> None:
        super()._learn(arm, score)
        self.a *= self.cfg.ts_gamma
        self.b *= self.cfg.ts_gamma
        if not math.isnan(score):
            self.a[arm] += score
            self.b[arm] += 1.0 - score


class RankPrioritised(ScoredPolicy):
    name = "rank"
    summary = "PLR-style rank prioritisation of Q with staleness mixing; knobs plr_beta, plr_rho"
    KNOBS = INDEX_KNOBS | {"plr_beta": Knob(0.1, "rank temperature", 0.0, 1e9, low_open=True),
                           "plr_rho": Knob(0.1, "staleness mixing", 0.0, 1.0)}
    _ARRAYS = ("last_chosen",)

    def _reset_state(self) -> None:
        super()._reset_state()
        self.last_chosen = np.zeros(self.n_arms, dtype=np.int64)

    def _index_law(self):
        q_prime = np.where(self.q_defined, self.q, undefined_q_fill(self.q, self.q_defined))
        order = np.argsort(-q_prime, kind="stable")
        rank = np.empty(self.n_arms)
        rank[order] = np.arange(1, self.n_arms + 1)
        p_score = rank ** (-1.0 / self.cfg.plr_beta)
        p_score /= p_score.sum()
        stale = (self.t - self.last_chosen).astype(float)
        p_stale = stale / stale.sum() if stale.sum() > 0 else np.full(self.n_arms, 1.0 / self.n_arms)
        rho = self.cfg.plr_rho
        return (1.0 - rho) * p_score + rho * p_stale, q_prime

    def _learn(self, arm: int, score: float) -> None:
        super()._learn(arm, score)
        self.last_chosen[arm] = self.t + 1

