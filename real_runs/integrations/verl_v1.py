"""verl 0.9's v1 trainer with the harness scheduler inside (docs/VERL.md, section 1b).
Imports verl: only for a process that runs verl; the entry point is
`python -m real_runs.integrations.verl_main` (which imports this module, registering the
trainer, in the driver and in verl's TaskRunner actor: never through `verl.plugins`).

`HarnessPPOTrainer` is verl's `PPOTrainerSync`, registered as `trainer.v1.trainer_mode=
harnessbandit` (`verl_main` sets it). It runs as the sync trainer (its config's trainer_mode
becomes `sync` before verl's own __init__ reads it, so the replay buffer, refill and
checkpoint paths are the sync mode's) with three seams:

* `_init_dataloader`: verl's own, then the train dataloader rebuilt on the project's sampler
  (`HarnessCurriculumCore.from_config` over verl's RLHFDataset, `+data.harnessbandit.*`):
  the sync mode draws each step's prompts in `prepare_step`, after the previous step's
  update, so the choice for step k+1 follows step k's feedback. `steps_per_epoch` and
  `total_training_steps` become the sampler's `steps` (unset `trainer.total_training_steps`
  is set to it; another value is refused).
* `_compute_advantage(batch, metrics)`: reads `uid`, `rm_scores`, `response_mask` and the
  harness fields (`extra_info`, the harness column, `data_source`: every dataset field of a
  trajectory is stored with it) of each trajectory from TransferQueue, keeps the step's
  view, then runs verl's own. One trajectory per (uid, rollout session): an agent loop that
  stores several outputs per session counts once.
* `step`: after verl's step (every local update of `parameter_sync_step`), the step is
  recorded through the sampler (`update`: L by SPEC §2.3 from the rewards grouped by uid,
  the policy's feedback, the SPEC §7 train row) before verl's `_save_checkpoint` (which
  saves the dataloader, hence the sampler, state), and the `hb/` scalars join `metrics`,
  which verl logs to the user's trackers.

The sketch (T): when `+data.harnessbandit.sketch=true`, `_init_resource_pool_mgr` puts the
sketching actor worker (`verl_engine_worker.sketch_worker`: the engine's optimizer step wrapped,
`sketch_block_path` / `sketch_blocks` / `sketch_dim` from `+data.harnessbandit.*`, the policy's
seed) in place of verl's for the actor role; its update output carries `hb_sketch` in its
metrics, which `take_update_sketch` pops on the driver before verl averages the metrics. The
FSDP engine needs GPUs (scripts/gpu_check.sh). Without the sketch T is missing (docs/VERL.md,
section 4).
"""
from __future__ import annotations

import numpy as np
import transfer_queue as tq
from omegaconf import open_dict
from torchdata.stateful_dataloader import StatefulDataLoader
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.dataset.rl_dataset import collate_fn

from policies.errors import UserError
from real_runs.integrations.verl_engine_worker import install_if_asked
from real_runs.integrations.verl_sampler import (V1_TRAINER_NAME, HarnessCurriculumCore, harness_names,
                                                 harness_settings, merge_views, step_view, take_update_sketch,
                                                 trajectory_rows, v1_problem)
from real_runs.tracking import row_metrics

TRAINER_NAME = V1_TRAINER_NAME
#: the TransferQueue fields a step's view reads (the harness fields are read when stored)
VIEW_FIELDS = ("uid", "rm_scores", "response_mask")
HARNESS_FIELDS = ("extra_info", "data_source")


def _plain(values) -> list:
    """A TransferQueue field of a batch as a python list (NonTensorStack, tensor or list)."""
    if hasattr(values, "tolist"):
        return values.tolist()
    return list(values)


def read_view(keys, partition_id: str, harness_key: str):
    """The step view (`step_view`) of the trajectories `keys` read from TransferQueue."""
    wanted = list(VIEW_FIELDS) + [f for f in (*HARNESS_FIELDS, harness_key) if f not in VIEW_FIELDS]
    present = _stored_fields(keys, partition_id)
    fields = [f for f in wanted if f in present] if present is not None else list(VIEW_FIELDS)
    data = tq.kv_batch_get(keys=list(keys), partition_id=partition_id, select_fields=fields)
    rows = trajectory_rows(keys)
    scores = data["rm_scores"]
    mask = data["response_mask"]
    totals = [float(scores[i].sum()) for i in rows]
    tokens = [int(mask[i].sum()) for i in rows]
    uids = [_plain(data["uid"])[i] for i in rows]
    table = {f: [_plain(data[f])[i] for i in rows] for f in fields if f not in VIEW_FIELDS}
    names = harness_names(table, harness_key, len(rows))
    return step_view(totals, uids, names, harness_key=harness_key, response_mask=np.asarray(tokens)[:, None])


def _stored_fields(keys, partition_id: str):
    """The field names stored for `keys` (None when this TransferQueue cannot say)."""
    try:
        meta = tq.kv_batch_get(keys=list(keys)[:1], partition_id=partition_id)
    except Exception:           # noqa: BLE001 - a TransferQueue without field listing: read the fixed fields
        return None
    return set(meta.keys())


@register_trainer(TRAINER_NAME)
class HarnessPPOTrainer(PPOTrainerSync):
    """verl 0.9's sync v1 trainer whose prompts come from the harness scheduler."""

    def __init__(self, config):
        problem = v1_problem(config)
        if problem:
            raise UserError(problem)
        with open_dict(config):             # the sync trainer's own paths (replay buffer, refill, checkpoint)
            config.trainer.v1.trainer_mode = "sync"
        self._hb_views: list = []
        self._hb_meta: dict = {}
        super().__init__(config)

    def _init_dataloader(self):
        steps = harness_settings(self.config.data).steps
        given = self.config.trainer.get("total_training_steps", None)
        if steps is not None and given is not None and int(given) != steps:
            raise UserError(f"trainer.total_training_steps={given} differs from data.harnessbandit.steps={steps}: "
                            "leave it unset (the v1 trainer then runs the sampler's steps) or make them equal")
        if steps is not None and given is None:
            with open_dict(self.config):
                self.config.trainer.total_training_steps = steps
        super()._init_dataloader()
        sampler = HarnessCurriculumCore.from_config(self.train_dataset, self.config.data, "verl's v1 trainer")
        self.train_dataloader = StatefulDataLoader(
            dataset=self.train_dataset, batch_size=self.config.data.get("gen_batch_size", None)
            or self.config.data.train_batch_size, num_workers=self.config.data["dataloader_num_workers"],
            drop_last=True, collate_fn=collate_fn, sampler=sampler)
        self.train_dataloader_it = None
        self.steps_per_epoch = sampler.steps
        self.total_training_steps = sampler.steps

    def _init_resource_pool_mgr(self):
        super()._init_resource_pool_mgr()
        install_if_asked(self.role_worker_mapping, self.config.data)

    @property
    def hb_sampler(self) -> HarnessCurriculumCore:
        return self.train_dataloader.sampler

    def _compute_advantage(self, batch, metrics: dict):
        self._hb_views.append(read_view(batch.keys, batch.partition_id, self.hb_sampler.harness_key))
        return super()._compute_advantage(batch, metrics)

    def _update_actor(self, batch, metrics: dict):
        group = self.actor_rollout_wg
        update = group.update_actor

        def update_and_take(data):
            output = update(data)
            take_update_sketch(output, self._hb_meta)
            return output

        group.update_actor = update_and_take
        try:
            return super()._update_actor(batch, metrics)
        finally:
            group.update_actor = update

    def step(self, metrics: dict, timing_raw: dict):
        self._hb_views, self._hb_meta = [], {}
        batch = super().step(metrics, timing_raw)
        if not self._hb_views:
            raise UserError("verl's v1 step computed no advantage, so the harness scheduler has no feedback for "
                            f"step {self.global_steps}")
        view = merge_views(self._hb_views)
        view.meta_info.update(self._hb_meta)
        sampler = self.hb_sampler
        row = sampler.update(view)
        metrics.update(row_metrics(row, sampler.harnesses))
        return batch


def task_runner():
    """verl's TaskRunnerV1 (undecorated) whose `run` imports this module in the Ray actor's
    process (registering the trainer there) before verl looks the trainer up."""
    import ray
    from verl.trainer import main_ppo
    base = main_ppo.TaskRunnerV1
    meta = getattr(base, "__ray_metadata__", None)
    base = meta.modified_class if meta is not None else base

    class HarnessTaskRunnerV1(base):
        def run(self, config):
            import real_runs.integrations.verl_v1  # noqa: F401 - registers TRAINER_NAME in this process
            return super().run(config)

    return ray.remote(HarnessTaskRunnerV1)


def run(config) -> None:
    """verl 0.9's v1 path of `main_ppo.main` (validate_config, run_ppo) with this trainer."""
    from verl.trainer import main_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device
    auto_set_device(config)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    main_ppo.run_ppo(config, task_runner_class=task_runner())
