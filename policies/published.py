"""The published schedulers HarnessBandit is compared with: `sec`, `variance`, `tac`.

Each is a pure-batch policy behind the SPEC §5 interface (one harness per step, drawn from
`probabilities()` with the policy's own generator), with its rule, defaults and source in
its docstring and `hb policies`, and its departures from the source listed in `departures`.
The signal maths is `policies.signals` (transfer memories, cosines, the inverse-CDF draw);
none is copied here.

Sources used (read through their public abstracts and the issue's summary of the papers;
where a detail is not given there, the choice made is listed as a departure):
* SEC: Chen et al. 2025, "Self-Evolving Curriculum for LLM Reasoning", arXiv 2505.14970;
* success-variance learnability: LILO (Foster & Foerster 2025, "Learning to Reason at the
  Frontier of Learnability") and SFL (Rutherford et al. 2024, "No Regrets: Investigating and
  Improving Regret Approximations for Curriculum Discovery");
* TAC: Yang et al. 2026, "Transferability for General Reasoning: An Automated Curriculum
  for Multi-Domain RLVR", arXiv 2606.25178.
"""
from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from policies.base import Feedback, Policy
from policies.knobs import Knob, Knobs
from policies.signals import MemoryBank, bank_for, sketch_norm, transfer_and_update

_NAN = float("nan")


def boltzmann(q: np.ndarray, tau: float) -> np.ndarray:
    """softmax(q / tau), shifted by max(q) (no floor, no bonus)."""
    z = np.exp((q - q.max()) / tau)
    return z / z.sum()


def trained_arms(policy: Policy, feedback: Feedback) -> list[int]:
    """The harnesses a step trained on: its arm, or every harness with groups of a mixed
    batch (checked as `Policy._record` checks them, before any state changes)."""
    if feedback.arm is not None:
        return [policy._check_arm(feedback.arm)]
    if feedback.counts is None:
        raise ValueError("feedback.arm=None is only allowed with feedback.counts (a mixed batch)")
    counts = np.asarray(feedback.counts)
    if counts.shape != (policy.n_arms,):
        raise ValueError(f"feedback.counts has shape {counts.shape}: expected ({policy.n_arms},)")
    return np.flatnonzero(counts).tolist()


def raw_learnability(feedback: Feedback) -> tuple[float, bool]:
    """(L, finite?) of a step: a missing L (None: no group with reward variance was trained)
    is 0.0 -- the mean |A| of a batch without reward variance -- and a non-finite one is
    counted by the caller and also taken as 0.0."""
    if feedback.learnability is None:
        return 0.0, True
    value = float(feedback.learnability)
    return (value, True) if math.isfinite(value) else (0.0, False)


class SEC(Policy):
    """Self-Evolving Curriculum (Chen et al. 2025, arXiv 2505.14970): a non-stationary bandit
    over harnesses whose reward is the trained batch's mean absolute advantage.

    Rule: Q_h = 0 for every harness at the start; after a step on harness h with raw
    learnability L (SPEC §2.3, the mean |A| of the batch), Q_h <- lr * L + (1 - lr) * Q_h
    (TD(0)); the next harness is drawn from p = softmax(Q / tau). No exploration floor, count
    bonus or warm-up, as in the paper. `update = "all"` also moves every harness that was not
    trained towards r = 0 (Q_j <- (1 - lr) Q_j), the other public variant; `"observed"` (the
    default) updates only the trained harness. Defaults lr = 0.5, tau = 1.0 (the paper also
    uses tau = 0.4 and 0.2).
    """

    name = "sec"
    summary = "Self-Evolving Curriculum: Q <- lr*L + (1-lr)*Q on the trained arm, p = softmax(Q/tau)"
    source = "Chen et al. 2025, Self-Evolving Curriculum for LLM Reasoning, arXiv 2505.14970"
    departures = (
        "one harness per step: the paper (as read here) draws a category per problem of a batch and rewards each "
        "drawn category by its own problems' mean |A|; here a step trains one harness and its "
        "batch's L is the reward (a mixed batch, when forced, rewards each of its harnesses with it)",
        "L is over the groups kept by dynamic sampling (zero-variance groups are dropped before the "
        "step); a step that kept none has L = 0",
    )
    KNOBS = Knobs({
        "lr": Knob(0.5, "TD(0) step: Q <- lr * L + (1 - lr) * Q", 0.0, 1.0, low_open=True),
        "tau": Knob(1.0, "Boltzmann temperature: p = softmax(Q / tau)", 0.0, 1e9, low_open=True),
        "update": Knob("observed", "observed: only the trained arm moves; all: the others move towards 0",
                       choices=("observed", "all")),
    })

    def __init__(self, n_arms: int, seed: int = 0, **knobs):
        super().__init__(n_arms, seed, **knobs)
        self.q = np.zeros(self.n_arms)
        self.last = {"learnability": _NAN, "transfer": _NAN, "score": _NAN}
        self.counters = {"nonfinite_signals": 0, "missing_transfer": 0}

    def probabilities(self) -> np.ndarray:
        return boltzmann(self.q, self.cfg.tau)

    def _reward(self, arm: int | None, feedback: Feedback) -> float:
        """The bandit reward of the step: the raw L (a subclass adds its own terms)."""
        value, finite = raw_learnability(feedback)
        if not finite:
            self.counters["nonfinite_signals"] += 1
        self.last.update(learnability=value, score=value)
        return value

    def update(self, feedback: Feedback) -> None:
        arms = trained_arms(self, feedback)
        reward = self._reward(arms[0] if feedback.arm is not None else None, feedback)
        lr = self.cfg.lr
        if self.cfg.update == "all":
            others = np.ones(self.n_arms, dtype=bool)
            others[arms] = False
            self.q[others] *= 1.0 - lr
        for arm in arms:
            self.q[arm] = lr * reward + (1.0 - lr) * self.q[arm]
        self._record(feedback)

    def diagnostics(self) -> dict:
        return {**super().diagnostics(), **self.last, "Q": self.q.copy(), "U": self.q / self.cfg.tau,
                "missing_learnability": 0, **self.counters}

    def _extra_state(self) -> dict:
        return {"q": self.q.copy(), "last": dict(self.last), "counters": dict(self.counters)}

    def _load_extra_state(self, state: dict) -> None:
        if np.shape(state["q"]) != (self.n_arms,):
            raise ValueError("state_dict does not match this policy's n_arms")
        self.q = np.asarray(state["q"], dtype=np.float64).copy()
        self.last, self.counters = dict(state["last"]), dict(state["counters"])


class TAC(SEC):
    """Transfer-Aware Curriculum (Yang et al. 2026, arXiv 2606.25178): a bandit over harnesses
    (the paper's domains) whose reward adds to the advantage-based learnability of the trained
    harness its transferability, the alignment of its projected gradient (the SPEC §2.4
    sketch of the step being taken) with the other harnesses' gradients.

    Rule: the bandit of `sec` (Q = 0 at the start, Q_h <- lr * r + (1 - lr) * Q_h,
    p = softmax(Q / tau), no floor, bonus or warm-up) with r = L + transfer_weight * T:
    L the raw learnability (mean |A|), T the mean cosine of the step's gradient sketch with
    the transfer memories of the other harnesses (EMA of their unit sketches, rate `eta`:
    `policies.signals.transfer_and_update`, the HarnessBandit memories). T is taken before the
    trained harness's memory is updated; while no other memory exists (or the sketch is
    absent, zero or not finite) r = L.
    """

    name = "tac"
    summary = "Transfer-Aware Curriculum: sec's bandit on r = L + transfer_weight * T (sketch cosines)"
    source = ("Yang et al. 2026, Transferability for General Reasoning: An Automated Curriculum for "
              "Multi-Domain RLVR, arXiv 2606.25178")
    departures = (
        "only the abstract was available: the way L and T combine (a weighted sum of the raw "
        "values), the bandit update (sec's TD(0) and Boltzmann law) and the transfer estimate "
        "(mean cosine with EMA memories of the other harnesses' sketches) are choices made here",
        "one harness per step (pure batches); a forced mixed batch gets r = L and updates no memory",
        "L is over the groups kept by dynamic sampling; a step that kept none has L = 0",
    )
    KNOBS = SEC.KNOBS.without("update") | {
        "transfer_weight": Knob(1.0, "weight of T in the reward r = L + transfer_weight * T", 0.0, 1e9),
        "eta": Knob(0.3, "transfer memory EMA rate (HarnessBandit's eta)", 0.0, 1.0, low_open=True),
    }

    @classmethod
    def _record_table(cls) -> Knobs:
        """`cfg` also holds sec's `update` (at its default, observed: TAC updates the trained arm)."""
        return SEC.KNOBS | cls.KNOBS

    def __init__(self, n_arms: int, seed: int = 0, **knobs):
        super().__init__(n_arms, seed, **knobs)
        self.bank: MemoryBank | None = None

    def _reward(self, arm: int | None, feedback: Feedback) -> float:
        value = super()._reward(arm, feedback)
        transfer = self._transfer(arm, feedback.sketch) if arm is not None else _NAN
        if math.isnan(transfer):
            self.counters["missing_transfer"] += 1
            reward = value
        else:
            reward = value + self.cfg.transfer_weight * transfer
        self.last.update(transfer=transfer, score=reward)
        return reward

    def _transfer(self, arm: int, sketch) -> float:
        """T of the trained harness's sketch against the other memories, then its memory's update."""
        if sketch is None:
            return _NAN
        self.bank, sketch = bank_for(self.bank, self.n_arms, sketch)
        g_norm = sketch_norm(sketch)
        if not math.isfinite(g_norm):
            self.counters["nonfinite_signals"] += 1
            return _NAN
        return transfer_and_update(self.bank, arm, sketch, self.cfg.eta, self.t + 1, g_norm=g_norm)[0]

    def diagnostics(self) -> dict:
        diag = super().diagnostics()
        if self.bank is not None:
            diag["memory_norm"] = np.where(self.bank.has, self.bank.norm(), np.nan)
            diag["memory_age"] = np.where(self.bank.has, self.t - self.bank.last_update, np.nan).astype(float)
        return diag

    def _extra_state(self) -> dict:
        return {**super()._extra_state(), "memory": None if self.bank is None else self.bank.state()}

    def _load_extra_state(self, state: dict) -> None:
        super()._load_extra_state(state)
        self.bank = None if state["memory"] is None else MemoryBank.from_state(state["memory"])


class SuccessVariance(Policy):
    """Learnability by success variance (LILO, Foster & Foerster 2025; SFL, Rutherford et al.
    2024): a harness is worth training when its success rate p is near 1/2, scored
    p (1 - p), where p is measured on ALL the groups generated for it, before dynamic
    sampling drops the zero-variance ones -- so a harness whose groups all fail (or all
    succeed) scores 0, which L on retained groups cannot see.

    Estimator of the recent rate (`Feedback.generated`: rollouts and reward sum per harness):
    discounted counts, per harness and only on steps that generated rollouts for it,
    S_h <- memory * S_h + reward sum, N_h <- memory * N_h + rollouts, p_h = S_h / N_h
    clipped to [0, 1] (`memory` = 0: the last step alone). A harness never generated scores
    1/4, the largest value, so every harness is tried.
    Sampling rule (`rule`): "proportional" (default): P_h = (1 - epsilon) s_h / sum s +
    epsilon / H (uniform when every score is 0); "topk" (SFL's buffer of the most learnable):
    P = (1 - epsilon) uniform over the `top_k` highest scores (ties: lower index first) +
    epsilon / H.
    """

    name = "variance"
    summary = "success-variance learnability p(1-p) on all generated groups (LILO, SFL); rule proportional|topk"
    source = ("Foster & Foerster 2025, Learning to Reason at the Frontier of Learnability (LILO); "
              "Rutherford et al. 2024, No Regrets: Investigating and Improving Regret Approximations "
              "for Curriculum Discovery (SFL)")
    departures = (
        "scores harnesses, not single tasks/levels: p is a harness's recent success rate over its "
        "generated groups (discounted counts, knob memory), not one task's rate from fresh rollouts",
        "SFL keeps a buffer of the top levels and mixes in random ones; here rule=topk samples "
        "uniformly among the top_k harnesses with an epsilon / H floor",
        "rewards are read as success in [0, 1] (p clipped to [0, 1]); steps without "
        "Feedback.generated leave the estimates unchanged (counted as missing_learnability)",
    )
    KNOBS = Knobs({
        "memory": Knob(0.9, "discount of a harness's past counts per step that generated it", 0.0, 1.0,
                       high_open=True),
        "rule": Knob("proportional", "proportional to p(1-p), or uniform over the top_k", choices=("proportional",
                                                                                                   "topk")),
        "top_k": Knob(1, "harnesses in the top set of rule=topk", 1, 10**6),
        "epsilon": Knob(0.05, "uniform floor: P_h >= epsilon / H", 0.0, 1.0),
    })

    def __init__(self, n_arms: int, seed: int = 0, **knobs):
        super().__init__(n_arms, seed, **knobs)
        self.successes = np.zeros(self.n_arms)
        self.rollouts = np.zeros(self.n_arms)
        self.last = {"learnability": _NAN, "score": _NAN}
        self.missing = 0

    def rates(self) -> np.ndarray:
        """(H,) p_h (NaN where the harness was never generated)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.clip(np.where(self.rollouts > 0, self.successes / self.rollouts, np.nan), 0.0, 1.0)

    def scores(self) -> np.ndarray:
        p = self.rates()
        return np.where(np.isnan(p), 0.25, p * (1.0 - p))

    def probabilities(self) -> np.ndarray:
        s, h, eps = self.scores(), self.n_arms, self.cfg.epsilon
        if self.cfg.rule == "topk":
            top = np.argsort(-s, kind="stable")[: min(self.cfg.top_k, h)]
            law = np.zeros(h)
            law[top] = 1.0 / top.size
        else:
            law = s / s.sum() if s.sum() > 0 else np.full(h, 1.0 / h)
        return (1.0 - eps) * law + eps / h

    def update(self, feedback: Feedback) -> None:
        gen = feedback.generated
        if gen is None:
            self.missing += 1
        else:
            gen = np.asarray(gen, dtype=np.float64)
            if gen.shape != (self.n_arms, 2):
                raise ValueError(f"feedback.generated has shape {gen.shape}: expected ({self.n_arms}, 2)")
            seen = gen[:, 0] > 0
            m = self.cfg.memory
            self.rollouts[seen] = m * self.rollouts[seen] + gen[seen, 0]
            self.successes[seen] = m * self.successes[seen] + gen[seen, 1]
        arm = feedback.arm
        self.last = {"learnability": _NAN if feedback.learnability is None else float(feedback.learnability),
                     "score": float(self.scores()[arm]) if arm is not None else _NAN}
        self._record(feedback)

    def diagnostics(self) -> dict:
        return {**super().diagnostics(), **self.last, "Q": self.scores(), "U": self.rates(),
                "missing_learnability": self.missing}

    def _extra_state(self) -> dict:
        return {"successes": self.successes.copy(), "rollouts": self.rollouts.copy(), "last": dict(self.last),
                "missing": self.missing}

    def _load_extra_state(self, state: dict) -> None:
        if np.shape(state["rollouts"]) != (self.n_arms,):
            raise ValueError("state_dict does not match this policy's n_arms")
        self.successes = np.asarray(state["successes"], dtype=np.float64).copy()
        self.rollouts = np.asarray(state["rollouts"], dtype=np.float64).copy()
        self.last, self.missing = dict(state["last"]), int(state["missing"])


def _document(cls: type[Policy]) -> None:
    """Append the source and the departures to the class docstring (`help(...)`)."""
    lines = [f"    Source: {cls.source}", "    Departures:"] + [f"    - {d}" for d in cls.departures]
    cls.__doc__ = (cls.__doc__ or "").rstrip() + "\n\n" + "\n".join(lines) + "\n"


PUBLISHED: tuple[type[Policy], ...] = (SEC, SuccessVariance, TAC)
for _cls in PUBLISHED:
    _document(_cls)
