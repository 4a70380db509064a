"""CPU seconds per optimizer step by phase of the TRL backend (`hb real --backend trl`), the
counterpart of `python -m real_runs.native.bench cpu-steps` (same clock, same phase names):

    python -m real_runs.integrations.trl_bench --model smollm2-135m --steps 3
    python -m real_runs.integrations.trl_bench --model smollm2-135m --steps 3 --set lora_rank=16 --set dtype=bfloat16

`steps` steps of `--policy` through `trl_run.build` (the command's own set-up; one torch
thread; `--set KEY=VALUE`: TRL knobs) with the CPU clock of this thread (`time.thread_time`)
standing in for the wall clock where the phases are timed (trl_grpo, hbsim's loop), so every
`seconds_*` column is CPU seconds whatever else the machine runs. Phases: generation
(`rollout`: TRL's sampling, prompts and completions), scoring (`tools`: the reward
functions), backward (TRL's forward and backward passes up to the clipping), sketch (the
gradient sketch before clipping and the update sketch), scheduler (the policy's select and
update and the scheduler's bookkeeping). The step total also holds clipping, Adam and TRL's
own bookkeeping. Also the CPU seconds of building the trainer (model load) and of one
evaluation. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import types


def cpu_steps(model: str, steps: int, policy: str, seed: int, sets: list[str]) -> dict:
    import torch

    import hbsim.loop
    import real_runs.integrations.trl_grpo as trl_grpo
    from hbsim.experiment import resolve_policy
    from real_runs.integrations import trl_run
    from real_runs.native.bench import phase_figures, use_cpu_clock

    use_cpu_clock(hbsim.loop, trl_grpo)
    torch.set_num_threads(1)
    args = types.SimpleNamespace(set=list(sets), policy=policy, label=None, model=model, preset=model, steps=steps,
                                 seed=seed, eval_every=None, counterfactual=None)
    cfg, policy_cfg, _ = trl_run.settings(args)
    policy_cfg = resolve_policy({**policy_cfg, **({"warmup_rounds": 1} if policy.startswith("harnessbandit")
                                                  else {})}, len(cfg.harnesses))
    with tempfile.TemporaryDirectory(prefix="hb-trl-bench-") as out:
        t0 = time.thread_time()
        trainer, sched, _ = trl_run.build(cfg, policy_cfg=policy_cfg, seed=seed, steps=steps, out=out,
                                          model_path=model, checkpoint_every=10**6)
        load = time.thread_time() - t0
        trainer.train()
        t0 = time.thread_time()
        frame = sched.recorder._evaluate()
        evaluation = time.thread_time() - t0
    train = sched.result().train
    return {"backend": "trl", "model": model, "policy": policy, "steps": steps, "sets": list(sets),
            **phase_figures(train),
            "groups_retained_per_step": float(train["groups_retained"].mean()),
            "cpu_seconds_load": round(load, 2), "cpu_seconds_one_evaluation": round(evaluation, 2),
            "episodes_per_evaluation": int(len(frame)), "torch": torch.__version__}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m real_runs.integrations.trl_bench")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--policy", default="harnessbandit")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    json.dump(cpu_steps(args.model, args.steps, args.policy, args.seed, args.set), sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
