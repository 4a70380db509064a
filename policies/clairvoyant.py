"""Clairvoyant references (not designs): `oracle` and `fixed`.

They bound what a scheduler can achieve; `hb policies` marks them (`Policy.reference`).

* `oracle` NEEDS THE ENVIRONMENT'S GROUND TRUTH (`needs_ground_truth = True`): every step it
  takes, among the candidate allocations -- the B-group pure batch on each harness, and with
  `with_mixed` the all-harness mixed batch (split as `mixed` splits it) -- the one with the
  largest EXACT expected one-step gain of its `target` (greedy, one step ahead; ties: the
  lowest candidate, the mixed batch last). The gains come from a callable the loop hands it
  (`attach_ground_truth`): the adapter's optional `target_gains(candidates (C, H) int counts,
  target) -> (C,)` (hbsim/adapter.py). Synthetic envs have it; a real run has no ground
  truth, so the loop (and `hb real`) refuses an oracle run before any work, with one line.
  Targets (TARGETS): `train` (mean true success, training tasks x training harnesses: the
  objective of the train table's `oracle_arm`/`regret`), `heldout_tasks` (held-out tasks x
  training harnesses) and `heldout_harness` (held-out tasks on the held-out harness): the
  expected mean reward of the eval suite of that name. The choice is made once per step
  (cached on t and the batch size), so `probabilities()` (one-hot on the choice, or the
  mixed batch's fractions) and `select()` agree; `diagnostics()["Q"]` are the pure
  candidates' expected gains of that step. No randomness is used.
* `fixed` trains harness `arm` every step; it needs no ground truth. One run per arm gives
  the best fixed arm, one arm for all seeds (`reports.readings.references.best_fixed`).

numpy only; the ground truth arrives as a plain callable (no import of an env).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from policies.base import BATCH_GROUPS, Allocation, Policy, checked_batch_groups
from policies.knobs import Knob, Knobs
from policies.mixed import even_split
from policies.validate import check_int

#: the oracle's targets: the training objective, then the two eval suites (hbsim.envs.base.SUITES)
TARGETS = ("train", "heldout_tasks", "heldout_harness")

#: what the oracle is handed: (candidates (C, H) int counts, target) -> (C,) expected gains
GroundTruth = Callable[[np.ndarray, str], np.ndarray]


class Oracle(Policy):
    name = "oracle"
    summary = "CLAIRVOYANT reference: greedy one-step on the env's exact expected gain of `target`"
    reference = "clairvoyant: needs the environment's ground truth (synthetic envs only; a real run refuses it)"
    needs_ground_truth = True
    KNOBS = Knobs({
        "target": Knob("train", "what the expected gain is measured on (train: the training objective; "
                                "heldout_tasks / heldout_harness: the eval suite of that name)", choices=TARGETS),
        "with_mixed": Knob(False, "also consider the all-harness mixed batch (split as `mixed` splits it)"),
    })

    def __init__(self, n_arms: int, seed: int = 0, **knobs):
        super().__init__(n_arms, seed, **knobs)
        self._ground_truth: GroundTruth | None = None
        self._batch_groups = BATCH_GROUPS.default
        self._choice: tuple | None = None        # ((t, batch_groups), counts, pure gains)

    def attach_ground_truth(self, gains: GroundTruth) -> None:
        """The loop hands the adapter's `target_gains` here before the first step."""
        if not callable(gains):
            raise TypeError(f"policy 'oracle': ground truth {gains!r} is not callable")
        self._ground_truth = gains

    def candidates(self, batch_groups: int) -> np.ndarray:
        """(C, H) int counts: the pure batch on each harness, then (with_mixed) the mixed batch."""
        rows = np.eye(self.n_arms, dtype=np.int64) * batch_groups
        if self.cfg.with_mixed and self.n_arms > 1:
            rows = np.vstack([rows, even_split(list(range(self.n_arms)), self.n_arms, batch_groups, self.t)])
        return rows

    def _choose(self, batch_groups: int) -> np.ndarray:
        key = (self.t, batch_groups)
        if self._choice is not None and self._choice[0] == key:
            return self._choice[1]
        if self._ground_truth is None:
            raise RuntimeError("policy 'oracle' has no ground truth: the loop attaches the adapter's "
                               "target_gains (attach_ground_truth) before the first step")
        cand = self.candidates(batch_groups)
        gains = np.asarray(self._ground_truth(cand, self.cfg.target), dtype=np.float64).reshape(-1)
        if gains.shape != (cand.shape[0],):
            raise ValueError(f"ground truth returned {gains.shape[0]} gains for {cand.shape[0]} candidates")
        best = int(np.argmax(np.where(np.isnan(gains), -np.inf, gains)))
        self._choice = (key, cand[best], gains[: self.n_arms].copy())
        return self._choice[1]

    def probabilities(self) -> np.ndarray:
        counts = self._choose(self._batch_groups)
        return counts / counts.sum()

    def select(self, batch_groups: int = BATCH_GROUPS.default) -> Allocation:
        self._batch_groups = checked_batch_groups(batch_groups)
        return Allocation(self._choose(self._batch_groups).copy())

    def diagnostics(self) -> dict:
        diag = super().diagnostics()
        if self._choice is not None:
            diag["Q"] = self._choice[2].copy()
        return diag

    def _extra_state(self) -> dict:
        return {"batch_groups": self._batch_groups}

    def _load_extra_state(self, state: dict) -> None:
        self._batch_groups = int(state.get("batch_groups", BATCH_GROUPS.default))
        self._choice = None                       # computed again from the (restored) adapter state


class Fixed(Policy):
    name = "fixed"
    summary = "reference: pure batch, always harness `arm` (one run per arm: best fixed arm in hindsight)"
    reference = ("clairvoyant reference, no ground truth needed: one run per arm gives the best fixed arm, one "
                 "arm for all seeds (reports.readings.references.best_fixed)")
    KNOBS = Knobs({"arm": Knob(0, "the harness trained every step (< the number of harnesses)", 0, 10**6)})

    def __init__(self, n_arms: int, seed: int = 0, **knobs):
        super().__init__(n_arms, seed, **knobs)
        self.arm = check_int(self.KNOBS.key("arm"), self.cfg.arm, 0, self.n_arms - 1)

    def probabilities(self) -> np.ndarray:
        p = np.zeros(self.n_arms)
        p[self.arm] = 1.0
        return p
