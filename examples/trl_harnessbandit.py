"""HarnessBandit scheduling the harness of every step of a TRL GRPO run.

Copy this file for your own model and tasks: replace `make_data` (one row per prompt,
with a `harness` column naming the harness it was rendered for) and `make_rewards`
(TRL reward functions), keep the rest. Runs offline on CPU as is:

    python examples/trl_harnessbandit.py --steps 4 --out runs/trl_example
    python examples/trl_harnessbandit.py --model /path/to/local/hf_checkpoint --device cuda --steps 100
    python examples/trl_harnessbandit.py --steps 8 --out runs/trl_example --resume
    hb report runs/ --baseline mixed --k 1        # over several such run directories

Needs `pip install 'harnessbandit[trl]'`. `hb real --backend trl` runs the same wiring
(real_runs.integrations.trl_run.build) with more knobs.
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")      # never download anything

import torch  # noqa: E402
from trl import GRPOConfig  # noqa: E402

import hbsim  # noqa: E402
from hbsim.contract.markers import claim_output_dir  # noqa: E402
from policies import make, validate  # noqa: E402
from policies.errors import UserError  # noqa: E402
from real_runs.cli import check_run_dir  # noqa: E402
from real_runs.integrations.trl_grpo import (HarnessGRPOTrainer, HarnessScheduler, harness_dataset,  # noqa: E402
                                             harness_reward)
from real_runs.integrations.trl_run import byte_tokenizer, held_out_evaluator, load_local, tiny_qwen2  # noqa: E402
from real_runs.world.tasks import make_tasks  # noqa: E402

HARNESSES = ["json", "xml", "func", "shell", "sexp", "kv"]


def make_data(seed: int):
    """(train dataset with prompt/harness/task columns, reward tasks, held-out tasks)."""
    train, heldout = make_tasks(seed, n_train=60, n_heldout=8)
    return harness_dataset(train, HARNESSES), train, heldout


def make_rewards(train_tasks):
    """TRL reward functions; they receive the dataset's columns (harness, task) as kwargs."""
    return [harness_reward(train_tasks)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help="local Hugging Face causal-LM directory (default: tiny Qwen2)")
    p.add_argument("--policy", default="harnessbandit", help="any name of `hb policies`, e.g. mixed, uniform")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--groups", type=int, default=2, help="prompts (GRPO groups) per optimizer step")
    p.add_argument("--generations", type=int, default=4, help="completions per prompt (G)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--out", default="runs/trl_example")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint in OUT/trl")
    a = p.parse_args()
    try:   # as `hb real`: never into a file, a grid or your own folder; --resume needs a checkpoint
        check_run_dir(a.out, a.resume, trl=True)
        validate.check_int("--steps", a.steps, 1, validate.MAX_STEPS)
        validate.check_int("--seed", a.seed, 0, validate.MAX_SEED)
        validate.check_int("--groups", a.groups, 1, validate.MAX_BATCH_GROUPS)
        validate.check_int("--generations", a.generations, 2, validate.MAX_BATCH_GROUPS)
    except UserError as exc:
        p.exit(2, f"error: {exc}\n")
    if a.device == "cpu":
        torch.set_num_threads(1)

    # 1. model and tokenizer: any local checkpoint, or a tiny Qwen2 built from a config
    if a.model:
        model, tok = load_local(a.model)
    else:
        tok = byte_tokenizer()
        model = tiny_qwen2(tok, "tiny", a.seed)

    # 2. data and rewards
    data, train_tasks, heldout = make_data(a.seed)

    # 3. the policy and the scheduler (evaluation: held-out tasks, SPEC §7 eval rows)
    policy = make(a.policy, n_arms=len(HARNESSES), seed=a.seed)
    evaluate = held_out_evaluator(model, tok, HARNESSES, heldout[:2], seed=a.seed,
                                  step=lambda: sched.recorder.t, max_new=24)
    config = {"env": {"kind": "trl", "model": a.model or "tiny", "harnesses": HARNESSES},
              "policy": {"name": a.policy, "label": a.policy, **policy.config()}, "seed": a.seed,
              "steps": a.steps, "eval_every": None, "batch_groups": a.groups}
    sched = HarnessScheduler(policy, HARNESSES, data, seed=a.seed, label=a.policy, evaluate=evaluate,
                             config=config["env"], block_path="model.layers")

    # 4. TRL as usual; one generation batch = one optimizer step = the policy's allocation
    args = GRPOConfig(output_dir=os.path.join(a.out, "trl"), max_steps=a.steps, seed=a.seed,
                      per_device_train_batch_size=a.groups * a.generations, num_generations=a.generations,
                      max_completion_length=24, learning_rate=1e-4, beta=0.0, use_cpu=a.device == "cpu",
                      report_to="none", logging_steps=1, save_steps=10, disable_tqdm=True)
    trainer = HarnessGRPOTrainer(model, reward_funcs=make_rewards(train_tasks), args=args, train_dataset=data,
                                 processing_class=tok, scheduler=sched)
    claim_output_dir(a.out, "run", tool="examples/trl_harnessbandit.py")
    trainer.train(resume_from_checkpoint=True if a.resume else None)

    # 5. final evaluation and the run directory (train.parquet, eval.parquet, run.json)
    sched.recorder.evaluate()
    result = sched.result(config)
    hbsim.write_run(result, a.out, overwrite=True)
    t = result.train
    print(t[["step", "arm", "reward", "learnability", "transfer", "overhead_frac"]].to_string(index=False))
    print(f"wrote {a.out}: mean step {t['seconds_step'].mean():.3f}s, "
          f"scheduler overhead {100 * t['overhead_frac'].mean():.2f}% of step time")


if __name__ == "__main__":
    main()
