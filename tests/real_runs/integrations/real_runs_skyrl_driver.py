"""Run SkyRL 0.4.0's own training loop (RayPPOTrainer.train) with HarnessSkyRLTrainer and its
callback on the CPU, for tests/real_runs/integrations/test_real_runs_skyrl_package.py. Runs in
the separate environment `make venv-skyrl` builds (.venv-skyrl), never in the test process.

    python real_runs_skyrl_driver.py OUT MODE [STEPS CKPT_INTERVAL KILL_AT]

MODE `harness`: HarnessSkyRLTrainer (resumes from OUT/ckpt when a checkpoint is there);
`stock`: SkyRL's own RayPPOTrainer writes the checkpoints (then `harness` must refuse them);
`dynamic`: trainer.algorithm.dynamic_sampling.type=filter (refused). KILL_AT > 0: SIGKILL this
process during step KILL_AT's generation.

On Python 3.11 (this machine) the driver first points typing.TypedDict at typing_extensions'
(skyrl 0.4.0 declares Python >= 3.12; its code otherwise runs unchanged on 3.11).
What is SkyRL's and what is stubbed: the config (SkyRLTrainConfig.from_cli_overrides), the
dataset (PromptDataset reading a parquet file; its prompt-length filter through a stand-in
tokenizer's chat template), the dataloader override, the loop of `train` (prepare_generator_input,
uids, postprocess_generator_output, convert_to_training_input, compute_advantages_and_returns
(GRPO), the callbacks, save_checkpoints / load_checkpoints with data.pt and trainer_state.pt,
the tracker payload) are SkyRL's own. Stubbed: the generator (a seeded 0/1 reward per env_class
in SkyRL's GeneratorOutput), the workers behind `dispatch` (weight sync, log-probs, the update,
the model checkpoint) and the tracker (records what `train` logs).

Writes OUT/result-<pid>.json: the sampler's train rows, the hb/ keys logged, the policy's
probabilities, the dataloader length and total steps.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import typing
from pathlib import Path

import numpy as np
import torch
import typing_extensions

# skyrl 0.4.0 declares Python >= 3.12 and this machine has 3.11: pydantic refuses its models'
# typing.TypedDict below 3.12, so point it at typing_extensions' (what 3.12's is) before SkyRL loads
if sys.version_info < (3, 12):
    typing.TypedDict = typing_extensions.TypedDict

HARNESSES = ["gsm8k", "search", "sql"]
SUCCESS = {"gsm8k": 0.5, "search": 0.25, "sql": 0.75}
N_SAMPLES, BATCH, R_LEN = 4, 2, 3


class Tokenizer:
    """The parts of a Hugging Face tokenizer SkyRL's dataset and loop call (no model files)."""
    pad_token_id, eos_token_id = 0, 1

    def apply_chat_template(self, messages, add_generation_prompt=True, return_dict=False, tokenize=True, **kw):
        text = " ".join(m["content"] for m in messages)
        return [2 + (ord(c) % 50) for c in text][:8] if tokenize else text

    def decode(self, ids, **kw):
        return " ".join(map(str, ids))


def write_dataset(out: Path) -> str:
    import pandas as pd
    rows = [{"prompt": [{"role": "user", "content": f"task {i} of {h}"}], "env_class": h,
             "reward_spec": {"ground_truth": h}} for i, h in enumerate(h for h in HARNESSES for _ in range(4))]
    rows[1]["env_class"] = None            # a row without env_class: the config's environment.env_class
    path = out / "train.parquet"
    pd.DataFrame(rows).to_parquet(path)
    return str(path)


class Generator:
    def __init__(self, kill_at: int):
        self.kill_at = kill_at

    async def generate(self, input_batch):
        step = input_batch["batch_metadata"].global_step
        if step == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        out = {"prompt_token_ids": [], "response_ids": [], "rewards": [], "loss_masks": [], "stop_reasons": [],
               "rollout_metrics": {}, "rollout_logprobs": None, "trajectory_ids": input_batch["trajectory_ids"]}
        for i, (env, tid) in enumerate(zip(input_batch["env_classes"], input_batch["trajectory_ids"])):
            reward = float(np.random.default_rng([step, *map(int, tid.instance_id.split("#")), tid.repetition_id]).random()
                           < SUCCESS[env])
            out["prompt_token_ids"].append([5, 6, 7])
            out["response_ids"].append([8 + i % 5] * R_LEN)
            out["rewards"].append(reward)
            out["loss_masks"].append([1] * R_LEN)
            out["stop_reasons"].append("stop")
        return out


class Dispatch:
    """SkyRL's WorkerDispatch seen from the trainer: no workers."""

    def __init__(self):
        self.saved = []

    async def save_weights_for_sampler(self):
        return None

    def get_timing_metrics(self):
        return {}

    def get_lcm_dp_size(self):
        return 1

    def save_checkpoint(self, model, path, tokenizer=None):
        os.makedirs(path, exist_ok=True)
        Path(path, "model.json").write_text(json.dumps({"model": model}))

    def load_checkpoint(self, model, path, *args, **kwargs):
        return None

    def finalize_pending_saves(self, model):
        return None

    def get_node_ids(self):
        return []


class Tracker:
    calls: list = []

    def log(self, data, step, commit=True):
        Tracker.calls.append({"step": step, **{k: float(v) for k, v in data.items() if k.startswith("hb/")}})

    def log_exception(self, exc, step=None):
        return None

    def finish(self, *args, **kwargs):
        return None


def config(out: Path, mode: str, steps: int, ckpt: int):
    from skyrl.train.config import SkyRLTrainConfig
    args = [f"data.train_data=['{write_dataset(out)}']", f"trainer.train_batch_size={BATCH}",
            f"trainer.policy_mini_batch_size={BATCH}", f"generator.n_samples_per_prompt={N_SAMPLES}",
            "trainer.epochs=1", "trainer.algorithm.advantage_estimator=grpo", f"trainer.ckpt_interval={ckpt}",
            f"trainer.ckpt_path={out / 'ckpt'}", f"trainer.export_path={out / 'export'}", "trainer.eval_interval=-1",
            "trainer.hf_save_interval=-1", "trainer.resume_mode=latest", "trainer.logger=console",
            "environment.env_class=search", "trainer.placement.colocate_all=false",
            "generator.inference_engine.enable_ray_prometheus_stats=false", "trainer.enable_ray_gpu_monitor=false"]
    if mode == "dynamic":
        args.append("trainer.algorithm.dynamic_sampling.type=filter")
    return SkyRLTrainConfig.from_cli_overrides(args)


def main(out: Path, mode: str, steps: int, ckpt: int, kill_at: int) -> int:
    from skyrl.train.dataset import PromptDataset
    from skyrl.train.trainer import RayPPOTrainer

    from policies.errors import UserError
    from real_runs.integrations.skyrl_trainer import HarnessSkyRLTrainer
    out.mkdir(parents=True, exist_ok=True)
    cfg = config(out, mode, steps, ckpt)
    tok = Tokenizer()
    data = PromptDataset([cfg.data.train_data[0]], tok, max_prompt_length=512, num_workers=1)
    kwargs = dict(cfg=cfg, tracker=Tracker(), tokenizer=tok, train_dataset=data, inference_engine_client=None,
                  generator=Generator(kill_at))
    settings = {"harnesses": HARNESSES, "steps": steps, "seed": 3, "policy": "harnessbandit"}
    try:
        trainer = (RayPPOTrainer(**kwargs) if mode == "stock"
                   else HarnessSkyRLTrainer(**kwargs, hb_settings=settings))
        trainer.dispatch = Dispatch()
        trainer.init_weight_sync_state = lambda: None
        trainer._cleanup_old_checkpoints = lambda: None

        async def generate(input_batch):
            return await trainer.generator.generate(input_batch)

        def forward(training_input):
            zeros = torch.zeros_like(training_input["loss_mask"], dtype=torch.float32)
            training_input["base_action_log_probs"], training_input["action_log_probs"] = None, zeros
            training_input["values"] = None
            return training_input

        trainer.generate = generate
        trainer.fwd_logprobs_values_reward = forward
        trainer.train_critic_and_policy = lambda training_input: {"policy_loss": 0.0}
        asyncio.run(trainer.train())
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if mode == "stock":
        return 0
    sampler = trainer.hb_sampler
    rows = [{k: (v if not isinstance(v, float) or np.isfinite(v) else None) for k, v in r.items()
             if not k.startswith("seconds") and k != "overhead_frac"} for r in sampler.recorder.rows]
    result = {"rows": rows, "logged": Tracker.calls, "probabilities": np.asarray(sampler.policy.probabilities()).tolist(),
              "len_dataloader": len(trainer.train_dataloader), "total_training_steps": trainer.total_training_steps,
              "env_class": sampler.env_class}
    Path(out, f"result-{os.getpid()}.json").write_text(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    a = sys.argv[1:]
    sys.exit(main(Path(a[0]), a[1], *(int(x) for x in (a[2:] + ["4", "2", "0"][len(a) - 2:]))))
