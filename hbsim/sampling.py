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
     harness order, so a real trainer can batch its rollouts); groups that fail the group
     filter (`GroupFilter`, below) are dropped; the retained groups fill the batch in
     generation order and the rest go to the harness's buffer, born at `step`;
  4. cap: every buffer keeps at most `max_size` groups, the newest (0 = no cap).
A batch comes out short when the rounds run out.

`max_age` (the env knob `leftover_max_age`): a buffered group can be used at step s while
s - born <= max_age; 0 means no age limit (a group waits until it is used). Expiry happens
when a step starts, so `leftover_size` after a step still counts groups that the next step
will drop as too old.

The group filter (`GroupFilter`, knobs `FILTER_KNOBS`, the same in every backend's table:
the synthetic env kinds, the native real trainer and the TRL backend). A group of rewards
r_1..r_G is kept iff
  * its rewards are not all equal (`hbsim.grpo.keep_mask`, always; DAPO's dynamic sampling);
  * `keep_band = "lo,hi"` (or [lo, hi]): lo <= mean(r) <= hi, BOTH edges inclusive
    ("" = no band, the default). With binary rewards and G = 8, "0.25,0.75" keeps groups
    with 2 to 6 successes (the variance rule alone keeps 1 to 7);
  * `min_abs_adv = a > 0`: mean_i |A_i| > a, A the group's advantages of the backend's
    `advantage` kind (prime-rl's advantage filter drops |A| <= threshold; here it acts on a
    group's mean, the unit the sampler keeps or drops). 0 (the default) is the variance rule.
With the defaults the filter IS `keep_mask` (nothing else is computed), so default runs keep
their numbers bit for bit; a run config records the two knobs only when set (`when_set`), so
its hash does not move either.

Every `Sample` also counts, per harness, the rollouts of ALL its fresh groups and their reward
sum BEFORE filtering (`generated_rewards`): what a success-variance scheduler (`variance`)
needs to see harnesses whose groups are all filtered out. And it keeps every fresh block with
its rewards and keep mask (`fresh`, generation order), from which `Sample.groups` builds the
step's rows of the groups table (hbsim.contract.GROUP_COLUMNS): nothing is drawn for it, so
every random stream and number of a run stays as it was.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from hbsim import grpo
from policies.errors import UserError
from policies.knobs import Knob
from policies.validate import comma_items

def _band(name: str, value) -> str:
    """`keep_band`'s parse: "lo,hi" or [lo, hi] (finite, lo <= hi) -> canonical "lo,hi"; "" = none."""
    items = value
    if isinstance(value, str):
        items = comma_items(value, keep_empty=True)
    try:
        if isinstance(items, (bytes, dict)) or not hasattr(items, "__iter__"):
            raise TypeError
        nums = [float(x) for x in items if not isinstance(x, bool)]
        if len(nums) != len(list(items)):
            raise TypeError
    except (TypeError, ValueError):
        nums = None
    if nums is None or len(nums) not in (0, 2) or not all(map(math.isfinite, nums)) or (nums and nums[0] > nums[1]):
        raise UserError(f"{name}={value!r} is not allowed: expected {_band.allowed}")
    return "" if not nums else f"{nums[0]!r},{nums[1]!r}"


_band.allowed = 'a band "lo,hi" (or [lo, hi]) of finite numbers with lo <= hi, or "" for none'

#: the group filter's knobs: the one definition, in every backend's knob table
FILTER_KNOBS = {
    "keep_band": Knob("", "keep a group only if lo <= its mean reward <= hi (edges inclusive; \"\" = no band)",
                      parse=_band),
    "min_abs_adv": Knob(0.0, "keep a group only if its mean |advantage| exceeds this (0 = the zero-variance rule)",
                        0.0, 1e9),
}


#: the knobs a run config records only when set: FILTER_KNOBS, and the env's cost and
#: validation-split knobs (hbsim.envs.costs adds them)
WHEN_SET: dict[str, Knob] = dict(FILTER_KNOBS)


def when_set(section: dict) -> dict:
    """A config section without the WHEN_SET knobs that hold their defaults: a run config
    records them only when set, so every config from before they existed hashes as before."""
    return {k: v for k, v in section.items() if not (k in WHEN_SET and v == WHEN_SET[k].default)}


@dataclass(frozen=True)
class GroupFilter:
    """Which groups carry signal (module docstring). `keep_band`: the canonical string of the
    knob; `advantage`: the advantage kind |A| is measured in."""

    keep_band: str = ""
    min_abs_adv: float = 0.0
    advantage: str = "loo"

    @classmethod
    def of(cls, knobs, advantage: str) -> "GroupFilter":
        """From a resolved knob mapping or record holding FILTER_KNOBS."""
        get = knobs.get if isinstance(knobs, dict) else lambda k: getattr(knobs, k)
        return cls(get("keep_band"), float(get("min_abs_adv")), advantage)

    @property
    def default(self) -> bool:
        return self.keep_band == "" and self.min_abs_adv == 0.0

    def mask(self, rewards: np.ndarray) -> np.ndarray:
        """rewards (n, G) -> (n,) bool: the groups that are kept."""
        keep = grpo.keep_mask(rewards)
        if self.default or not keep.any():
            return keep
        r = np.asarray(rewards, dtype=np.float64)
        if self.keep_band:
            lo, hi = (float(x) for x in comma_items(self.keep_band))
            mean = r.mean(axis=-1)
            keep &= (mean >= lo) & (mean <= hi)
        if self.min_abs_adv > 0.0 and keep.any():
            with np.errstate(invalid="ignore"):
                keep &= np.abs(grpo.advantages(r, self.advantage)).mean(axis=-1) > self.min_abs_adv
        return keep


#: generate(requests: {harness: groups}) -> {harness: (block of groups, rewards (groups, G))}
Generate = Callable[[dict], dict]


@dataclass
class Sample:
    """One step's optimizer groups and its dynamic-sampling ledger.

    parts: harness -> blocks in batch order (leftovers oldest first, then fresh groups)
    generated: fresh groups generated (= scored); retained: fresh groups kept (non-zero variance)
    leftover_used: buffered groups taken; leftover_age: their mean age in steps (nan if none)
    leftover_size: groups in all buffers after the step
    generated_rewards: harness -> [rollouts, reward sum] of its fresh groups, before filtering
    fresh: (harness, block, rewards (n, G), keep (n,)) of every fresh block, in generation order
    """

    parts: dict[int, list] = field(default_factory=dict)
    generated: int = 0
    retained: int = 0
    leftover_used: int = 0
    leftover_age: float = float("nan")
    leftover_size: int = 0
    generated_rewards: dict[int, list] = field(default_factory=dict)
    fresh: list[tuple] = field(default_factory=list)

    def groups(self, advantage: str, cost: Callable[[int, object], np.ndarray]) -> dict[str, np.ndarray]:
        """The step's generated groups (StepResult.groups): arrays (n,) `arm`, `size`,
        `success`, `reward_mean`, `reward_std`, `mean_abs_adv` (hbsim.grpo.group_stats of the
        `advantage` kind), `retained` and `cost` (cost(harness, block) -> (len(block),), the
        generation cost of each group), n = the fresh groups of the step in generation order."""
        parts = [(h, rewards, keep, np.asarray(cost(h, block), dtype=np.float64).reshape(-1))
                 for h, block, rewards, keep in self.fresh if len(rewards)]
        if not parts:
            zeros = np.zeros(0)
            return {"arm": np.zeros(0, dtype=np.int64), "size": np.zeros(0, dtype=np.int64), "success": zeros,
                    "reward_mean": zeros, "reward_std": zeros, "mean_abs_adv": zeros,
                    "retained": np.zeros(0, dtype=bool), "cost": zeros}
        out = {"arm": np.concatenate([np.full(len(r), h, dtype=np.int64) for h, r, _, _ in parts]),
               "size": np.concatenate([np.full(len(r), np.shape(r)[1], dtype=np.int64) for _, r, _, _ in parts])}
        if len({np.shape(r)[1] for _, r, _, _ in parts}) == 1:     # one call: row-wise, the same numbers
            out.update(grpo.group_stats(np.concatenate([np.asarray(r, dtype=np.float64) for _, r, _, _ in parts]),
                                        advantage))
        else:
            stats = [grpo.group_stats(r, advantage) for _, r, _, _ in parts]
            out.update({k: np.concatenate([s[k] for s in stats]) for k in stats[0]})
        out["retained"] = np.concatenate([np.asarray(keep, dtype=bool) for _, _, keep, _ in parts])
        out["cost"] = np.concatenate([c for *_, c in parts])
        return out

    def generated_array(self, n_harnesses: int) -> np.ndarray:
        """`generated_rewards` as an (H, 2) float array [rollouts, reward sum] (zeros where none)."""
        out = np.zeros((n_harnesses, 2))
        for h, (n, total) in self.generated_rewards.items():
            out[h] = (n, total)
        return out


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
                 max_size: int = 0, group_filter: GroupFilter | None = None):
        self.oversample, self.max_rounds = float(oversample), int(max_rounds)
        self.filter = group_filter or GroupFilter()
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
                seen = sample.generated_rewards.setdefault(h, [0, 0.0])
                seen[0] += int(np.size(rewards))
                seen[1] += float(np.sum(rewards))
                keep = self.filter.mask(rewards)
                sample.fresh.append((h, block, rewards, keep))
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
