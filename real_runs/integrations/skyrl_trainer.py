"""SkyRL 0.4's trainer with the harness scheduler inside (docs/SKYRL.md). Imports skyrl: only
for a process that runs SkyRL; the entry point is `python -m real_runs.integrations.skyrl_main`.

* `HarnessSkyRLTrainer`: SkyRL's `RayPPOTrainer` with its documented dataloader override
  (`_build_train_dataloader_and_compute_training_steps`): the train dataloader draws through
  the project's sampler (`skyrl_sampler.make_sampler`, harness = each prompt row's
  `env_class`), single-process (`num_workers=0`: a worker would prefetch the next step's
  prompts before this step's feedback), `train_batch_size` prompts per step, the sampler's
  `steps` as SkyRL's `total_training_steps`. DAPO `dynamic_sampling` (several draws per step)
  is refused with one line. `compute_advantages_and_returns` keeps the step's view (token
  rewards, uids, response mask) before SkyRL pops `rewards` and `uids` from the batch that
  `on_step_end` later sees. `save_checkpoints` writes the scheduler's state
  (`harnessbandit.pt`) into the step's checkpoint folder before SkyRL's own save (whose
  `latest_ckpt_global_step.txt` comes last), and `load_checkpoints` restores it (a checkpoint
  without it is refused with one line).
* `HarnessCallback`: a `TrainingCallback`: `on_step_end` records the step (`update`: L from
  the step's rewards per uid by SPEC §2.3, the policy's feedback, the SPEC §7 train row);
  `on_log` adds the step's `hb/` keys to the dict SkyRL commits to its tracker.
* `HarnessPPOExp`: SkyRL's `BasePPOExp` building `HarnessSkyRLTrainer` with the callback.
"""
from __future__ import annotations

import os

import torch
from skyrl.train.entrypoints.main_base import BasePPOExp
from skyrl.train.trainer import RayPPOTrainer
from skyrl.train.utils.callbacks import TrainingCallback
from torchdata.stateful_dataloader import StatefulDataLoader

from policies.errors import UserError
from real_runs.integrations.skyrl_sampler import dynamic_sampling_problem, make_sampler, skyrl_view, unique_uids
from real_runs.tracking import row_metrics

STATE_FILE = "harnessbandit.pt"


class HarnessCallback(TrainingCallback):
    """Feeds each step to the scheduler and its `hb/` keys to SkyRL's tracker."""

    def __init__(self):
        self._unlogged: dict | None = None

    def on_step_end(self, trainer, callback_input, control) -> None:
        view = trainer.hb_view
        if view is None:
            raise UserError(f"SkyRL step {trainer.global_step} computed no advantages, so the harness scheduler "
                            "has no feedback for it")
        trainer.hb_view = None
        self._unlogged = trainer.hb_sampler.update(view)

    def on_log(self, trainer, callback_input, control) -> None:
        if self._unlogged is not None and callback_input.logs is not None:
            callback_input.logs.update(row_metrics(self._unlogged, trainer.hb_sampler.harnesses))
            self._unlogged = None


class HarnessSkyRLTrainer(RayPPOTrainer):
    """SkyRL's RayPPOTrainer drawing each step's prompts through the harness scheduler."""

    def __init__(self, *args, hb_settings: dict, **kwargs):
        self.hb_settings, self.hb_view, self.hb_sampler = dict(hb_settings), None, None
        callbacks = list(kwargs.pop("callbacks", None) or [])
        super().__init__(*args, callbacks=[*callbacks, HarnessCallback()], **kwargs)

    def _build_train_dataloader_and_compute_training_steps(self):
        cfg = self.cfg
        problem = dynamic_sampling_problem(cfg.trainer.algorithm.dynamic_sampling.type)
        if problem:
            raise UserError(problem)
        if self.train_dataset is None:
            raise UserError("the SkyRL trainer with the harness scheduler needs a train dataset (data.train_data)")
        sampler = make_sampler(self.train_dataset, self.hb_settings, batch_size=cfg.trainer.train_batch_size,
                               env_class_key=getattr(self.train_dataset, "env_class_key", "env_class"),
                               default_env=cfg.environment.env_class)
        given = cfg.trainer.max_training_steps
        if given is not None and int(given) != sampler.steps:
            raise UserError(f"trainer.max_training_steps={given} differs from harnessbandit.steps={sampler.steps}: "
                            "leave it null or make them equal")
        self.hb_sampler = sampler
        self.train_dataloader = self._hb_dataloader()
        self.total_training_steps = sampler.steps

    def _hb_dataloader(self) -> StatefulDataLoader:
        """The train dataloader on the project's sampler: single-process, one step per batch,
        uids unique within a step (`unique_uids`)."""
        collate = self.train_dataset.collate_fn
        return StatefulDataLoader(self.train_dataset, batch_size=self.cfg.trainer.train_batch_size,
                                  sampler=self.hb_sampler, collate_fn=lambda items: unique_uids(collate(items)),
                                  num_workers=0, drop_last=True)

    def compute_advantages_and_returns(self, data):
        last = data.metadata.get("is_last_step") if self.cfg.generator.step_wise_trajectories else None
        self.hb_view = skyrl_view(self.hb_sampler, data["rewards"].float().cpu().numpy(), data.metadata["uids"],
                                  data["response_mask"].cpu().numpy(), pad_size=data.metadata.get("pad_size", 0),
                                  last_step=last)
        return super().compute_advantages_and_returns(data)

    def save_checkpoints(self) -> str:
        folder = os.path.join(self.cfg.trainer.ckpt_path, f"global_step_{self.global_step}")
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, f".{STATE_FILE}.tmp")
        torch.save(self.hb_sampler.state_dict(), tmp)
        os.replace(tmp, os.path.join(folder, STATE_FILE))
        return super().save_checkpoints()

    def load_checkpoints(self):
        step, path = super().load_checkpoints()
        if path:
            state = os.path.join(path, STATE_FILE)
            if not os.path.isfile(state):
                raise UserError(f"SkyRL checkpoint {path} has no {STATE_FILE} (it was not written by the harness "
                                "scheduler's trainer): resume is refused rather than restarting the scheduler")
            self.hb_sampler.load_state_dict(torch.load(state, weights_only=False))
            self.train_dataloader = self._hb_dataloader()
        return step, path


class HarnessPPOExp(BasePPOExp):
    """SkyRL's experiment building `HarnessSkyRLTrainer` (the `harnessbandit.*` settings)."""

    def __init__(self, cfg, hb_settings: dict):
        self.hb_settings = dict(hb_settings)
        super().__init__(cfg)

    def get_trainer(self, cfg, tracker, tokenizer, train_dataset, eval_dataset, inference_engine_client,
                    generator, colocate_pg):
        return HarnessSkyRLTrainer(cfg=cfg, tracker=tracker, tokenizer=tokenizer, train_dataset=train_dataset,
                                   eval_dataset=eval_dataset, inference_engine_client=inference_engine_client,
                                   generator=generator, colocate_pg=colocate_pg, hb_settings=self.hb_settings)
