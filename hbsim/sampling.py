"""Dynamic sampling with per-harness leftover buffers (SPEC §2.2): the ONE implementation,
used by the synthetic environments (`hbsim.envs.base`) and by real runs (`real_runs.native.adapter`).

The sampler is pure bookkeeping: the caller generates and scores groups (`generate`), the
sampler decides which groups are optimized, which wait in a leftover buffer and which are
dropped, and counts them. Groups are opaque to it and travel in *blocks*: a sequence of
groups of one harness generated at the same step (a numpy array of packed records, or a
list of objects) that supports len(), slicing and, for arrays, boolean-mask indexing.

One step, `collect(need, step, generate)`:
  1. expire: buffered groups older than `max_age` steps are dropped (see below);
  2. leftovers first: every harness h with need[h] > 0 takes up to need[h] buffered groups,
     oldest first, and their ages (step - birth step) are recorded;
  3. up to `max_rounds` rounds: every harness still missing m groups asks for
     ceil(m * oversample) fresh groups (ONE `generate` call per round for all harnesses, in
     harness order, so a real trainer can batch its rollouts); groups whose rewards all equal
     each other (`hbsim.grpo.keep_mask`) are dropped; the retained groups fill the batch in
     generation order and the rest go to the harness's buffer, born at `step`;
  4. cap: every buffer keeps at most `max_size` groups, the newest (0 = no cap).
A batch comes out short when the rounds run out.

`max_age` (the env knob `leftover_max_age`): a buffered group can be used at step s while
s - born <= max_age; 0 means no age limit (a group waits until it is used). Expiry happens
when a step starts, so `leftover_size` after a step still counts groups that the next step
will drop as too old.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from hbsim import grpo

#: generate(requests: {harness: groups}) -> {harness: (block of groups, rewards (groups, G))}
Generate = Callable[[dict], dict]


@dataclass
class Sample:
    """One step's optimizer groups and its dynamic-sampling ledger.

    parts: harness -> blocks in batch order (leftovers oldest first, then fresh groups)
    generated: fresh groups generated (= scored); retained: fresh groups kept (non-zero variance)
    leftover_used: buffered groups taken; leftover_age: their mean age in steps (nan if none)
    leftover_size: groups in all buffers after the step
    """

    parts: dict[int, list] = field(default_factory=dict)
    generated: int = 0
    retained: int = 0
    leftover_used: int = 0
    leftover_age: float = float("nan")
    leftover_size: int = 0


def _select(block, mask: np.ndarray):
    """The groups of `block` where `mask` is True (arrays by indexing, sequences by position)."""
    if isinstance(block, np.ndarray):
        return block[mask]
    return [g for g, keep in zip(block, mask.tolist()) if keep]


class DynamicSampler:
    """Per-harness leftover buffers and the sampling rounds (see the module docstring).

    A buffer is a list of [born, block] entries, oldest first.
    """

    def __init__(self, n_harnesses: int, *, oversample: float, max_rounds: int, max_age: int = 0,
                 max_size: int = 0):
        self.oversample, self.max_rounds = float(oversample), int(max_rounds)
        self.max_age, self.max_size = int(max_age), int(max_size)
        self.buffers: list[list[list]] = [[] for _ in range(int(n_harnesses))]

    def size(self) -> int:
        return sum(len(block) for buf in self.buffers for _, block in buf)

    def expire(self, step: int) -> None:
        """Drop buffered groups whose age at `step` exceeds max_age (max_age = 0: none)."""
        if self.max_age > 0:
            for h, buf in enumerate(self.buffers):
                self.buffers[h] = [entry for entry in buf if step - entry[0] <= self.max_age]

    def _take(self, h: int, n: int, step: int, parts: list, ages: list) -> int:
        """Move up to n buffered groups of harness h (oldest first) into `parts`, their ages
        at `step` into `ages`; returns how many."""
        buf, taken = self.buffers[h], 0
        while taken < n and buf:
            born, block = buf[0]
            use = min(n - taken, len(block))
            parts.append(block[:use])
            ages.extend([step - born] * use)
            if use == len(block):
                buf.pop(0)
            else:
                buf[0] = [born, block[use:]]
            taken += use
        return taken

    def _cap(self) -> None:
        """Drop the oldest groups of every buffer beyond `max_size` (0: no cap)."""
        if self.max_size > 0:
            for h, buf in enumerate(self.buffers):
                extra = sum(len(block) for _, block in buf) - self.max_size
                if extra > 0:
                    self._take(h, extra, 0, [], [])

    def collect(self, need: dict[int, int], step: int, generate: Generate) -> Sample:
        """The groups of one step: need = harness -> groups wanted (harness order)."""
        self.expire(step)
        sample, ages = Sample(), []
        have = {}
        for h in sorted(need):
            sample.parts[h] = []
            have[h] = self._take(h, int(need[h]), step, sample.parts[h], ages) if need[h] > 0 else 0
        sample.leftover_used = len(ages)
        for _ in range(self.max_rounds):
            missing = {h: need[h] - have[h] for h in sorted(need) if need[h] > have[h]}
            if not missing:
                break
            requests = {h: int(math.ceil(m * self.oversample)) for h, m in missing.items()}
            fresh = generate(requests)
            for h, m in requests.items():
                block, rewards = fresh[h]
                sample.generated += m
                keep = grpo.keep_mask(rewards)
                kept = int(keep.sum())
                sample.retained += kept
                if not kept:
                    continue
                block = _select(block, keep)
                use = min(missing[h], kept)
                sample.parts[h].append(block[:use])
                have[h] += use
                if kept > use:
                    self.buffers[h].append([step, block[use:]])
        self._cap()
        sample.leftover_age = float(sum(ages) / len(ages)) if ages else float("nan")
        sample.leftover_size = self.size()
        return sample

    def state_dict(self) -> dict:
        return {"buffers": copy.deepcopy(self.buffers)}

    def load_state_dict(self, state: dict) -> None:
        buffers = state["buffers"]
        if len(buffers) != len(self.buffers):
            raise ValueError(f"sampler state has {len(buffers)} buffers: expected {len(self.buffers)}")
        self.buffers = [[[int(born), block] for born, block in buf] for buf in copy.deepcopy(buffers)]
