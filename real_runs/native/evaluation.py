"""The one held-out evaluator of real runs, native and TRL backends alike.

`heldout_eval(model, harnesses, tasks, seed=, step=, ...)` plays every held-out task on
every training harness (suite `heldout_tasks`, task id "<task>@<harness>") and on the
held-out harness (suite `heldout_harness`), `attempts` times each, with
`rollout.play`, and returns the eval frame of SPEC §7. Sampling draws from a torch
generator of the named stream `streams.EVAL` seeded by (run seed, step), so an
evaluation never perturbs training and both backends draw the same stream for the same
seed and step.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from real_runs import streams
from real_runs.native.rollout import play
from real_runs.world.worlds import get_world


def heldout_eval(model, harnesses: list[str], tasks: list, *, seed: int, step: int, attempts: int,
                 max_new: int, temperature: float = 1.0, chunk: int = 512, world: str = "tools",
                 sampler: str = "multinomial") -> pd.DataFrame:
    """The eval frame (suite, task, category, harness, attempt, reward, success) of `tasks`
    on the training `harnesses` (names) and the held-out harnesses; `model` speaks the
    `rollout.play` contract and is left in eval mode; `world`: the task world's name
    (`real_runs.world.worlds`), whose held-out harnesses are played; `sampler`: how a token is
    drawn (`model.draw`)."""
    w = get_world(world)
    jobs, meta = [], []
    for suite, names in (("heldout_tasks", harnesses), ("heldout_harness", w.heldout)):
        for name in names:
            h = w.harness(name)
            for task in tasks:
                tid = f"{task.id}@{name}" if suite == "heldout_tasks" or len(names) > 1 else task.id
                for attempt in range(attempts):
                    jobs.append((h, task))
                    meta.append((suite, tid, task.category, name, attempt))
    model.eval()
    gen = torch.Generator(next(model.parameters()).device).manual_seed(streams.torch_seed(seed, streams.EVAL, step))
    played = play(model, jobs, generator=gen, max_new=max_new, temperature=temperature, chunk=chunk,
                  sampler=sampler)
    frame = pd.DataFrame(meta, columns=["suite", "task", "category", "harness", "attempt"])
    frame["reward"] = np.asarray(played.rewards, dtype=np.float64)
    frame["success"] = frame["reward"] >= 1.0
    return frame
