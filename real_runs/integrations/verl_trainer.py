"""verl's driver with the harness scheduler inside (verl 0.5-0.7, extra `harnessbandit[verl]`;
design: docs/VERL.md). Imports verl: only for a process that runs verl.

* `HarnessRayPPOTrainer`: a `RayPPOTrainer` subclass that overrides only `_update_actor`
  (and checks its dataloader once it is built). After verl's actor update of a step it
  1. moves the gradient sketch the actor took before its optimizer step from the update's
     output into the step's batch (`take_sketch`: legacy workers return a `DataProto` whose
     `meta_info["hb_sketch"]` -- or the metrics' `hb_sketch` -- carries it);
  2. records the step in the sampler (`HarnessCurriculumCore.record_early`), BEFORE verl's
     checkpoint of the step: verl saves inside the step and calls `sampler.update(batch)`
     only after it, so a stock trainer's checkpoint lacks that step's feedback and a resumed
     run would replay its choice. verl's own later `sampler.update(batch=batch)` returns the
     row already recorded;
  3. merges the step's `hb/` scalars (real_runs.tracking.row_metrics) into the metrics verl
     logs, so `trainer.logger=[console,wandb,tensorboard,trackio]` shows them.
* `HarnessTaskRunner` and `main`: verl's `main_ppo` entry point with this trainer
  (`python -m real_runs.integrations.verl_trainer <verl's Hydra overrides>`).

New engine workers (`trainer.use_legacy_worker_impl=disable`): verl's `_update_actor` keeps
only the worker's `metrics` dict (renamed `actor/...`) of the update's output, so a sketch
reaches the driver only as the metric `actor/hb_sketch` (a list, which `take_sketch` reads);
the engine's metrics aggregation across ranks is not ours to control, so that path is not
checked: what is missing is a worker-side hook that returns the all-reduced vector unchanged.
"""
from __future__ import annotations

import os

import numpy as np
from verl.trainer.ppo.ray_trainer import RayPPOTrainer

from policies.errors import UserError
from real_runs.integrations.verl_sampler import HarnessCurriculumCore
from real_runs.tracking import row_metrics

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
    """`RayPPOTrainer` whose sampler (`data.sampler` = HarnessCurriculumSampler) records each
    step before verl checkpoints it, with the actor's sketch and the `hb/` metrics."""

    def _create_dataloader(self, *args, **kwargs):
        super()._create_dataloader(*args, **kwargs)
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
        row = sampler.record_early(batch)
        out.meta_info.setdefault("metrics", {}).update(row_metrics(row, sampler.harnesses))
        return out


def _task_runner():
    from verl.trainer import main_ppo

    class HarnessTaskRunner(main_ppo.TaskRunner):
        """verl's TaskRunner building `HarnessRayPPOTrainer` (in the Ray actor's process)."""

        def run(self, config):
            main_ppo.RayPPOTrainer = HarnessRayPPOTrainer
            return super().run(config)

    return HarnessTaskRunner


def main() -> None:
    """verl's `main_ppo` (its Hydra config `ppo_trainer`, the same overrides) with
    `HarnessRayPPOTrainer`."""
    import hydra
    import ray
    from verl.experimental.reward_loop import migrate_legacy_reward_impl
    from verl.trainer import main_ppo
    from verl.utils.device import auto_set_device

    @hydra.main(config_path=os.path.join(os.path.dirname(main_ppo.__file__), "config"),
                config_name="ppo_trainer", version_base=None)
    def _main(config):
        auto_set_device(config)
        config = migrate_legacy_reward_impl(config)
        main_ppo.run_ppo(config, task_runner_class=ray.remote(num_cpus=1)(_task_runner()))

    _main()


if __name__ == "__main__":
    main()
