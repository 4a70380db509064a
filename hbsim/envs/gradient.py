"""The base of the gradient-based synthetic environments (drifting, student): a parameter
vector moved by an optimizer (`hbsim.grpo.Optimizer`), the expected step shared by the
oracle and the ground truth, the optimizer knobs, the list knobs (harness indices, steps)
and the fixed sketch coordinates. The GRPO maths itself lives in `hbsim.grpo`."""
from __future__ import annotations

import numpy as np

from hbsim import grpo
from hbsim.envs.base import SyntheticEnv
from policies.errors import UserError
from policies.knobs import Knob


class GradientEnv(SyntheticEnv):
    """A parameter vector `theta` moved by the optimizer `self.opt`: the subclass writes
    `true_gradients()` (H+1, D), the expected policy gradient per retained group of each
    harness, and `_logits(thetas (D, K), tasks=slice(None))` -> (n, H+1, K) (rows `tasks` of the
    success matrix); the expected steps are shared."""

    def set_lr_scale(self, scale: float) -> None:
        super().set_lr_scale(scale)
        self.opt.lr = self.knobs["lr"] * self.lr_scale

    @classmethod
    def _check_knobs(cls, knobs: dict) -> None:
        if knobs["bias_low"] > knobs["bias_high"]:
            raise UserError(f"env.bias_low={knobs['bias_low']} is not allowed: expected <= "
                            f"bias_high={knobs['bias_high']}")

    def _expected_step(self, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(thetas (D, K), moved (K,)): theta after the expected (noise-free) step of each
        candidate allocation (K, H) -- the mixed true gradient through the optimizer from
        the current state -- and whether that step moves theta at all."""
        cand = np.asarray(candidates, dtype=np.float64)
        frac = cand / cand.sum(axis=1, keepdims=True)
        success = self.success_matrix()
        cache = getattr(self, "_gradient_cache", None)
        if cache is None or cache[0] is not success:     # once per state (the step's oracle and the policy's)
            self._gradient_cache = cache = (success, self.true_gradients()[: self.H])
        grad = -(frac @ cache[1])                                                    # (K, D)
        thetas = np.ascontiguousarray((self.theta + self.opt.peek(grad)).T)          # (D, K); C order keeps BLAS fast
        return thetas, np.any(grad != 0.0, axis=1)

    def expected_success(self, candidates: np.ndarray, tasks: slice = slice(None)) -> np.ndarray:
        """(K, n, H+1) true success matrix (rows `tasks`) after the expected step of each
        candidate allocation (K, H) from the current state (drift left out); the state is not
        changed."""
        from scipy.special import expit     # imported here: the bernoulli env needs no scipy

        thetas, moved = self._expected_step(candidates)
        p_new = expit(self._logits(thetas, tasks)).transpose(2, 0, 1)                # (K, n, H+1)
        return np.where(moved[:, None, None], p_new, self.success_matrix()[tasks][None])

    def true_directions(self) -> np.ndarray:
        """(H+1, D) true expected loss-gradient direction of a pure step per harness (the
        held-out harness last): what the gradient sketch estimates without noise."""
        return -self.true_gradients()


def optimizer_knobs(lr: float) -> dict[str, Knob]:
    """The optimizer knobs of an environment whose default learning rate is `lr`."""
    return {
        "optimizer": Knob("adam", "preconditioning of the update", choices=grpo.OPTIMIZERS),
        "lr": Knob(lr, "learning rate (Adam moves every coordinate ~lr per step; plain SGD "
                       "needs a ~30x larger lr for a similar pace)", 1e-12, 100.0),
        "beta1": Knob(0.9, "Adam first-moment decay (0 = the update uses the current gradient only)", 0.0, 0.999999),
        "beta2": Knob(0.999, "Adam second-moment decay", 0.0, 0.999999),
        "eps": Knob(1e-8, "Adam epsilon", 1e-30, 1.0),
        "sketch_dim": Knob(64, "d: sketch coordinates (a fixed uniform subset; all when d >= dim)", 1, 10**7),
    }


def sketch_coordinates(rng: np.random.Generator, dim: int, d: int) -> np.ndarray:
    """Fixed sketch coordinates: all of 0..dim-1 when d >= dim, else d drawn without
    replacement, sorted."""
    if d >= dim:
        return np.arange(dim)
    return np.sort(rng.choice(dim, size=d, replace=False))
