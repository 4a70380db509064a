"""Worker of the TRL data-parallel test (`python -m torch.distributed.run --nproc_per_node 2`,
gloo, CPU): a 3-step HarnessGRPOTrainer run, 2 groups x G = 4 per step, one group per
rank. Each rank writes what it trained on and what its policy was fed to OUT/rank<r>.npz."""
import json
import os
import sys

import numpy as np

os.environ["HF_HUB_OFFLINE"] = "1"

from hbsim.experiment import resolve_policy  # noqa: E402
from real_runs.integrations import trl_run  # noqa: E402


def main(out: str) -> None:
    cfg = trl_run.TRL_KNOBS.settings(dict(harnesses=["json", "xml", "kv"], n_train_tasks=12, n_heldout_tasks=2,
                                          eval_tasks=1, max_completion_length=8, batch_groups=2, group_size=4,
                                          sketch_dim=512))
    calls = []

    def even(prompts, completions, completion_ids, harness, task, **_):
        calls.append({"harness": list(harness), "task": list(task)})
        return [sum(i % 2 == 0 for i in ids) / max(len(ids), 1) for ids in completion_ids]

    trainer, sched, config = trl_run.build(
        cfg, policy_cfg=resolve_policy({"name": "harnessbandit", "label": "hb"}, 3), seed=0, steps=3,
        out=os.path.join(out, "run"), checkpoint_every=100, extra_rewards=[even],
        extra_args={"per_device_train_batch_size": 4})
    fed = []
    update = sched.policy.update
    sched.policy.update = lambda fb: (fed.append(fb.sketch.copy()), update(fb))[1]
    trainer.train()
    rank = trainer.accelerator.process_index
    train = sched.result(config).train
    np.savez(os.path.join(out, f"rank{rank}.npz"), sketch=np.stack(fed), learn=train["learnability"].to_numpy(),
             transfer=train["transfer"].to_numpy(), arm=train["arm"].to_numpy(),
             world=trainer.accelerator.num_processes, synced=trainer._grads_synced(),
             calls=json.dumps(calls))


if __name__ == "__main__":
    main(sys.argv[1])
