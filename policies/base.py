"""Shared types of the policy interface (SPEC §5): `Feedback`, `Allocation`, `Policy`.

Every scheduling policy is a small stateful object with a validated configuration, its
learned state in plain numpy arrays, and the six methods of SPEC §5. Its knobs live in ONE
place, the class's `KNOBS` table (`policies.knobs.Knobs`: default, doc, what is allowed);
`knobs()`, `config()`, `hb policies`, `--set` and grid validation read it, and the
constructor resolves it once into `self.cfg` (a frozen record). A variant's table is its
family's `without(...)` / `with_defaults(...)` / `| {...}`, never a copied class. A policy never
touches global random state: each owns a `numpy.random.Generator` seeded at
construction, and its state (the generator included) round-trips through
`state_dict()` / `load_state_dict()` exactly.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from policies.knobs import Knob, Knobs
from policies.signals import inverse_cdf_draw
from policies.errors import UserError
from policies.validate import MAX_BATCH_GROUPS, check_int

#: groups per optimizer step: the one definition of its default and bounds (the run
#: config's `batch_groups`, hbsim.run_knobs.RUN_KNOBS, is this knob)
BATCH_GROUPS = Knob(8, "groups per optimizer step", 1, MAX_BATCH_GROUPS)
#: the learning-rate multiplier of a design's optimizer steps: a knob of EVERY policy (added to
#: each table, so a grid's [[policies]] table, a `policy.lr_scale` sweep and `--set` set it per
#: design), applied by the adapter (`set_lr_scale`, hbsim/adapter.py); `config()` leaves it out
#: at its default, so configs hash as before it existed (docs/ARCHITECTURE.md "lr_scale")
LR_SCALE = Knob(1.0, "learning-rate multiplier of this design's optimizer steps (applied by the env or "
                     "trainer; 1 = the env's lr)", 0.05, 20.0)


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
    generated: (H, 2) per harness [rollouts, reward sum] of ALL groups generated this step,
        before dynamic-sampling filtering (success-variance schedulers see dead harnesses
        through it), or None.
    """

    arm: int | None
    learnability: float | None = None
    sketch: np.ndarray | None = None
    update_sketch: np.ndarray | None = None
    reward: float | None = None
    cost: float | None = None
    counts: np.ndarray | None = None
    generated: np.ndarray | None = None


def checked_batch_groups(batch_groups) -> int:
    """`batch_groups` checked against BATCH_GROUPS (a plain int in range costs no knob call:
    `select` runs every step)."""
    if type(batch_groups) is int and BATCH_GROUPS.low <= batch_groups <= BATCH_GROUPS.high:
        return batch_groups
    return BATCH_GROUPS.check("batch_groups", batch_groups)

#: how far a policy's probabilities may sum from 1 (float rounding of a softmax is ~1e-15)
PROBABILITY_TOLERANCE = 1e-6


def checked_probabilities(policy: "Policy") -> np.ndarray:
    """`policy.probabilities()` as float64, checked at every draw (a user's policy class is
    trusted with its name only): `n_arms` finite numbers >= 0 summing to 1 (within
    PROBABILITY_TOLERANCE), else UserError naming the policy, its class, the step and the values."""
    raw = policy.probabilities()
    try:
        p = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError):
        p = None
    ok = (p is not None and p.shape == (policy.n_arms,) and bool(np.isfinite(p).all()) and bool((p >= 0).all())
          and abs(float(p.sum()) - 1.0) <= PROBABILITY_TOLERANCE)
    if not ok:
        cls = type(policy)
        shown = np.array2string(p, precision=4, threshold=8) if p is not None else repr(raw)[:80]
        raise UserError(f"policy {policy.name!r} ({cls.__module__}.{cls.__qualname__}): probabilities() returned "
                        f"{shown} at step {policy.t + 1}; allowed: {policy.n_arms} finite numbers >= 0 summing to 1")
    return p


class Policy:
    """Base class (module docstring): per-arm visits and the step count live here, a
    subclass's learned state is saved through `_extra_state`."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    mixed: ClassVar[bool] = False
    #: a clairvoyant reference (policies.clairvoyant): "" for a learning design, else the
    #: one-line mark `hb policies` shows
    reference: ClassVar[str] = ""
    #: reads the environment's ground truth: the loop hands it `attach_ground_truth(fn)`
    #: (the adapter's optional `target_gains`) and refuses adapters without one
    needs_ground_truth: ClassVar[bool] = False
    #: a published method's citation and its departures from the source (`hb policies` prints them)
    source: ClassVar[str] = ""
    departures: ClassVar[tuple[str, ...]] = ()
    KNOBS: ClassVar[Knobs] = Knobs(scope="policy")
    _RECORD: ClassVar[Knobs] = KNOBS
    #: knobs added after results were recorded: `config()` leaves each out while it holds this
    #: default, so earlier configs (and their hashes) stay as they were (like `lr_scale`)
    QUIET_DEFAULTS: ClassVar[dict] = {}

    def __init_subclass__(cls, **kwargs):
        """Every policy's table is named after it (`policy 'ucb1' has no knob ...`), its
        docstring lists the knobs, and `_RECORD` is the table `self.cfg` is a record of."""
        super().__init_subclass__(**kwargs)
        table = cls.KNOBS if "lr_scale" in cls.KNOBS else cls.KNOBS | {"lr_scale": LR_SCALE}
        cls.KNOBS = table.named(owner=f"policy {cls.name!r}", scope="policy")
        if cls.__doc__ and cls.KNOBS:
            cls.__doc__ = cls.KNOBS.docstring(cls.__doc__)
        cls._RECORD = cls._record_table()

    @classmethod
    def _record_table(cls) -> Knobs:
        """The table of `self.cfg`: KNOBS (a family whose variants drop knobs overrides it)."""
        return cls.KNOBS

    def __init__(self, n_arms: int, seed: int = 0, **knobs):
        self.n_arms = check_int("n_arms", n_arms, 1, 10**6)
        self.seed = check_int("seed", seed, 0, 2**63 - 1)
        self._knobs = self.KNOBS.resolve(knobs)          # this policy's knobs, resolved: its config()
        self.cfg = self._RECORD.record(self._knobs)
        self.lr_scale = float(self._knobs["lr_scale"])
        self._rng = np.random.default_rng(self.seed)
        self.t = 0
        self._visits = np.zeros(self.n_arms, dtype=np.int64)   # steps with groups on each arm
        self._last_arm = -1

    # -- the interface -------------------------------------------------------------
    def probabilities(self) -> np.ndarray:
        raise NotImplementedError

    def warmup_steps(self) -> int:
        """Steps of the deterministic round-robin warm-up before the policy's own law (0: none;
        `ScoredPolicy`: warmup_rounds x harnesses). A run of at most this many steps is round
        robin throughout (`hbsim.experiment.warmup_line` says so as the runs start)."""
        return 0

    def select(self, batch_groups: int = BATCH_GROUPS.default) -> Allocation:
        return Allocation.pure(self._draw(), self.n_arms, checked_batch_groups(batch_groups))

    def _draw(self) -> int:
        """One draw from `probabilities()` with the policy's generator (inverse CDF); a
        one-hot law (warm-up, round-robin) consumes no randomness."""
        p = checked_probabilities(self)
        top = int(np.argmax(p))
        if p[top] == 1.0:
            return top
        return inverse_cdf_draw(p, self._rng.random())

    @classmethod
    def knobs(cls) -> dict:
        """Default values of the knobs (beyond n_arms and seed), from `KNOBS`."""
        return cls.KNOBS.defaults()

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
        """A policy without learned scores only counts the visit (a learning policy overrides it)."""
        self._record(feedback)

    def diagnostics(self) -> dict:
        """The diagnostics keys of docs/ARCHITECTURE.md; NaN scores for a policy without learned ones."""
        nan, h = float("nan"), self.n_arms
        return {"t": self.t, "arm": self._last_arm, "learnability": nan, "transfer": nan, "l_norm": nan, "t_norm": nan,
                "score": nan, "Q": np.full(h, nan), "U": np.full(h, nan), "n": self._visits.copy(),
                "memory_norm": np.full(h, nan), "memory_age": np.full(h, nan),
                "probabilities": self.probabilities(), "missing_learnability": 0, "missing_transfer": 0,
                "nonfinite_signals": 0}

    def config(self) -> dict:
        """The resolved constructor arguments of this policy: n_arms, seed and its knobs
        (`lr_scale` only where it is not 1: see LR_SCALE; likewise QUIET_DEFAULTS)."""
        quiet = {"lr_scale": LR_SCALE.default, **self.QUIET_DEFAULTS}
        knobs = {k: v for k, v in self._knobs.items() if k not in quiet or v != quiet[k]}
        return {"n_arms": self.n_arms, "seed": self.seed, **copy.deepcopy(knobs)}

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
