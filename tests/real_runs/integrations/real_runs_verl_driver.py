"""Run verl 0.7.1's own driver (RayPPOTrainer.__init__ -> create_rl_sampler -> fit) with
HarnessRayPPOTrainer on the CPU, for tests/real_runs/integrations/test_real_runs_verl_package.py.
Runs in the separate environment `make venv-verl` builds (.venv-verl: verl 0.7.1, numpy<2, the
CPU torch), never in the test process.

    python real_runs_verl_driver.py OUT MODE [STEPS SAVE_FREQ KILL_AT]

MODE `actor`: verl's DataParallelPPOActor subclass HarnessPPOActor on an FSDP2 module (one
gloo rank): the sketch it takes equals the pre-clip gradient's, not the clipped one's.
MODE: `harness` (HarnessRayPPOTrainer; after its run, the trainer's refusal of verl's default
trainer.total_epochs (30) without total_training_steps is recorded too), `stock` (verl's own
RayPPOTrainer). KILL_AT > 0:
SIGKILL this process during step KILL_AT's generation (after the checkpoint of an earlier
step). The run resumes from OUT/ckpt when one is there (verl's resume_mode=auto).

What is verl's and what is stubbed: the config is verl's Hydra `ppo_trainer` with the user's
overrides; the dataset rows are shaped as RLHFDataset's (tensors + data_source, extra_info,
reward_model, and a top-level `harness` column that verl drops); collate, uid, _get_gen_batch,
repeat, union, response mask, reward extraction, GRPO advantages, the checkpoint order
and data.pt, _load_checkpoint, the metrics and the sampler.update call are verl's own code.
The rollout is stubbed below verl's agent loop: each row's outputs go through verl's own
`AgentLoopWorker._postprocess` (the reward loop on, so the input's non-tensor keys are not
copied back), with a seeded 0/1 reward per harness; the actor worker group returns
log-probs and, from `update_actor`, a legacy-worker DataProto whose meta_info carries a
sketch computed from the advantages it received.

Writes OUT/result-<pid>.json: the sampler's train rows, the hb/ metrics verl logged, the
non-tensor keys of the batch at update, verl's dataloader length and total steps.
"""
from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

import verl
from hydra import compose, initialize_config_dir
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopWorker, _InternalAgentLoopOutput
from verl.trainer import main_ppo
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.utils import Role

from policies.errors import UserError
from real_runs.integrations.verl_trainer import HarnessRayPPOTrainer

HARNESSES = ["json", "xml", "kv"]
SUCCESS = {"json": 0.5, "xml": 0.25, "kv": 0.75}     # each harness's chance of reward 1
P_LEN, R_LEN, N_ROLL, GROUPS, SKETCH_DIM = 4, 3, 4, 2, 6


class Rows(torch.utils.data.Dataset):
    """Rows as verl 0.7.1's RLHFDataset yields them (raw_prompt, dummy_tensor, index, ...);
    `dataframe` as its HF datasets table."""

    def __init__(self, n_per_harness: int = 4):
        import datasets
        names = [h for h in HARNESSES for _ in range(n_per_harness)]
        self.rows = [{"data_source": "hbtest", "harness": h, "extra_info": {"harness": h, "index": i},
                      "reward_model": {"ground_truth": h, "style": "rule"}} for i, h in enumerate(names)]
        self.dataframe = datasets.Dataset.from_list(self.rows)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):       # RLHFDataset 0.7.1's __getitem__: the agent loop tokenizes raw_prompt
        return {**self.rows[i], "raw_prompt": [{"role": "user", "content": f"task {i}"}],
                "dummy_tensor": torch.tensor([0], dtype=torch.uint8), "index": i, "tools_kwargs": {},
                "interaction_kwargs": {}}


def rollout(prompts: DataProto) -> DataProto:
    """The agent loop's output for `prompts` (n rollouts per prompt, interleaved), through
    verl's own `_postprocess` with the reward loop on; rewards seeded by (step, row)."""
    step = int(prompts.meta_info["global_steps"])
    outputs = []
    for i in range(len(prompts)):
        harness = prompts.non_tensor_batch["extra_info"][i]["harness"]
        reward = float(np.random.default_rng([step, i]).random() < SUCCESS[harness])
        prompt = (torch.arange(P_LEN) + 10 * int(prompts.non_tensor_batch["index"][i]))[None]   # (1, P)
        response = torch.full((1, R_LEN), 7 + i)
        mask = torch.ones(1, P_LEN + R_LEN, dtype=torch.long)
        outputs.append(_InternalAgentLoopOutput(
            prompt_ids=prompt, response_ids=response, input_ids=torch.cat([prompt, response], dim=1),
            position_ids=torch.arange(P_LEN + R_LEN)[None], response_mask=torch.ones(1, R_LEN, dtype=torch.long),
            attention_mask=mask, multi_modal_inputs={}, reward_score=reward, num_turns=2,
            metrics=AgentLoopMetrics()))
    out = AgentLoopWorker._postprocess(SimpleNamespace(reward_loop_worker_handles=["reward loop"]), outputs,
                                       input_non_tensor_batch=prompts.non_tensor_batch)
    out.meta_info.pop("metrics")
    out.meta_info = {"timing": {}, **out.meta_info}
    return out


def sketch_of(batch: DataProto) -> list:
    """A stand-in gradient sketch: per harness a fixed direction, weighted by the mean |advantage|
    of its rows (a function of what the actor trained on)."""
    adv = batch.batch["advantages"].sum(-1).abs().numpy()
    out = np.zeros(SKETCH_DIM)
    for i, info in enumerate(batch.non_tensor_batch["extra_info"]):
        h = HARNESSES.index(info["harness"])
        out += adv[i] * np.random.default_rng(100 + h).standard_normal(SKETCH_DIM)
    return (out / len(adv)).tolist()


class Actor:
    """The actor/rollout worker group's driver-side handle (legacy workers)."""

    def __init__(self, kill_at: int):
        self.kill_at, self.trained = kill_at, 0

    def compute_log_prob(self, batch):
        zeros = torch.zeros(len(batch), R_LEN)
        return DataProto.from_dict(tensors={"old_log_probs": zeros, "entropys": zeros})

    def update_actor(self, batch):
        self.trained += 1
        return DataProto(meta_info={"metrics": {"actor/pg_loss": [0.0], "actor/grad_norm": [1.0]},
                                    "hb_sketch": sketch_of(batch)})

    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
        os.makedirs(local_path, exist_ok=True)
        Path(local_path, "actor.json").write_text(json.dumps({"step": global_step, "trained": self.trained}))

    def load_checkpoint(self, local_path, del_local_after_load=False):
        self.trained = json.loads(Path(local_path, "actor.json").read_text())["trained"]


class Rollouts:
    def __init__(self, kill_at: int):
        self.kill_at = kill_at

    def generate_sequences(self, prompts):
        if int(prompts.meta_info["global_steps"]) == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)       # the kill: mid-step, nothing of this step saved
        return rollout(prompts)


class Logged:
    """verl's `Tracking` (imported inside fit) replaced by a recorder of what fit logs."""
    calls: list = []

    def __init__(self, *args, **kwargs):
        pass

    def log(self, data, step, backend=None):
        Logged.calls.append({"step": step, **{k: float(v) for k, v in data.items() if k.startswith("hb/")}})


def config(out: Path, mode: str, steps: int, save_freq: int):
    folder = os.path.join(os.path.dirname(main_ppo.__file__), "config")
    overrides = [
        "data.sampler.class_path=pkg://real_runs.integrations.verl_sampler",
        "data.sampler.class_name=HarnessCurriculumSampler", "data.dataloader_num_workers=0",
        f"data.train_batch_size={GROUPS}", f"+data.harnessbandit.harnesses=[{','.join(HARNESSES)}]",
        f"+data.harnessbandit.steps={steps}", "+data.harnessbandit.seed=3", "+data.harnessbandit.policy=harnessbandit",
        f"actor_rollout_ref.rollout.n={N_ROLL}", "algorithm.adv_estimator=grpo", "algorithm.use_kl_in_reward=False",
        "actor_rollout_ref.actor.use_kl_loss=False", f"trainer.save_freq={save_freq}",
        f"trainer.default_local_dir={out / 'ckpt'}", "trainer.resume_mode=auto", "trainer.val_before_train=False",
        "trainer.test_freq=-1", "trainer.logger=[]", "trainer.balance_batch=False", "trainer.device=cpu",
        "trainer.n_gpus_per_node=0"]
    if mode != "epochs":          # verl's default total_epochs=15 stays: total_training_steps bounds the run
        overrides.append(f"trainer.total_training_steps={steps}")
    else:
        overrides[overrides.index(f"trainer.default_local_dir={out / 'ckpt'}")] = f"trainer.default_local_dir={out / 'e'}"
    with initialize_config_dir(config_dir=folder, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def actor_check(out: Path) -> int:
    """HarnessPPOActor._optimizer_step: the sketch before verl's clipping (grad_clip 0.01 is active)."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from verl.utils.config import omega_conf_to_dataclass

    from real_runs.integrations.verl_actor import HarnessPPOActor
    from real_runs.integrations.verl_sketch import ShardedSketch
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("HB_PORT", "29731"), RANK="0",
                      WORLD_SIZE="1", LOCAL_RANK="0")
    dist.init_process_group("gloo")
    with initialize_config_dir(config_dir=os.path.join(os.path.dirname(main_ppo.__file__), "config"),
                               version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=[
            "actor_rollout_ref.actor.grad_clip=0.01", "data.train_batch_size=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1"])
    torch.manual_seed(0)
    net = torch.nn.Module()
    net.blocks = torch.nn.ModuleList([torch.nn.Linear(5, 7), torch.nn.Linear(7, 3)])
    for block in net.blocks:
        fully_shard(block)
    fully_shard(net)
    sketch = ShardedSketch.build(net, block_path="blocks", last_blocks=2, dim=12, seed=1)
    actor = HarnessPPOActor(omega_conf_to_dataclass(cfg.actor_rollout_ref.actor), net,
                            torch.optim.SGD(net.parameters(), lr=0.1), sketch=sketch)
    x = torch.linspace(-1, 1, 10).reshape(2, 5)
    before = [p.detach().to_local().clone() for p in net.parameters()]
    (net.blocks[1](net.blocks[0](x)) ** 2).sum().backward()
    pre_clip = sketch.grad().tolist()
    norm = float(actor._optimizer_step())
    post_clip = sketch.grad().tolist()       # the clipped gradients are still there after the step
    moved = any(not torch.equal(a, p.detach().to_local()) for a, p in zip(before, net.parameters()))
    result = {"taken": actor.take_step_sketch(), "pre_clip": pre_clip, "post_clip": post_clip, "grad_norm": norm,
              "moved": moved, "after_take": actor.take_step_sketch()}
    Path(out, f"result-{os.getpid()}.json").write_text(json.dumps(result))
    dist.destroy_process_group()
    return 0


def main(out: Path, mode: str, steps: int, save_freq: int, kill_at: int) -> int:
    if mode == "actor":
        return actor_check(out)
    cls = RayPPOTrainer if mode == "stock" else HarnessRayPPOTrainer
    rows = Rows()
    pools = SimpleNamespace(get_n_gpus=lambda: 1)
    try:
        trainer = cls(config=config(out, mode, steps, save_freq), tokenizer=None,
                      role_worker_mapping={Role.ActorRollout: object}, resource_pool_manager=pools,
                      train_dataset=rows, val_dataset=rows)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    trainer.actor_rollout_wg, trainer.async_rollout_manager = Actor(kill_at), Rollouts(kill_at)
    trainer.checkpoint_manager = SimpleNamespace(update_weights=lambda step: None, sleep_replicas=lambda: None)
    sampler = trainer.train_dataloader.sampler
    seen = []
    update = sampler.update

    def spy(batch):
        seen.append(sorted(batch.non_tensor_batch.keys()))
        return update(batch)

    sampler.update = spy
    import verl.utils.tracking
    verl.utils.tracking.Tracking = Logged
    try:
        trainer.fit()
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows_out = [{k: (v if not isinstance(v, float) or np.isfinite(v) else None) for k, v in r.items()
                 if not k.startswith("seconds") and k != "overhead_frac"} for r in sampler.recorder.rows]
    result = {"verl": verl.__version__, "sampler": type(sampler).__name__, "len_dataloader": len(trainer.train_dataloader),
              "total_training_steps": trainer.total_training_steps, "rows": rows_out, "logged": Logged.calls,
              "update_keys": seen, "actor_trained": trainer.actor_rollout_wg.trained,
              "probabilities": np.asarray(sampler.policy.probabilities()).tolist()}
    if mode == "harness":
        try:
            cls(config=config(out, "epochs", steps, save_freq), tokenizer=None, role_worker_mapping={Role.ActorRollout: object},
                resource_pool_manager=pools, train_dataset=rows, val_dataset=rows)
        except UserError as exc:
            result["epochs_refusal"] = str(exc)
    Path(out, f"result-{os.getpid()}.json").write_text(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    a = sys.argv[1:]
    sys.exit(main(Path(a[0]), a[1], *(int(x) for x in (a[2:] + ["4", "2", "0"][len(a) - 2:]))))
