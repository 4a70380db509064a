"""The task worlds of real runs, by name (knob `world`): which tasks, which harnesses.

* ``tools``: the byte-level model's agentic tool-use world (`tasks`, `harnesses`, `episode`):
  json, xml, func, shell, sexp, kv for training, react held out.
* ``answers``: the answer-format world for a real language model (`answers`): json, xml,
  first, cot, boxed, noisy for training, hash held out.

`get_world(name)` returns a `World`: `train` and `heldout` (harness names), `harness(name)`
(UserError for an unknown one), `make_tasks(seed, n_train=, n_heldout=)`. A harness object
plays its episodes through `episode(harness, task)`: the answer world's harnesses make their
own (`AnswerHarness.episode`), the tool-use world's go through `episode.Episode`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from policies.errors import UserError
from real_runs.world import answers, harnesses, tasks
from real_runs.world.episode import Episode


@dataclass(frozen=True)
class World:
    name: str
    train: tuple[str, ...]
    heldout: tuple[str, ...]
    harness: Callable
    make_tasks: Callable


WORLDS: dict[str, World] = {
    "tools": World("tools", tuple(harnesses.TRAIN_HARNESSES), tuple(harnesses.HELDOUT_HARNESSES),
                   harnesses.get_harness, tasks.make_tasks),
    "answers": World("answers", tuple(answers.TRAIN_HARNESSES), tuple(answers.HELDOUT_HARNESSES),
                     answers.get_harness, answers.make_tasks),
}


def get_world(name: str) -> World:
    try:
        return WORLDS[name]
    except (KeyError, TypeError):
        raise UserError(f"world={name!r} is not allowed: expected one of {sorted(WORLDS)}") from None


def episode(harness, task):
    """A fresh episode of `task` under `harness`, whichever world they come from."""
    make = getattr(harness, "episode", None)
    return make(task) if make is not None else Episode(harness, task)
