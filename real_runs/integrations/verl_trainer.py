"""verl's legacy driver with the harness scheduler inside (verl 0.5-0.7, and 0.8-0.9 with
`trainer.use_v1=false`; extra `harnessbandit[verl]`; design: docs/VERL.md). Imports verl: only
for a process that runs verl. The entry point is `python -m real_runs.integrations.verl_main`,
which checks the installed verl before importing it.

* `HarnessRayPPOTrainer`: a `RayPPOTrainer` subclass. On verl 0.5-0.7 verl builds the sampler
  from `data.sampler` (HarnessCurriculumSampler); on 0.8-0.9 (no curriculum hook, and the
  schema rejects `data.sampler.*`) the trainer builds it itself from `+data.harnessbandit.*`
  and hands it to verl as `train_sampler`. After verl's actor update of a step it
  1. moves the gradient sketch the actor took before its optimizer step from the update's
     output into the step's batch (`take_sketch`: legacy workers return a `DataProto` whose
     `meta_info["hb_sketch"]` -- or the metrics' `hb_sketch` / `actor/hb_sketch` -- carries it);
  2. records the step in the sampler BEFORE verl's checkpoint of the step (0.5-0.7:
     `record_early`, verl's own later `sampler.update(batch=batch)` returns that row; 0.8-0.9:
     `update`, which verl no longer calls);
  3. merges the step's `hb/` scalars (real_runs.tracking.row_metrics) into the metrics verl
     logs, so `trainer.logger=[console,wandb,tensorboard,trackio]` shows them.
  On 0.8-0.9 with `+data.harnessbandit.sketch=true` the actor role's worker becomes the
  sketching one (`verl_engine_worker.install_if_asked`) before verl reads the mapping.
* `task_runner` and `main`: verl's TaskRunner (0.5-0.8 `main_ppo`, 0.9 `main_ppo_v0`) building
  `HarnessRayPPOTrainer` in its Ray actor, run through verl's own `run_ppo`.
"""
from __future__ import annotations

import os

import numpy as np
from verl.trainer.ppo.ray_trainer import RayPPOTrainer

from policies.errors import UserError
from real_runs.integrations.verl_sampler import (VERL_SUPPORTED, HarnessCurriculumCore, installed_version,
                                                 version_tuple)
from real_runs.tracking import row_metrics

#: whether this verl's RayPPOTrainer.fit calls `sampler.update(batch=batch)` (0.5-0.7) and builds
#: the sampler from `data.sampler`; from 0.8 on the trainer builds and feeds it
VERL_CALLS_UPDATE = version_tuple(installed_version("verl") or "0") < VERL_SUPPORTED[1]

SKETCH_KEYS = ("hb_sketch", "hb_update_sketch")


def _vector(value) -> np.ndarray:
    """A (d,) float32 sketch from what the workers sent: one vector, or one per rank (the
    same all-reduced vector on every rank: the first)."""
    arr = np.asarray(value, dtype=np.float32)
    return arr[0] if arr.ndim == 2 else arr


def take_sketch(actor_output, batch) -> None:
    """Move `hb_sketch` / `hb_update_sketch` from the actor update's output (`meta_info`, or
    its `metrics` as `hb_sketch` or `actor/hb_sketch`) into `batch.meta_info`, where
    `verl_result` reads them; the metrics lose them (verl would average the vector)."""
    meta = actor_output.meta_info
    metrics = meta.get("metrics", {}) or {}
    for key in SKETCH_KEYS:
        found = [meta.pop(key, None)] + [metrics.pop(name, None) for name in (key, f"actor/{key}")]
        value = next((v for v in found if v is not None), None)
        if value is not None:
            batch.meta_info[key] = _vector(value)


class HarnessRayPPOTrainer(RayPPOTrainer):
    """`RayPPOTrainer` whose sampler (0.5-0.7: `data.sampler` = HarnessCurriculumSampler; 0.8-0.9:
    built here from `+data.harnessbandit.*`) records each step before verl checkpoints it, with
    the actor's sketch and the `hb/` metrics."""

    def __init__(self, config, tokenizer, role_worker_mapping, *args, **kwargs):
        if not VERL_CALLS_UPDATE:           # 0.8-0.9: verl's engine workers; the sketch is the engine wrap
            from real_runs.integrations.verl_engine_worker import install_if_asked
            install_if_asked(role_worker_mapping, config.data)
        super().__init__(config, tokenizer, role_worker_mapping, *args, **kwargs)

    def _create_dataloader(self, train_dataset, val_dataset, collate_fn, train_sampler=None, *args, **kwargs):
        if not VERL_CALLS_UPDATE:
            if train_dataset is None:
                raise UserError("HarnessRayPPOTrainer on verl 0.8+ needs train_dataset (verl's TaskRunner passes "
                                "it): it builds the sampler over that dataset")
            train_sampler = HarnessCurriculumCore.from_config(train_dataset, self.config.data)
        super()._create_dataloader(train_dataset, val_dataset, collate_fn, train_sampler, *args, **kwargs)
        sampler = self.train_dataloader.sampler
        if not isinstance(sampler, HarnessCurriculumCore):
            raise UserError(f"HarnessRayPPOTrainer needs data.sampler.class_name=HarnessCurriculumSampler "
                            f"(class_path=pkg://real_runs.integrations.verl_sampler); got {type(sampler).__name__}")
        if self.total_training_steps != sampler.steps:
            raise UserError(f"trainer.total_training_steps={self.total_training_steps} (len(train_dataloader) x "
                            f"trainer.total_epochs unless set) differs from data.harnessbandit.steps={sampler.steps}: "
                            f"set trainer.total_epochs=1 or trainer.total_training_steps={sampler.steps}")

    def _update_actor(self, batch):
        out = super()._update_actor(batch)
        sampler = self.train_dataloader.sampler
        take_sketch(out, batch)
        row = sampler.record_early(batch) if VERL_CALLS_UPDATE else sampler.update(batch)
        out.meta_info.setdefault("metrics", {}).update(row_metrics(row, sampler.harnesses))
        return out


def task_runner():
    """verl's TaskRunner class (the undecorated one: 0.9's `main_ppo_v0.TaskRunner` is a Ray
    actor class) whose `run` builds `HarnessRayPPOTrainer`, wrapped as verl wraps its own."""
    import ray
    try:
        from verl.trainer import main_ppo_v0 as module      # 0.9: the legacy trainer's home
    except ImportError:
        from verl.trainer import main_ppo as module         # 0.5-0.8
    base = module.TaskRunner
    meta = getattr(base, "__ray_metadata__", None)
    base = meta.modified_class if meta is not None else base

    class HarnessTaskRunner(base):
        """verl's TaskRunner building `HarnessRayPPOTrainer` (in the Ray actor's process)."""

        def run(self, config):
            module.RayPPOTrainer = HarnessRayPPOTrainer
            return super().run(config)

    return ray.remote(num_cpus=1)(HarnessTaskRunner)


def run(config) -> None:
    """verl's `run_ppo` of the composed Hydra config with `HarnessRayPPOTrainer` (what
    `verl_main` calls for the legacy trainer)."""
    from verl.trainer import main_ppo
    from verl.utils.device import auto_set_device
    auto_set_device(config)
    if VERL_CALLS_UPDATE or version_tuple(installed_version("verl") or "0") < (0, 9):
        from verl.experimental.reward_loop import migrate_legacy_reward_impl
        config = migrate_legacy_reward_impl(config)
    main_ppo.run_ppo(config, task_runner_class=task_runner())
