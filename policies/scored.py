"""The HarnessBandit fused scheduler (SPEC §3) -- the ONE implementation.

`learnability`, `transfer`, `harnessbandit`, `product` and `min` are this class with a
different `fusion`. Three knobs beyond the paper, which the reading note asks to ablate
(each off by default, which is the paper):

* `transfer_source="update"`: T on the optimizer-update sketch (Adam-aware) instead of the
  raw gradient sketch (note §4.2);
* `max_memory_age=k`: T ignores other harnesses' memories older than k global steps (§9.2);
* `cost_weight=w > 0`: S <- S / (1 + w * c~), c~ the feedback's cost (groups generated per
  optimized group) min-max normalised in its own pooled window (§9.2).

Beyond the paper, one knob per failure mechanism of the fused scheduler (SPEC §10; each
default is the paper, and `config()` leaves them out at their defaults, so earlier configs
hash as before; docs/POLICIES.md "Beyond the paper: the robustness knobs"):

* `empty_step`: a step without a retained group (raw L missing) is skipped (the paper: Q is
  not updated) or scored as L = 0 (`zero`, the mean |A| of a batch without reward variance)
  minus `empty_cost`;
* `undefined_q`: the Q' of an arm whose Q is undefined: the largest defined Q (the paper), a
  constant `q_prior` (`prior`) or `q_prior * prior_decay ** n_h` (`optimistic`);
* `learnability_source`: L~ from |advantage| (the paper), from measured learning progress
  (`progress`: |fast - slow| EMAs of the harness's training success on all its generated
  groups, `Feedback.generated`), or the mean of both (`both`); `progress_sign="increase"`
  counts only a rise, max(fast - slow, 0), so a collapse of success is not progress;
* `noise_z`: the noise check: L~ times min(1, progress / (noise_z * se)), se the binomial
  standard error of the step's success rate (0 = off);
* the law's sharpness is `tau` and `epsilon` (and `bonus_c`), already knobs.

Index policies (`policies.bandits`) reuse this signal pipeline and override only
`_index_law` (and `_learn` for their own statistics). The windows and Q are Python lists
(read and written one scalar at a time, where a numpy scalar costs more than the
arithmetic); `state_dict()` exports every piece as a numpy array.
"""
from __future__ import annotations

import math

import numpy as np

from policies.base import Feedback, Policy
from policies.errors import UserError
from policies.knobs import Knob, Knobs
from policies.signals import (FUSION_USES, FUSIONS, MemoryBank, bank_for, inverse_cdf_draw, minmax_normalise,
                              noise_weight, selection_probabilities, sketch_norm, success_progress,
                              transfer_and_update, undefined_prior, window_push, window_values)

_NAN = float("nan")

#: the knobs of the SPEC §3 family (paper defaults); a variant's table drops those its
#: fusion or its own law never reads (they keep these defaults in its `cfg`)
SCORED_KNOBS = Knobs({
    "window": Knob(32, "pooled window length of raw L and T observations (all harnesses)", 1, 10**7),
    "alpha": Knob(0.5, "weight of L~ in the mean fusion", 0.0, 1.0),
    "q_decay": Knob(0.7, "Q <- q_decay * Q + (1 - q_decay) * S", 0.0, 1.0, high_open=True),
    "bonus_c": Knob(0.2, "count bonus c / sqrt(n_h + 1)", 0.0, 1e9),
    "tau": Knob(0.3, "softmax temperature", 0.0, 1e9, low_open=True),
    "epsilon": Knob(0.15, "exploration floor (p_h >= epsilon / H)", 0.0, 1.0),
    "eta": Knob(0.3, "memory EMA rate", 0.0, 1.0, low_open=True),
    "warmup_rounds": Knob(5, "round-robin warm-up for warmup_rounds * H steps", 0, 10**7),
    "fusion": Knob("mean", "how L~ and T~ make the score S", choices=tuple(FUSIONS)),
    "degenerate": Knob(0.5, "normalised value when the window holds < 2 values or has zero range", 0.0, 1.0),
    "transfer_source": Knob("gradient", "which sketch T uses (update: the optimizer-update sketch)",
                            choices=("gradient", "update")),
    "max_memory_age": Knob(None, "ignore other memories whose age (global steps since their last update, as in "
                                 "diagnostics) exceeds this (none: no limit)", 0, 10**9, type=int, optional=True),
    "cost_weight": Knob(0.0, "divide S by (1 + cost_weight * normalised cost); 0 = off", 0.0, 1e9),
}, scope="policy")

#: beyond the paper (SPEC §10): one knob per failure mechanism, each default the paper's
ROBUST_KNOBS = Knobs({
    "empty_step": Knob("skip", "a step whose raw L is missing (no retained group): skip (the paper: no Q update) "
                               "or zero (L = 0 enters the window and the fusion, minus empty_cost)",
                       choices=("skip", "zero")),
    "empty_cost": Knob(0.0, "with empty_step=zero: subtracted from the score S of an empty step", 0.0, 1.0),
    "learnability_source": Knob("advantage", "L~ from: advantage (the paper: mean |A|), progress (|fast - slow| "
                                             "EMAs of the harness's training success, all generated groups), both "
                                             "(the mean of the two normalised values)",
                                choices=("advantage", "progress", "both")),
    "progress_fast": Knob(0.5, "fast EMA rate of a harness's success per visit (learning progress)", 0.0, 1.0,
                          low_open=True),
    "progress_slow": Knob(0.1, "slow EMA rate of a harness's success per visit (learning progress)", 0.0, 1.0,
                          low_open=True),
    "progress_sign": Knob("absolute", "learning progress as: absolute (|fast - slow|, any change of success) or "
                                      "increase (max(fast - slow, 0): only rising success counts)",
                          choices=("absolute", "increase")),
    "noise_z": Knob(0.0, "noise check: L~ times min(1, progress / (noise_z * se)), se the binomial standard error "
                         "of the step's success rate; 0 = off", 0.0, 1e9),
}, scope="policy")

#: the law's knob for arms whose Q is undefined (only the softmax law of SPEC §3 reads it)
UNDEFINED_Q_KNOBS = Knobs({
    "undefined_q": Knob("max", "Q' of an arm whose Q is undefined: max (the paper: the largest defined Q), prior "
                               "(q_prior) or optimistic (q_prior * prior_decay ** n_h)",
                        choices=("max", "prior", "optimistic")),
    "q_prior": Knob(0.5, "undefined_q=prior|optimistic: the prior value of an undefined Q", 0.0, 1e9),
    "prior_decay": Knob(0.5, "undefined_q=optimistic: the prior's factor per visit", 0.0, 1.0),
}, scope="policy")

#: the whole family (paper knobs first); index policies drop the softmax law's knobs
SCORED_KNOBS = SCORED_KNOBS | ROBUST_KNOBS | UNDEFINED_Q_KNOBS
#: the knobs beyond the paper at their defaults: left out of `config()` (Policy.QUIET_DEFAULTS)
BEYOND_PAPER_DEFAULTS = {**ROBUST_KNOBS.defaults(), **UNDEFINED_Q_KNOBS.defaults()}


class ScoredPolicy(Policy):
    """SPEC §3 with a configurable fusion. A variant's `KNOBS` is `SCORED_KNOBS.without(...)`
    (plus its own knobs); the knobs it drops keep their defaults in `self.cfg`, and a
    variant with a `fixed_fusion` refuses any other fusion."""

    name = "harnessbandit"
    summary = "SPEC §3 fused scheduler, S = alpha*L~ + (1-alpha)*T~ (the paper)"
    fixed_fusion: str | None = None
    KNOBS = SCORED_KNOBS
    QUIET_DEFAULTS = BEYOND_PAPER_DEFAULTS

    @classmethod
    def _record_table(cls) -> Knobs:
        family = SCORED_KNOBS if cls.fixed_fusion is None else SCORED_KNOBS.with_defaults(fusion=cls.fixed_fusion)
        return family | cls.KNOBS

    def __init__(self, n_arms: int, seed: int = 0, **knobs):
        fusion = knobs.pop("fusion", self.fixed_fusion) if self.fixed_fusion is not None else None
        if fusion != self.fixed_fusion:
            raise UserError(f"policy.fusion={fusion!r} is not allowed for policy {self.name!r}: it is fixed to "
                            f"{self.fixed_fusion!r}; use 'harnessbandit' with fusion=... instead")
        super().__init__(n_arms, seed, **knobs)
        self.uses_l, self.uses_t = FUSION_USES[self.cfg.fusion]
        self._fuse = FUSIONS[self.cfg.fusion]
        cfg = self.cfg
        #: the knobs beyond the paper, resolved once (at the paper's defaults each is False: no per-step cost)
        self._empty_zero = cfg.empty_step == "zero"
        self._increase = cfg.progress_sign == "increase"
        self._progress = self.uses_l and (cfg.learnability_source != "advantage" or cfg.noise_z > 0)
        self._prior = cfg.undefined_q != "max"
        self._reset_state()

    def _reset_state(self) -> None:
        h = self.n_arms
        self.l_window = [0.0] * self.cfg.window         # ring buffers (see policies.signals.window_push)
        self.t_window = [0.0] * self.cfg.window
        self.c_window = [0.0] * self.cfg.window
        self.l_count = self.t_count = self.c_count = 0
        self.q = [0.0] * h                              # per-arm scalars as lists: read and written
        self.q_defined = [False] * h                    # one at a time, where numpy scalars cost more
        self.p_window = [0.0] * self.cfg.window         # learning progress (learnability_source, noise_z)
        self.p_count = 0
        self.fast = [0.0] * h                           # per-arm EMAs of training success
        self.slow = [0.0] * h
        self.measured = [False] * h
        self.bank: MemoryBank | None = None             # transfer memories, allocated on the first sketch
        self.counters = {"missing_learnability": 0, "missing_transfer": 0, "nonfinite_signals": 0}
        self.last = {"arm": -1, "learnability": _NAN, "transfer": _NAN, "l_norm": _NAN, "t_norm": _NAN,
                     "score": _NAN}
        self._law_cache: tuple[np.ndarray, np.ndarray] | None = None

    # -- selection ---------------------------------------------------------------------
    def warmup_steps(self) -> int:
        """warmup_rounds x harnesses: the round-robin steps before the first scored draw."""
        return self.cfg.warmup_rounds * self.n_arms

    def in_warmup(self) -> bool:
        return self.t < self.warmup_steps()

    def _law(self) -> tuple[np.ndarray, np.ndarray]:
        """(p, U) for the next step, cached until the next update."""
        if self._law_cache is None:
            if self.in_warmup():
                p = np.zeros(self.n_arms)
                p[self.t % self.n_arms] = 1.0
                self._law_cache = (p, np.full(self.n_arms, _NAN))
            else:
                self._law_cache = self._index_law()
        return self._law_cache

    def _index_law(self) -> tuple[np.ndarray, np.ndarray]:
        """The post-warm-up law (p, index) — the one thing an index policy overrides."""
        cfg = self.cfg
        n = self.n.tolist()
        fill = None
        if self._prior and not all(self.q_defined):       # every Q defined: no arm reads the prior
            fill = undefined_prior(n, cfg.q_prior, 1.0 if cfg.undefined_q == "prior" else cfg.prior_decay)
        return selection_probabilities(self.q, self.q_defined, n, cfg.bonus_c, cfg.tau, cfg.epsilon, fill)

    def probabilities(self) -> np.ndarray:
        return self._law()[0].copy()

    @property
    def n(self) -> np.ndarray:
        """(H,) visit counts n_h: the base class's per-arm visits (every update counts)."""
        return self._visits

    def _draw(self) -> int:
        """Warm-up: arm t mod H, no randomness; afterwards one inverse-CDF draw from the
        cached law (no copy)."""
        if self.in_warmup():
            return self.t % self.n_arms
        return inverse_cdf_draw(self._law()[0], self._rng.random())

    # -- update ------------------------------------------------------------------------
    def update(self, feedback: Feedback) -> None:
        arm = self._check_arm(feedback.arm)
        self._law_cache = None
        score = self._score(arm, feedback)
        self._learn(arm, score)
        self._record(feedback)          # n_h += 1 (always, SPEC §3 step 6) and t += 1
        self._law_cache = None          # (_learn may have cached the law of the step just taken)

    def _score(self, arm: int, feedback: Feedback) -> float:
        """SPEC §3 steps 1-4: T (before the memory update), windows, normalisation, fusion,
        and the optional cost division. Returns S (NaN when no signal was present)."""
        t_raw = self._transfer(arm, feedback) if self.uses_t else _NAN
        l_raw = _NAN
        empty = feedback.learnability is None
        if not empty:
            l_raw = float(feedback.learnability)
            if not math.isfinite(l_raw):
                self.counters["nonfinite_signals"] += 1
                l_raw = _NAN
        if math.isnan(l_raw):
            self.counters["missing_learnability"] += 1
            if empty and self._empty_zero:
                l_raw = 0.0                                 # empty_step=zero: the mean |A| of no variance
        l_norm = t_norm = _NAN
        cfg = self.cfg
        if not math.isnan(l_raw):
            self.l_count = window_push(self.l_window, self.l_count, l_raw)
            l_norm = minmax_normalise(l_raw, window_values(self.l_window, self.l_count), cfg.degenerate)
        if self._progress:
            l_norm = self._progress_learnability(arm, feedback, l_norm)
        if not math.isnan(t_raw):
            self.t_count = window_push(self.t_window, self.t_count, t_raw)
            t_norm = minmax_normalise(t_raw, window_values(self.t_window, self.t_count), cfg.degenerate)
        score = self._fuse(l_norm, t_norm, cfg.alpha)
        if empty and self._empty_zero:
            score -= cfg.empty_cost
        cost = feedback.cost
        if cost is not None and cfg.cost_weight > 0 and math.isfinite(cost):
            cost = float(cost)
            self.c_count = window_push(self.c_window, self.c_count, cost)
            c_norm = minmax_normalise(cost, window_values(self.c_window, self.c_count), cfg.degenerate)
            score = score / (1.0 + cfg.cost_weight * c_norm)
        self.last = {"arm": arm, "learnability": l_raw, "transfer": t_raw, "l_norm": l_norm,
                     "t_norm": t_norm, "score": score}
        return score

    def _progress_learnability(self, arm: int, feedback: Feedback, l_norm: float) -> float:
        """L~ under `learnability_source` and `noise_z` (beyond the paper). The step's success
        rate of the trained harness comes from `Feedback.generated` (all its generated groups,
        before filtering), else from `Feedback.reward` (rollout count unknown: no noise
        check); neither: progress is missing and L~ stays the advantage's."""
        cfg = self.cfg
        source = cfg.learnability_source
        rate, rollouts = _NAN, _NAN
        gen = feedback.generated
        if gen is not None:
            shape = gen.shape if type(gen) is np.ndarray else np.shape(gen)     # (the attribute: no call)
            if shape != (self.n_arms, 2):
                raise ValueError(f"feedback.generated has shape {shape}: expected ({self.n_arms}, 2)")
            count, total = gen[arm].tolist()               # one conversion: scalars cost more as numpy
            if count > 0:
                rollouts = float(count)
                rate = min(1.0, max(0.0, total / rollouts))
        elif feedback.reward is not None and math.isfinite(feedback.reward):
            rate = min(1.0, max(0.0, float(feedback.reward)))
        if rate != rate:                                   # NaN: no success measured this step
            return l_norm if source == "advantage" else _NAN
        fast, slow, progress = success_progress(self.fast[arm], self.slow[arm], rate, cfg.progress_fast,
                                                cfg.progress_slow, not self.measured[arm], self._increase)
        self.fast[arm], self.slow[arm], self.measured[arm] = fast, slow, True
        if source != "advantage":
            self.p_count = window_push(self.p_window, self.p_count, progress)
            p_norm = minmax_normalise(progress, window_values(self.p_window, self.p_count), cfg.degenerate)
            l_norm = p_norm if source == "progress" or l_norm != l_norm else 0.5 * (l_norm + p_norm)
        if cfg.noise_z > 0.0 and l_norm == l_norm:
            l_norm *= noise_weight(progress, slow, rollouts, cfg.noise_z)
        return l_norm

    def _learn(self, arm: int, score: float) -> None:
        """SPEC §3 step 5: Q <- S the first time, then the EMA. Index policies extend this."""
        if math.isnan(score):
            return
        if self.q_defined[arm]:
            decay = self.cfg.q_decay
            self.q[arm] = decay * self.q[arm] + (1.0 - decay) * score
        else:
            self.q[arm] = score
            self.q_defined[arm] = True

    def _transfer(self, arm: int, feedback: Feedback) -> float:
        sketch = feedback.update_sketch if self.cfg.transfer_source == "update" else feedback.sketch
        if sketch is not None:
            self.bank, sketch = bank_for(self.bank, self.n_arms, sketch)
        g_norm = sketch_norm(sketch) if sketch is not None else _NAN
        if sketch is not None and math.isnan(g_norm):
            self.counters["nonfinite_signals"] += 1
        if math.isnan(g_norm) or g_norm == 0.0:
            self.counters["missing_transfer"] += 1
            return _NAN
        eligible = None
        if self.cfg.max_memory_age is not None:
            # last_update holds (step index + 1) of each memory's update; the current step is t
            # age = global steps since the memory's last update, as in diagnostics()
            eligible = (self.t - self.bank.last_update) <= self.cfg.max_memory_age
        transfer, compared = transfer_and_update(self.bank, arm, sketch, self.cfg.eta, self.t + 1, eligible, g_norm)
        if math.isnan(transfer):
            self.counters["missing_transfer"] += 1
            if compared:
                self.counters["nonfinite_signals"] += 1       # the cosines overflowed
        return transfer

    # -- diagnostics and state -----------------------------------------------------------
    def diagnostics(self) -> dict:
        p, u = self._law()
        if self.bank is None:
            age = norm = np.full(self.n_arms, np.nan)
        else:
            age = np.where(self.bank.has, self.t - self.bank.last_update, np.nan).astype(float)
            norm = np.where(self.bank.has, self.bank.norm(), np.nan)
        return {"t": self.t, **self.last, "Q": np.where(self.q_defined, self.q, np.nan), "U": u,
                "n": self.n.copy(), "memory_norm": norm, "memory_age": age, "probabilities": p,
                **self.counters}

    _LISTS = ("l_window", "t_window", "c_window", "q", "q_defined")   # saved as arrays
    #: the learning-progress state (beyond the paper); a state saved before it existed loads as fresh
    _PROGRESS_LISTS = ("p_window", "fast", "slow", "measured")
    #: an index policy's own state arrays (`_reset_state` makes them), saved and loaded as copies
    _ARRAYS: tuple[str, ...] = ()

    def _extra_state(self) -> dict:
        state = {k: np.array(getattr(self, k)) for k in self._LISTS + self._PROGRESS_LISTS}
        state.update(p_count=self.p_count, l_count=self.l_count, t_count=self.t_count, c_count=self.c_count, counters=dict(self.counters),
                     last=dict(self.last), memory=None if self.bank is None else self.bank.state())
        state.update({k: getattr(self, k).copy() for k in self._ARRAYS})
        return state

    def _load_extra_state(self, state: dict) -> None:
        if np.shape(state["q"]) != (self.n_arms,) or np.shape(state["l_window"]) != (self.cfg.window,):
            raise ValueError("state_dict does not match this policy's n_arms or window")
        for k in self._LISTS:
            setattr(self, k, np.asarray(state[k]).tolist())
        if "p_window" in state:
            for k in self._PROGRESS_LISTS:
                setattr(self, k, np.asarray(state[k]).tolist())
            self.p_count = int(state["p_count"])
        self.l_count, self.t_count, self.c_count = int(state["l_count"]), int(state["t_count"]), int(state["c_count"])
        self.counters, self.last = dict(state["counters"]), dict(state["last"])
        self.bank = None if state["memory"] is None else MemoryBank.from_state(state["memory"])
        for k in self._ARRAYS:
            setattr(self, k, state[k].copy())
        self._law_cache = None


#: the variants with a fixed fusion read only the knobs their fusion reads
FIXED_FUSION_KNOBS = SCORED_KNOBS.without("fusion", "alpha")


class LearnabilityOnly(ScoredPolicy):
    name = "learnability"
    summary = "SPEC §3 with S = L~ only (T never computed)"
    fixed_fusion = "learnability"
    KNOBS = FIXED_FUSION_KNOBS.without("eta", "transfer_source", "max_memory_age")


class TransferOnly(ScoredPolicy):
    name = "transfer"
    summary = "SPEC §3 with S = T~ only (no Q update while T is missing)"
    fixed_fusion = "transfer"
    KNOBS = FIXED_FUSION_KNOBS


class ProductFusion(ScoredPolicy):
    name = "product"
    summary = "SPEC §3 with S = L~ * T~ (one present -> that one)"
    fixed_fusion = "product"
    KNOBS = FIXED_FUSION_KNOBS


class MinFusion(ScoredPolicy):
    name = "min"
    summary = "SPEC §3 with S = min(L~, T~) (one present -> that one)"
    fixed_fusion = "min"
    KNOBS = FIXED_FUSION_KNOBS
