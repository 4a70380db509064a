"""Logistic student (SPEC §6, the recommended environment): a real parameter vector theta,
success probability sigmoid(<theta, phi(task, harness)>), policy-gradient updates from the
sampled rollouts, so learnability and transferability emerge from one consistent model.

Features (C = 5 categories, H training harnesses + 1 held-out harness, column H):

    x_t  = onehot(category_t) (+) u_t                 u_t ~ N(0, I / n_task_features)
    z_h  = onehot(h) (H+1)    (+) v_h                 v_h ~ N(0, I / n_harness_features)
    phi(t, h) = x_t (+) z_h (+) interaction * vec(x_t outer v_h)

so harnesses share the task coordinates (positive transfer), own their one-hot bias
coordinate (no transfer), and meet in the v / interaction coordinates, where harnesses with
opposite embeddings pull against each other (negative transfer). dim = (C + n_task_features)
+ (H + 1) + n_harness_features + (C + n_task_features) * n_harness_features.

Initial theta: category weights ~ N(0, category_spread^2), task-feature weights ~
N(0, task_spread^2) (task difficulty), harness bias coordinates spaced evenly in
[bias_low, bias_high] (permuted per seed; with the defaults some harnesses start near zero
success and some saturate) and heldout_bias for the held-out harness, v weights 0,
interaction weights ~ N(0, init_interaction^2) (per (task, harness) difficulty).

One step (n optimized groups, group g = task t_g on harness h_g, G binary rollouts r with
advantages A = hbsim.grpo.advantages(r, advantage) from the base, CURRENT p_g):

    grad log pi(r) = (r - p) phi                        (Bernoulli "success" action)
    g_hat = sum_g mean_i A_gi (r_gi - p_g) phi(t_g, h_g) / n        (policy gradient)
    loss gradient = -g_hat;  Delta theta = optimizer step (Adam by default)

The gradient sketch is the loss gradient on a fixed coordinate subset (all coordinates when
sketch_dim >= dim); the update sketch is Delta theta on the same coordinates. Nothing is
tuned per signal: L is the mean |A| of the sampled groups, T the cosine of these gradients.

Oracle: as in hbsim.envs.drifting -- per task the exact E[mean_i A_i (r_i - p) | p] for G
binary rollouts, retained groups drawn in proportion to their keep probability, and the
expected gradient put through the optimizer from the current state (no sampling noise).
"""
from __future__ import annotations

import numpy as np
from scipy.special import expit

from hbsim.envs.base import COMMON_KNOBS, CATEGORIES, Batch, aligned_heldout, heldout_align_knobs
from hbsim.envs.gradient import GradientEnv, optimizer_knobs, sketch_coordinates
from hbsim.grpo import Optimizer, expected_group_signal
from policies.knobs import Knob


def student_features(x: np.ndarray, v: np.ndarray, interaction: float) -> np.ndarray:
    """phi (n, K, D) from task features x (n, dx) and harness embeddings v (K, dv):
    phi[t, h] = x_t (+) onehot_K(h) (+) v_h (+) interaction * vec(outer(x_t, v_h)),
    D = dx + K + dv + dx * dv (row-major outer product)."""
    n, dx = x.shape
    K, dv = v.shape
    xb = np.broadcast_to(x[:, None, :], (n, K, dx))
    oh = np.broadcast_to(np.eye(K)[None, :, :], (n, K, K))
    vb = np.broadcast_to(v[None, :, :], (n, K, dv))
    outer = interaction * (x[:, None, :, None] * v[None, :, None, :]).reshape(n, K, dx * dv)
    return np.concatenate([xb, oh, vb, outer], axis=2)


class StudentEnv(GradientEnv):
    kind = "student"
    summary = "logistic student: theta, sigmoid(<theta, phi(task, harness)>), REINFORCE + Adam"
    KNOBS = COMMON_KNOBS | {
        "n_task_features": Knob(8, "random task features besides the category one-hot", 0, 4096),
        "n_harness_features": Knob(4, "harness embedding size (shared / conflicting coordinates)", 0, 256),
        "interaction": Knob(1.0, "scale of the task x harness interaction features", 0.0, 100.0),
        "category_spread": Knob(0.5, "std of the initial category weights", 0.0, 50.0),
        "task_spread": Knob(1.0, "std of the initial task-feature weights (task difficulty)", 0.0, 50.0),
        "init_interaction": Knob(0.5, "std of the initial interaction weights", 0.0, 50.0),
        "bias_low": Knob(-5.0, "lowest training-harness bias (near zero success)", -50.0, 50.0),
        "bias_high": Knob(4.0, "highest training-harness bias (saturated)", -50.0, 50.0),
        "heldout_bias": Knob(-1.0, "held-out harness bias", -50.0, 50.0),
        **optimizer_knobs(0.005),
        **heldout_align_knobs(),
    }

    # -- structure -----------------------------------------------------------------
    def _build(self, rng: np.random.Generator) -> None:
        k, H, C = self.knobs, self.H, len(CATEGORIES)
        n_all, ntf, nhf = self.n_tasks + self.n_heldout, k["n_task_features"], k["n_harness_features"]
        u = rng.normal(0.0, 1.0, (n_all, ntf)) / np.sqrt(max(ntf, 1))
        self.x = np.concatenate([np.eye(C)[self.task_category], u], axis=1)          # (n_all, dx)
        self.v = rng.normal(0.0, 1.0, (H + 1, nhf)) / np.sqrt(max(nhf, 1))           # (H+1, dv)
        self.v = aligned_heldout(self.v, k, unit=False)
        self.phi = student_features(self.x, self.v, k["interaction"])               # (n_all, H+1, D)
        dx, D = self.x.shape[1], self.phi.shape[2]
        self._phi2 = np.ascontiguousarray(self.phi.reshape(-1, D))                   # (n_all (H+1), D)
        self._phi_train = np.ascontiguousarray(self.phi[: self.n_tasks, :H].reshape(-1, D))
        self._phi_by_harness = np.ascontiguousarray(self.phi[: self.n_tasks].transpose(1, 0, 2))  # (H+1, n, D)
        bias = np.append(rng.permutation(np.linspace(k["bias_low"], k["bias_high"], H)), k["heldout_bias"])
        self.theta0 = np.concatenate([
            rng.normal(0.0, k["category_spread"], C), rng.normal(0.0, k["task_spread"], ntf), bias,
            np.zeros(nhf), rng.normal(0.0, k["init_interaction"], dx * nhf)])
        assert self.theta0.shape == (D,)
        self.dim = D
        self.theta, self._p = self.theta0.copy(), None
        self.coords = sketch_coordinates(rng, D, k["sketch_dim"])
        self.opt = Optimizer(k["optimizer"], D, k["lr"], k["beta1"], k["beta2"], k["eps"])

    # -- truth ---------------------------------------------------------------------
    def success_matrix(self) -> np.ndarray:
        """(n_all, H+1) true success probabilities, cached until theta moves (read-only)."""
        if self._p is None:
            self._p = expit(self._phi2 @ self.theta).reshape(self.phi.shape[:2])
            self._p.flags.writeable = False
        return self._p

    def true_gradients(self) -> np.ndarray:
        """(H+1, D) expected policy gradient (reward ascent) per retained group, per harness."""
        p = self.success_matrix()[: self.n_tasks]
        sig, keep = expected_group_signal(p, self.G, self.knobs["advantage"])       # (n, H+1)
        total = keep.sum(axis=0)
        g = np.matmul(sig.T[:, None, :], self._phi_by_harness)[:, 0, :]            # (H+1, D)
        return np.divide(g, total[:, None], out=np.zeros_like(g), where=total[:, None] > 1e-300)

    # -- learning ------------------------------------------------------------------
    def _learn(self, batch: Batch, rng: np.random.Generator):
        """REINFORCE + optimizer step on the batch (module docstring). `rng` is unused: the
        only noise is the sampling of the rollouts themselves."""
        n = len(batch)
        phi = self.phi[batch.tasks, batch.harnesses]                                 # (n, D)
        p_now = self.success_matrix()[batch.tasks, batch.harnesses]
        sig = (batch.advantages * (batch.rewards - p_now[:, None])).mean(axis=1)    # (n,)
        grad = -(sig @ phi) / n
        delta = self.opt.step(grad)
        self.theta, self._p = self.theta + delta, None
        self._update_norm = float(np.linalg.norm(delta))
        return grad[self.coords].astype(np.float32), delta[self.coords].astype(np.float32)

    def expected_gains(self, candidates: np.ndarray) -> np.ndarray:
        thetas, moved = self._expected_step(candidates)
        p_new = expit(self._phi_train @ thetas)                                      # (n H, K)
        return np.where(moved, p_new.mean(axis=0) - self.success_matrix()[: self.n_tasks, : self.H].mean(), 0.0)

    def _logits(self, thetas: np.ndarray, tasks: slice = slice(None)) -> np.ndarray:
        """thetas (D, K) -> logits (n, H+1, K) of K parameter vectors (rows `tasks`)."""
        if tasks == slice(None):
            return (self._phi2 @ thetas).reshape(*self.phi.shape[:2], -1)
        phi = self.phi[tasks]                                                        # contiguous rows: a view
        return (phi.reshape(-1, phi.shape[2]) @ thetas).reshape(*phi.shape[:2], -1)

    # -- state ---------------------------------------------------------------------
    def _model_state(self) -> dict:
        return {"theta": self.theta.copy(), "opt": self.opt.state_dict()}

    def _load_model_state(self, state: dict) -> None:
        self.theta, self._p = np.array(state["theta"], dtype=np.float64), None
        self.opt.load_state_dict(state["opt"])
