"""A policy of your own (docs/EXTENDING.md): epsilon-greedy on each harness's moving average
of learnability. `hb --plugin my_policy ...` imports this module (its folder on PYTHONPATH),
which registers the class for every command and its worker processes."""
import numpy as np

from harnessbandit import Knob, Knobs, Policy, register


@register
class GreedyLearnability(Policy):
    name = "greedy_l"
    summary = "epsilon-greedy on each harness's moving-average learnability"
    KNOBS = Knobs({"epsilon": Knob(0.1, "share of the steps drawn uniformly", 0.0, 1.0),
                   "decay": Knob(0.9, "weight of the old average at a visit", 0.0, 1.0)})

    def __init__(self, n_arms: int, seed: int = 0, **knobs):
        super().__init__(n_arms, seed, **knobs)     # checks the knobs: self.cfg.epsilon, self.cfg.decay
        self.avg = np.ones(n_arms)                  # optimistic: every harness gets tried

    def probabilities(self) -> np.ndarray:          # (H,): the law of the next pure batch's harness
        p = np.full(self.n_arms, self.cfg.epsilon / self.n_arms)
        p[np.argmax(self.avg)] += 1.0 - self.cfg.epsilon
        return p

    def update(self, feedback) -> None:
        super().update(feedback)                    # counts the visit
        if feedback.arm is not None:                # a missing learnability (an empty step) counts as 0
            seen = feedback.learnability if np.isfinite(feedback.learnability or np.nan) else 0.0
            self.avg[feedback.arm] = self.cfg.decay * self.avg[feedback.arm] + (1 - self.cfg.decay) * seen

    def _extra_state(self) -> dict:                 # state_dict / load_state_dict round-trip it
        return {"avg": self.avg.copy()}

    def _load_extra_state(self, state: dict) -> None:
        self.avg = np.asarray(state["avg"], dtype=np.float64)
