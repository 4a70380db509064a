"""Shared types of the policy interface (SPEC §5): `Feedback`, `Allocation`, `Policy`.

Every scheduling policy is a small stateful object with a validated configuration, its
learned state in plain numpy arrays, and the six methods of SPEC §5. Its knobs and their
defaults live in ONE place, the policy's frozen `Config` dataclass (`knobs()`, `build`,
`hb policies` and grid validation read it); the constructor validates the values. A policy never
touches global random state: each owns a `numpy.random.Generator` seeded at
construction, and its state (the generator included) round-trips through
`state_dict()` / `load_state_dict()` exactly.
"""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from policies.signals import inverse_cdf_draw
from policies.errors import UserError


@dataclass(frozen=True)
class Allocation:
    """How the next optimizer batch is split over harnesses.

    counts: (H,) int, groups drawn from each harness; sums to the batch size.
    """

    counts: np.ndarray

    @property
    def arm(self) -> int | None:
        """The harness of a pure batch; None when more than one harness has groups."""
        nonzero = np.flatnonzero(self.counts)
        return int(nonzero[0]) if nonzero.size == 1 else None

    @property
    def is_pure(self) -> bool:
        return self.arm is not None

    @classmethod
    def pure(cls, arm: int, n_arms: int, batch_groups: int) -> "Allocation":
        counts = np.zeros(n_arms, dtype=np.int64)
        counts[arm] = batch_groups
        return cls(counts)


@dataclass(frozen=True)
class Feedback:
    """What a policy observes after one optimizer step.

    arm: the harness of the step (None for a mixed batch; then `counts` says the split).
    learnability: raw L_h (SPEC §2.3); None or non-finite means missing.
    sketch: (d,) raw gradient sketch (SPEC §2.4); None means absent.
    update_sketch: (d,) sketch of the optimizer update on the same coordinates, or None.
    reward: mean reward of the step's batch, or None.
    cost: a scalar cost of the step (e.g. groups generated per optimized group), or None.
    counts: (H,) groups per harness of a mixed batch, or None.
    """

    arm: int | None
    learnability: float | None = None
    sketch: np.ndarray | None = None
    update_sketch: np.ndarray | None = None
    reward: float | None = None
    cost: float | None = None
    counts: np.ndarray | None = None


def check_range(name: str, value: Any, low: float, high: float, *, low_open: bool = False,
                high_open: bool = False, integer: bool = False) -> None:
    """Raise ValueError naming the argument, the value and the allowed range."""
    if integer:
        ok_type = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    else:
        ok_type = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    lo_b, hi_b = ("(" if low_open else "["), (")" if high_open else "]")
    allowed = f"{'an integer' if integer else 'a number'} in {lo_b}{low}, {high}{hi_b}"
    if not ok_type or not np.isfinite(value):
        raise UserError(f"{name}={value!r} is not allowed: expected {allowed}")
    too_low = value <= low if low_open else value < low
    too_high = value >= high if high_open else value > high
    if too_low or too_high:
        raise UserError(f"{name}={value!r} is out of range: expected {allowed}")


@dataclass(frozen=True)
class NoKnobs:
    """The `Config` of a policy without knobs."""


def knob_config(name: str, base: type, drop: tuple[str, ...] = ()) -> type:
    """A frozen dataclass `name` with the fields (and defaults) of `base` minus `drop`, in
    order: the `Config` of a variant that lacks some of its family's knobs. Subclass it
    (`@dataclass(frozen=True)`) to add knobs after them."""
    unknown = sorted(set(drop) - {f.name for f in dataclasses.fields(base)})
    if unknown:
        raise ValueError(f"knob_config: {base.__name__} has no field {unknown[0]!r}")
    spec = [(f.name, f.type, dataclasses.field(default=f.default))
            for f in dataclasses.fields(base) if f.name not in drop]
    return dataclasses.make_dataclass(name, spec, frozen=True)


class Policy:
    """Base class: `Config` (a frozen dataclass) names the knobs and their defaults; config
    attributes are set by the constructor; learned state lives in plain arrays (per-arm
    visits and step count here, the rest in subclasses, saved through `_extra_state`),
    randomness in the policy's own `self._rng`."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    mixed: ClassVar[bool] = False
    Config: ClassVar[type] = NoKnobs

    def __init__(self, n_arms: int, seed: int = 0):
        check_range("n_arms", n_arms, 1, 10**6, integer=True)
        check_range("seed", seed, 0, 2**63 - 1, integer=True)
        self.n_arms = int(n_arms)
        self.seed = int(seed)
        self._rng = np.random.default_rng(self.seed)
        self.t = 0
        self._visits = np.zeros(self.n_arms, dtype=np.int64)   # steps with groups on each arm
        self._last_arm = -1

    # -- the interface -------------------------------------------------------------
    def probabilities(self) -> np.ndarray:
        raise NotImplementedError

    def select(self, batch_groups: int = 8) -> Allocation:
        if type(batch_groups) is not int or not 1 <= batch_groups <= 10**9:   # the common case costs no call
            check_range("batch_groups", batch_groups, 1, 10**9, integer=True)
        return Allocation.pure(self._draw(), self.n_arms, batch_groups)

    def _draw(self) -> int:
        """One draw from `probabilities()` with the policy's generator (inverse CDF); a
        one-hot law (warm-up, round-robin) consumes no randomness."""
        p = self.probabilities()
        top = int(np.argmax(p))
        if p[top] == 1.0:
            return top
        return inverse_cdf_draw(p, self._rng.random())

    @classmethod
    def knobs(cls) -> dict:
        """Default values of the knobs (beyond n_arms and seed): the fields of `Config`."""
        return {f.name: f.default for f in dataclasses.fields(cls.Config)}

    @classmethod
    def make_config(cls, knobs: dict):
        """`Config(**knobs)`; an unknown knob raises ValueError naming the valid ones."""
        unknown = sorted(set(knobs) - set(cls.knobs()))
        if unknown:
            valid = ", ".join(cls.knobs()) or "none"
            raise UserError(f"policy {cls.name!r} has no knob {unknown[0]!r}; valid knobs: {valid}")
        return cls.Config(**knobs)

    @classmethod
    def build(cls, n_arms: int, seed: int = 0, **knobs) -> "Policy":
        cls.make_config(knobs)
        return cls(n_arms, seed, **knobs)

    def _record(self, feedback: "Feedback") -> None:
        """Count a visit for a pure arm, or for every harness of a mixed batch."""
        if feedback.arm is not None:
            self._last_arm = self._check_arm(feedback.arm)
            self._visits[self._last_arm] += 1
        elif feedback.counts is not None:
            counts = np.asarray(feedback.counts)
            if counts.shape != (self.n_arms,):
                raise ValueError(f"feedback.counts has shape {counts.shape}: expected ({self.n_arms},)")
            self._visits += counts > 0
            self._last_arm = -1
        else:
            raise ValueError("feedback.arm=None is only allowed with feedback.counts (a mixed batch)")
        self.t += 1

    def update(self, feedback: Feedback) -> None:
        raise NotImplementedError

    def diagnostics(self) -> dict:
        raise NotImplementedError

    def config(self) -> dict:
        """The resolved constructor arguments (knobs) of this policy."""
        return {"n_arms": self.n_arms, "seed": self.seed}

    def state_dict(self) -> dict:
        return {"name": self.name, "n_arms": self.n_arms, "config": self.config(), "t": self.t,
                "rng": copy.deepcopy(self._rng.bit_generator.state), "visits": self._visits.copy(),
                "last_arm": self._last_arm, "state": copy.deepcopy(self._extra_state())}

    def load_state_dict(self, d: dict) -> None:
        if d.get("name") != self.name:
            raise ValueError(f"state_dict name={d.get('name')!r} does not match policy {self.name!r}")
        if int(d.get("n_arms", self.n_arms)) != self.n_arms:
            raise ValueError(f"state_dict n_arms={d.get('n_arms')!r} does not match this policy's n_arms={self.n_arms}")
        mine, theirs = self.config(), d.get("config", {})
        for key in sorted(set(mine) | set(theirs)):
            if key != "seed" and mine.get(key) != theirs.get(key):
                raise ValueError(f"state_dict config {key}={theirs.get(key)!r} does not match this policy's "
                                 f"{key}={mine.get(key)!r}; build the policy with the same knobs")
        self.t = int(d["t"])
        self._visits = np.asarray(d["visits"]).copy()
        self._last_arm = int(d["last_arm"])
        self._rng.bit_generator.state = copy.deepcopy(d["rng"])
        self._load_extra_state(copy.deepcopy(d["state"]))

    def _extra_state(self) -> dict:
        return {}

    def _load_extra_state(self, state: dict) -> None:
        pass

    def _check_arm(self, arm: Any) -> int:
        if type(arm) is int and 0 <= arm < self.n_arms:      # the common case costs no isinstance calls
            return arm
        if not isinstance(arm, (int, np.integer)) or isinstance(arm, bool) or not 0 <= arm < self.n_arms:
            raise ValueError(f"feedback.arm={arm!r} is not allowed: expected an integer in [0, {self.n_arms - 1}]")
        return int(arm)
