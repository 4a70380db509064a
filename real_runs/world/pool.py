"""The one per-harness task pool of real runs: for every harness, its items (task indices of
the native trainer, dataset rows of the TRL and verl integrations) in a shuffled order,
reshuffled after each pass, from a generator of the run seed (`real_runs.streams`), so
every rank and every policy of a seed draws the same items. numpy only.
"""
from __future__ import annotations

import copy

import numpy as np

from policies.errors import UserError
from real_runs import streams


class TaskPool:
    """items[h]: the item ids harness h draws from; `stream` names the generators
    (`streams.TASK_POOL`, `streams.ROW_POOL`), one per harness."""

    def __init__(self, items: list, seed: int, stream: int):
        self.items = [np.asarray(x) for x in items]
        self._rng = [streams.rng(seed, stream, h) for h in range(len(self.items))]
        self._pool = [rng.permutation(x) for rng, x in zip(self._rng, self.items)]
        self._pos = [0] * len(self.items)

    @classmethod
    def of_column(cls, harness_column, harnesses: list[str], seed: int,
                  stream: int = streams.ROW_POOL) -> "TaskPool":
        """The pool of dataset rows: row i belongs to harness `harness_column[i]`."""
        column = np.asarray(list(harness_column), dtype=object)
        rows = [np.flatnonzero(column == h) for h in harnesses]
        for h, r in zip(harnesses, rows):
            if r.size == 0:
                raise UserError(f"harness={h!r} has no row in the dataset's `harness` column; "
                                f"present are {sorted(set(column.tolist()))}")
        return cls(rows, seed, stream)

    def draw(self, h: int, n: int) -> list[int]:
        """The next n items of harness h (a new shuffled pass when one ends)."""
        out = []
        while len(out) < n:
            if self._pos[h] >= len(self._pool[h]):
                self._pool[h] = self._rng[h].permutation(self.items[h])
                self._pos[h] = 0
            out.append(int(self._pool[h][self._pos[h]]))
            self._pos[h] += 1
        return out

    def state_dict(self) -> dict:
        return {"pool": [p.copy() for p in self._pool], "pos": list(self._pos),
                "rng": [copy.deepcopy(r.bit_generator.state) for r in self._rng]}

    def load_state_dict(self, state: dict) -> None:
        self._pool = [np.asarray(p).copy() for p in state["pool"]]
        self._pos = list(state["pos"])
        for rng, s in zip(self._rng, state["rng"]):
            rng.bit_generator.state = copy.deepcopy(s)
