"""A test-only policy registered through the grid's `plugins` hook.

`explode` behaves like `uniform` but raises in `update` at step `fail_step` when its
seed equals `fail_seed`: valid at plan time (validation builds it with seed 0), so only
the chosen cells fail while the grid runs.
"""
from dataclasses import dataclass

from policies import POLICIES
from policies.simple import Uniform


@dataclass(frozen=True)
class ExplodeConfig:
    fail_seed: int = -1
    fail_step: int = 2


class Explode(Uniform):
    name = "explode"
    summary = "uniform, but raises in update() for one seed (tests only)"
    Config = ExplodeConfig

    def __init__(self, n_arms, seed=0, **knobs):
        super().__init__(n_arms, seed)
        cfg = self.make_config(knobs)
        self.fail_seed, self.fail_step = int(cfg.fail_seed), int(cfg.fail_step)

    def config(self):
        return {**super().config(), "fail_seed": self.fail_seed, "fail_step": self.fail_step}

    def update(self, feedback):
        if self.seed == self.fail_seed and self.t == self.fail_step:
            raise RuntimeError(f"planted failure at step {self.t} for seed {self.seed}")
        super().update(feedback)


POLICIES.setdefault(Explode.name, Explode)
