"""Bernoulli-reward bandit (SPEC §6): per (task, harness) success probabilities that move with
training through a learning-curve model with a harness-to-harness transfer matrix.

Model (C = 5 categories, H training harnesses + 1 held-out harness, column H):

    logit[t, h] = a_t + b_h + w[c_t, h] + z[c_t, h] + u_t
    p[t, h]     = ceil_h * sigmoid(logit[t, h])

a_t: task difficulty (category offset included), b_h: harness offset, w: fixed harness x
category affinity, ceil_h: success ceiling (< 1 for saturating harnesses: a plateau),
z (C, H+1): learned competence, u_t: learned task-specific skill (training tasks only; it
does not reach held-out tasks). Harness roles are permuted per seed: `n_saturating`
harnesses start easy but plateau at `saturation_ceiling`, `n_zero` harnesses start at
(near) zero success (b = zero_offset) and only rise through transfer, the rest are drawn
around `harness_offset_mean`.

The step update is built from the optimized batch, through its advantages. For group g
(task t_g of category c_g on harness h_g, rewards r, advantages A, success probability p_g)
the policy-gradient signal on the logit is s_g = mean_i A_i (r_i - p_g) -- for binary
rewards and LOO advantages s_g = L_g / 2 exactly, so learnability is learning progress.

    S[c, h]  = sum_{g: c_g=c, h_g=h} s_g / n          (n = optimized groups)
    z       <- z + lr * S @ M,    u_t <- u_t + task_lr * sum_{g: t_g=t} s_g / n
    (lr and task_lr times the design's `lr_scale`, `set_lr_scale`; `update_norm` is the norm
    of (lr S M, task_lr du) together)
    then, every step whatever was trained (the step's world stream, common to all policies):
    z, u    <- (1 - forget) (z, u);   z <- z + drift * N(0, 1)

M (H, H+1) is the transfer matrix: M[h, h] = 1, off-diagonal entries transfer_scale * U(0.3, 1),
a `negative_fraction` of them negated (negative transfer; the held-out column included).
The gradient sketch is (S @ M, the task-skill gradient, grad_noise * N(0, 1) in noise_dims
nuisance coordinates) as float32; so the cosine of two harnesses' sketches is the cosine
of their transfer rows times that of their category signals. No update sketch (plain SGD).

Oracle: the expected one-step gain of an allocation is exact under the model for binary
rewards: per task E[s | p] = sum_k Binom(k; G, p) s(k), retained tasks are drawn in
proportion to their keep probability, and the update is linear in the allocation counts.
The oracle's gain is that of the expected update (forgetting included; left out: the
zero-mean drift noise, the staleness of leftover groups, the chance that no group at all
is retained, and the curvature of the sigmoid -- on ordinary harnesses it matches the mean
realised one-step gain within Monte Carlo error, see the tests).
"""
from __future__ import annotations

import numpy as np

from hbsim import grpo
from hbsim.envs.base import COMMON_KNOBS, CATEGORIES, Batch, Knob, SyntheticEnv, aligned_heldout, heldout_align_knobs
from policies.errors import UserError


def _sigmoid(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Logistic function (faster than scipy's expit on small arrays); exp overflow -> 0.
    With `out` (may be x itself) it is computed in place."""
    out = np.negative(x, out=out)
    with np.errstate(over="ignore"):
        np.exp(out, out=out)
    out += 1.0
    return np.reciprocal(out, out=out)


class BernoulliEnv(SyntheticEnv):
    kind = "bernoulli"
    summary = "per-(task, harness) Bernoulli success; learning curves coupled by a transfer matrix"
    KNOBS = COMMON_KNOBS | {
        "lr": Knob(1.0, "logit step of the competence z per unit of batch signal S", 0.0, 1000.0),
        "task_lr": Knob(0.5, "logit step of the task-specific skill u (training tasks only)", 0.0, 1000.0),
        "transfer_scale": Knob(0.4, "magnitude of the off-diagonal transfer entries", 0.0, 10.0),
        "negative_fraction": Knob(0.2, "fraction of off-diagonal transfer entries that are negative", 0.0, 1.0),
        "drift": Knob(0.01, "std of the per-step random walk of the competence z", 0.0, 10.0),
        "forget": Knob(0.0, "per-step shrinkage of z and u towards 0", 0.0, 1.0),
        "difficulty_mean": Knob(-0.5, "mean task logit offset", -20.0, 20.0),
        "difficulty_std": Knob(1.5, "std of the task logit offset", 0.0, 20.0),
        "harness_offset_mean": Knob(-0.5, "mean logit offset of ordinary harnesses", -20.0, 20.0),
        "harness_std": Knob(0.8, "std of harness offsets and of harness x category affinities", 0.0, 20.0),
        "n_saturating": Knob(1, "training harnesses that start easy and plateau at the ceiling", 0, 64),
        "saturation_ceiling": Knob(0.7, "success ceiling of the saturating harnesses", 0.01, 1.0),
        "n_zero": Knob(1, "training harnesses that start at (near) zero success", 0, 64),
        "zero_offset": Knob(-8.0, "logit offset of the zero-success harnesses", -50.0, 0.0),
        "grad_noise": Knob(0.01, "std of the gradient sketch's nuisance coordinates", 0.0, 100.0),
        "noise_dims": Knob(32, "nuisance coordinates appended to the gradient sketch", 0, 100_000),
        **heldout_align_knobs(),
    }

    @classmethod
    def _check_knobs(cls, knobs: dict) -> None:
        if knobs["n_saturating"] + knobs["n_zero"] > knobs["n_harnesses"]:
            raise UserError(f"env n_saturating={knobs['n_saturating']} + n_zero={knobs['n_zero']} "
                             f"are not allowed: expected a sum <= n_harnesses={knobs['n_harnesses']}")

    # -- structure -----------------------------------------------------------------
    def _build(self, rng: np.random.Generator) -> None:
        k, H, C = self.knobs, self.H, len(CATEGORIES)
        n_all = self.n_tasks + self.n_heldout
        cat_offset = rng.normal(0.0, 0.5, C)
        self.a = rng.normal(k["difficulty_mean"], k["difficulty_std"], n_all) + cat_offset[self.task_category]
        roles = rng.permutation(np.repeat([0, 1, 2], [k["n_saturating"], k["n_zero"],
                                                      H - k["n_saturating"] - k["n_zero"]]))
        self.roles = np.append(roles, 2)                       # 0 saturating, 1 zero, 2 ordinary
        b = rng.normal(k["harness_offset_mean"], k["harness_std"], H + 1)
        b = np.where(self.roles == 0, np.abs(b) + 1.0, b)
        self.b = np.where(self.roles == 1, k["zero_offset"], b)
        self.ceil = np.where(self.roles == 0, k["saturation_ceiling"], 1.0)
        self.w = rng.normal(0.0, k["harness_std"], (C, H + 1))
        mag = k["transfer_scale"] * rng.uniform(0.3, 1.0, (H, H + 1))
        sign = np.where(rng.random((H, H + 1)) < k["negative_fraction"], -1.0, 1.0)
        self.M = sign * mag
        self.M[np.arange(H), np.arange(H)] = 1.0
        self.M = aligned_heldout(self.M.T, k, unit=False).T      # held-out column <- aligned harnesses' columns
        self.w = aligned_heldout(self.w.T, k, unit=False).T
        self.z = np.zeros((C, H + 1))
        self.u = np.zeros(self.n_tasks)
        self._logit_cache = self._success_cache = None
        self._onehot = np.eye(C)[self.task_category[: self.n_tasks]]                    # (n, C)

    # -- truth ---------------------------------------------------------------------
    def _logits(self) -> np.ndarray:
        if self._logit_cache is None:
            u_all = np.concatenate([self.u, np.zeros(self.n_heldout)])
            self._logit_cache = (self.a[:, None] + self.b[None, :] + self.w[self.task_category]
                                 + self.z[self.task_category] + u_all[:, None])
        return self._logit_cache

    def success_matrix(self) -> np.ndarray:
        """Read-only (cached until the next update)."""
        if self._success_cache is None:
            self._success_cache = self.ceil[None, :] * _sigmoid(self._logits())
            self._success_cache.flags.writeable = False
        return self._success_cache

    # -- learning ------------------------------------------------------------------
    def _learn(self, batch: Batch, rng: np.random.Generator):
        k, H, C = self.knobs, self.H, len(CATEGORIES)
        n = len(batch)
        s = (batch.advantages * (batch.rewards - batch.p[:, None])).mean(axis=1)      # (n,)
        cell = self.task_category[batch.tasks] * H + batch.harnesses
        S = np.bincount(cell, weights=s / n, minlength=C * H).reshape(C, H)
        gz = S @ self.M                                                                 # (C, H+1)
        gu = np.bincount(batch.tasks, weights=s / n, minlength=self.n_tasks)
        lr, task_lr = k["lr"] * self.lr_scale, k["task_lr"] * self.lr_scale
        self.z = self.z + lr * gz
        self.u = self.u + task_lr * gu
        self._update_norm = float(np.sqrt(np.sum((lr * gz) ** 2) + np.sum((task_lr * gu) ** 2)))
        self._logit_cache = self._success_cache = None
        noise = k["grad_noise"] * rng.standard_normal(k["noise_dims"])
        sketch = np.concatenate([gz.ravel(), gu, noise]).astype(np.float32)
        return sketch, None

    def expected_update(self, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Expected (drift-free) step of each candidate allocation from the current state:
        candidates (K, H) counts -> dz (K, C, H+1) competence change before shrinkage and
        du (K, n_tasks) task-skill change. Exact for binary rewards under the model."""
        k, H = self.knobs, self.H
        cand = np.asarray(candidates, dtype=np.float64)                               # (K, H)
        frac = cand / cand.sum(axis=1, keepdims=True)
        success = self.success_matrix()
        cache = getattr(self, "_signal_cache", None)
        if cache is None or cache[0] is not success:     # once per state (the step's oracle and the policy's)
            p = success[: self.n_tasks, :H]                                            # (n, H)
            es, keep = grpo.expected_group_signal(p, self.G, k["advantage"])             # (n, H) each
            total = keep.sum(axis=0)                                                   # (H,)
            per_group = np.divide(es, total[None, :], out=np.zeros_like(es), where=total[None, :] > 1e-300)
            self._signal_cache = cache = (success, per_group, self._onehot.T @ per_group)   # D: (C, H)
        _, per_group, D = cache
        dz = k["lr"] * self.lr_scale * (D[None, :, :] * frac[:, None, :]) @ self.M     # (K, C, H+1)
        du = k["task_lr"] * self.lr_scale * frac @ per_group.T                         # (K, n)
        return dz, du

    def expected_gains(self, candidates: np.ndarray) -> np.ndarray:
        H, forget = self.H, self.knobs["forget"]
        dz, du = self.expected_update(candidates)
        logit = self._logits()[: self.n_tasks, :H]                                     # (n, H)
        x = self._onehot @ dz[:, :, :H]                                                # (K, n, H)
        x += du[:, :, None]
        if forget:                     # the step's shrinkage applies to the updated z and u
            cats = self.task_category[: self.n_tasks]
            x *= 1.0 - forget
            logit = logit - forget * (self.z[cats, :H] + self.u[:, None])             # (n, H)
        x += logit
        p_new = _sigmoid(x, out=x)
        p_new *= self.ceil[:H]
        n_cells = self.n_tasks * H
        p_old = self.success_matrix()[: self.n_tasks, :H]
        return p_new.reshape(len(p_new), -1).sum(axis=1) / n_cells - p_old.sum() / n_cells

    def expected_success(self, candidates: np.ndarray, tasks: slice = slice(None)) -> np.ndarray:
        """(K, n, H+1) true success matrix (rows `tasks`) after the expected (drift-free) step
        of each candidate allocation (K, H), forgetting included; the state is not changed."""
        forget = self.knobs["forget"]
        dz, du = self.expected_update(candidates)                                      # (K, C, H+1), (K, n)
        rows = np.arange(self.n_tasks + self.n_heldout)[tasks]
        cats = self.task_category[rows]
        x = dz[:, cats, :]                                                             # (K, n, H+1)
        train = rows < self.n_tasks                                                    # the task skill u
        if train.any():
            x[:, train] += du[:, rows[train], None]
        logit = self._logits()[rows]
        if forget:
            u_all = np.concatenate([self.u, np.zeros(self.n_heldout)])[rows]
            x *= 1.0 - forget
            logit = logit - forget * (self.z[cats] + u_all[:, None])
        x += logit
        return self.ceil[None, None, :] * _sigmoid(x, out=x)

    def true_directions(self) -> np.ndarray:
        """(H, C (H+1) + n_tasks) true expected gradient-sketch direction of a pure step per
        training harness (the sketch's (S M, task-skill) part, no noise). No pure step on the
        held-out harness exists here, so it has no row."""
        dz, du = self.expected_update(np.eye(self.H, dtype=np.int64))
        lr, task_lr = self.knobs["lr"] * self.lr_scale, self.knobs["task_lr"] * self.lr_scale
        gz = dz.reshape(self.H, -1) / lr if lr else np.zeros_like(dz.reshape(self.H, -1))
        gu = du / task_lr if task_lr else np.zeros_like(du)
        return np.concatenate([gz, gu], axis=1)

    # -- state ---------------------------------------------------------------------
    def _model_state(self) -> dict:
        return {"z": self.z.copy(), "u": self.u.copy()}

    def _load_model_state(self, state: dict) -> None:
        self.z, self.u = np.array(state["z"], dtype=np.float64), np.array(state["u"], dtype=np.float64)
        self._logit_cache = self._success_cache = None

    def _advance(self, rng: np.random.Generator) -> None:
        """Every step: forgetting, then the competence random walk (the step's world stream)."""
        k = self.knobs
        if k["forget"]:
            self.z = (1.0 - k["forget"]) * self.z
            self.u = (1.0 - k["forget"]) * self.u
        if k["drift"]:
            self.z = self.z + k["drift"] * rng.standard_normal(self.z.shape)
        self._logit_cache = self._success_cache = None
