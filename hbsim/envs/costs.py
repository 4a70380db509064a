"""The fair-comparison knobs of every synthetic env (`hbsim.envs.base.COMMON_KNOBS`): the
cost ledger's per-harness tokens and simulated tool seconds per generated group and
simulated rollout seconds per token (they fill the ledger's `tokens` and `cost_seconds`
columns: the `eval_budget` units `tokens` and `seconds`), and the validation split
(`n_validation_tasks`, a grid's [tune] target). All default to 0, so tables without them are
unchanged, and a run config records them only when set (`hbsim.sampling.when_set`), so its
hash does not move either.
"""
from __future__ import annotations

import numpy as np

from hbsim.sampling import WHEN_SET
from policies.errors import UserError
from policies.knobs import Knob
from policies.validate import comma_items


def harness_floats(value, low: float, high: float, scalar: bool) -> list[float] | None:
    """The one parse of a per-harness number list knob: its comma string ("" = none), a list
    of numbers or (`scalar`) one number -> the floats, each finite in [low, high]; None when
    the value is none of these (the caller names the knob and what is allowed)."""
    try:
        items = (comma_items(value) if isinstance(value, str)
                 else list(value) if isinstance(value, (list, tuple)) else [value] if scalar else None)
        if items is None or any(isinstance(x, bool) for x in items):
            raise TypeError
        floats = [float(x) for x in items]
    except (TypeError, ValueError):
        return None
    return floats if all(np.isfinite(x) and low <= x <= high for x in floats) else None


def harness_values(text: str) -> list[float]:
    """A canonical per-harness list (a resolved knob's comma string) as its floats ("" -> [])."""
    return [float(x) for x in comma_items(text)]


def per_harness_floats(name: str, value) -> str:
    """A `Knob.parse` for a per-harness cost: a number >= 0 (every harness), a list of them
    (one per training harness, in harness order) or their comma string ("" = none, i.e. 0);
    resolves to the canonical comma string (order kept) so configs stay flat scalars."""
    floats = harness_floats(value, 0.0, 1e12, scalar=True)
    if floats is None:
        raise UserError(f"{name}={value!r} is not allowed: expected {per_harness_floats.allowed}")
    return ",".join(repr(x) if x != int(x) else str(int(x)) for x in floats)


per_harness_floats.allowed = ('a number in [0, 1e12] for every harness, or one per training harness like '
                              '"100,400,800" (or [100, 400, 800]; "" = 0)')


def harness_costs(knobs: dict, name: str) -> np.ndarray:
    """(H,) per-harness values of a `per_harness_floats` knob (a single value: every harness)."""
    text, H = knobs[name], knobs["n_harnesses"]
    values = harness_values(text) or [0.0]
    if len(values) not in (1, H):
        raise UserError(f"env.{name}={text!r} is not allowed: expected one value or n_harnesses={H} values")
    return np.array(values * H if len(values) == 1 else values, dtype=np.float64)


COST_KNOBS = {
    "group_tokens": Knob("", "tokens per generated group, per harness (the `tokens` ledger column; \"\" = 0)",
                         parse=per_harness_floats),
    "group_tool_seconds": Knob("", "simulated tool seconds per generated group, per harness (in `cost_seconds`)",
                               parse=per_harness_floats),
    "token_seconds": Knob(0.0, "simulated rollout seconds per generated token (in `cost_seconds`)", 0.0, 1e6),
}
#: the validation split (hbsim.envs.base: the last N training rows, suite `validation`)
VALIDATION_KNOBS = {
    "n_validation_tasks": Knob(0, "the last N of the n_tasks training tasks, never trained on, evaluated as suite "
                                  "'validation' (a grid's [tune] target; no report reads it; 0 = none)", 0, 100_000),
}
WHEN_SET.update(COST_KNOBS)
WHEN_SET.update(VALIDATION_KNOBS)
