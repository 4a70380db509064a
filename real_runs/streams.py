"""The named random streams of real runs: every generator is created from (run seed, stream
id, ...) here, so no two uses share a stream and each backend draws the same numbers.

numpy only (the task world imports it without torch).

    stream id    used by                                 words after the id
    TASKS        task world: `make_tasks`                 -
    WARM_INIT    native warm start: initial weights      - (32-bit torch seed, `torch_seed32`)
    WARM_BATCH   native warm start: demonstration batches -
    TASK_POOL    native trainer: per-harness task pools  harness index
    ROW_POOL     TRL / verl: per-harness dataset rows    harness index
    ROLLOUT      native trainer: rollout sampling        rank
    EVAL         held-out evaluation, native AND TRL     optimizer step

(The TRL backend's in-process Qwen2 draws its initial weights from `manual_seed(seed)`.)
"""
from __future__ import annotations

import numpy as np

TASKS = 0x7A5C
WARM_INIT = 11
WARM_BATCH = 12
TASK_POOL = 21
ROW_POOL = 23
ROLLOUT = 31
EVAL = 41


def rng(seed: int, stream: int, *words: int) -> np.random.Generator:
    """The numpy Generator of `stream` for run `seed` (and e.g. the harness index)."""
    return np.random.default_rng([int(seed), int(stream), *(int(w) for w in words)])


def torch_seed(seed: int, stream: int, *words: int) -> int:
    """A 63-bit seed for `torch.Generator.manual_seed` of `stream` (e.g. EVAL, step)."""
    state = np.random.SeedSequence([int(seed), int(stream), *(int(w) for w in words)])
    return int(state.generate_state(1, dtype=np.uint64)[0] >> 1)


def torch_seed32(seed: int, stream: int) -> int:
    """The 32-bit form of `torch_seed`, kept for WARM_INIT only: every native real run's
    warm start (and so its results) was initialised with it."""
    return int(np.random.SeedSequence([int(seed), int(stream)]).generate_state(1)[0])
