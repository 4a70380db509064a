"""Run verl 0.9.1's own drivers with the project's trainers on the CPU, for
tests/real_runs/integrations/test_real_runs_verl09_package.py. Runs in the separate environment
`make venv-verl09` builds (.venv-verl09: verl 0.9.1, numpy 2, transformers 5, TransferQueue, the
CPU torch), never in the test process.

    python real_runs_verl09_driver.py OUT MODE [STEPS SAVE_FREQ KILL_AT]

MODE `legacy`: verl's legacy RayPPOTrainer (trainer.use_v1=false) as HarnessRayPPOTrainer
through its own `fit`; `v1`: verl's v1 trainer HarnessPPOTrainer (trainer.v1.trainer_mode=
harnessbandit) through its own `fit`, with a real TransferQueue and verl's ReplayBuffer.
KILL_AT > 0: SIGKILL this process during step KILL_AT's generation; a run resumes from OUT/ckpt
when a checkpoint is there (verl's resume_mode=auto).

Both: verl's Hydra `ppo_trainer` config with the user's `+data.harnessbandit.*` overrides,
verl's RLHFDataset reading a parquet file (rows name their harness in extra_info and in a
`harness` column), collate, the StatefulDataLoader with the project's sampler, uid, `fit`,
the advantages, the checkpoint order and data.pt, `_load_checkpoint` and the metrics are
verl's own. Stubbed (they need GPUs and a model): the rollout (legacy: each row's outputs go
through verl's own `AgentLoopWorker._postprocess`; v1: each trajectory is written into
TransferQueue as verl's `AgentLoopWorkerTQ._agent_loop_postprocess` writes it, every prompt
field with it), with a seeded 0/1 reward per harness; the actor worker group (log-probs, the
update: its output carries a stand-in sketch `hb_sketch` in the engine worker's metrics, the
actor checkpoint); the weight sync.

Writes OUT/result-<pid>.json: the sampler's train rows, the hb/ metrics verl logged, the
policy's probabilities, verl's dataloader length and total steps.
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

HARNESSES = ["json", "xml", "kv"]
SUCCESS = {"json": 0.5, "xml": 0.25, "kv": 0.75}     # each harness's chance of reward 1
P_LEN, R_LEN, N_ROLL, GROUPS, SKETCH_DIM = 4, 3, 4, 2, 6


def write_dataset(out: Path) -> str:
    import pandas as pd
    names = [h for h in HARNESSES for _ in range(4)]
    rows = [{"data_source": "hbtest", "harness": h, "prompt": [{"role": "user", "content": f"task {i}"}],
             "extra_info": {"harness": h, "index": i}, "reward_model": {"ground_truth": h, "style": "rule"}}
            for i, h in enumerate(names)]
    path = out / "train.parquet"
    pd.DataFrame(rows).to_parquet(path)
    return str(path)


def reward(step: int, index: int, session: int, harness: str) -> float:
    """A seeded 0/1 reward of dataset row `index`'s `session`-th rollout at `step` (never of
    verl's uid, a fresh uuid4 per run)."""
    return float(np.random.default_rng([step, index, session]).random() < SUCCESS[harness])


def sketch_of(harness_counts: dict) -> list:
    """A stand-in gradient sketch: per harness a fixed direction weighted by its rows."""
    out = np.zeros(SKETCH_DIM)
    for h, n in harness_counts.items():
        out += n * np.random.default_rng(100 + HARNESSES.index(h)).standard_normal(SKETCH_DIM)
    return out.tolist()


class Logged:
    """verl's `Tracking` replaced by a recorder of what fit logs."""
    calls: list = []

    def __init__(self, *args, **kwargs):
        pass

    def log(self, data, step, backend=None):
        Logged.calls.append({"step": step, **{k: float(v) for k, v in data.items() if k.startswith("hb/")}})

    def finish(self, *a, **k):
        pass


def config(out: Path, mode: str, steps: int, save_freq: int, extra=()):
    from hydra import compose, initialize_config_dir
    from verl.trainer import main_ppo
    folder = os.path.join(os.path.dirname(main_ppo.__file__), "config")
    data = write_dataset(out)
    overrides = [
        f"data.train_files={data}", f"data.val_files={data}", "data.dataloader_num_workers=0",
        f"data.train_batch_size={GROUPS}", f"+data.harnessbandit.harnesses=[{','.join(HARNESSES)}]",
        f"+data.harnessbandit.steps={steps}", "+data.harnessbandit.seed=3", "+data.harnessbandit.policy=harnessbandit",
        "+data.harnessbandit.sketch=true", "data.filter_overlong_prompts=False", "data.return_raw_chat=True",
        f"actor_rollout_ref.rollout.n={N_ROLL}", "algorithm.adv_estimator=grpo", "algorithm.use_kl_in_reward=False",
        "actor_rollout_ref.actor.use_kl_loss=False", f"trainer.save_freq={save_freq}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={GROUPS}",
        f"trainer.default_local_dir={out / 'ckpt'}", "trainer.resume_mode=auto", "trainer.val_before_train=False",
        "trainer.test_freq=-1", "trainer.logger=[]", "trainer.balance_batch=False", "trainer.device=cpu",
        "trainer.n_gpus_per_node=1", f"trainer.use_v1={mode == 'v1'}", *extra]
    if mode == "v1":            # one TransferQueue storage unit (verl's default 8 are 8 Ray actors)
        overrides += ["trainer.v1.trainer_mode=harnessbandit", "transfer_queue.backend.SimpleStorage.num_data_storage_units=1"]
    else:
        overrides.append(f"trainer.total_training_steps={steps}")
    with initialize_config_dir(config_dir=folder, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def result(out: Path, sampler, trainer, extra=None) -> None:
    rows = [{k: (v if not isinstance(v, float) or np.isfinite(v) else None) for k, v in r.items()
             if not k.startswith("seconds") and k != "overhead_frac"} for r in sampler.recorder.rows]
    import verl
    data = {"verl": verl.__version__, "sampler": type(sampler).__name__, "rows": rows, "logged": Logged.calls,
            "probabilities": np.asarray(sampler.policy.probabilities()).tolist(),
            "len_dataloader": len(trainer.train_dataloader), "total_training_steps": trainer.total_training_steps,
            **(extra or {})}
    Path(out, f"result-{os.getpid()}.json").write_text(json.dumps(data, default=str))


# ---------------------------------------------------------------- legacy trainer (use_v1=false)
def legacy(out: Path, steps: int, save_freq: int, kill_at: int) -> int:
    from verl import DataProto
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopWorker, _InternalAgentLoopOutput
    from verl.trainer.ppo.utils import Role
    from verl.utils import tensordict_utils as tu

    from real_runs.integrations.verl_trainer import HarnessRayPPOTrainer
    from verl.trainer.ppo.utils import create_rl_dataset

    cfg = config(out, "legacy", steps, save_freq)
    dataset = create_rl_dataset(cfg.data.train_files, cfg.data, None, None, is_train=True)
    seen: list = []

    class Rollouts:
        def generate_sequences(self, prompts):
            step = int(prompts.meta_info["global_steps"])
            if step == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)        # mid-step, nothing of this step saved
            outputs = []
            for i in range(len(prompts)):
                info = prompts.non_tensor_batch["extra_info"][i]
                harness = info["harness"]
                prompt = (torch.arange(P_LEN) + 10 * (i % 7))[None]
                response = torch.full((1, R_LEN), 7 + i)
                outputs.append(_InternalAgentLoopOutput(
                    prompt_ids=prompt, response_ids=response, input_ids=torch.cat([prompt, response], dim=1),
                    position_ids=torch.arange(P_LEN + R_LEN)[None], response_mask=torch.ones(1, R_LEN, dtype=torch.long),
                    attention_mask=torch.ones(1, P_LEN + R_LEN, dtype=torch.long), multi_modal_inputs={},
                    reward_score=reward(step, int(info["index"]), i % N_ROLL, harness), num_turns=2, metrics=AgentLoopMetrics()))
            res = AgentLoopWorker._postprocess(SimpleNamespace(reward_loop_worker_handles=["reward loop"]), outputs,
                                               input_non_tensor_batch=prompts.non_tensor_batch)
            res.meta_info.pop("metrics")
            res.meta_info = {"timing": {}, **res.meta_info}
            return res

    class Actor:
        """The engine workers' group seen from the driver (TensorDicts in, TensorDicts out)."""

        def __init__(self):
            self.trained = 0

        def update_actor(self, batch_td):
            self.trained += 1
            names = [info["harness"] for info in tu.get(batch_td, "extra_info")]
            counts = {h: names.count(h) for h in set(names)}
            return tu.get_tensordict(tensor_dict={}, non_tensor_dict={"metrics": {
                "pg_loss": [0.0], "mfu": [0.0], "hb_sketch": sketch_of(counts)}})

        def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
            os.makedirs(local_path, exist_ok=True)
            Path(local_path, "actor.json").write_text(json.dumps({"step": global_step, "trained": self.trained}))

        def load_checkpoint(self, local_path, del_local_after_load=False):
            self.trained = json.loads(Path(local_path, "actor.json").read_text())["trained"]

    pools = SimpleNamespace(get_n_gpus=lambda: 1)
    from policies.errors import UserError
    try:
        roles = {Role.ActorRollout: object}
        trainer = HarnessRayPPOTrainer(config=cfg, tokenizer=None, role_worker_mapping=roles,
                                       resource_pool_manager=pools, train_dataset=dataset, val_dataset=dataset)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    trainer.actor_rollout_wg, trainer.async_rollout_manager = Actor(), Rollouts()
    trainer.checkpoint_manager = SimpleNamespace(update_weights=lambda step: None, sleep_replicas=lambda: None)

    def old_log_prob(batch):
        zeros = torch.zeros(len(batch), R_LEN)
        return DataProto.from_dict(tensors={"old_log_probs": zeros, "entropys": zeros}), 0.0

    trainer._compute_old_log_prob = old_log_prob
    sampler = trainer.train_dataloader.sampler
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
    actor = roles[Role.ActorRollout]
    plan = getattr(getattr(getattr(actor, "__ray_metadata__", None), "modified_class", None), "actor_worker_cls", None)
    result(out, sampler, trainer, {"update_keys": seen, "actor_trained": trainer.actor_rollout_wg.trained,
                                   "actor_sketch_plan": getattr(plan, "hb_sketch_plan", None)})
    return 0


# ---------------------------------------------------------------- v1 trainer (use_v1=true)
class AgentLoopTQ:
    """verl's AgentLoopManagerTQ seen from the trainer: each prompt's n trajectories written into
    TransferQueue as `AgentLoopWorkerTQ._run_prompt` / `_agent_loop_postprocess` write them
    (key `{uid}_{session}_0`, every prompt field with the trajectory, the prompt's status tag)."""

    def __init__(self, kill_at: int, n: int):
        self.kill_at, self.n = kill_at, n

    def generate_sequences(self, batch):
        import transfer_queue as tq
        from verl.utils import tensordict_utils as tu
        from verl.utils.tensordict_utils import list_of_dict_to_tensordict
        step = int(tu.get(batch, "global_steps"))
        if step == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)            # mid-step, nothing of this step saved
        keys, fields, tags = [], [], []
        prompt_fields = [k for k in batch.keys() if k not in ("global_steps",)]
        for i in range(len(batch)):
            prompt = {k: _item(batch, k, i) for k in prompt_fields}
            uid, harness = prompt["uid"], prompt["extra_info"]["harness"]
            for session in range(self.n):
                score = reward(step, int(prompt["extra_info"]["index"]), session, harness)
                prompts = torch.arange(P_LEN) + 10 * (i % 7)
                responses = torch.full((R_LEN,), 7 + session)
                rm = torch.zeros(R_LEN)
                rm[-1] = score
                field = dict(prompt)
                field.update(prompts=prompts, responses=responses, response_mask=torch.ones(R_LEN, dtype=torch.long),
                             input_ids=torch.cat([prompts, responses]), attention_mask=torch.ones(P_LEN + R_LEN,
                             dtype=torch.long), position_ids=torch.arange(P_LEN + R_LEN), rm_scores=rm,
                             loss_mask=torch.ones(R_LEN, dtype=torch.long), session_id=session)
                keys.append(f"{uid}_{session}_0")
                fields.append(field)
                tags.append({"status": "success", "prompt_len": P_LEN, "response_len": R_LEN, "seq_len": P_LEN + R_LEN,
                             "global_steps": step, "min_global_steps": step, "max_global_steps": step})
        tq.kv_batch_put(keys=keys, fields=list_of_dict_to_tensordict(fields), tags=tags, partition_id="train")
        for i in range(len(batch)):
            tq.kv_put(key=_item(batch, "uid", i), partition_id="train", tag={"status": "finished"})


def _item(batch, key, i):
    value = batch[key]
    if hasattr(value, "tolist") and not isinstance(value, torch.Tensor):
        return value.tolist()[i]
    return value[i]


def v1(out: Path, steps: int, save_freq: int, kill_at: int) -> int:
    import ray
    import transfer_queue as tq
    from omegaconf import open_dict
    from verl.trainer.ppo.v1 import trainer_base

    from policies.errors import UserError
    from real_runs.integrations.verl_v1 import HarnessPPOTrainer

    cfg = config(out, "v1", steps, save_freq)
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    with open_dict(cfg):
        cfg.transfer_queue.enable = True
    tq.init(cfg.transfer_queue)
    trained = {"n": 0}

    class Actor:
        def update_actor(self, batch):
            trained["n"] += 1
            data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_info"])
            names = [info["harness"] for info in _plain_list(data["extra_info"])]
            counts = {h: names.count(h) for h in set(names)}
            return {"metrics": {"pg_loss": [0.0], "mfu": [0.0], "hb_sketch": [sketch_of(counts)]}}

        def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
            os.makedirs(local_path, exist_ok=True)
            Path(local_path, "actor.json").write_text(json.dumps({"step": global_step, "trained": trained["n"]}))

        def load_checkpoint(self, local_path, del_local_after_load=False):
            trained["n"] = json.loads(Path(local_path, "actor.json").read_text())["trained"]

    try:
        trainer = HarnessPPOTrainer(cfg)
        trainer.tokenizer = trainer.processor = None
        trainer._init_dataloader()
        trainer._init_dump_executor()
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    trainer.actor_rollout_wg = Actor()
    trainer.checkpoint_manager = SimpleNamespace(update_weights=lambda step: None, sleep_replicas=lambda: None)
    trainer.reward_loop_manager = SimpleNamespace(reward_loop_worker_handles=["reward loop"])
    trainer._balance_batch = lambda batch, metrics=None, **kw: batch
    trainer._compute_old_log_prob = lambda batch, metrics: batch
    trainer._compute_metrics = lambda batch, metrics, timing_raw, global_steps, epoch: None
    trainer._load_checkpoint()
    trainer_base.Tracking = Logged
    sampler = trainer.train_dataloader.sampler
    try:
        trainer.fit(AgentLoopTQ(kill_at, N_ROLL))
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        tq.close()
    result(out, sampler, trainer, {"actor_trained": trained["n"], "trainer_mode": cfg.trainer.v1.trainer_mode})
    return 0


# ---------------------------------------------------------------- the sketching actor worker (v1)
def worker(out: Path, steps: int, save_freq: int, kill_at: int) -> int:
    """verl 0.9.1's own classes around the sketch wiring (verl_engine_worker), in one process:
    the v1 trainer's `_init_resource_pool_mgr` swapping the actor role's worker; the swapped
    class (verl's ActorRolloutRefWorker with a SketchTrainingWorker inside, verl's registered
    methods kept); `reset` wrapping a stand-in engine once; an update of two optimizer steps
    through the override of verl's `train_mini_batch` (its body stubbed: FSDPEngine needs a
    GPU), two ranks' outputs concatenated by verl's collect and the sketch popped on the
    driver. Writes OUT/result-<pid>.json with what the test compares."""
    import ray
    from torch import nn
    from verl.single_controller.base.decorator import MAGIC_ATTR, _concat_data_proto_or_future
    from verl.trainer.ppo.utils import Role
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker

    from policies.errors import UserError
    from real_runs.integrations.verl_sampler import take_update_sketch
    from real_runs.integrations.verl_engine_worker import install_sketch_worker
    from real_runs.integrations.verl_v1 import HarnessPPOTrainer
    from real_runs.native.sketch import ParamSketch

    def unwrap(actor_class):
        return actor_class.__ray_metadata__.modified_class

    cfg = config(out, "v1", steps, save_freq, ("+data.harnessbandit.sketch_dim=12", "+data.harnessbandit.sketch_blocks=1"))
    trainer = object.__new__(HarnessPPOTrainer)
    trainer.config = cfg
    trainer._init_resource_pool_mgr()
    roles = {role.name: unwrap(cls) for role, cls in trainer.role_worker_mapping.items()}
    swapped = roles["ActorRollout"]
    inner = swapped.actor_worker_cls
    plan = dict(inner.hb_sketch_plan)
    refused = []
    for mapping in ({Role.Critic: ray.remote(TrainingWorker)},):
        try:
            install_sketch_worker(mapping, plan)
        except UserError as exc:
            refused.append(str(exc))
    split = {Role.Actor: ray.remote(ActorRolloutRefWorker), Role.RefPolicy: ray.remote(ActorRolloutRefWorker)}
    split_roles = [r.name for r in install_sketch_worker(split, plan)]

    torch.manual_seed(0)
    net = nn.Module()
    net.model = nn.Module()
    net.model.layers = nn.ModuleList([nn.Linear(3, 3) for _ in range(2)])

    class Engine:           # what FSDPEngine's initialize / optimizer_step do to the module
        def __init__(self):
            self.module, self.inits = net, 0
            self.optimizer = torch.optim.SGD(net.parameters(), lr=0.1)

        def initialize(self):
            self.inits += 1

        def optimizer_step(self):
            norm = torch.nn.utils.clip_grad_norm_(net.parameters(), max_norm=0.01)
            self.optimizer.step()
            return float(norm)

    check = ParamSketch.build(net, **plan)
    pre = []

    def train_mini_batch(self, data):       # verl's loop, its end as verl writes it: two mini-batches
        for x in data:
            net.zero_grad()
            (net.model.layers[1](net.model.layers[0](x)) ** 2).sum().backward()
            pre.append(check.grad().tolist())
            self.engine.optimizer_step()
        return tu.get_tensordict(tensor_dict={}, non_tensor_dict={"metrics": {"pg_loss": [0.5, 0.25]}}).cpu()

    TrainingWorker.train_mini_batch = train_mini_batch
    w = object.__new__(inner)
    w.engine = Engine()
    w.reset()
    w.reset()                               # a second reset (verl reloads) keeps the one wrap
    batch = [torch.randn(4, 3), torch.randn(4, 3)]
    outputs = [w.train_mini_batch(batch), w.train_mini_batch(batch[:1])]
    collected = _concat_data_proto_or_future([outputs[0], outputs[0]])      # two ranks, the same all-reduced sketch
    meta = {}
    take_update_sketch(collected, meta)
    data = {"roles": sorted(roles), "swapped_is_verls": issubclass(swapped, ActorRolloutRefWorker),
            "inner_is_verls": issubclass(inner, TrainingWorker), "ref_worker": swapped.ref_worker_cls is TrainingWorker,
            "registered": all(getattr(getattr(swapped, m), MAGIC_ATTR, None) is not None
                              for m in ("init_model", "update_actor", "compute_log_prob", "save_checkpoint")),
            "plan": plan, "refused": refused, "split_roles": split_roles,
            "split_ref_kept": unwrap(split[Role.RefPolicy]) is not unwrap(split[Role.Actor])
            and not hasattr(unwrap(split[Role.RefPolicy]).actor_worker_cls, "hb_sketch_plan"),
            "inits": w.engine.inits, "pre": pre, "taken": meta["hb_sketch"].tolist(),
            "second": tu.get(outputs[1], "metrics")["hb_sketch"], "metrics_left": sorted(collected["metrics"])}
    Path(out, f"result-{os.getpid()}.json").write_text(json.dumps(data, default=str))
    return 0


def _plain_list(values) -> list:
    return values.tolist() if hasattr(values, "tolist") else list(values)


def main(out: Path, mode: str, steps: int, save_freq: int, kill_at: int) -> int:
    out.mkdir(parents=True, exist_ok=True)
    if os.environ.get("HB_DUMP_AFTER"):           # a hang: every thread's stack on stderr after that many seconds
        import faulthandler
        faulthandler.dump_traceback_later(int(os.environ["HB_DUMP_AFTER"]), exit=True)
    if mode == "legacy":
        return legacy(out, steps, save_freq, kill_at)
    if mode == "v1":
        return v1(out, steps, save_freq, kill_at)
    if mode == "worker":
        return worker(out, steps, save_freq, kill_at)
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    a = sys.argv[1:]
    sys.exit(main(Path(a[0]), a[1], *(int(x) for x in (a[2:] + ["4", "2", "0"][len(a) - 2:]))))
