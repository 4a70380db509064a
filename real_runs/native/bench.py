"""Speed figures of the real trainer without pytest (for machines that only have torch).

    python -m real_runs.native.bench sketch [--device cuda] [--repeats 50]   # gather of d coordinates
    python -m real_runs.native.bench timing RUN_DIR                           # per-phase seconds of a run

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m real_runs.native.bench")
    sub = parser.add_subparsers(dest="what", required=True)
    s = sub.add_parser("sketch")
    s.add_argument("--device", default="cpu")
    s.add_argument("--repeats", type=int, default=50)
    t = sub.add_parser("timing")
    t.add_argument("run_dir")
    args = parser.parse_args(argv)
    result = bench_sketch(args.device, args.repeats) if args.what == "sketch" else run_timing(args.run_dir)
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
