"""The one training loop (SPEC §6, docs/ARCHITECTURE.md): the only code that talks to both
a policy and a trainer -- a `TrainingAdapter` (synthetic or the native real trainer) driven
by `Loop`, or a trainer that runs its own steps (TRL, verl) holding a `StepRecorder`.

One step:
    alloc = recorder.begin()                         # p = policy.probabilities(), then
                                                     # policy.select(batch_groups): pure or mixed
    res   = adapter.train_step(alloc)                # raw L, sketch, reward, cost ledger
    row   = recorder.record(res)                     # policy.update(step_feedback(alloc, res)),
                                                     # then the SPEC §7 train row (policy
                                                     # diagnostics read AFTER the update)
`hbsim.adapter.step_feedback` is the one StepResult -> Feedback (cost = groups_generated / groups_optimized).

Step numbering: the train row of the s-th optimizer step has `step = s` (1-based); its
ground-truth columns describe the state after that step. An evaluation tagged `step = s`
ran after s optimizer steps (`step = 0`: before training). `seconds_scheduler` is the wall
time of select + update, `seconds_step` the wall time of the whole step (evaluation
excluded); the `seconds_*` columns are the only ones that are not reproducible bit for bit.
Equal-cost evaluation (`eval_budget = "groups:500,1000"`): after every step,
`evaluate_budget()` evaluates once for the milestones the cumulative cost (`step_cost`) has
newly crossed; those rows carry hbsim.contract.BUDGET_COLUMNS and are kept apart from the
ordinary evaluations (`evaluated_at` ignores them).
`step_overhead(row)` / `overhead_fraction(train)` derive the scheduler's share of the step time from them.
Groups table: a StepResult's `groups` (every group the step generated, before the filter)
become the step's rows of `groups.parquet` (hbsim.contract.GROUP_COLUMNS; `group_frame`),
with the harness's name and `chosen` (its allocation count > 0) added here; a trainer that
reports none (None) writes no groups table.
Checkpoints: `Loop.run`'s `checkpoint` hook; `Loop.load_state_dict` continues such a run.
"""
from __future__ import annotations

import copy
import datetime as _dt
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from hbsim.adapter import float_or_nan, step_feedback
from hbsim.contract import BUDGET_COLUMNS, BUDGET_UNITS, EVAL_COLUMNS, GROUP_COLUMNS, ROW_KEYS, UPDATE_NORM
from hbsim.counterfactual import Probe
from hbsim.contract.records import RunResult, config_hash, versions, write_run
from hbsim.run_knobs import RUN_KNOBS, budget_milestones
from policies import Allocation
from policies.base import checked_probabilities
from policies.errors import UserError

#: per-harness diagnostics arrays -> column prefix
_ARM_COLUMNS = (("Q", "q"), ("n", "n"), ("memory_norm", "mem_norm"), ("memory_age", "mem_age"))
_SCALARS = ("transfer", "l_norm", "t_norm", "score")

#: the scheduler's side of a step: sketch gather + all-reduce + policy select/update
OVERHEAD_PHASES = ("seconds_sketch", "seconds_allreduce", "seconds_scheduler")


def step_cost(row, unit: str) -> float:
    """A train row's cost in an `eval_budget` unit: its ledger column (BUDGET_UNITS); for
    `seconds` without simulated `cost_seconds` (nan: real runs), the measured
    seconds_rollout + seconds_tools."""
    value = float(row.get(BUDGET_UNITS[unit], 0.0))
    if unit == "seconds" and not np.isfinite(value):
        value = float(row.get("seconds_rollout", 0.0)) + float(row.get("seconds_tools", 0.0))
    return value


def step_overhead(row) -> float:
    """(sketch + all-reduce + policy seconds) / seconds_step of one train row (a mapping;
    nan when the step took no measurable time)."""
    step = float(row.get("seconds_step", 0.0))
    return sum(float(row.get(c, 0.0)) for c in OVERHEAD_PHASES) / step if step > 0 else float("nan")


def overhead_fraction(train: pd.DataFrame) -> pd.Series:
    """`step_overhead` of every train row."""
    return pd.Series([step_overhead(r) for r in train.to_dict("records")], index=train.index, dtype=np.float64)


def group_frame(run_id: str, label: str, seed: int, harnesses: list[str], steps: list[dict]) -> pd.DataFrame:
    """The groups table (GROUP_COLUMNS) of `steps`: per step a dict with `step`, `chosen`
    (H,) bool and the StepResult's `groups` arrays, in step order."""
    columns = [c for c in GROUP_COLUMNS if c not in ROW_KEYS]
    if not steps:
        return pd.DataFrame({c: [] for c in GROUP_COLUMNS})
    arm = np.concatenate([s["arm"] for s in steps]).astype(np.int64)
    frame = pd.DataFrame({
        "run_id": run_id, "policy": label, "seed": int(seed),
        "step": np.concatenate([np.full(len(s["arm"]), s["step"], dtype=np.int64) for s in steps]),
        "harness": pd.Series(np.asarray(harnesses, dtype=object)[arm] if len(arm) else [], dtype=object),
        "arm": arm, "group": np.concatenate([np.arange(len(s["arm"]), dtype=np.int64) for s in steps]),
        "chosen": np.concatenate([np.asarray(s["chosen"], dtype=bool)[s["arm"]] for s in steps]).astype(bool)})
    for c in columns:
        if c not in frame:
            frame[c] = np.concatenate([np.asarray(s[c]) for s in steps])
    frame["retained"] = frame["retained"].astype(bool)
    return frame[list(GROUP_COLUMNS)]


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def normalised_entropy(p: np.ndarray) -> float:
    """-sum p log p / log H of a law p (H,): 1 = uniform, 0 = one arm (0 for H = 1)."""
    q = p[p > 0]
    return float(-(q * np.log(q)).sum() / np.log(p.size)) if p.size > 1 else 0.0


def attach_ground_truth(policy, ground_truth: Callable | None) -> None:
    """Hand `ground_truth` (an adapter's `target_gains`) to a policy that declares
    `needs_ground_truth` (policies.clairvoyant); UserError, one line, when there is none."""
    if not getattr(policy, "needs_ground_truth", False):
        return
    if not callable(ground_truth):
        name = getattr(policy, "name", type(policy).__name__)
        raise UserError(f"policy={name!r} is not allowed here: it needs the environment's ground truth "
                        f"(the adapter method target_gains), which this trainer does not have; use a synthetic "
                        f"env (hb sim) or a policy that learns from feedback")
    policy.attach_ground_truth(ground_truth)


def apply_lr_scale(policy, set_lr_scale: Callable[[float], None] | None) -> None:
    """Hand the policy's `lr_scale` (policies.base.LR_SCALE) to the trainer's `set_lr_scale`;
    UserError, one line, for a scale other than 1 where the trainer has none."""
    scale = float(getattr(policy, "lr_scale", 1.0))
    if callable(set_lr_scale):
        set_lr_scale(scale)
    elif scale != 1.0:
        raise UserError(f"policy.lr_scale={scale!r} is not allowed here: this trainer cannot scale its learning "
                        f"rate (no adapter method set_lr_scale); expected 1.0")


@dataclass
class PendingStep:
    """A step begun (`StepRecorder.begin`) and not yet recorded."""

    p: np.ndarray                   # the law of the step's draw
    allocation: Allocation
    select_seconds: float
    start: float                    # perf_counter reading at the step's start


class StepRecorder:
    """The policy's side of every backend's steps: allocation, feedback, SPEC §7 rows.

    `begin()` asks the policy for the next step's allocation; the trainer trains on it and
    hands the StepResult to `record(res)`, which feeds the policy (`step_feedback`) and
    returns the step's train row. `Loop` drives an adapter through it; a trainer that runs
    its own steps (TRL's GRPOTrainer, verl's driver) holds one. evaluate: () -> eval frame
    (EVAL_COLUMNS) of `evaluate()`; env: the env section of the default run config;
    ground_truth: the adapter's optional `target_gains` (hbsim/adapter.py), handed to a
    policy with `needs_ground_truth` -- without one such a policy is refused (UserError)
    before any step; set_lr_scale: the trainer's optional `set_lr_scale`, called with the
    policy's `lr_scale` (without one, only lr_scale = 1 runs)."""

    def __init__(self, policy, harnesses: list[str], *, label: str | None = None, seed: int = 0,
                 eval_every: int | None = None, batch_groups: int | None = None,
                 evaluate: Callable[[], pd.DataFrame] | None = None, env: dict | None = None,
                 eval_budget: str | None = None, ground_truth: Callable | None = None,
                 set_lr_scale: Callable[[float], None] | None = None):
        attach_ground_truth(policy, ground_truth)
        apply_lr_scale(policy, set_lr_scale)
        # the run knobs' own parses (hbsim.run_knobs): a resolved config's values pass unchanged,
        # a trainer's direct arguments (TRL, verl) are checked here
        eval_every = RUN_KNOBS["eval_every"].check("eval_every", eval_every)
        self.eval_budget = RUN_KNOBS["eval_budget"].check("eval_budget", eval_budget)
        self._budget_unit, self._milestones = budget_milestones(self.eval_budget)
        self._spent = 0.0                            # cumulative cost in the budget unit
        knob = RUN_KNOBS["batch_groups"]
        self.batch_groups = knob.check("batch_groups", knob.default if batch_groups is None else batch_groups)
        self.policy = policy
        self.label = label if label is not None else getattr(policy, "name", type(policy).__name__)
        self.seed, self.eval_every = int(seed), eval_every
        self.harnesses = list(harnesses)
        self._evaluate, self._env = evaluate, dict(env or {})
        self._columns = {prefix: [f"{prefix}_{h}" for h in self.harnesses]
                         for prefix in ("p", "alloc") + tuple(prefix for _, prefix in _ARM_COLUMNS)}
        self.t = 0
        self.started = _utc_now()
        self.pending: PendingStep | None = None
        self._rows: list[dict] = []
        self._groups: list[dict] | None = None          # per step: the groups it generated (`group_frame`)
        self._evals: list[pd.DataFrame] = []
        self._budget_evals: list[pd.DataFrame] = []      # budget evaluations (kept apart: `evaluated_at`)
        self._budget_done: list[float] = []              # the milestones evaluated, ascending

    # -- one step --------------------------------------------------------------------
    def begin(self, start: float | None = None) -> Allocation:
        """The policy's allocation of the next step (kept as `pending` until `record`);
        `start`: the step's perf_counter start if it began earlier (default: now)."""
        start = time.perf_counter() if start is None else start
        p = checked_probabilities(self.policy)           # a user's policy: checked at every draw
        t0 = time.perf_counter()
        alloc = self.policy.select(batch_groups=self.batch_groups)
        self.pending = PendingStep(p, alloc, time.perf_counter() - t0, start)
        return alloc

    def record(self, res, *, scheduler_seconds: float = 0.0) -> dict:
        """Feedback of the pending step's StepResult `res` to the policy, then the step's
        train row (kept and returned). `seconds_scheduler` = select + update +
        `scheduler_seconds` (the caller's own bookkeeping), `seconds_step` = now - start."""
        step, self.pending = self.pending, None
        if step is None:
            raise RuntimeError("record(res) before begin(): no step is pending")
        feedback = step_feedback(step.allocation, res)
        t2 = time.perf_counter()
        self.policy.update(feedback)
        t3 = time.perf_counter()
        res.cost.seconds = {**res.cost.seconds, "scheduler": step.select_seconds + (t3 - t2) + scheduler_seconds}
        self.t += 1
        row = self._row(step.p, step.allocation, res, self.policy.diagnostics())
        row["seconds_step"] = time.perf_counter() - step.start
        self._rows.append(row)
        self._record_groups(step.allocation, getattr(res, "groups", None))
        if self._budget_unit is not None:
            self._spent += step_cost(row, self._budget_unit)
        return row

    def _record_groups(self, alloc, groups: dict | None) -> None:
        """Keep the step's generated groups (StepResult.groups) for the groups table."""
        if groups is None:
            return
        if self._groups is None:
            self._groups = []
        entry = {k: np.asarray(v).copy() for k, v in groups.items()}
        entry["arm"] = entry["arm"].astype(np.int64)
        entry["step"], entry["chosen"] = self.t, np.asarray(alloc.counts) > 0
        self._groups.append(entry)

    @property
    def rows(self) -> list[dict]:
        """The train rows so far (one per step, oldest first); read-only by convention."""
        return self._rows

    @property
    def evaluations(self) -> list[pd.DataFrame]:
        """The eval frames so far, one per evaluation: the ordinary ones, then the budget
        ones (`evaluate_budget`); read-only by convention."""
        return self._evals + self._budget_evals

    @property
    def last_groups(self) -> dict | None:
        """The latest step's groups (StepResult.groups arrays, `arm` as int64; None when the
        trainer reports none); read-only by convention."""
        return self._groups[-1] if self._groups else None

    @property
    def evaluated_at(self) -> int | None:
        """The step of the latest evaluation (None before the first)."""
        return int(self._evals[-1]["step"].iloc[0]) if self._evals else None

    def _row(self, p: np.ndarray, alloc, res, diag: dict) -> dict:
        arm = alloc.arm
        row = {"policy": self.label, "seed": self.seed, "step": self.t, "arm": -1 if arm is None else int(arm),
               "learnability": float_or_nan(res.learnability)}
        for key in _SCALARS:
            row[key] = float_or_nan(diag.get(key))
        row["reward"] = float_or_nan(res.reward)
        row[UPDATE_NORM] = float_or_nan(getattr(res, "update_norm", None))
        row.update(zip(self._columns["p"], p.tolist()))
        row["entropy"] = normalised_entropy(p)
        nan_arms = [float("nan")] * len(self.harnesses)
        for key, prefix in _ARM_COLUMNS:
            values = diag.get(key)
            values = nan_arms if values is None else np.asarray(values, dtype=np.float64).tolist()
            row.update(zip(self._columns[prefix], values))
        row.update(zip(self._columns["alloc"], np.asarray(alloc.counts).astype(np.int64).tolist()))
        row.update(res.cost.as_row())
        row.update(res.extras)
        return row

    # -- evaluation ------------------------------------------------------------------
    def evaluate(self) -> pd.DataFrame:
        """Held-out evaluation now; rows tagged policy (label), seed and step."""
        frame = self._frame()
        self._evals.append(frame)
        return frame

    def evaluate_budget(self) -> list[pd.DataFrame]:
        """With `eval_budget`: one evaluation now for the milestones the cumulative cost has
        crossed since the last call (call it after every step), one tagged copy of it per
        milestone (BUDGET_COLUMNS: unit, milestone, the cost reached); [] when none."""
        new = [m for m in self._milestones[len(self._budget_done):] if m <= self._spent]
        if not new:
            return []
        frame = self._frame()
        out = []
        for m in new:
            tagged = frame.copy()
            for col, value in zip(BUDGET_COLUMNS, (self._budget_unit, m, self._spent)):
                tagged[col] = value
            out.append(tagged)
        self._budget_evals.extend(out)
        self._budget_done.extend(new)
        return out

    def _frame(self) -> pd.DataFrame:
        frame = (self._evaluate() if self._evaluate else pd.DataFrame(columns=list(EVAL_COLUMNS))).copy()
        frame.insert(0, "step", self.t)
        frame.insert(0, "seed", self.seed)
        frame.insert(0, "policy", self.label)
        return frame

    # -- state -----------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"t": self.t, "label": self.label, "seed": self.seed, "started": self.started,
                "policy": self.policy.state_dict(), "rows": copy.deepcopy(self._rows),
                "groups": copy.deepcopy(self._groups),
                "evals": [e.copy() for e in self._evals], "budget_evals": [e.copy() for e in self._budget_evals],
                "budget_done": list(self._budget_done)}

    def load_state_dict(self, state: dict) -> None:
        if state.get("label") != self.label or state.get("seed") != self.seed:
            raise ValueError(f"loop state of label={state.get('label')!r} seed={state.get('seed')!r} does not "
                             f"match this loop (label={self.label!r}, seed={self.seed})")
        self.policy.load_state_dict(state["policy"])
        self.t, self.started = int(state["t"]), state["started"]
        self._rows = copy.deepcopy(state["rows"])
        self._groups = copy.deepcopy(state.get("groups"))
        self._evals = [e.copy() for e in state["evals"]]
        self._budget_evals = [e.copy() for e in state.get("budget_evals", [])]
        self._budget_done = [float(m) for m in state.get("budget_done", [])]
        if self._budget_unit is not None:
            self._spent = float(sum(step_cost(r, self._budget_unit) for r in self._rows))

    # -- result ----------------------------------------------------------------------
    def env_config(self) -> dict:
        """The env section of the default run config."""
        return dict(self._env)

    def result(self, config: dict | None = None) -> RunResult:
        """Frames + run.json content. Without `config`, one is built from the policy and
        env configs (enough to hash, not to rerun)."""
        if config is None:
            config = {"env": self.env_config(),
                      "policy": {"name": getattr(self.policy, "name", ""), "label": self.label,
                                 **self.policy.config()},
                      "seed": self.seed, "steps": self.t, "eval_every": self.eval_every,
                      "batch_groups": self.batch_groups}
            if self.eval_budget is not None:
                config["eval_budget"] = self.eval_budget
        run_id = config_hash(config)
        train = pd.DataFrame(self._rows)
        train.insert(0, "run_id", run_id)
        frames = self._evals + self._budget_evals
        evals = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
            columns=["policy", "seed", "step", *EVAL_COLUMNS])
        evals.insert(0, "run_id", run_id)
        policy_cfg = config.get("policy", {})
        meta = {"run_id": run_id, "config": config, "config_hash": run_id, "versions": versions(),
                "seed": self.seed, "started": self.started, "finished": _utc_now(),
                "policy": policy_cfg.get("name", getattr(self.policy, "name", "")), "label": self.label,
                "steps": self.t}
        groups = (None if self._groups is None else
                  group_frame(run_id, self.label, self.seed, self.harnesses, self._groups))
        return RunResult(train=train, eval=evals, meta=meta, groups=groups)


class Loop(StepRecorder):
    """Drives one policy on one `TrainingAdapter`; rows accumulate in memory until `result()`."""

    def __init__(self, policy, adapter, *, label: str | None = None, seed: int = 0,
                 eval_every: int | None = None, batch_groups: int | None = None, eval_budget: str | None = None):
        super().__init__(policy, adapter.harnesses, label=label, seed=seed, eval_every=eval_every,
                         batch_groups=batch_groups, evaluate=adapter.evaluate, eval_budget=eval_budget,
                         ground_truth=getattr(adapter, "target_gains", None),
                         set_lr_scale=getattr(adapter, "set_lr_scale", None))
        self.adapter = adapter
        #: hook(loop) callables run at the start of every step, before the policy is asked
        #: (e.g. hbsim.counterfactual.Probe); they must leave policy and adapter as they found them
        self.hooks: list[Callable[["Loop"], None]] = []

    def step(self) -> dict:
        """One optimizer step; returns (and keeps) its train row."""
        for hook in self.hooks:
            hook(self)
        alloc = self.begin()
        return self.record(self.adapter.train_step(alloc))

    def env_config(self) -> dict:
        return self.adapter.config()

    def run(self, steps: int, progress: Callable[[int, int], None] | None = None, *,
            checkpoint: Callable[["Loop"], bool | None] | None = None) -> None:
        """Run until `steps` optimizer steps are done; evaluates every `eval_every` steps
        (step 0 included) and always at the final step. `checkpoint(loop)` is called after
        every step and its evaluation, where `loop.state_dict()` is consistent; a true return
        stops the run there (no final evaluation), e.g. on SIGTERM; another `run(steps)`, on
        this loop or one given its `state_dict()`, continues it."""
        if not isinstance(steps, (int, np.integer)) or isinstance(steps, bool) or steps < 0:
            raise UserError(f"steps={steps!r} is not allowed: expected an integer >= 0")
        if self.eval_every and self.t == 0 and not self._evals:
            self.evaluate()
        while self.t < steps:
            self.step()
            if progress is not None:
                progress(self.t, steps)
            if (self.eval_every and self.t % self.eval_every == 0) or self.t == steps:
                self.evaluate()
            self.evaluate_budget()
            if checkpoint is not None and checkpoint(self):
                return
        if self.t == steps and self.evaluated_at != self.t:
            self.evaluate()

    def state_dict(self) -> dict:
        return {**super().state_dict(), "adapter": self.adapter.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.adapter.load_state_dict(state["adapter"])


def run(policy, adapter, steps: int, *, label: str | None = None, seed: int = 0,
        eval_every: int | None = None, out=None, config: dict | None = None,
        progress: Callable[[int, int], None] | None = None, batch_groups: int | None = None,
        counterfactual: int | None = None, state: dict | None = None,
        checkpoint: Callable[[Loop], bool | None] | None = None, eval_budget: str | None = None) -> RunResult:
    """Run `steps` optimizer steps of `policy` on `adapter`, evaluate at the end (and every
    `eval_every` steps), return the RunResult; with `out`, also write the run directory.
    `counterfactual=k`: every k-th step, a what-if pure step on every harness first
    (hbsim.counterfactual; the run itself is unchanged), in `result.counterfactual`.
    `state`: a `Loop.state_dict()` to continue from; `checkpoint`: see `Loop.run` (a run it
    stops returns the steps done so far). `eval_budget`: also evaluate at each cost milestone
    ("groups:500,1000", `StepRecorder.evaluate_budget`)."""
    loop = Loop(policy, adapter, label=label, seed=seed, eval_every=eval_every, batch_groups=batch_groups,
                eval_budget=eval_budget)
    if state is not None:
        loop.load_state_dict(state)
    probe = None
    if counterfactual:
        probe = Probe(counterfactual)
        loop.hooks.append(probe)
    loop.run(steps, progress=progress, checkpoint=checkpoint)
    result = loop.result(config)
    if probe is not None:
        result.counterfactual = probe.frame(result.train["run_id"].iloc[0] if len(result.train) else "")
    if out is not None:
        write_run(result, out)
    return result
