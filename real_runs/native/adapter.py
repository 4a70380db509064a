"""`GRPOAdapter`: real GRPO training behind hbsim's `TrainingAdapter` (SPEC §6).

`hbsim.run(policy, GRPOAdapter(...), steps)` drives it like any synthetic environment.
One `train_step(allocation)`:
  1. dynamic sampling by `hbsim.sampling.DynamicSampler` (SPEC §2.2, shared with the
     synthetic envs): leftover groups of each requested harness first (oldest first, age
     recorded), then fresh groups -- G rollouts per task from the harness's own shuffled
     task pool, with over-sampling, for up to `sample_rounds` rounds;
  2. the harness's control loop and checker score every rollout (`rollout.play`, one
     batched call per round for all harnesses);
  3. groups that fail the group filter (`hbsim.sampling.GroupFilter`: zero variance, and
     the `keep_band` / `min_abs_adv` knobs when set) are dropped, after their rollouts and
     rewards are counted per harness (`StepResult.generated`); retained groups beyond the request go to the
     harness's leftover buffer (at most `leftover_max` groups, groups older than
     `leftover_max_age` steps dropped; 0 = no age limit);
  4. advantages, micro-batched PPO-clip + k3-KL backward, the gradient sketch of the
     last blocks BEFORE clipping and the step, clip, Adam, the update sketch
     (`trainer`); learnability from per-token advantages and masks (SPEC §2.3);
  5. the full cost ledger and seconds by phase.
Randomness: the named streams of `real_runs.streams`, all from the run seed and saved in
`state_dict`: a per-harness task pool (`world.pool.TaskPool`, TASK_POOL) and one torch
Generator for sampling (ROLLOUT); evaluation (`native.evaluation`, EVAL) draws from a
generator seeded by (seed, step), so it never perturbs training.

Data parallel (torch.distributed initialised by the caller, e.g. `hb real` under
torchrun): each rank generates its share of every harness's groups (own sampling stream
and leftover buffers); counts, token totals, rewards and learnability are summed across
ranks, the loss is divided by the GLOBAL token count, and the sketch and the gradients
are SUMmed, so all ranks step identically and report identical feedback.
"""
from __future__ import annotations

import copy
import dataclasses
import time

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist

from hbsim.adapter import CostLedger, StepResult
from hbsim.sampling import DynamicSampler, GroupFilter, when_set
from policies import Allocation
from policies.errors import UserError
from real_runs import streams
from real_runs.native.evaluation import heldout_eval
from real_runs.native.presets import RealConfig, model_dict, resolve
from real_runs.native.rollout import play
from real_runs.native.sketch import ParamSketch
from real_runs.native.trainer import (Group, accumulate_gradients, build_rows, global_sum, pad_rows,
                                      sketch_and_update, token_learnability)
from real_runs.world.harnesses import HARNESSES, TRAIN_HARNESSES
from real_runs.world.pool import TaskPool
from real_runs.world.tasks import make_tasks


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device={name!r} is not available: torch sees no CUDA device; use cpu or auto")
    return torch.device(name)


def global_sum_array(values: np.ndarray, device) -> np.ndarray:
    """Element-wise sum of a float array over ranks, one all-reduce (a copy outside torch.distributed)."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        t = torch.as_tensor(np.asarray(values, dtype=np.float64), device=device)
        dist.all_reduce(t)
        return t.cpu().numpy()
    return np.array(values, dtype=np.float64)


def _rank_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class GRPOAdapter:
    """Real GRPO on the task world's training harnesses (index = arm)."""

    def __init__(self, cfg: RealConfig | None = None, seed: int = 0, *, model=None, progress=None):
        """progress(done, total): called during a warm start that is trained (not cached)."""
        self.cfg = cfg or resolve()
        self.seed = int(seed)
        self.device = pick_device(self.cfg.device)
        if self.cfg.threads and self.device.type == "cpu":
            torch.set_num_threads(self.cfg.threads)  # process-wide: concurrent CPU workers must not oversubscribe
        self.rank, self.world = _rank_world()
        self.harnesses = list(TRAIN_HARNESSES)
        self._train_h = [HARNESSES[n] for n in TRAIN_HARNESSES]
        self.train_tasks, self.heldout_tasks = make_tasks(self.seed, n_train=self.cfg.n_train_tasks,
                                                          n_heldout=self.cfg.n_heldout_tasks)
        self.model, self.warm_key = model if model is not None else self._build_model(progress)
        self.ref = copy.deepcopy(self.model).requires_grad_(False).eval()
        self.optimizer = torch.optim.Adam([p for p in self.model.parameters() if p.requires_grad],
                                          lr=self.cfg.lr)
        patterns = tuple(p.strip() for p in self.cfg.sketch_patterns.split(",") if p.strip())
        self.sketch = ParamSketch.build(self.model, block_path=self.model.block_path,
                                        last_blocks=self.cfg.sketch_blocks, dim=self.cfg.sketch_dim,
                                        seed=self.seed + self.cfg.sketch_seed, patterns=patterns)
        self._pool = TaskPool([np.arange(len(self.train_tasks))] * len(self.harnesses), self.seed,
                              streams.TASK_POOL)
        self._gen = torch.Generator(device=self.device).manual_seed(
            streams.torch_seed(self.seed, streams.ROLLOUT, self.rank))
        self._sampler = DynamicSampler(len(self.harnesses), oversample=self.cfg.oversample,
                                       max_rounds=self.cfg.sample_rounds, max_age=self.cfg.leftover_max_age,
                                       max_size=self.cfg.leftover_max,
                                       group_filter=GroupFilter.of(self.cfg, self.cfg.advantage))
        self._step = 0

    def _build_model(self, progress=None):
        if self.cfg.model_path:
            from real_runs.native.hf import load_hf_model
            return load_hf_model(self.cfg.model_path, self.cfg.hf_block_path, self.device, self.cfg.max_len), "hf"
        from real_runs.native.model import ModelConfig, Transformer
        from real_runs.native.warmstart import warm_start, warm_tasks
        warm_h = self._train_h[:min(self.cfg.warm_harnesses, len(self._train_h))]
        tasks = warm_tasks(self.cfg, self.seed, self.train_tasks, self.heldout_tasks)
        others = self._train_h[len(warm_h):]
        state, key = warm_start(self.cfg, self.seed, warm_h, tasks, self.device, others, progress=progress)
        model = Transformer(ModelConfig(**model_dict(self.cfg)))
        model.load_state_dict(state)
        return model.to(self.device), key

    # -- sampling --------------------------------------------------------------------
    def _generate(self, requests: dict[int, int], ledger: CostLedger) -> dict:
        """The sampler's `generate`: requests = harness -> fresh groups (this rank's share),
        played in one batch; returns harness -> (groups, rewards (n, G))."""
        G = self.cfg.group_size
        jobs, meta = [], []
        for h, n in requests.items():
            for task in (self.train_tasks[i] for i in self._pool.draw(h, n)):
                meta.append((h, task))
                jobs.extend([(self._train_h[h], task)] * G)
        out = {h: ([], np.zeros((0, G))) for h in requests}
        if not jobs:
            return out
        self.model.eval()
        played = play(self.model, jobs, generator=self._gen, max_new=self.cfg.max_new_tokens,
                      temperature=self.cfg.temperature, chunk=self.cfg.eval_chunk)
        ledger.tokens += played.tokens
        for phase, sec in played.seconds.items():
            ledger.seconds[phase] = ledger.seconds.get(phase, 0.0) + sec
        groups = [Group(h, task.id, np.asarray(played.rewards[k * G:(k + 1) * G]),
                        played.turns[k * G:(k + 1) * G], self._step) for k, (h, task) in enumerate(meta)]
        for h in requests:
            mine = [g for g in groups if g.harness == h]
            out[h] = (mine, np.stack([g.rewards for g in mine]) if mine else np.zeros((0, G)))
        return out

    def _share(self, n: int) -> int:
        """This rank's part of n groups (ranks split every request as evenly as possible)."""
        return n // self.world + (1 if self.rank < n % self.world else 0)

    def collect(self, counts: np.ndarray, ledger: CostLedger) -> list[Group]:
        """The optimizer batch of this rank for allocation counts (H,) (SPEC §2.2); the
        step's (H, 2) generated rollouts and reward sums of this rank go to `self._generated`."""
        need = {h: self._share(int(c)) for h, c in enumerate(counts) if c > 0}
        sample = self._sampler.collect(need, self._step, lambda requests: self._generate(requests, ledger))
        self._generated = sample.generated_array(len(self.harnesses))
        ledger.groups_generated = ledger.groups_scored = sample.generated
        ledger.groups_retained = sample.retained
        ledger.leftover_used, ledger.leftover_age = sample.leftover_used, sample.leftover_age
        ledger.leftover_size = sample.leftover_size
        return [g for h in sorted(sample.parts) for block in sample.parts[h] for g in block]

    def set_lr_scale(self, scale: float) -> None:
        """The adapter's optional `set_lr_scale` (hbsim/adapter.py): Adam's lr = cfg.lr x scale
        (a checkpoint's optimizer state carries it)."""
        for group in self.optimizer.param_groups:
            group["lr"] = self.cfg.lr * float(scale)

    # -- the step --------------------------------------------------------------------
    def train_step(self, allocation: Allocation) -> StepResult:
        cfg, ledger = self.cfg, CostLedger()
        counts = np.asarray(allocation.counts, dtype=np.int64)
        if counts.shape != (len(self.harnesses),):
            raise ValueError(f"allocation.counts shape={counts.shape} is not allowed: "
                             f"expected ({len(self.harnesses)},)")
        groups = self.collect(counts, ledger)
        t0 = time.perf_counter()
        rows = build_rows(groups, cfg.advantage)
        n_tokens = global_sum(rows.n_tokens, self.device)
        self.model.eval()  # no dropout: training log-probs must match the rollout's and the reference's
        stats = dict.fromkeys(("loss", "kl_sum", "clipped"), float("nan"))
        if n_tokens > 0:
            stats = accumulate_gradients(self.model, self.ref, rows, micro_batch=cfg.micro_batch,
                                         n_tokens_global=n_tokens, clip_low=cfg.clip_low,
                                         clip_high=cfg.clip_high, kl_coef=cfg.kl_coef)
        learn = self._learnability(rows)
        ledger.seconds["backward"] = time.perf_counter() - t0
        sketch, update, grad_norm, update_norm = None, None, float("nan"), 0.0
        if n_tokens > 0:
            sketch, update, grad_norm, seconds, update_norm = sketch_and_update(
                self.model, self.optimizer, self.sketch, update_sketch=cfg.update_sketch,
                max_grad_norm=cfg.max_grad_norm)
            ledger.seconds.update(seconds)
        ledger.groups_optimized = len(groups)
        for name in ("groups_generated", "groups_scored", "groups_retained", "groups_optimized", "tokens"):
            setattr(ledger, name, int(global_sum(getattr(ledger, name), self.device)))   # over all ranks
        generated = global_sum_array(self._generated, self.device)
        reward_sum = global_sum(sum(float(g.rewards.sum()) for g in groups), self.device)
        n_roll = global_sum(sum(len(g.rewards) for g in groups), self.device)
        self._step += 1
        extras = {"loss": stats["loss"], "grad_norm": grad_norm, "kl": stats["kl_sum"] / max(n_tokens, 1.0),
                  "clip_frac": stats["clipped"] / max(n_tokens, 1.0)}
        return StepResult(learnability=learn, sketch=sketch, update_sketch=update,
                          reward=reward_sum / n_roll if n_roll else float("nan"), cost=ledger, extras=extras,
                          generated=generated, update_norm=update_norm)

    def _learnability(self, rows) -> float | None:
        """SPEC §2.3 from per-token advantages and masks, over all ranks' retained groups."""
        if len(rows):
            batch = pad_rows(rows, list(range(len(rows))), "cpu")
            local = token_learnability(batch["adv"], batch["mask"], torch.tensor(rows.traj),
                                       torch.tensor(rows.group))
            n_groups = max(rows.group) + 1
        else:
            local, n_groups = None, 0
        total = global_sum((local or 0.0) * n_groups, self.device)
        count = global_sum(n_groups, self.device)
        return total / count if count else None

    # -- evaluation ------------------------------------------------------------------
    def evaluate(self) -> pd.DataFrame:
        """`native.evaluation.heldout_eval` of the first `eval_tasks` held-out tasks."""
        cfg = self.cfg
        return heldout_eval(self.model, self.harnesses, self.heldout_tasks[:cfg.eval_tasks], seed=self.seed,
                            step=self._step, attempts=cfg.eval_attempts, max_new=cfg.max_new_tokens,
                            temperature=cfg.temperature, chunk=cfg.eval_chunk)

    # -- records and state -----------------------------------------------------------
    def config(self) -> dict:
        return when_set({"kind": "real", "n_harnesses": len(self.harnesses), **dataclasses.asdict(self.cfg)})

    def state_dict(self) -> dict:
        return {"step": self._step, "model": self.model.state_dict(), "ref": self.ref.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "pool": self._pool.state_dict(), "gen": self._gen.get_state(), "leftover": self._sampler.state_dict(),
                "warm_key": self.warm_key}

    def load_state_dict(self, state: dict) -> None:
        self._step = int(state["step"])
        self.model.load_state_dict(state["model"])
        self.ref.load_state_dict(state["ref"])
        self.optimizer.load_state_dict(state["optimizer"])
        self._pool.load_state_dict(state["pool"])
        self._gen.set_state(state["gen"])
        self._sampler.load_state_dict(state["leftover"])

