"""verl 0.9's actor worker with the gradient sketch wired in (docs/VERL.md, section 4). Imports
verl: only for a worker process that runs verl.

verl's `ActorRolloutRefWorker` builds its actor as an inner `TrainingWorker`
(`actor_worker_cls`), which `init_model` resets (building the FSDP engine) and `update_actor`
calls directly (`train_mini_batch`). `sketch_worker(plan)` returns a subclass whose inner
worker, `SketchTrainingWorker`:

* after the engine is built (`reset`), wraps the engine's `optimizer_step` so it reads the
  sketch before verl clips and steps (`verl_engine_sketch.wrap_optimizer_step` over a
  `verl_sketch.ShardedSketch` of the engine's module: the last blocks under
  `sketch_block_path`, `sketch_dim` coordinates, planned from the policy's seed; a collective
  that every rank's engine reaches at the same point);
* puts the summed pre-clip sketch of each update into the update's metrics as `hb_sketch`
  (`with_sketch`; every rank clears its sum, the ranks that return outputs carry it).

The ref model's worker (`ref_worker_cls`) is verl's own. `install_sketch_worker` puts the class
in a trainer's role -> worker mapping for the actor role when `+data.harnessbandit.sketch=true`:
the v1 trainer in `_init_resource_pool_mgr` (`verl_v1.HarnessPPOTrainer`, the seam verl's own
separate-async trainer uses to swap its worker), the legacy trainer on 0.8-0.9 before verl's
`__init__` reads the mapping (`verl_trainer.HarnessRayPPOTrainer`); on the driver `verl_sampler.take_update_sketch` pops the
vector before verl averages the metrics. The engine runs on GPUs only (the FSDP engine and the
rollout server), so the whole worker runs in scripts/gpu_check.sh; on the CPU the tests run
the wrap on FSDP2 gloo ranks and these two seams on verl's own classes.
"""
from __future__ import annotations

import ray
from verl.trainer.ppo.utils import Role
from verl.utils import tensordict_utils as tu
from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker

from policies.errors import UserError
from real_runs.integrations.verl_engine_sketch import take_step_sketch, wrap_optimizer_step
from real_runs.integrations.verl_sampler import harness_settings
from real_runs.integrations.verl_sketch import ShardedSketch


def sketch_plan(settings, seed: int) -> dict:
    """The sketch's shape from the sampler's settings (`VERL_KNOBS`: sketch_block_path,
    sketch_blocks, sketch_dim) and the policy's seed: `ParamSketch.build`'s keywords."""
    return dict(block_path=settings.sketch_block_path, last_blocks=settings.sketch_blocks,
                dim=int(settings.sketch_dim), seed=int(seed))


def with_sketch(output, engine):
    """`train_mini_batch`'s output with the update's summed pre-clip sketch in its metrics as
    `hb_sketch` (the sum is cleared on every rank; a rank without output returns None)."""
    sketch = take_step_sketch(engine)
    if output is None or sketch is None:
        return output
    metrics = dict(tu.get(output, "metrics"))
    metrics["hb_sketch"] = sketch
    return tu.get_tensordict(tensor_dict={}, non_tensor_dict={"metrics": metrics}).cpu()


class SketchTrainingWorker(TrainingWorker):
    """verl's TrainingWorker whose engine takes the sketch before every optimizer step
    (`hb_sketch_plan`: `sketch_plan`'s keywords, set by `sketch_worker`)."""

    hb_sketch_plan: dict = {}

    def reset(self):
        super().reset()
        if getattr(self.engine, "hb_sketch", None) is None:     # a later reset reloads: keep the one wrap
            wrap_optimizer_step(self.engine, ShardedSketch.build(self.engine.module, **self.hb_sketch_plan))

    def train_mini_batch(self, data):
        return with_sketch(super().train_mini_batch(data), self.engine)


def sketch_worker(plan: dict) -> type:
    """verl's ActorRolloutRefWorker whose actor is a SketchTrainingWorker with `plan`."""
    inner = type("HarnessSketchTrainingWorker", (SketchTrainingWorker,), {"hb_sketch_plan": dict(plan)})
    return type("HarnessActorRolloutRefWorker", (ActorRolloutRefWorker,), {"actor_worker_cls": inner})


def install_if_asked(role_worker_mapping: dict, data_config) -> list:
    """`install_sketch_worker` when verl's `data.harnessbandit.sketch` is true, with the shape
    and seed of its settings (`sketch_plan`); returns the roles swapped (none without it)."""
    settings = harness_settings(data_config)
    return install_sketch_worker(role_worker_mapping, sketch_plan(settings, settings.seed)) if settings.sketch else []


def install_sketch_worker(role_worker_mapping: dict, plan: dict) -> list:
    """Put the sketching actor worker (`sketch_worker(plan)`) in place of
    verl's `ActorRolloutRefWorker` for the actor's role (ActorRollout, ActorRolloutRef or
    Actor; a separate RefPolicy keeps verl's own), as verl's separate-async trainer swaps its
    own worker in; returns the roles swapped. A mapping holding none of them is refused."""
    actor_roles = [r for r in (Role.ActorRollout, Role.ActorRolloutRef, Role.Actor) if r in role_worker_mapping]
    if not actor_roles:
        raise UserError("data.harnessbandit.sketch=true needs verl's actor worker, but this trainer maps no actor "
                        f"role (roles: {sorted(str(r) for r in role_worker_mapping)})")
    for role in actor_roles:
        role_worker_mapping[role] = ray.remote(sketch_worker(plan))
    return actor_roles
