"""Speed figures of the real trainer without pytest (for machines that only have torch).

    python -m real_runs.native.bench sketch [--device cuda] [--repeats 50]   # gather of d coordinates
    python -m real_runs.native.bench timing RUN_DIR                           # per-phase seconds of a run
    python -m real_runs.native.bench cpu-steps --preset smollm2-135m --steps 3  # CPU seconds per step by phase

`sketch` times `ParamSketch.grad` on gradients shaped like the last 4 blocks of a
2B-parameter model (hidden 2048, MLP 6144; q, k, v, o, up, gate, down and two norms per
block; ~0.9 GB of float32) gathering 65,536 pre-computed flat coordinates.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def two_b_last_blocks(hidden: int = 2048, mlp: int = 6144, blocks: int = 4) -> dict[str, tuple[int, ...]]:
    """name -> shape of the parameter tensors of the last `blocks` blocks of a 2B-like model."""
    shapes: dict[str, tuple[int, ...]] = {}
    for b in range(blocks):
        for name in ("q", "k", "v", "o"):
            shapes[f"layers.{b}.attn.{name}.weight"] = (hidden, hidden)
        shapes[f"layers.{b}.mlp.up.weight"] = (mlp, hidden)
        shapes[f"layers.{b}.mlp.gate.weight"] = (mlp, hidden)
        shapes[f"layers.{b}.mlp.down.weight"] = (hidden, mlp)
        shapes[f"layers.{b}.norm1.weight"] = (hidden,)
        shapes[f"layers.{b}.norm2.weight"] = (hidden,)
    return shapes


def gradient_sketch_fixture(device: str = "cpu", d: int = 65536):
    """A ParamSketch over zero-stride parameters whose `.grad` is resident (ones)."""
    import torch
    from torch import nn

    from policies.sketch import plan_sketch
    from real_runs.native.sketch import ParamSketch

    shapes = two_b_last_blocks()
    named = []
    for name, shape in shapes.items():
        p = nn.Parameter(torch.zeros((), device=device).expand(shape))
        p.grad = torch.ones(shape, device=device)
        named.append((name, p))
    return ParamSketch(named, plan_sketch(shapes, d, 0))


def bench_sketch(device: str, repeats: int) -> dict:
    import torch

    sk = gradient_sketch_fixture(device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    for _ in range(3):
        sk.grad()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = sk.grad()
        sync()
        times.append(time.perf_counter() - t0)
    assert float(out.sum()) == out.numel()
    return {"device": device, "coordinates": int(out.numel()), "tensors": len(sk.names),
            "median_ms": 1e3 * float(np.median(times)), "min_ms": 1e3 * float(np.min(times)),
            "repeats": repeats}


def run_timing(run_dir: str) -> dict:
    """Mean seconds per phase, mean step seconds and the scheduler overhead fraction."""
    from hbsim.contract.records import read_run

    run = read_run(run_dir)
    train = run.train
    phases = {c[len("seconds_"):]: float(train[c].mean()) for c in train.columns
              if c.startswith("seconds_") and c != "seconds_step"}
    out = {"steps": int(len(train)), "phase_seconds_mean": phases}
    if "seconds_step" in train:
        out["step_seconds_mean"] = float(train["seconds_step"].mean())
        out["overhead_frac_mean"] = float(train["overhead_frac"].mean())
        out["overhead_frac_median"] = float(train["overhead_frac"].median())
    out["tokens_per_step"] = float(train["tokens"].mean())
    out["reward_by_step"] = [float(x) for x in train["reward"]]
    ev = run.eval
    if len(ev):  # held-out reward per harness at each evaluation (step 0 = after the warm start)
        table = ev.groupby(["step", "harness"])["reward"].mean().unstack("harness")
        out["eval_reward"] = {int(step): {h: round(float(v), 4) for h, v in row.items()}
                              for step, row in table.iterrows()}
    optimized = max(train["groups_optimized"].sum(), 1)
    out["groups_generated_per_optimized"] = float(train["groups_generated"].sum() / optimized)
    return out


#: the phase names of the CPU benches (`seconds_<column>` of the train table -> the name printed)
PHASE_NAMES = {"rollout": "generation", "tools": "scoring", "backward": "backward", "sketch": "sketch",
               "optimizer": "optimizer", "allreduce": "allreduce", "scheduler": "scheduler"}


def use_cpu_clock(*modules) -> None:
    """Make `modules` time their phases with this thread's CPU clock (`time.thread_time` for
    `time.perf_counter`), so their `seconds_*` columns are CPU seconds whatever else runs.
    For a bench process only: the modules keep the clock for the rest of the process."""
    import types

    cpu_clock = types.SimpleNamespace(perf_counter=time.thread_time, time=time.time, thread_time=time.thread_time)
    for module in modules:
        module.time = cpu_clock


def phase_figures(train) -> dict:
    """Both CPU benches' reading of a train table: the mean seconds per step by phase
    (`PHASE_NAMES`), the mean step, the scheduler's share of it and the tokens per step."""
    phases = {PHASE_NAMES.get(c[len("seconds_"):], c[len("seconds_"):]): float(train[c].mean())
              for c in train.columns if c.startswith("seconds_") and c != "seconds_step"}
    total = float(train["seconds_step"].mean())
    return {"cpu_seconds_per_step_by_phase": {k: round(v, 4) for k, v in phases.items()},
            "cpu_seconds_per_step": round(total, 3),
            "scheduler_share": round(phases.get("scheduler", 0.0) / total, 6) if total else None,
            "tokens_per_step": float(train["tokens"].mean())}


def cpu_steps(preset: str, steps: int, policy: str, seed: int, sets: list[str]) -> dict:
    """CPU seconds per optimizer step by phase of the native backend: `steps` steps of `policy`
    on `preset` (one torch thread; `sets`: KEY=VALUE env knobs), with the CPU clock of this
    thread (`time.thread_time`) standing in for the wall clock in the modules that time the
    phases (rollout, adapter, trainer, hbsim's loop), so every `seconds_*` column is CPU
    seconds whatever else the machine runs. Phases: generation (`rollout`: sampling),
    scoring (`tools`: prompts, replies and the checkers), backward (rows, forward, backward;
    the learnability), sketch (the gradient sketch before clipping, and the update sketch),
    optimizer (clip and Adam), scheduler (the policy's select and update). Also the CPU
    seconds of building the model (load) and of one evaluation (every harness, the preset's
    eval_tasks x eval_attempts)."""
    import torch

    import hbsim.loop
    import policies
    import real_runs.native.adapter
    import real_runs.native.rollout
    import real_runs.native.trainer
    from policies.validate import parse_sets
    from real_runs import make_adapter
    from real_runs.native.presets import preset_run_keys

    use_cpu_clock(hbsim.loop, real_runs.native.adapter, real_runs.native.rollout, real_runs.native.trainer)
    torch.set_num_threads(1)
    knobs = parse_sets(sets)
    # batch_groups is a run key: the preset's (what `hb real` runs with) unless --set batch_groups=N
    batch_groups = knobs.pop("batch_groups", None) or preset_run_keys(preset).get("batch_groups")
    t0 = time.thread_time()
    adapter = make_adapter(seed, preset=preset, threads=1, **knobs)
    load = time.thread_time() - t0
    t0 = time.thread_time()
    frame = adapter.evaluate()
    evaluation = time.thread_time() - t0
    pol = policies.make(policy, n_arms=len(adapter.harnesses), seed=seed,
                        **({"warmup_rounds": 1} if policy.startswith("harnessbandit") else {}))
    result = hbsim.loop.run(pol, adapter, steps, seed=seed, batch_groups=batch_groups)
    train = result.train
    return {"preset": preset, "policy": policy, "steps": steps, "knobs": knobs, "batch_groups": batch_groups,
            **phase_figures(train),
            "groups_allocated_per_step": float(train[[c for c in train.columns if c.startswith("alloc_")]].sum(axis=1).mean()),
            "groups_optimized_per_step": float(train["groups_optimized"].mean()),
            "cpu_seconds_load": round(load, 2), "cpu_seconds_one_evaluation": round(evaluation, 2),
            "episodes_per_evaluation": int(len(frame)), "torch": torch.__version__}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m real_runs.native.bench")
    sub = parser.add_subparsers(dest="what", required=True)
    s = sub.add_parser("sketch")
    s.add_argument("--device", default="cpu")
    s.add_argument("--repeats", type=int, default=50)
    t = sub.add_parser("timing")
    t.add_argument("run_dir")
    c = sub.add_parser("cpu-steps")
    c.add_argument("--preset", default="smollm2-135m")
    c.add_argument("--steps", type=int, default=3)
    c.add_argument("--policy", default="harnessbandit")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    if args.what == "cpu-steps":
        result = cpu_steps(args.preset, args.steps, args.policy, args.seed, args.set)
    else:
        result = bench_sketch(args.device, args.repeats) if args.what == "sketch" else run_timing(args.run_dir)
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
