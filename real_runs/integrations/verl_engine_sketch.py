"""The gradient sketch inside verl 0.8-0.9's model engine (docs/VERL.md, section 4). torch
only, no verl import: it wraps any engine object with an `optimizer_step()` method (verl's
`FSDPEngine.optimizer_step` clips the gradients and steps the optimizer inside it).

`wrap_optimizer_step(engine, sketch)` replaces the engine's `optimizer_step` by one that first
reads `sketch.grad()` (a `verl_sketch.ShardedSketch`: a collective over the data-parallel
ranks, so every rank's engine calls it at the same point) and adds it to the engine's running
sum, then runs the original (verl's clip and step). An update with several optimizer steps
(mini-batches, ppo_epochs) sums their pre-clip sketches, as the 0.5-0.7 actor does.
`take_step_sketch(engine)` returns the sum since the last call (a list of d floats, the same
all-reduced vector on every rank; None when no step ran) and `attach(metrics, engine)` puts it
into an update's metrics dict as `hb_sketch`, which the driver pops before verl averages the
metrics (`verl_sampler.take_update_sketch` on v1, `verl_trainer.take_sketch` on the legacy
trainer). `verl_engine_worker` wires it into verl 0.9's `ActorRolloutRefWorker` (the wrap after
the engine is built, the sketch into each update's metrics); the wrap runs on CUDA/NCCL ranks in
phase 9 of scripts/gpu_check.sh.
"""
from __future__ import annotations

import torch


def wrap_optimizer_step(engine, sketch) -> None:
    """Make `engine.optimizer_step` read `sketch` before the original clips and steps."""
    if getattr(engine, "hb_sketch", None) is not None:
        raise ValueError("this engine's optimizer_step is already wrapped by the harness sketch")
    original = engine.optimizer_step
    engine.hb_sketch, engine.hb_sketch_sum = sketch, None

    def optimizer_step(*args, **kwargs):
        g = engine.hb_sketch.grad()                      # (d,) before verl clips
        engine.hb_sketch_sum = g if engine.hb_sketch_sum is None else engine.hb_sketch_sum + g
        return original(*args, **kwargs)

    engine.optimizer_step = optimizer_step


def take_step_sketch(engine) -> list | None:
    """The summed pre-clip sketch of the optimizer steps since the last call (None: none)."""
    out: torch.Tensor | None = engine.hb_sketch_sum
    engine.hb_sketch_sum = None
    return None if out is None else out.float().cpu().tolist()


def attach(metrics: dict, engine) -> dict:
    """`metrics` with the update's sketch as `hb_sketch` (unchanged when no step ran)."""
    sketch = take_step_sketch(engine)
    if sketch is not None:
        metrics["hb_sketch"] = sketch
    return metrics
