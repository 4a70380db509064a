"""The shared training adapter (SPEC §6): one protocol for synthetic environments and
the real GRPO trainer, so that exactly one loop (`hbsim.loop`) talks to policies.

An adapter owns everything about training on harnesses; it never sees the policy. The
loop asks the policy for an `Allocation`, hands it to `train_step`, and feeds the
returned `StepResult` back to the policy as `Feedback` (`step_feedback`, below).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Protocol, runtime_checkable

import numpy as np
import pandas as pd

from policies import Allocation, Feedback

#: Phases of the per-step wall-clock ledger (SPEC §2.2). Adapters may leave some at 0.
SECOND_PHASES = ("rollout", "tools", "backward", "sketch", "scheduler", "optimizer")


@dataclass
class CostLedger:
    """Cost of one optimizer step (SPEC §2.2). Counts are in groups of G rollouts.

    groups_generated: groups sampled (over-sampling included)
    groups_scored: groups whose rollouts were scored by the checker / reward
    groups_retained: scored groups with non-zero reward variance (dynamic sampling)
    groups_optimized: groups in the optimizer batch (leftovers included)
    leftover_used: optimized groups taken from the harness's leftover buffer
    leftover_age: mean age in steps of the leftover groups used (nan if none)
    leftover_size: groups left in the buffers after the step (all harnesses)
    tokens: tokens generated (synthetic environments: the env knob `group_tokens`, default 0)
    cost_seconds: simulated rollout + tool seconds (synthetic environments: knobs
        `token_seconds`, `group_tool_seconds`; default 0, reproducible); None (nan in the
        row) where nothing is simulated: the `eval_budget` unit `seconds` then counts the
        measured seconds["rollout"] + seconds["tools"] (`hbsim.loop.step_cost`)
    seconds: phase -> seconds (wall clock), phases from SECOND_PHASES
    """

    groups_generated: int = 0
    groups_scored: int = 0
    groups_retained: int = 0
    groups_optimized: int = 0
    leftover_used: int = 0
    leftover_age: float = float("nan")
    leftover_size: int = 0
    tokens: int = 0
    cost_seconds: float | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    def as_row(self) -> dict:
        row = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "seconds"}
        if self.cost_seconds is None:
            row["cost_seconds"] = float("nan")
        for phase in SECOND_PHASES:
            row[f"seconds_{phase}"] = float(self.seconds.get(phase, 0.0))
        for phase, value in self.seconds.items():
            row.setdefault(f"seconds_{phase}", float(value))
        return row


@dataclass
class StepResult:
    """What one optimizer step produced.

    learnability: raw L of the batch (SPEC §2.3); None when no group was retained
    sketch: (d,) float32 gradient sketch taken before optimizer.step(), or None
    update_sketch: (d,) float32 sketch of the parameter update, or None
    reward: mean reward of the optimized batch (nan if empty)
    cost: the cost ledger
    extras: env-specific per-step columns (e.g. oracle_arm, regret, true_p_<harness>)
    generated: (H, 2) per harness [rollouts, reward sum] of ALL groups generated this step,
        before dynamic-sampling filtering (`Feedback.generated`), or None
    update_norm: L2 norm of the parameter update the step applied (all parameters, not the
        sketch's coordinates; 0.0 when nothing was optimized), None where not measured;
        the train column `hbsim.contract.UPDATE_NORM`
    groups: the step's GENERATED groups before the group filter, arrays (n,) by column
        (`hbsim.sampling.Sample.groups`: arm, size, success, reward_mean, reward_std,
        mean_abs_adv, retained, cost), or None where a trainer does not report them; the
        loop makes them the step's rows of the groups table (hbsim.contract.GROUP_COLUMNS)
    """

    learnability: float | None
    sketch: np.ndarray | None
    update_sketch: np.ndarray | None
    reward: float
    cost: CostLedger
    extras: dict[str, float] = field(default_factory=dict)
    generated: np.ndarray | None = None
    update_norm: float | None = None
    groups: dict[str, np.ndarray] | None = None


@runtime_checkable
class TrainingAdapter(Protocol):
    """Implemented by every synthetic environment (hbsim) and by real_runs.GRPOAdapter.

    harnesses: names of the TRAINING harnesses, index = arm
    train_step(allocation): run one optimizer step on the allocation's groups
    evaluate(): held-out evaluation, a DataFrame with hbsim.contract.EVAL_COLUMNS (one row
        per attempt; the loop adds run_id, policy, seed and step)
    config(): the resolved configuration (for run.json)
    state_dict() / load_state_dict(): exact resume, every RNG included

    Two OPTIONAL methods (looked up with getattr, so they are not part of the Protocol):

    target_gains(candidates, target) -> (C,): the environment's GROUND TRUTH -- for
        candidate allocations (C, H) int group counts, the exact expected one-step change of
        the mean true success on `target` ("train": training tasks x training harnesses,
        "heldout_tasks", "heldout_harness": the eval suites; policies.clairvoyant.TARGETS) if
        that allocation were optimized from the current state, which it must not change.
        The synthetic envs have it (hbsim.envs.base.SyntheticEnv.target_gains); the real
        trainer has none. The loop hands it to a policy with `needs_ground_truth` (the
        clairvoyant `oracle`) and refuses such a policy, with one line, where it is missing.
    set_lr_scale(scale): multiply the trainer's learning rate by `scale` (absolute, not
        cumulative; 1.0 = the configured lr), applied to every later step and to the
        expected steps of `target_gains`. The loop calls it with the policy's `lr_scale`
        (policies.base.LR_SCALE) before the first step; a trainer without it runs only
        designs with lr_scale = 1.
    """

    harnesses: list[str]

    def train_step(self, allocation: Allocation) -> StepResult: ...

    def evaluate(self) -> pd.DataFrame: ...

    def config(self) -> dict: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


def float_or_nan(value) -> float:
    return float("nan") if value is None else float(value)


def step_feedback(allocation: Allocation, res) -> Feedback:
    """The one StepResult -> Feedback of every backend: what the policy observes after a
    step on `allocation` (cost = groups generated per optimized group, None when none was
    optimized)."""
    cost = res.cost
    ratio = cost.groups_generated / cost.groups_optimized if cost.groups_optimized else None
    return Feedback(arm=allocation.arm, learnability=res.learnability, sketch=res.sketch,
                    update_sketch=res.update_sketch, reward=res.reward, cost=ratio,
                    counts=np.asarray(allocation.counts), generated=getattr(res, "generated", None))
