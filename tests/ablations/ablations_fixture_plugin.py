"""A test-only policy registered through the grid's `plugins` hook.

`explode` behaves like `uniform` but raises in `update` at step `fail_step` when its
seed equals `fail_seed`: valid at plan time (validation builds it with seed 0), so only
the chosen cells fail while the grid runs. With `$EXPLODE_ERRNO` set in the environment
(not in the config, so the same cells resume without it) the failure is that OSError
instead (28: the disk is full, as a run's write would fail).
"""
import os

from policies import register
from policies.knobs import Knob, Knobs
from policies.simple import Uniform


class Explode(Uniform):
    name = "explode"
    summary = "uniform, but raises in update() for one seed (tests only)"
    KNOBS = Knobs({"fail_seed": Knob(-1, "the seed whose run fails (-1: none)"),
                   "fail_step": Knob(2, "the step it fails at")})

    def update(self, feedback):
        if self.seed == self.cfg.fail_seed and self.t == self.cfg.fail_step:
            code = int(os.environ.get("EXPLODE_ERRNO", "0"))
            if code:
                raise OSError(code, os.strerror(code))
            raise RuntimeError(f"planted failure at step {self.t} for seed {self.seed}")
        super().update(feedback)


register(Explode)
