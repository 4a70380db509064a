"""HarnessBandit inside TRL's `GRPOTrainer`: the same policy objects schedule the harness
of every optimizer step of a Hugging Face GRPO run (extra `harnessbandit[trl]`).

    from real_runs.integrations.trl_grpo import HarnessScheduler, HarnessGRPOTrainer, harness_dataset
    data = harness_dataset(tasks, ["json", "xml", "kv"])            # prompt, harness, task columns
    sched = HarnessScheduler(policies.make("harnessbandit", n_arms=3, seed=0), ["json", "xml", "kv"],
                             data, seed=0)
    trainer = HarnessGRPOTrainer(model, reward_funcs=..., args=GRPOConfig(...), train_dataset=data,
                                 processing_class=tok, scheduler=sched)
    trainer.train()
    hbsim.write_run(sched.result(config), "runs/trl0")             # SPEC §7 run directory

Where each signal comes from (one optimizer step = one generation batch; the trainer
checks `steps_per_generation == gradient_accumulation_steps` and `num_iterations == 1`):

* prompts: at generation time (`_generate_and_score_completions`) the scheduler asks the
  policy for this step's `Allocation` and replaces the dataloader's rows by rows of the
  allocated harnesses (`world.pool.TaskPool`: a seeded shuffled pool of dataset rows per
  harness, identical on every rank), each repeated `num_generations` times, in the global
  order TRL slices per process. The dataloader's own sampler cannot choose them: accelerate
  prefetches one batch ahead, so it would pick step k+1's prompts before step k's feedback.
* L: the rewards TRL gathers over all processes (`_calculate_rewards`), grouped by G,
  through `hbsim.grpo` (LOO advantages of the groups with reward variance, SPEC §2.3);
  the dynamic-sampling counts come from TRL's `frac_reward_zero_std` (TRL keeps
  zero-variance groups in the batch with advantage 0, so groups_optimized = all groups).
* the group filter (`hbsim.sampling.GroupFilter`, knobs `keep_band`, `min_abs_adv`): when
  set, the groups it drops (by the same rule as the native trainer's dynamic sampling, on
  the step's global rewards) stay in TRL's batch with their advantages set to 0, as TRL
  treats zero-variance groups: they add no policy-gradient term (with beta > 0 their KL
  term remains, and TRL's loss normalisers still count their tokens); L and
  groups_retained are then over the kept groups. TRL cannot refill the batch.
* the gradient sketch: transformers' Trainer clips (`_clip_grad_norm`, or `_get_grad_norm`
  when max_grad_norm = 0) BEFORE `on_pre_optimizer_step`, so a callback sees clipped
  gradients; the trainer takes the sketch in those two methods, before clipping. Under DDP
  the gradients are already averaged over ranks there (the global gradient, identical on
  every rank); ranks that hold local gradients SUM their raw sketches (`all_reduce_sum`)
  before anything is normalised. The update sketch is taken after `optimizer.step()`.
* feedback: at `on_step_end` the scheduler builds the step's `StepResult` and hands it to
  its `hbsim.loop.StepRecorder`, which feeds the policy (`step_feedback`) and records the
  SPEC §7 train row; `overhead_frac` is `hbsim.loop.step_overhead` of the row (the
  scheduler's bookkeeping counts as `seconds_scheduler`).
* checkpoints: `on_save` writes `harnessbandit.pt` (recorder state: policy incl. RNG, rows,
  evaluations; and the row pools) into TRL's `checkpoint-N` folder;
  `train(resume_from_checkpoint=...)` restores it before TRL resumes.
"""
from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from transformers import TrainerCallback
from trl import GRPOTrainer

from hbsim.adapter import CostLedger, StepResult
from hbsim.contract import TRL_STATE
from hbsim.contract.atomic import atomic_write, file_mode
from hbsim.loop import StepRecorder, step_overhead
from hbsim.sampling import GroupFilter
from policies.errors import UserError
from real_runs.integrations.signals import group_signals, group_table
from real_runs.native.sketch import ParamSketch, global_sketch
from real_runs.world.pool import TaskPool

FORMAT = 2


def harness_dataset(tasks, harnesses: list[str], world: str = "tools"):
    """A `datasets.Dataset` with one row per (harness, task): `prompt` (the harness's
    rendering of the task), `harness` (name) and `task` (id), harness-major order; the
    harnesses of task world `world` (`real_runs.world.worlds`)."""
    from datasets import Dataset

    from real_runs.world.worlds import get_world
    get_harness = get_world(world).harness
    return Dataset.from_list([{"prompt": get_harness(name).render(task), "harness": name, "task": task.id}
                              for name in harnesses for task in tasks])


def harness_reward(tasks, world: str = "tools") -> Callable:
    """TRL reward function for the built-in tasks of `world`: plays a completion through its
    row's harness and returns the checker's reward in [0, 1]. TRL generates one completion
    per prompt, so a multi-turn harness is played open-loop: each line (up to the stop
    marker) is one turn, observations are not shown to the model."""
    from real_runs.world.worlds import episode as new_episode
    from real_runs.world.worlds import get_world
    get_harness = get_world(world).harness
    by_id = {t.id: t for t in tasks}

    def reward(prompts, completions, harness, task, **_):
        out = []
        for text, name, tid in zip(completions, harness, task):
            h = get_harness(name)
            episode = new_episode(h, by_id[tid])
            for turn in text.split(h.stop)[:h.max_turns]:
                if episode.feed(turn):
                    break
            out.append(float(episode.reward()))
        return out

    reward.__name__ = "harness_reward"
    return reward


@dataclass
class _Signals:
    """What the trainer's hooks report during the pending step (scheduler-private)."""

    arms: list[int]
    rewards: np.ndarray | None = None
    keep: np.ndarray | None = None      # (groups,) the group filter's mask (None: the filter is not set)
    sketch: torch.Tensor | None = None
    before: torch.Tensor | None = None
    update: torch.Tensor | None = None
    grad_norm: float = float("nan")
    frac_zero: float = float("nan")
    tokens: int = 0
    lengths: np.ndarray | None = None   # (B,) completion tokens of each row (one process), else None
    seconds: Counter = field(default_factory=Counter)     # phase -> seconds of the cost ledger
    own: float = 0.0                # the scheduler's bookkeeping seconds (counted as `scheduler`)


class HarnessScheduler(TrainerCallback):
    """The policy's side of a TRL GRPO run: allocation per step, signals, feedback, rows,
    through an `hbsim.loop.StepRecorder` (`recorder`).

    policy: any `policies.make(...)` object with n_arms = len(harnesses); dataset: the
    training dataset (its `harness` column names a harness of `harnesses` on every row);
    evaluate: optional () -> eval DataFrame (SPEC §7 columns) run every `eval_every` steps;
    sketch knobs as in SPEC §2.4 (sketch_blocks None = min(4, number of blocks));
    run_config: the run's whole config, saved in each checkpoint's harnessbandit.pt under
    "config" (what `hb real --backend trl --resume` compares with its own).
    The trainer reports through the public methods: `begin`, `generated`, `set_rewards`,
    `take_sketch`, `set_grad_norm`, and the callbacks `on_optimizer_step` / `on_step_end`.
    """

    def __init__(self, policy, harnesses: list[str], dataset, *, seed: int = 0, label: str | None = None,
                 evaluate: Callable[[], pd.DataFrame] | None = None, eval_every: int | None = None,
                 config: dict | None = None, block_path: str = "model.layers", sketch_dim: int = 65536,
                 sketch_blocks: int | None = None, sketch_patterns: tuple[str, ...] = ("*",),
                 update_sketch: bool = True, advantage: str = "loo", group_filter: GroupFilter | None = None,
                 eval_budget: str | None = None, run_config: dict | None = None):
        if policy.n_arms != len(harnesses):
            raise UserError(f"policy n_arms={policy.n_arms} is not allowed: expected len(harnesses)={len(harnesses)}")
        self.harnesses, self.seed = list(harnesses), int(seed)
        self.sampler = TaskPool.of_column(dataset["harness"], self.harnesses, seed)
        self.recorder = StepRecorder(policy, self.harnesses, label=label, seed=seed, eval_every=eval_every,
                                     batch_groups=1, evaluate=evaluate, env=config, eval_budget=eval_budget)
        self.policy, self.advantage = policy, advantage
        self.run_config = run_config      # saved with each checkpoint: `hb real --resume` compares it
        self.filter = group_filter or GroupFilter(advantage=advantage)
        self.sketch_knobs = dict(block_path=block_path, dim=sketch_dim, last_blocks=sketch_blocks,
                                 patterns=tuple(sketch_patterns), update=update_sketch)
        self.sketch: ParamSketch | None = None
        self.group_size = 1
        self._step: _Signals | None = None
        self._step_start = time.perf_counter()

    # -- set-up by the trainer ---------------------------------------------------------
    def attach(self, model, *, group_size: int, batch_groups: int) -> None:
        """The sketch of `model`'s trainable block parameters (under a peft wrapper: the
        wrapped model's, so with LoRA the adapters' matrices)."""
        get_base = getattr(model, "get_base_model", None)
        model = get_base() if callable(get_base) else model
        knobs = self.sketch_knobs
        self.sketch = ParamSketch.build(model, block_path=knobs["block_path"], last_blocks=knobs["last_blocks"],
                                        dim=knobs["dim"], seed=self.seed, patterns=knobs["patterns"])
        self.group_size, self.recorder.batch_groups = int(group_size), int(batch_groups)

    # -- one step: the trainer's reports -----------------------------------------------
    def begin(self, n: int | None = None, rank: int = 0) -> list[int]:
        """Select this step's allocation; returns rank `rank`'s share (n rows; None = all)
        of the global dataset rows, G consecutive rows per group."""
        t0 = time.perf_counter()
        alloc = self.recorder.begin(start=self._step_start)
        rows, arms = [], []
        for h, count in enumerate(np.asarray(alloc.counts)):
            for index in self.sampler.draw(h, int(count)):
                rows.extend([index] * self.group_size)
                arms.extend([h] * self.group_size)
        self._step = _Signals(arms)
        self._step.own = time.perf_counter() - t0 - self.recorder.pending.select_seconds
        return rows if n is None else rows[rank * n:(rank + 1) * n]

    def generated(self, seconds: float, frac_reward_zero_std: float, tokens: int, scoring: float = 0.0) -> None:
        """TRL generated and scored the step's completions in `seconds`, `scoring` of them in
        the reward functions (the cost ledger's `tools` phase, as the native backend's checkers)."""
        if self._step is not None:
            self._step.seconds["rollout"] += seconds - scoring
            self._step.seconds["tools"] += scoring
            self._step.frac_zero, self._step.tokens = float(frac_reward_zero_std), int(tokens)

    def set_rewards(self, per_func: torch.Tensor, weights: torch.Tensor, lengths: list[int] | None = None) -> None:
        """The step's global rewards from TRL's per-function rewards (B, F) and weights (F,)
        (a row whose every function returned None stays NaN); `lengths`: the completion tokens
        of each of the B rows when they are known (one process), for the groups table's cost."""
        if self._step is None:
            return
        t0 = time.perf_counter()
        if lengths is not None and len(lengths) == per_func.shape[0]:
            self._step.lengths = np.asarray(lengths, dtype=np.float64)
        rewards = (per_func * weights.to(per_func.device).unsqueeze(0)).nansum(dim=1)
        rewards[torch.isnan(per_func).all(dim=1)] = torch.nan
        self._step.rewards = rewards.detach().cpu().numpy().astype(np.float64)
        if not self.filter.default:
            r = self._step.rewards.reshape(-1, self.group_size)
            self._step.keep = self.filter.mask(r) & np.isfinite(r).all(axis=1)
        self._step.own += time.perf_counter() - t0

    def filter_advantages(self, advantages: torch.Tensor, rank: int = 0) -> torch.Tensor:
        """Rank `rank`'s advantages (n,) with the rows of the groups the filter drops set to
        0 (unchanged when the filter is not set); rank r holds global rows [r n, (r + 1) n)."""
        step = self._step
        if step is None or step.keep is None:
            return advantages
        n = advantages.shape[0]
        rows = np.repeat(step.keep, self.group_size)[rank * n:(rank + 1) * n]
        return advantages * torch.as_tensor(rows, device=advantages.device).to(advantages.dtype).reshape(
            (n,) + (1,) * (advantages.dim() - 1))

    def take_sketch(self, grads_synced: bool, backward_seconds: float = 0.0) -> None:
        """Before clipping: raw gradient sketch (global) and the parameters' values."""
        if self._step is None or self.sketch is None:
            return
        step = self._step
        step.seconds["backward"] += backward_seconds
        t0 = time.perf_counter()
        local = self.sketch.grad()
        t1 = time.perf_counter()
        step.sketch = global_sketch(local, grads_synced)
        t2 = time.perf_counter()
        if self.sketch_knobs["update"]:
            step.before = self.sketch.values()
        step.seconds["sketch"] += (t1 - t0) + (time.perf_counter() - t2)
        step.seconds["allreduce"] += t2 - t1

    def set_grad_norm(self, norm) -> None:
        if self._step is not None:
            self._step.grad_norm = float(norm)

    # -- callbacks ---------------------------------------------------------------------
    def on_step_begin(self, args, state, control, **kwargs):
        self._step_start = time.perf_counter()

    def on_optimizer_step(self, args, state, control, **kwargs):
        step = self._step
        if step is not None and step.before is not None:
            t0 = time.perf_counter()
            step.update = self.sketch.values() - step.before
            step.seconds["sketch"] += time.perf_counter() - t0

    def on_step_end(self, args, state, control, **kwargs):
        if self._step is not None:
            self.finish()
        if self.recorder.eval_every and self.recorder.t % self.recorder.eval_every == 0:
            self.recorder.evaluate()
        self.recorder.evaluate_budget()

    def on_save(self, args, state, control, **kwargs):
        folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        if state.is_world_process_zero and os.path.isdir(folder):
            record = {"format": FORMAT, **self.state_dict(), "config": self.run_config}
            atomic_write(os.path.join(folder, TRL_STATE), lambda tmp: torch.save(record, tmp))
            mode = file_mode()      # safetensors writes model.safetensors 0600 whatever the umask
            for name in os.listdir(folder):
                if os.path.isfile(os.path.join(folder, name)):
                    os.chmod(os.path.join(folder, name), mode)

    # -- state -------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The recorder (policy incl. RNG, rows, evaluations) and the row pools."""
        return {"recorder": self.recorder.state_dict(), "sampler": self.sampler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.recorder.load_state_dict(state["recorder"])
        self.sampler.load_state_dict(state["sampler"])

    def load_checkpoint(self, folder: str) -> None:
        path = os.path.join(folder, TRL_STATE)
        if not os.path.exists(path):
            raise UserError(f"resume_from_checkpoint={folder!r} is not allowed: it holds no {TRL_STATE} "
                            "(not written by a HarnessScheduler run)")
        state = torch.load(path, map_location="cpu", weights_only=False)
        if state.get("format") != FORMAT:
            raise UserError(f"{path} has format={state.get('format')!r}; this version reads {FORMAT}")
        self.load_state_dict(state)

    def finish(self) -> dict:
        """Feedback to the policy and the step's train row (`StepRecorder.record`)."""
        t0 = time.perf_counter()
        step, self._step = self._step, None
        n_groups = len(step.arms) // self.group_size
        rewards = step.rewards if step.rewards is not None else np.full(len(step.arms), np.nan)
        frac = step.frac_zero
        if step.keep is None:
            learn, _ = group_signals(rewards, self.group_size, self.advantage)
            retained = n_groups - int(round(frac * n_groups)) if np.isfinite(frac) else 0
        else:
            learn, retained = group_signals(rewards, self.group_size, self.advantage, keep=step.keep)
        ledger = CostLedger(groups_generated=n_groups, groups_scored=n_groups, groups_retained=retained,
                            groups_optimized=n_groups, tokens=step.tokens, seconds=dict(step.seconds))
        ok = np.isfinite(rewards)
        arms = np.asarray(step.arms, dtype=np.int64)
        generated = np.stack([np.bincount(arms[ok], minlength=len(self.harnesses)).astype(np.float64),
                              np.bincount(arms[ok], weights=rewards[ok], minlength=len(self.harnesses))], axis=1)
        res = StepResult(learnability=learn, sketch=None if step.sketch is None else step.sketch.cpu().numpy(),
                         update_sketch=None if step.update is None else step.update.cpu().numpy(),
                         reward=float(np.nanmean(rewards)) if np.isfinite(rewards).any() else float("nan"),
                         cost=ledger, extras={"grad_norm": step.grad_norm, "frac_reward_zero_std": frac},
                         generated=generated, groups=self._groups(step, rewards))
        row = self.recorder.record(res, scheduler_seconds=step.own + (time.perf_counter() - t0))
        row["overhead_frac"] = step_overhead(row)
        return row

    def _groups(self, step: _Signals, rewards: np.ndarray) -> dict:
        """The step's rows of the groups table (every completion group TRL generated, before the
        filter); cost = its completion tokens, or an even share of the step's tokens where the
        per-row lengths are not known (several processes)."""
        n_groups = len(step.arms) // self.group_size
        if step.lengths is not None:
            costs = step.lengths.reshape(-1, self.group_size).sum(axis=1)
        else:
            costs = np.full(n_groups, step.tokens / n_groups if n_groups else 0.0)
        return group_table(rewards, np.asarray(step.arms), self.group_size, self.advantage, keep=step.keep,
                           costs=costs)

    def result(self, config: dict | None = None):
        """The run's `RunResult` (train and eval frames, run.json content)."""
        return self.recorder.result(config)


class HarnessGRPOTrainer(GRPOTrainer):
    """`GRPOTrainer` whose every optimizer step trains on the harness(es) that `scheduler`'s
    policy selects. Overrides only hooks (generation batch, reward gathering, the
    pre-clipping gradient) and delegates the work to TRL."""

    def __init__(self, *args, scheduler: HarnessScheduler, **kwargs):
        callbacks = list(kwargs.pop("callbacks", None) or []) + [scheduler]
        super().__init__(*args, callbacks=callbacks, **kwargs)
        a = self.args
        if a.steps_per_generation != a.gradient_accumulation_steps or self.num_iterations != 1:
            raise UserError(f"steps_per_generation={a.steps_per_generation}, num_iterations={self.num_iterations} "
                            f"are not allowed: one generation must be one optimizer step (steps_per_generation = "
                            f"gradient_accumulation_steps={a.gradient_accumulation_steps}, num_iterations = 1)")
        self.scheduler = scheduler
        batch = a.per_device_train_batch_size * a.steps_per_generation * self.accelerator.num_processes
        scheduler.attach(self.accelerator.unwrap_model(self.model), group_size=self.num_generations,
                         batch_groups=batch // self.num_generations)

    def _generate_and_score_completions(self, inputs):
        if not self.model.training:
            return super()._generate_and_score_completions(inputs)
        rows = self.scheduler.begin(len(inputs), self.accelerator.process_index)
        t0 = time.perf_counter()
        out = super()._generate_and_score_completions([self.train_dataset[i] for i in rows])
        out["advantages"] = self.scheduler.filter_advantages(out["advantages"], self.accelerator.process_index)
        self.scheduler.generated(time.perf_counter() - t0, self._metrics["train"]["frac_reward_zero_std"][-1],
                                 out["num_items_in_batch"], scoring=getattr(self, "_hb_scoring", 0.0))
        self._hb_backward_start = time.perf_counter()
        return out

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        t0 = time.perf_counter()
        per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._hb_scoring = time.perf_counter() - t0
        if self.model.training:
            lengths = [len(c) for c in completion_ids_list] if self.accelerator.num_processes == 1 else None
            self.scheduler.set_rewards(per_func, self.reward_weights, lengths)
        return per_func

    def _grads_synced(self) -> bool:
        return self.accelerator.num_processes == 1 or self.model_wrapped is not self.model

    def _hb_sketch(self) -> None:
        backward = time.perf_counter() - getattr(self, "_hb_backward_start", time.perf_counter())
        self.scheduler.take_sketch(self._grads_synced(), backward)

    def _clip_grad_norm(self, model):
        self._hb_sketch()
        norm = super()._clip_grad_norm(model)
        self.scheduler.set_grad_norm(norm)
        return norm

    def _get_grad_norm(self, model, grad_norm=None):
        if grad_norm is not None:     # clipping computed it: `_clip_grad_norm` took the sketch
            return super()._get_grad_norm(model, grad_norm=grad_norm)
        self._hb_sketch()             # max_grad_norm = 0: no clipping, the sketch is taken here
        norm = super()._get_grad_norm(model)
        self.scheduler.set_grad_norm(norm)
        return norm

    def log(self, logs: dict, start_time: float | None = None) -> None:
        """TRL's log of a training step, with the step's scheduler signals (`hb/` scalars of
        its train row, real_runs.tracking) merged in: whatever `report_to` names gets them."""
        rows = self.scheduler.recorder.rows
        if self.model.training and rows and rows[-1]["step"] != getattr(self, "_hb_logged", None):
            from real_runs.tracking import row_metrics
            self._hb_logged = rows[-1]["step"]
            logs = {**logs, **row_metrics(rows[-1], self.scheduler.harnesses)}
        super().log(logs, start_time)

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        if resume_from_checkpoint:
            folder = resume_from_checkpoint
            if folder is True:
                from transformers.trainer_utils import get_last_checkpoint
                folder = get_last_checkpoint(self.args.output_dir)
                if folder is None:
                    raise UserError(f"resume_from_checkpoint=True is not allowed: no checkpoint in "
                                    f"{self.args.output_dir!r}")
            self.scheduler.load_checkpoint(folder)
            resume_from_checkpoint = folder
        return super().train(resume_from_checkpoint, *args, **kwargs)
