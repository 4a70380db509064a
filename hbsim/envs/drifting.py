"""Drifting-gradient bandit (SPEC §6): per-harness true gradients = shared component +
harness-specific component + batch noise, drifting over time, with SGD or Adam
preconditioning so that raw-gradient and update-direction cosines can disagree (the reading
note's §4.2).

Model (C = 5 categories, H training harnesses + 1 held-out harness, column H, parameters
theta in R^dim, theta_0 = 0):

    w[c, h]   = sqrt(rho_h) s + sqrt(category_share) e_c + sqrt(1 - rho_h - category_share) c_h
    p[t, h]   = sigmoid(<theta, w[c_t, h]> + b[t, h])

s, e_c, c_h are orthonormal unit vectors (one shared direction, one per category, one per
harness). rho_h, the share of harness h's squared norm along the shared direction, is spaced
evenly in shared +- shared_spread over the training harnesses (permuted per seed; the
held-out harness has `shared`): harnesses with a larger rho transfer more.
b[t, h] = bias_h + d_t + eps_th: harness offsets spaced evenly in [bias_low, bias_high]
(permuted per seed; the held-out harness has heldout_bias), task difficulty d_t ~
N(0, task_spread^2), pair jitter eps ~ N(0, pair_spread^2). A conflicting pair (a, b) of
`conflict_pairs` has c_b = gamma c_a + sqrt(1 - gamma^2) c_b', gamma chosen so that
cos(w[c, a], w[c, b]) = conflict_cos exactly.

Gradient of one step (loss = minus reward; n optimized groups, group g = task t_g on harness
h_g, advantages A, binary rewards r, CURRENT success probability p_g):

    sig_g = mean_i A_gi (r_gi - p_g)                   (REINFORCE signal on the logit)
    grad  = - sum_g sig_g w[c_g, h_g] / n  +  noise * (sigma o xi) / sqrt(dim * n)

xi ~ N(0, I) is the step's draw of the drift stream (the same at step t for every policy,
whether or not it has a batch); sigma (dim,) are fixed per-coordinate noise
scales exp(noise_spread * N(0, 1)) normalised to mean square 1, so Adam's second moment is
anisotropic. The update is Delta theta = -lr * grad (sgd) or Adam's -lr m_hat / (sqrt(v_hat)
+ eps) (adam, see `preconditioned_direction`). StepResult carries both sketches on a fixed
coordinate subset of size sketch_dim (all coordinates when sketch_dim >= dim): the loss
gradient and the update Delta theta.

Drift (a function of the step counter only, identical for every policy): after each step
every free direction rotates by `rotation` radians in its own fixed random plane, takes a
random-walk step of norm ~ `walk`, and the directions are re-orthonormalised; after s steps,
s in `phase_steps`, every harness-specific direction is resampled (a phase change: the
train row of step s already shows the new phase's true success).

Oracle: the expected one-step gain of an allocation. Per task, E[sig | p] is exact for
binary rewards (sum over k successes of Binom(k; G, p) sig(k)); retained groups are drawn
in proportion to their keep probability; the candidate's expected gradient goes through
the optimizer from the current state (Adam applied to the expected gradient, no noise).
Drift is common to all candidates and left out. `expected_success` gives the whole success
matrix after that expected step (held-out rows and column included), `true_directions` the
true expected loss gradient per harness (hbsim.counterfactual).

Knobs for the signal-validity study: `heldout_align` / `heldout_align_strength` make the
held-out harness's own direction follow chosen training harnesses; `axis_aligned` puts
every direction on a coordinate axis and `shared_v0` starts Adam with a large second
moment on the shared axis (the reading note's §4.2 counterexample, preset
`adam-counterexample` in hbsim.envs.ENV_PRESETS).
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import expit

from hbsim.envs.base import (COMMON_KNOBS, CATEGORIES, Batch, _stream, aligned_heldout, heldout_align_knobs, int_items,
                             int_string)
from hbsim.envs.gradient import GradientEnv, optimizer_knobs, sketch_coordinates
from hbsim.grpo import Optimizer, expected_group_signal
from policies.errors import UserError
from policies.knobs import Knob

#: spawn-key stream id of the drift and gradient-noise stream (the base uses 0-5)
STREAM_DRIFT = 10


# -- pure maths ------------------------------------------------------------------------
def orthonormal_rows(F: np.ndarray) -> np.ndarray:
    """Gram-Schmidt of the rows of F (K, D), K <= D: orthonormal rows, row k spanning the
    same first-k subspace as F's and pointing the same way (sign-fixed QR)."""
    q, r = np.linalg.qr(F.T)
    return (q * np.where(np.diag(r) < 0, -1.0, 1.0)).T


# -- the environment -------------------------------------------------------------------
class DriftingEnv(GradientEnv):
    kind = "drifting"
    summary = "shared + harness-specific drifting gradient directions, SGD/Adam, conflicting pairs"
    KNOBS = COMMON_KNOBS | {
        "dim": Knob(128, "parameter dimension (>= n_harnesses + 7)", 2, 10**6),
        "shared": Knob(0.15, "mean share of a target's squared norm along the shared direction", 0.0, 1.0),
        "shared_spread": Knob(0.1, "harness shared shares are spaced evenly in shared +- shared_spread", 0.0, 1.0),
        "category_share": Knob(0.1, "share of every target's squared norm along its category direction", 0.0, 1.0),
        "conflict_pairs": Knob("0-1", "harness pairs (a-b) whose targets have cosine conflict_cos",
                               parse=int_string(pairs=True)),
        "conflict_cos": Knob(-0.3, "cosine of a conflicting pair's targets (same category)", -1.0, 1.0),
        "rotation": Knob(0.01, "radians every direction rotates per step (in its own random plane)", 0.0, 3.2),
        "walk": Knob(0.02, "norm of every direction's random-walk step per step", 0.0, 10.0),
        "phase_steps": Knob("", "after these many steps the harness-specific directions are resampled",
                            parse=int_string()),
        "noise": Knob(1.0, "norm of one group's gradient noise (a batch of n: noise/sqrt(n))", 0.0, 1e6),
        "noise_spread": Knob(1.0, "log-std of the per-coordinate noise scales (Adam anisotropy)", 0.0, 10.0),
        "bias_low": Knob(-3.0, "lowest training-harness logit offset", -50.0, 50.0),
        "bias_high": Knob(1.5, "highest training-harness logit offset", -50.0, 50.0),
        "heldout_bias": Knob(-0.5, "held-out harness logit offset", -50.0, 50.0),
        "task_spread": Knob(1.0, "std of the task difficulty offset", 0.0, 50.0),
        "pair_spread": Knob(0.5, "std of the per-(task, harness) offset jitter", 0.0, 50.0),
        **optimizer_knobs(0.005),
        **heldout_align_knobs(),
        "axis_aligned": Knob(False, "directions start on coordinate axes (shared = axis 0, then categories, "
                                    "harnesses); with rotation = walk = 0 they stay there"),
        "shared_v0": Knob(0.0, "Adam's starting second moment on the shared axis (a pre-trained optimizer "
                               "state, t starting at 10^4 so no bias correction; needs axis_aligned): Adam then "
                               "damps the shared part of every update (0 = fresh optimizer)", 0.0, 1e12),
    }

    @classmethod
    def _check_knobs(cls, knobs: dict) -> None:
        super()._check_knobs(knobs)
        H, C = knobs["n_harnesses"], len(CATEGORIES)
        if knobs["dim"] < H + C + 2:
            raise UserError(f"env.dim={knobs['dim']} is not allowed: expected >= n_harnesses + "
                             f"{C + 2} = {H + C + 2} (orthonormal directions)")
        lo, hi = knobs["shared"] - knobs["shared_spread"], knobs["shared"] + knobs["shared_spread"]
        if lo < 0.0 or hi + knobs["category_share"] > 1.0:
            raise UserError(f"env shared={knobs['shared']}, shared_spread={knobs['shared_spread']}, "
                             f"category_share={knobs['category_share']} are not allowed: expected "
                             f"shared - shared_spread >= 0 and shared + shared_spread + category_share <= 1")
        if knobs["shared_v0"] > 0 and not knobs["axis_aligned"]:
            raise UserError(f"env.shared_v0={knobs['shared_v0']} is not allowed with axis_aligned=False: "
                             f"expected 0 (the shared direction is only an axis when axis_aligned = true)")
        pairs = int_items("env.conflict_pairs", knobs["conflict_pairs"], pairs=True)
        flat = [x for pair in pairs for x in pair]
        if any(x >= H for x in flat) or len(set(flat)) != len(flat):
            raise UserError(f"env.conflict_pairs={knobs['conflict_pairs']!r} is not allowed: expected "
                             f"disjoint pairs of distinct harness indices in [0, {H - 1}]")
        if pairs:
            rho, kappa = _shared_shares(knobs), knobs["category_share"]
            ranges = [_pair_cos_range(rho[i], rho[j], kappa) for i in range(H) for j in range(H) if i != j]
            worst, best = max(lo for lo, _ in ranges), min(hi for _, hi in ranges)
            if not worst - 1e-12 <= knobs["conflict_cos"] <= best + 1e-12:
                raise UserError(f"env.conflict_cos={knobs['conflict_cos']} is not allowed with these "
                                 f"shared shares: expected in [{worst:.4g}, {best:.4g}]")

    # -- structure -----------------------------------------------------------------
    def _build(self, rng: np.random.Generator) -> None:
        k, H, C, D = self.knobs, self.H, len(CATEGORIES), self.knobs["dim"]
        n_all = self.n_tasks + self.n_heldout
        bias = np.append(rng.permutation(np.linspace(k["bias_low"], k["bias_high"], H)), k["heldout_bias"])
        self.b = (bias[None, :] + rng.normal(0.0, k["task_spread"], n_all)[:, None]
                  + rng.normal(0.0, k["pair_spread"], (n_all, H + 1)))             # (n_all, H+1)
        self.rho = np.append(rng.permutation(_shared_shares(k)), k["shared"])      # (H+1,)
        scales = np.exp(k["noise_spread"] * rng.standard_normal(D))
        self.noise_scale = scales / np.sqrt(np.mean(scales ** 2))                   # (D,)
        self.coords = sketch_coordinates(rng, D, k["sketch_dim"])
        self.pairs = int_items("env.conflict_pairs", k["conflict_pairs"], pairs=True)
        self.phases = set(int_items("env.phase_steps", k["phase_steps"]))
        self.F, self.P = self._fresh_directions(rng, 1 + C + H + 1)               # (K, D) each
        if k["axis_aligned"]:          # the note's counterexample: directions on coordinate axes
            n = 1 + C + H + 1
            self.F, self.P = np.eye(D)[:n], np.eye(D)[(np.arange(n) + 1) % D]
        self.onehot = np.eye(C)[self.task_category[: self.n_tasks]]                # (n, C)
        self.drift_rng = _stream(self.seed, STREAM_DRIFT)
        self.xi = self.drift_rng.standard_normal(D)                                # step 0's noise
        self.drift_step = 0
        self.theta = np.zeros(D)
        self.opt = Optimizer(k["optimizer"], D, k["lr"], k["beta1"], k["beta2"], k["eps"])
        if k["shared_v0"] > 0:
            self.opt.v[0], self.opt.t = k["shared_v0"], 10_000
        self._mixing()
        self._W, self._p = self._targets(), None

    def _fresh_directions(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        """n unit directions and, for each, a unit partner orthogonal to it (its rotation plane)."""
        F = rng.standard_normal((n, self.knobs["dim"]))
        F /= np.linalg.norm(F, axis=1, keepdims=True)
        P = rng.standard_normal(F.shape)
        P -= np.sum(P * F, axis=1, keepdims=True) * F
        return F, P / np.linalg.norm(P, axis=1, keepdims=True)

    def _mixing(self) -> None:
        """Fixed mixing weights of the targets: sqrt(rho), sqrt(own) (H+1,) and each
        conflicting pair's gamma = cos(c_a, c_b)."""
        kappa = self.knobs["category_share"]
        self._w_shared, self._w_own = np.sqrt(self.rho), np.sqrt(np.clip(1.0 - self.rho - kappa, 0.0, None))
        self._gammas = []
        for a, b in self.pairs:
            lo, hi = _pair_cos_range(self.rho[a], self.rho[b], kappa)
            gamma = 0.0 if hi == lo else min(max(2 * (self.knobs["conflict_cos"] - lo) / (hi - lo) - 1, -1.0), 1.0)
            self._gammas.append((a, b, gamma, math.sqrt(1.0 - gamma ** 2)))

    def _targets(self) -> np.ndarray:
        """w (C, H+1, D) from the current free directions (see the module docstring)."""
        C = len(CATEGORIES)
        B = orthonormal_rows(self.F)
        s, e, c = B[0], B[1: 1 + C], B[1 + C:]                                      # c: (H+1, D)
        for a, b, gamma, rest in self._gammas:
            c[b] = gamma * c[a] + rest * c[b]
        c = aligned_heldout(c, self.knobs)
        return (self._w_shared[:, None] * s + self._w_own[:, None] * c)[None, :, :] \
            + math.sqrt(self.knobs["category_share"]) * e[:, None, :]

    def _sync(self) -> None:
        """Advance the drift to the current step counter. One persistent stream draws, per
        step and in this order, the walk, a phase's new directions and the step's gradient
        noise, whatever the policy does: drift and noise are functions of the step only."""
        k, C = self.knobs, len(CATEGORIES)
        if self.drift_step == self.step_count:
            return
        while self.drift_step < self.step_count:
            t, rng = self.drift_step + 1, self.drift_rng
            if k["rotation"] > 0:
                cos, sin = np.cos(k["rotation"]), np.sin(k["rotation"])
                self.F, self.P = cos * self.F + sin * self.P, cos * self.P - sin * self.F
            if k["walk"] > 0:
                F = self.F + k["walk"] / np.sqrt(k["dim"]) * rng.standard_normal(self.F.shape)
                self.F = F / np.linalg.norm(F, axis=1, keepdims=True)
                P = self.P - np.sum(self.P * self.F, axis=1, keepdims=True) * self.F
                self.P = P / np.linalg.norm(P, axis=1, keepdims=True)
            if t in self.phases:
                self.F[1 + C:], self.P[1 + C:] = self._fresh_directions(rng, self.H + 1)
            self.xi = rng.standard_normal(k["dim"])
            self.drift_step = t
        self._W, self._p = self._targets(), None

    # -- truth ---------------------------------------------------------------------
    def _logits(self, thetas: np.ndarray, tasks: slice = slice(None)) -> np.ndarray:
        """thetas (D, K) -> logits (n, H+1, K) of K parameter vectors (rows `tasks`)."""
        C, H1, D = self._W.shape
        wt = (self._W.reshape(C * H1, D) @ thetas).reshape(C, H1, -1)               # (C, H+1, K)
        return wt[self.task_category[tasks]] + self.b[tasks, :, None]

    def success_matrix(self) -> np.ndarray:
        """(n_all, H+1) true success probabilities, cached until theta or the drift moves
        (read-only)."""
        self._sync()
        if self._p is None:
            self._p = expit(self._logits(self.theta[:, None])[:, :, 0])
            self._p.flags.writeable = False
        return self._p

    def true_gradients(self) -> np.ndarray:
        """(H+1, D) expected reward-ascent direction per harness (per retained group), the
        quantity whose cosines the transfer signal estimates."""
        p = self.success_matrix()[: self.n_tasks]
        sig, keep = expected_group_signal(p, self.G, self.knobs["advantage"])       # (n, H+1)
        total = keep.sum(axis=0)
        S = np.divide(self.onehot.T @ sig, total, out=np.zeros((len(CATEGORIES), self.H + 1)),
                      where=total > 1e-300)                                          # (C, H+1)
        return np.einsum("ch,chd->hd", S, self._W)

    # -- learning ------------------------------------------------------------------
    def _learn(self, batch: Batch, rng: np.random.Generator):
        """One optimizer step on the batch. The gradient noise is the step's draw of the
        drift stream (not `rng`), so every policy sees the same noise at step t."""
        self._sync()
        k, n = self.knobs, len(batch)
        cats = self.task_category[batch.tasks]
        p_now = self.success_matrix()[batch.tasks, batch.harnesses]
        sig = (batch.advantages * (batch.rewards - p_now[:, None])).mean(axis=1)   # (n,)
        signal = sig @ self._W[cats, batch.harnesses] / n                          # (D,)
        grad = -signal + k["noise"] * self.noise_scale * self.xi / np.sqrt(k["dim"] * n)
        delta = self.opt.step(grad)
        self.theta, self._p = self.theta + delta, None
        self._update_norm = float(np.linalg.norm(delta))
        return grad[self.coords].astype(np.float32), delta[self.coords].astype(np.float32)

    def expected_gains(self, candidates: np.ndarray) -> np.ndarray:
        n, H = self.n_tasks, self.H
        thetas, moved = self._expected_step(candidates)
        p_new = expit(self._logits(thetas)[:n, :H])                                 # (n, H, K)
        return np.where(moved, p_new.mean(axis=(0, 1)) - self.success_matrix()[:n, :H].mean(), 0.0)

    # -- state ---------------------------------------------------------------------
    def _model_state(self) -> dict:
        return {"theta": self.theta.copy(), "opt": self.opt.state_dict(), "F": self.F.copy(),
                "P": self.P.copy(), "drift_step": self.drift_step, "xi": self.xi.copy(),
                "drift_rng": self.drift_rng.bit_generator.state}

    def _load_model_state(self, state: dict) -> None:
        self.theta = np.array(state["theta"], dtype=np.float64)
        self.opt.load_state_dict(state["opt"])
        self.F, self.P = np.array(state["F"], dtype=np.float64), np.array(state["P"], dtype=np.float64)
        self.drift_step, self.xi = int(state["drift_step"]), np.array(state["xi"], dtype=np.float64)
        self.drift_rng.bit_generator.state = state["drift_rng"]
        self._W, self._p = self._targets(), None


def _shared_shares(knobs: dict) -> np.ndarray:
    """(H,) shared shares of the training harnesses, evenly spaced in shared +- shared_spread."""
    return knobs["shared"] + knobs["shared_spread"] * np.linspace(-1.0, 1.0, knobs["n_harnesses"])


def _pair_cos_range(rho_a: float, rho_b: float, kappa: float) -> tuple[float, float]:
    """Reachable same-category cosines of two targets with shared shares rho_a, rho_b:
    sqrt(rho_a rho_b) + kappa -+ sqrt(own_a own_b), own = 1 - rho - kappa."""
    base = np.sqrt(rho_a * rho_b) + kappa
    span = np.sqrt(max(1.0 - rho_a - kappa, 0.0) * max(1.0 - rho_b - kappa, 0.0))
    return float(base - span), float(base + span)
