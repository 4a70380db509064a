"""The fitted env kind `twin` (issue 30, `hb twin fit`): the scenario model
(hbsim/envs/scenario.py, same state, step, forgetting, trust region, interference and oracle)
with ONE value per harness where the scenario kind has one value per role.

Why a kind of its own: a scenario gives every harness of a role the same core reading and
bias (plus a seeded jitter), so six real harnesses of six difficulties cannot be written as
roles. A twin keeps the roles for what they say about a harness's STRUCTURE (`noise`: its
success does not move, `dead`: it never succeeds, `ordinary`: it learns) and takes the
values from three per-harness knobs:

    harness_bias     b_h, the logit offset (replaces the role's bias; the seeded jitter is kept)
    harness_read     read_h, how the harness reads (and its gradient writes) the shared core
    harness_ceiling  ceil_h, its success ceiling (a dead harness stays at 0)
    harness_names    the harnesses' names (the real run's), instead of the role names

each a comma string with one value per training harness ("" = the role's value). Everything
else is the scenario kind's knob table, so `hb sim --scenario TWIN.toml`, `hb stress` and
the oracle work on a twin as on any scenario file.
"""
from __future__ import annotations

import numpy as np

from hbsim.envs.base import Knob
from hbsim.envs.scenario import ROLES, ScenarioEnv
from hbsim.envs.costs import harness_floats, harness_values
from policies.errors import UserError
from policies.validate import comma_items

#: bounds of a per-harness value
VALUE_BOUND = 1000.0


def per_harness_values(name: str, value) -> str:
    """A `Knob.parse` for a per-harness value list: floats in [-1000, 1000], a list of them or
    their comma string ("" = the role's values); resolves to the canonical comma string."""
    floats = harness_floats(value, -VALUE_BOUND, VALUE_BOUND, scalar=False)
    if floats is None:
        raise UserError(f"{name}={value!r} is not allowed: expected {per_harness_values.allowed}")
    return ",".join(repr(float(x)) for x in floats)


per_harness_values.allowed = ('one number in [-1000, 1000] per training harness like "-1.5,0.3,2" '
                              '(or a list; "" = the roles\' values)')


def harness_names_string(name: str, value) -> str:
    """A `Knob.parse` for `harness_names`: distinct names of letters, digits, '_', '-', '.'."""
    items = comma_items(value, keep_empty=True) if isinstance(value, str) else value
    ok = isinstance(items, (list, tuple)) and all(
        isinstance(s, str) and s and all(c.isalnum() or c in "_-." for c in s) for s in items)
    if value == "":
        return ""
    if not ok or len(set(items)) != len(items):
        raise UserError(f"{name}={value!r} is not allowed: expected {harness_names_string.allowed}")
    return ",".join(items)


harness_names_string.allowed = 'distinct comma-separated names like "json,xml,shell" ("" = the role names)'


def _values(knobs: dict, name: str) -> np.ndarray | None:
    text = knobs[name]
    return np.array(harness_values(text)) if text else None


class TwinEnv(ScenarioEnv):
    kind = "twin"
    summary = "a fitted twin (hb twin fit): the scenario model with one bias, reading and ceiling per harness"
    KNOBS = ScenarioEnv.KNOBS | {
        "harness_bias": Knob("", "per-harness logit offset (replaces the role's bias)", parse=per_harness_values),
        "harness_read": Knob("", "per-harness core reading (replaces the role's)", parse=per_harness_values),
        "harness_ceiling": Knob("", "per-harness success ceiling in [0, 1] (replaces the role's)",
                                parse=per_harness_values),
        "harness_names": Knob("", "the harnesses' names, in order (\"\" = the role names)", parse=harness_names_string),
    }

    @classmethod
    def _check_knobs(cls, knobs: dict) -> None:
        super()._check_knobs(knobs)
        H = knobs["n_harnesses"]
        for name in ("harness_bias", "harness_read", "harness_ceiling", "harness_names"):
            n = len(comma_items(knobs[name])) if knobs[name] else H
            if n != H:
                raise UserError(f"env.{name}={knobs[name]!r} is not allowed: expected n_harnesses={H} values, got {n}")
        ceiling = _values(knobs, "harness_ceiling")
        if ceiling is not None and not ((ceiling >= 0) & (ceiling <= 1)).all():
            raise UserError(f"env.harness_ceiling={knobs['harness_ceiling']!r} is not allowed: expected values in [0, 1]")

    def _build(self, rng: np.random.Generator) -> None:
        super()._build(rng)                       # the same structure stream as the scenario kind
        k, H = self.knobs, self.H
        value = lambda v: float(k[v]) if isinstance(v, str) else float(v)   # noqa: E731
        role_bias = np.array([value(ROLES[r][1]) for r in self.roles])
        bias, read, ceiling = (_values(k, n) for n in ("harness_bias", "harness_read", "harness_ceiling"))
        if bias is not None:
            self.b[:H] += bias - role_bias        # the seeded jitter stays
        if read is not None:
            self.read = np.where(self.noisy, 0.0, read)
        if ceiling is not None:
            self.ceil[:H] = np.where(np.array(self.roles) == "dead", 0.0, ceiling)
        if k["harness_names"]:
            self.harnesses = comma_items(k["harness_names"])
        self._base = self.a[:, None] + self.b[None, :] + self.w[self.task_category]


__all__ = ["TwinEnv", "per_harness_values"]
