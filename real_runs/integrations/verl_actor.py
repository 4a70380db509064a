"""The verl actor that takes the gradient sketch before its optimizer step (verl 0.5-0.7
legacy FSDP workers, `actor.strategy=fsdp2`; docs/VERL.md section 4). Imports verl: only for
a worker process that runs verl.

`HarnessPPOActor` is verl's `DataParallelPPOActor` whose `_optimizer_step` first reads the
sketch of the gradients (`verl_sketch.ShardedSketch.grad()`, a collective over the ranks),
then lets the parent clip and step. A step whose update makes several optimizer steps
(mini-batches, ppo_epochs) sums their pre-clip sketches. `update_policy` returns the sum in
its metrics as `hb_sketch` (a list: the legacy worker's `update_actor` sends the metrics to the
driver in `meta_info["metrics"]`, where `HarnessRayPPOTrainer`'s `take_sketch` moves it into
the step's batch). Wiring it into verl's worker (an `ActorRolloutRefWorker` that builds this
actor, chosen by a `TaskRunner` subclass, with the sketch's plan in the worker's config) is
not written.
"""
from __future__ import annotations

import torch
from verl.workers.actor.dp_actor import DataParallelPPOActor

from real_runs.integrations.verl_sketch import ShardedSketch


class HarnessPPOActor(DataParallelPPOActor):
    """`DataParallelPPOActor` with `sketch` (a ShardedSketch over its module's last blocks)
    read before every optimizer step's clipping."""

    def __init__(self, config, actor_module, actor_optimizer=None, *, sketch: ShardedSketch):
        super().__init__(config, actor_module, actor_optimizer)
        self.hb_sketch = sketch
        self._hb_sum: torch.Tensor | None = None

    def _optimizer_step(self):
        g = self.hb_sketch.grad()                       # (d,) before the parent clips
        self._hb_sum = g if self._hb_sum is None else self._hb_sum + g
        return super()._optimizer_step()

    def take_step_sketch(self) -> list | None:
        """The summed pre-clip sketch of the optimizer steps since the last call (None: none)."""
        out, self._hb_sum = self._hb_sum, None
        return None if out is None else out.float().cpu().tolist()

    def update_policy(self, data):
        self._hb_sum = None
        metrics = super().update_policy(data)
        sketch = self.take_step_sketch()
        if sketch is not None:
            metrics["hb_sketch"] = sketch
        return metrics
