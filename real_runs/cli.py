"""`hb real`: one real GRPO run, its harness chosen each step by a scheduling policy.

    hb real --preset tiny --policy harnessbandit --seed 0 --steps 3 --out runs/real0
    hb real ... --steps 6 --out runs/real0 --resume      # continue the same run to step 6

DIR is a run directory (SPEC §7): train.parquet, eval.parquet, run.json, and
checkpoints/last.pt (written every --checkpoint-every steps and at the end). Progress,
per-step timings and the scheduler overhead fraction go to stderr; the summary to stdout.

Data parallel: under `torchrun --nproc_per_node N -m hbsim.cli real ...` every rank runs
the same loop on its share of the groups (gloo on CPU, nccl on CUDA with device
cuda:LOCAL_RANK); sketches and gradients are SUMmed across ranks, so every rank's policy
sees the same feedback and draws the same arms. Only rank 0 writes files and prints.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from real_runs.presets import BATCH_GROUPS, PRESETS
from policies import validate
from policies.errors import UserError

#: fraction of step time spent on the scheduler side: sketch gather + all-reduce + policy
OVERHEAD_PHASES = ("seconds_sketch", "seconds_allreduce", "seconds_scheduler")


def add_arguments(parser) -> None:
    parser.add_argument("--preset", default="tiny", choices=list(PRESETS), help="model/run size")
    parser.add_argument("--policy", default="harnessbandit", help="scheduling policy name (hb policies)")
    parser.add_argument("--label", default=None, help="policy label in the tables (default: the name)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, required=True, help="optimizer steps to reach")
    parser.add_argument("--out", required=True, help="run directory")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--resume", action="store_true", help="continue DIR's checkpoint to --steps")
    parser.add_argument("--model", default=None, help="local Hugging Face causal-LM directory (needs transformers)")
    parser.add_argument("--eval-every", type=int, default=None)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--backend", default="native", choices=["native", "trl"],
                        help="native trainer, or TRL's GRPOTrainer (extra harnessbandit[trl]; real_runs.trl_run)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a knob: env knob (lr=3e-4), policy.<knob>, batch_groups, eval_every")


def build_config(args) -> dict:
    """The resolved run config of `hb real` (docs/ARCHITECTURE.md)."""
    from hbsim.experiment import resolve_policy
    from real_runs import adapter_knobs
    from real_runs.presets import resolve

    env, policy, top = {"preset": args.preset, "device": args.device}, {}, {}
    if args.model:
        env["model_path"] = args.model
    for key, value in validate.parse_sets(args.set).items():
        if key.startswith("policy."):
            policy[key[len("policy."):]] = value
        elif key in ("batch_groups", "eval_every"):
            top[key] = value
        else:
            env[key.removeprefix("env.")] = value
    n_arms = adapter_knobs()["n_harnesses"]
    full = resolve(**env).to_dict()
    label = args.label or args.policy
    return {"env": {"kind": "real", "n_harnesses": n_arms, **full},
            "policy": resolve_policy({"name": args.policy, "label": label, **policy}, n_arms),
            "seed": args.seed, "steps": args.steps,
            "eval_every": top.get("eval_every", args.eval_every),
            "batch_groups": top.get("batch_groups", BATCH_GROUPS[args.preset])}


def overhead_fraction(row: dict, step_seconds: float) -> float:
    """(sketch + all-reduce + policy select/update seconds) / wall seconds of the step."""
    return sum(float(row.get(k, 0.0)) for k in OVERHEAD_PHASES) / step_seconds if step_seconds > 0 else float("nan")


def _same_run(saved: dict, config: dict) -> None:
    a = {k: v for k, v in saved.items() if k != "steps"}
    b = {k: v for k, v in config.items() if k != "steps"}
    if a != b:
        diff = sorted(k for k in set(a["env"]) | set(b["env"]) if a["env"].get(k) != b["env"].get(k))
        where = f"env knobs {diff}" if diff else "policy, seed, eval_every or batch_groups"
        raise UserError(f"--resume config does not match the checkpoint's ({where} differ); "
                         "only --steps may change")


def _init_distributed(args) -> int:
    """Join the torchrun process group if there is one; returns this process's rank."""
    import os

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return 0
    import torch
    import torch.distributed as dist

    cuda = args.device.startswith("cuda") or (args.device == "auto" and torch.cuda.is_available())
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        args.device = f"cuda:{local}"
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    return dist.get_rank()


def _check_out(args) -> None:
    """Before torch is imported: --steps bounded, and --out a run directory we may write
    (policies.validate): never a file, a grid, an `hb sim` folder, a report or a folder
    hb did not create; with --resume, an existing run directory holding a checkpoint."""
    validate.check_int("--steps", args.steps, 0, validate.MAX_STEPS)
    if args.model is not None and not Path(args.model).is_dir():
        raise UserError(f"--model {args.model!r} is not a folder; expected a local Hugging Face model directory")
    if args.resume:
        validate.check_resume_dir(args.out)
    validate.check_output_dir(args.out, "run", force_flag=None)


def main(args) -> int:
    _check_out(args)
    import hbsim
    from policies import make
    from real_runs import checkpoint, make_adapter

    if getattr(args, "backend", "native") == "trl":
        from real_runs.trl_run import main as trl_main
        return trl_main(args)
    rank = _init_distributed(args)
    if rank:  # followers train in lockstep but never write or print
        sys.stdout = sys.stderr = open(os.devnull, "w")

    if args.checkpoint_every < 1:
        raise UserError(f"--checkpoint-every={args.checkpoint_every} is not allowed: expected an integer >= 1")
    out = Path(args.out)
    config = build_config(args)
    saved = checkpoint.load(out) if args.resume else None
    if not args.resume and ((out / "run.json").exists() or (checkpoint.checkpoint_dir(out) / checkpoint.LAST).exists()):
        raise UserError(f"--out {str(out)!r} already holds a run; use --resume or another directory")
    if saved is not None:
        _same_run(saved["config"], config)
    env = {k: v for k, v in config["env"].items()}
    t0 = time.perf_counter()
    adapter = make_adapter(config["seed"], **env)
    pknobs = {k: v for k, v in config["policy"].items() if k not in ("name", "label")}
    policy = make(config["policy"]["name"], n_arms=len(adapter.harnesses), seed=config["seed"], **pknobs)
    loop = hbsim.Loop(policy, adapter, label=config["policy"]["label"], seed=config["seed"],
                      eval_every=config["eval_every"], batch_groups=config["batch_groups"])
    if saved is not None:
        loop.load_state_dict(saved["loop"])
        print(f"resumed {out} at step {loop.t}", file=sys.stderr)
    if loop.t > args.steps:
        raise UserError(f"--steps={args.steps} is not allowed: the checkpoint is already at step {loop.t}")
    print(f"model ready in {time.perf_counter() - t0:.1f}s (warm start {adapter.warm_key}, device {adapter.device})",
          file=sys.stderr)
    if rank == 0:
        validate.claim_output_dir(out, "run", tool="hb real")
    _train(loop, config, out, args, rank)
    result = loop.result(config)
    if rank == 0:
        hbsim.write_run(result, out, overwrite=True)
        checkpoint.save(out, config, loop.state_dict())
        _summary(result, out)
    return 0


def _train(loop, config, out, args, rank: int = 0) -> None:
    from real_runs import checkpoint

    every = config["eval_every"]
    if loop.t == 0 and (every or args.steps == 0):  # a fresh run (a checkpoint is never at step 0)
        loop.evaluate()
    while loop.t < args.steps:
        t0 = time.perf_counter()
        row = loop.step()
        wall = time.perf_counter() - t0
        row["seconds_step"] = wall
        row["overhead_frac"] = overhead_fraction(row, wall)
        name = loop.harnesses[row["arm"]] if row["arm"] >= 0 else "mixed"
        print(f"step {loop.t}/{args.steps} arm={name} reward={row['reward']:.3f} L={row['learnability']:.3f} "
              f"groups gen/opt={row['groups_generated']}/{row['groups_optimized']} tokens={row['tokens']} "
              f"{wall:.2f}s overhead={100 * row['overhead_frac']:.2f}%", file=sys.stderr)
        if (every and loop.t % every == 0) or loop.t == args.steps:
            loop.evaluate()
        if rank == 0 and loop.t % args.checkpoint_every == 0 and loop.t < args.steps:
            checkpoint.save(out, config, loop.state_dict())


def _summary(result, out) -> None:
    train, ev = result.train, result.eval
    final = ev[ev["step"] == ev["step"].max()] if len(ev) else ev
    print(f"run {out}: {len(train)} steps, policy {result.meta['label']}, seed {result.meta['seed']}")
    if len(train) and "seconds_step" in train:
        print(f"  mean step {train['seconds_step'].mean():.3f}s; scheduler overhead (sketch + all-reduce + "
              f"policy) {100 * train['overhead_frac'].mean():.2f}% of step time")
    for suite, part in final.groupby("suite"):
        print(f"  {suite}: mean reward {part['reward'].mean():.3f}, success {part['success'].mean():.3f} "
              f"({part['task'].nunique()} tasks x {part['attempt'].nunique()} attempts)")
