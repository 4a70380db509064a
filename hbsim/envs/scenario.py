"""Role-structured environment (issue 18 item 3): harnesses with fixed NAMED roles and the
structure real multi-harness training has -- a specialisation trap, an anchor, a reward-noise
harness, a dead harness, prerequisite/unlock, harnesses that arrive or leave mid-run, many
mostly-irrelevant ones, within-batch interference, schedule-dependent forgetting and
held-out-harness success driven by the coverage of trained formats.

Roles are given by name (`roles = "primary*2,anchor,trap,noise,dead"`, one per training
harness, `role*k` repeats); the harness names follow the roles (`primary1`, `primary2`,
`anchor`, ...), so "harness 3 is the trap" holds in every seed. Only the noise stays seeded:
task difficulty, bias jitter and harness x category affinity (the structure stream).

Model (C = 5 categories, H training harnesses + the held-out harness, column H; learned
state z (C,) core competence per category and s (H,) harness-specific skill):

    logit[t, h] = a_t + b_h + w[c_t, h] + read_h z[c_t] + s_h + gate_h
    p[t, h]     = ceil_h sigmoid(logit[t, h])                   (noise role: p = noise_p)
    logit[t, x] = a_t + heldout_bias + w[c_t, x] + heldout_read z[c_t] + sum_h align_h s_h
                  + coverage sum_h cov_h (1 - exp(-max(s_h, 0) / coverage_scale))

read_h is how harness h reads (and, its gradient, writes) the shared core: the anchor reads
it strongly (high transfer) and starts near saturation (low L); the trap reads it NEGATIVELY
(its steps lower z, hurting every other harness), starts at p ~ 0.5 (high L) and is capped
at trap_ceiling, so its L and its harm never fade; a dead harness has ceil = 0 (never a
retained group); a plateau harness starts easy and saturates at plateau_ceiling < 1, where
its groups keep a high L with nothing left to gain (the saturation trap); a noise harness's
success is a constant noise_p whatever is learned (high variance, nothing to learn) and its
groups push z by a zero-mean random direction; a filler harness is saturated and reads the
core weakly (many mostly-irrelevant harnesses); a locked harness has gate = -unlock_gap (1 - sigmoid(4 (mean
s_key - unlock_at))): it is dead until the key harnesses' skill passes unlock_at. A `late`
harness is unavailable before `arrive_step`, a `gone` one from `leave_step` on: the policy
interface has no availability mask, so an unavailable harness is modelled as its tasks not
being runnable -- every rollout fails, it yields no retained group (a pure step on it is an
empty step), while its success still counts in the training mean and the evaluation. The
held-out harness gains from the COVERAGE of trained formats (the concave sum over
harness skills rewards spreading) and follows align_h s_h linearly (negative for
`primary`: specialising on those formats hurts it).

One step (n optimized groups, sig_g = mean_i A_gi (r_gi - p_g) as in the other envs):

    kappa = (mean_g var(r_g) / var(all rewards of the batch)) ** (interference / 2)
    z    += lr kappa sum_g read_{h_g} sig_g onehot(c_g) / n  (+ noise groups: lr kappa noise_scale sig_g xi_g / n)
    s_h  += skill_lr kappa sum_{g in h} sig_g / n
    (dz, ds) *= min(1, max_step / |step|)      (the trust region, like GRPO's ratio clipping; 0 = none)
    s_h  *= exp(-forget (1 - share_h) |step|)  (share_h: h's share of the optimized groups,
                                               |step| = sum |dz| + sum |ds|, the step's L1 move)

kappa < 1 is per-batch normalisation across heterogeneous trajectories: the batch-level
reward std grows with the spread of success levels between the batch's harnesses, so a
mixed batch of harnesses at different success levels takes a smaller step than the pure
steps it averages (interference = 0: kappa = 1). Forgetting depends on the schedule: a
harness's skill decays on the steps that train OTHER harnesses, in proportion to how far
that step moves the parameters (catastrophic forgetting is overwriting), so the skill
equilibria do not wash out with a larger learning rate; an empty step forgets nothing. The
trust region bounds a step's progress, so beyond the learning rate at which it binds a
larger rate adds nothing and a wasted step stays wasted. Each train row records `trust_bound`
(1.0 when the trust region clipped that step's move, else 0.0; an env extra), so the fraction
of a run's steps on which it binds is measured (`hb scenarios NAME --sweep`): the shipped
scenarios run where it binds on a minority of uniform's steps and the learning rate, not the
trust region, sets the progress (issue 28; each file's `lr_note`).

Oracle (`expected_success`, `expected_gains`; the base's `target_gains` per target): per
task the exact E[sig | p] and keep probability for G binary rollouts (hbsim.grpo), retained
groups drawn in proportion to their keep probability, a harness's expected fill
1 - (1 - q_h) ** (oversample max_rounds) (q_h its mean keep probability), kappa by the
plug-in ratio of the expected within-group and batch variances, the trust region and the
forgetting applied to the expected step; the noise groups' zero-mean push is left out.
"""
from __future__ import annotations

import numpy as np

from hbsim.envs.base import CATEGORIES, COMMON_KNOBS, Batch, Knob, SyntheticEnv
from hbsim.grpo import expected_group_signal
from policies.errors import UserError
from policies.validate import comma_items

#: role -> (read knob or value, bias knob or value, align knob or value, coverage weight)
ROLES = {
    "ordinary": ("ordinary_read", "ordinary_bias", 0.0, 1.0),
    "primary": ("ordinary_read", "ordinary_bias", "primary_align", 1.0),
    "anchor": ("anchor_read", "anchor_bias", 0.0, 1.0),
    "trap": ("trap_read", "trap_bias", 0.0, 1.0),
    "noise": (0.0, 0.0, 0.0, 0.0),
    "dead": (0.0, 0.0, 0.0, 0.0),
    "filler": ("filler_read", "filler_bias", 0.0, 0.0),
    "key": ("ordinary_read", "ordinary_bias", 0.0, 1.0),
    "locked": ("ordinary_read", "ordinary_bias", 0.0, 1.0),
    "late": ("ordinary_read", "ordinary_bias", 0.0, 1.0),
    "gone": ("ordinary_read", "ordinary_bias", 0.0, 1.0),
    "plateau": (0.0, "plateau_bias", 0.0, 0.0),
}


def expand_roles(value) -> list[str]:
    """"primary*2,anchor" (or a list) -> ["primary", "primary", "anchor"]; UserError otherwise."""
    items = comma_items(value, keep_empty=True) if isinstance(value, str) else value
    out = []
    try:
        for item in items:
            role, _, count = str(item).strip().partition("*")
            n = int(count) if count else 1
            if role.strip() not in ROLES or not 1 <= n <= 64:
                raise ValueError
            out += [role.strip()] * n
    except (TypeError, ValueError):
        out = []
    if not out:
        raise UserError(f"env.roles={value!r} is not allowed: expected comma-separated roles (role*k repeats) "
                        f"from {', '.join(ROLES)}")
    return out


def _roles_string(name: str, value) -> str:
    return ",".join(expand_roles(value))


_roles_string.allowed = f"comma-separated roles like \"primary*2,anchor,trap\" from {', '.join(ROLES)}"


def harness_names(roles: list[str]) -> list[str]:
    """A role's name, numbered 1.. where the role repeats."""
    seen = {r: 0 for r in roles}
    out = []
    for r in roles:
        seen[r] += 1
        out.append(r if roles.count(r) == 1 else f"{r}{seen[r]}")
    return out


def trust_region(max_step: float, moved):
    """The factor min(1, max_step / moved) that clips a step's L1 move to max_step (0: none)."""
    moved = np.asarray(moved, dtype=np.float64)
    if not max_step:
        return np.ones_like(moved)
    return np.minimum(1.0, max_step / np.maximum(moved, 1e-300))


def forgetting(rate: float, share: np.ndarray, moved) -> np.ndarray:
    """The factor exp(-rate (1 - share_h) moved) on each harness skill after a step that moved
    the parameters by `moved` (L1) with harness shares `share` (..., H); `moved` (...,)."""
    return np.exp(-rate * (1.0 - share) * np.asarray(moved)[..., None])


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


class ScenarioEnv(SyntheticEnv):
    kind = "scenario"
    summary = "named harness roles (trap, anchor, noise, dead, locked, ...) with interference and forgetting"
    KNOBS = COMMON_KNOBS | {
        "roles": Knob("primary,primary,anchor,trap,noise,dead", "role of each training harness, in order",
                      parse=_roles_string),
        "lr": Knob(2.0, "step of the core competence z per unit of batch signal", 0.0, 1000.0),
        "skill_lr": Knob(2.0, "step of the harness-specific skill s per unit of batch signal", 0.0, 1000.0),
        "forget": Knob(0.0, "decay of a harness's skill per unit of parameter movement made for other harnesses", 0.0, 100.0),
        "max_step": Knob(0.0, "trust region: a step's L1 move of (z, s) is clipped to this (0 = none)", 0.0, 1000.0),
        "interference": Knob(0.0, "exponent of the batch-variance normalisation (0 = none)", 0.0, 16.0),
        "coverage": Knob(0.0, "held-out logit per covered trained format (diversity)", 0.0, 100.0),
        "coverage_scale": Knob(1.0, "skill at which a format counts as ~63% covered", 1e-6, 100.0),
        "heldout_bias": Knob(-1.0, "held-out harness bias", -50.0, 50.0),
        "heldout_read": Knob(0.5, "how much the held-out harness reads the core z", -10.0, 10.0),
        "ordinary_read": Knob(0.7, "core reading of ordinary/primary/key/locked/late/gone harnesses", -10.0, 10.0),
        "ordinary_bias": Knob(-0.5, "bias of ordinary/primary/key/locked/late/gone harnesses", -50.0, 50.0),
        "primary_align": Knob(-0.3, "held-out logit per unit of a primary harness's skill", -10.0, 10.0),
        "anchor_read": Knob(1.5, "core reading of the anchor (high transfer)", -10.0, 10.0),
        "anchor_bias": Knob(2.0, "anchor bias (near saturation: low L)", -50.0, 50.0),
        "trap_read": Knob(-1.0, "core reading of the trap (negative: its steps hurt the others)", -10.0, 10.0),
        "trap_bias": Knob(0.5, "trap bias (p ~ 0.5: high L)", -50.0, 50.0),
        "trap_ceiling": Knob(0.6, "success ceiling of the trap (its L never fades, so neither does its harm)",
                             0.01, 1.0),
        "filler_read": Knob(0.1, "core reading of a filler (mostly irrelevant) harness", -10.0, 10.0),
        "filler_bias": Knob(3.5, "filler bias (saturated)", -50.0, 50.0),
        "plateau_bias": Knob(1.0, "bias of a plateau harness (starts easy: high L)", -50.0, 50.0),
        "plateau_ceiling": Knob(0.7, "success ceiling of a plateau harness (its L stays high, its gain ends)",
                                0.01, 1.0),
        "noise_p": Knob(0.5, "constant success probability of a noise harness", 0.0, 1.0),
        "noise_scale": Knob(1.0, "size of a noise group's random push on z", 0.0, 100.0),
        "unlock_gap": Knob(8.0, "logit penalty of a locked harness before it is unlocked", 0.0, 50.0),
        "unlock_at": Knob(1.0, "mean key-harness skill at which a locked harness is half unlocked", 0.0, 100.0),
        "arrive_step": Knob(0, "first step at which `late` harnesses are available", 0, 10**6),
        "leave_step": Knob(0, "first step at which `gone` harnesses are unavailable (0 = never)", 0, 10**6),
        "difficulty_std": Knob(1.0, "std of the task logit offset", 0.0, 20.0),
        "bias_jitter": Knob(0.2, "std of the seeded jitter of every harness bias", 0.0, 20.0),
        "affinity_std": Knob(0.3, "std of the seeded harness x category affinity", 0.0, 20.0),
    }

    @classmethod
    def _check_knobs(cls, knobs: dict) -> None:
        roles = expand_roles(knobs["roles"])
        if len(roles) != knobs["n_harnesses"]:
            raise UserError(f"env.roles={knobs['roles']!r} is not allowed: expected n_harnesses="
                            f"{knobs['n_harnesses']} roles, got {len(roles)}")
        if "locked" in roles and "key" not in roles:
            raise UserError(f"env.roles={knobs['roles']!r} is not allowed: a locked harness needs a key harness")

    # -- structure -----------------------------------------------------------------
    def _build(self, rng: np.random.Generator) -> None:
        k, H, C = self.knobs, self.H, len(CATEGORIES)
        self.roles = expand_roles(k["roles"])
        self.harnesses = harness_names(self.roles)
        self.heldout_harness = "unseen"
        value = lambda v: float(k[v]) if isinstance(v, str) else float(v)   # noqa: E731
        table = np.array([[value(x) for x in ROLES[r]] for r in self.roles])  # (H, 4)
        self.read, bias, self.align, self.cov = table.T
        n_all = self.n_tasks + self.n_heldout
        self.a = rng.normal(0.0, k["difficulty_std"], n_all)
        jitter = rng.normal(0.0, k["bias_jitter"], H + 1)
        self.b = np.append(bias, k["heldout_bias"]) + jitter
        self.w = rng.normal(0.0, k["affinity_std"], (C, H + 1))
        roles = np.array(self.roles)
        ceil = np.where(roles == "plateau", k["plateau_ceiling"], np.where(roles == "trap", k["trap_ceiling"], 1.0))
        self.ceil = np.append(np.where(roles == "dead", 0.0, ceil), 1.0)
        self.noisy = roles == "noise"
        self.key, self.locked = roles == "key", roles == "locked"
        self.late, self.gone = roles == "late", roles == "gone"
        self._base = self.a[:, None] + self.b[None, :] + self.w[self.task_category]       # (n_all, H+1)
        self._onehot = np.eye(C)[self.task_category[: self.n_train]]                       # (n_train, C)
        self.z, self.s = np.zeros(C), np.zeros(H)
        self._share, self._moved = np.zeros(H), 0.0
        self._bound = 0.0
        self._p = None

    def available(self, step: int | None = None) -> np.ndarray:
        """(H,) bool: the harnesses whose tasks can be run at `step` (default: the current one)."""
        step = self.step_count if step is None else step
        k = self.knobs
        gone = self.gone & (k["leave_step"] > 0) & (step >= k["leave_step"])
        return ~((self.late & (step < k["arrive_step"])) | gone)

    # -- truth ---------------------------------------------------------------------
    def _success(self, z: np.ndarray, s: np.ndarray, tasks: slice = slice(None)) -> np.ndarray:
        """z (K, C), s (K, H) -> (K, n, H+1) true success probabilities of rows `tasks`."""
        k, H = self.knobs, self.H
        cats = self.task_category[tasks]
        read = np.append(self.read, k["heldout_read"])
        logit = self._base[tasks][None] + z[:, cats][:, :, None] * read[None, None, :]
        covered = 1.0 - np.exp(-np.maximum(s, 0.0) / k["coverage_scale"])
        own = np.concatenate([s, (s @ self.align + k["coverage"] * covered @ self.cov)[:, None]], axis=1)
        if self.locked.any():
            unlock = _sigmoid(4.0 * (s[:, self.key].mean(axis=1) - k["unlock_at"]))        # (K,)
            own[:, :H] -= np.outer(1.0 - unlock, self.locked * k["unlock_gap"])
        p = self.ceil[None, None, :] * _sigmoid(logit + own[:, None, :])
        p[:, :, :H][:, :, self.noisy] = k["noise_p"]
        return p

    def success_matrix(self) -> np.ndarray:
        """(n_all, H+1) true success probabilities, cached until the state moves (read-only)."""
        if self._p is None:
            self._p = self._success(self.z[None], self.s[None])[0]
            self._p.flags.writeable = False
        return self._p

    def _sampling_p(self) -> np.ndarray:
        """(n_train, H) success at generation of the rows the task pools draw from: 0 on
        unavailable harnesses."""
        return self.success_matrix()[: self.n_train, : self.H] * self.available()[None, :]

    def _generate(self, requests: dict[int, int], before: np.ndarray) -> dict:
        masked = before.copy()
        masked[:, : self.H] *= self.available()[None, :]
        return super()._generate(requests, masked)

    # -- learning ------------------------------------------------------------------
    def _learn(self, batch: Batch, rng: np.random.Generator):
        k, H, C = self.knobs, self.H, len(CATEGORIES)
        n = len(batch)
        sig = (batch.advantages * (batch.rewards - batch.p[:, None])).mean(axis=1)         # (n,)
        total = batch.rewards.var()
        kappa = (batch.rewards.var(axis=1).mean() / total) ** (k["interference"] / 2) if total > 0 else 1.0
        cats = self.task_category[batch.tasks]
        gz = np.bincount(cats, weights=self.read[batch.harnesses] * sig / n, minlength=C)
        noisy = self.noisy[batch.harnesses]
        if noisy.any():
            xi = rng.standard_normal((int(noisy.sum()), C))
            gz = gz + k["noise_scale"] * (sig[noisy] / n) @ xi
        gs = np.bincount(batch.harnesses, weights=np.where(noisy, 0.0, sig) / n, minlength=H)
        dz, ds = k["lr"] * self.lr_scale * kappa * gz, k["skill_lr"] * self.lr_scale * kappa * gs   # lr_scale: set_lr_scale
        clip = trust_region(k["max_step"], np.abs(dz).sum() + np.abs(ds).sum())
        self._bound = float(clip < 1.0)
        dz, ds = dz * clip, ds * clip
        self.z, self.s, self._p = self.z + dz, self.s + ds, None
        self._share = np.bincount(batch.harnesses, minlength=H) / n
        self._moved = float(np.abs(dz).sum() + np.abs(ds).sum())
        grad = -kappa * np.concatenate([gz, gs])
        return grad.astype(np.float32), np.concatenate([dz, ds]).astype(np.float32)

    def _advance(self, rng: np.random.Generator) -> None:
        """Schedule-dependent forgetting of the harness skills (nothing after an empty step)."""
        if self.knobs["forget"] and self._moved:
            self.s, self._p = self.s * forgetting(self.knobs["forget"], self._share, self._moved), None
        self._share, self._moved = np.zeros(self.H), 0.0

    def _ground_truth(self, gains: np.ndarray, counts: np.ndarray) -> dict:
        """The base's extras and `trust_bound`: 1.0 when the trust region clipped this step's
        move (its unclipped L1 move exceeded max_step), 0.0 otherwise (an empty step included);
        its mean over a run's steps is the fraction of steps the trust region binds."""
        extras = {**super()._ground_truth(gains, counts), "trust_bound": self._bound}
        self._bound = 0.0
        return extras

    def _expected_parts(self) -> dict:
        """Per-harness expectations at the current state (module docstring, "Oracle"); cached
        while the success matrix (the state) and the step stay the same."""
        cached = getattr(self, "_parts", None)
        if cached is not None and cached[0] is self.success_matrix() and cached[1] == self.step_count:
            return cached[2]
        parts = self._compute_parts()
        self._parts = (self.success_matrix(), self.step_count, parts)
        return parts

    def _compute_parts(self) -> dict:
        k, G = self.knobs, self.G
        p = self._sampling_p()                                                            # (n, H)
        es, keep = expected_group_signal(p, G, k["advantage"])
        total = keep.sum(axis=0)
        ok = total > 1e-300
        safe = np.where(ok, total, 1.0)
        D = np.where(ok[None, :], self._onehot.T @ es / safe, 0.0)                       # (C, H) signal per group
        within = np.where(ok, (p * (1 - p)).sum(axis=0) * (G - 1) / G / safe, 0.0)
        mean = np.where(ok, (p - p ** G).sum(axis=0) / safe, 0.0)
        fill = 1.0 - (1.0 - total / self.n_train) ** (k["oversample"] * k["max_rounds"])
        return {"D": D, "within": within, "mean": mean, "fill": fill}

    def expected_state(self, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """candidates (K, H) counts -> (z (K, C), s (K, H)) after the expected step from the
        current state, forgetting included; the state is not changed."""
        k = self.knobs
        cand = np.asarray(candidates, dtype=np.float64)
        e = self._expected_parts()
        opt = cand * e["fill"][None, :]                                                   # expected optimized groups
        n = opt.sum(axis=1, keepdims=True)
        share = np.divide(opt, n, out=np.zeros_like(opt), where=n > 0)                   # (K, H)
        m = share @ e["mean"]
        total = m * (1.0 - m)
        ratio = np.divide(share @ e["within"], total, out=np.ones_like(m), where=total > 0)
        kappa = np.clip(ratio, 0.0, 1.0) ** (k["interference"] / 2)                       # (K,)
        sig = e["D"][None] * share[:, None, :]                                            # (K, C, H)
        sig[:, :, self.noisy] = 0.0
        dz = k["lr"] * self.lr_scale * kappa[:, None] * (sig @ self.read)
        ds = k["skill_lr"] * self.lr_scale * kappa[:, None] * sig.sum(axis=1)
        clip = trust_region(k["max_step"], np.abs(dz).sum(axis=1) + np.abs(ds).sum(axis=1))[:, None]
        dz, ds = dz * clip, ds * clip
        s = self.s[None] + ds
        if k["forget"]:
            s = s * forgetting(k["forget"], share, np.abs(dz).sum(axis=1) + np.abs(ds).sum(axis=1))
        return self.z[None] + dz, s

    def expected_success(self, candidates: np.ndarray, tasks: slice = slice(None)) -> np.ndarray:
        """(K, n, H+1) true success (rows `tasks`) after the expected step of each candidate (K, H)."""
        return self._success(*self.expected_state(candidates), tasks)

    def expected_gains(self, candidates: np.ndarray) -> np.ndarray:
        """(K,) expected one-step change of the mean training success (the base's
        `target_gains` gives the held-out targets from `expected_success`)."""
        n, H = self.n_tasks, self.H
        new = self.expected_success(candidates, slice(0, n))[:, :, :H]
        return new.mean(axis=(1, 2)) - self.success_matrix()[:n, :H].mean()

    def true_directions(self) -> np.ndarray:
        """(H, C + H) expected loss-gradient direction of a pure step per training harness
        (core part read_h D[:, h], own-skill part on coordinate h); zero for noise and dead."""
        D = self._expected_parts()["D"].copy()
        D[:, self.noisy] = 0.0
        out = np.zeros((self.H, D.shape[0] + self.H))
        out[:, : D.shape[0]] = -(D * self.read[None, :]).T
        out[np.arange(self.H), D.shape[0] + np.arange(self.H)] = -D.sum(axis=0)
        return out

    # -- state ---------------------------------------------------------------------
    def _model_state(self) -> dict:
        return {"z": self.z.copy(), "s": self.s.copy()}

    def _load_model_state(self, state: dict) -> None:
        self.z, self.s = np.array(state["z"], dtype=np.float64), np.array(state["s"], dtype=np.float64)
        self._share, self._moved, self._p, self._bound = np.zeros(self.H), 0.0, None, 0.0
