"""The verl side of the integration (design: docs/VERL.md), in the parts that run without
a cluster and without verl installed.

* `verl_feedback(batch, harnesses, ...)`: a verl `DataProto`-like batch (`.batch` tensors,
  `.non_tensor_batch` arrays, `.meta_info`) after a training step -> the policy's
  `Feedback`: L from the trajectories' outcome scores grouped by `uid` (SPEC §2.3, LOO
  advantages recomputed from the scores: verl's own advantages may be std-scaled), the
  sketch that the actor put into `meta_info["hb_sketch"]`, the allocation counts from the
  `harness` column.
* `HarnessCurriculumSampler`: the sampler verl's `RayPPOTrainer` builds from
  `data.sampler.class_path/class_name` (an `AbstractCurriculumSampler` when verl is
  importable). Its iterator asks the policy for the next step's allocation only when the
  step's first index is drawn, so with `data.dataloader_num_workers=0` the choice for
  step k+1 follows `update(batch_k)`; it reuses the TRL backend's per-harness row pools.
"""
from __future__ import annotations

import numpy as np

from policies import Feedback
from policies.errors import UserError
from real_runs.trl_signals import HarnessSampler, group_signals


def _column(batch, key):
    for table in (getattr(batch, "non_tensor_batch", None), getattr(batch, "batch", None), batch):
        if isinstance(table, dict) or hasattr(table, "keys"):
            if key in table.keys():
                value = table[key]
                return value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
    raise UserError(f"verl batch has no {key!r} field; expected it in batch.batch or batch.non_tensor_batch")


def verl_feedback(batch, harnesses: list[str], *, score_key: str = "token_level_scores",
                  harness_key: str = "harness", advantage: str = "loo") -> Feedback:
    """Feedback of one verl step. Rows sharing a `uid` are one GRPO group (all groups must
    have the same size G); a row's reward is the sum of its token-level scores."""
    scores = _column(batch, score_key)
    rewards = scores.reshape(len(scores), -1).sum(axis=1).astype(np.float64)
    uid = _column(batch, "uid")
    names = _column(batch, harness_key)
    order, groups = [], {}
    for i, u in enumerate(uid.tolist()):
        if u not in groups:
            groups[u] = []
            order.append(u)
        groups[u].append(i)
    sizes = {len(v) for v in groups.values()}
    if len(sizes) != 1:
        raise UserError(f"verl batch group sizes={sorted(sizes)} are not allowed: every uid must have the same "
                        "number of rollouts (actor_rollout_ref.rollout.n)")
    size = sizes.pop()
    index = np.asarray([i for u in order for i in groups[u]])
    learn, _ = group_signals(rewards[index], size, advantage)
    counts = np.zeros(len(harnesses), dtype=np.int64)
    for u in order:
        name = str(names[groups[u][0]])
        if name not in harnesses:
            raise UserError(f"verl batch harness={name!r} is not allowed: expected one of {harnesses}")
        counts[harnesses.index(name)] += 1
    meta = getattr(batch, "meta_info", {}) or {}
    sketch, update = meta.get("hb_sketch"), meta.get("hb_update_sketch")
    used = np.flatnonzero(counts)
    return Feedback(arm=int(used[0]) if len(used) == 1 else None, learnability=learn,
                    sketch=None if sketch is None else np.asarray(sketch, dtype=np.float32),
                    update_sketch=None if update is None else np.asarray(update, dtype=np.float32),
                    reward=float(rewards.mean()), cost=None, counts=counts)


class HarnessCurriculumCore:
    """The verl-independent body of `HarnessCurriculumSampler`: `__iter__` yields the dataset
    indices of step after step (`batch_groups` prompts each, drawn from the harnesses of
    the policy's allocation at the moment the step's first index is requested), and
    `update(batch)` feeds the step's `verl_feedback` to the policy."""

    def __init__(self, harness_column, harnesses: list[str], policy, *, batch_groups: int, steps: int,
                 seed: int = 0, harness_key: str = "harness"):
        self.harnesses, self.policy, self.harness_key = list(harnesses), policy, harness_key
        self.batch_groups, self.steps = int(batch_groups), int(steps)
        self.rows = HarnessSampler(list(harness_column), self.harnesses, seed)
        self.pending: list = []     # allocations drawn and not yet fed back (at most one without prefetch)

    def __len__(self) -> int:
        return self.batch_groups * self.steps

    def __iter__(self):
        for _ in range(self.steps):
            alloc = self.policy.select(batch_groups=self.batch_groups)
            self.pending.append(alloc)
            for h, n in enumerate(np.asarray(alloc.counts)):
                yield from self.rows.draw(h, int(n))

    def update(self, batch) -> Feedback:
        if not self.pending:
            raise UserError("update(batch) is not allowed before the sampler drew a step")
        if len(self.pending) > 1:   # the next step's harnesses were chosen before this feedback
            raise UserError(f"{len(self.pending)} steps were drawn before update(batch): the dataloader prefetches, "
                            "so each choice would ignore the previous step's feedback; set "
                            "data.dataloader_num_workers=0")
        alloc = self.pending.pop(0)
        feedback = verl_feedback(batch, self.harnesses, harness_key=self.harness_key)
        if not np.array_equal(feedback.counts, alloc.counts):
            raise UserError(f"verl batch harness counts={feedback.counts.tolist()} differ from the allocation "
                            f"{np.asarray(alloc.counts).tolist()}: set data.dataloader_num_workers=0 and "
                            "data.shuffle=False so the trainer consumes the sampler's steps in order")
        self.policy.update(feedback)
        return feedback

    def state_dict(self) -> dict:
        return {"policy": self.policy.state_dict(), "rows": self.rows.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.rows.load_state_dict(state["rows"])


try:  # verl is not a dependency: the class below is verl's sampler when verl is importable
    from verl.experimental.dataset.sampler import AbstractCurriculumSampler as _VerlBase
except ImportError:
    _VerlBase = object


class HarnessCurriculumSampler(HarnessCurriculumCore, _VerlBase):
    """verl: `data.sampler.class_path=pkg://real_runs.trl_verl`,
    `data.sampler.class_name=HarnessCurriculumSampler`, `data.dataloader_num_workers=0`,
    and `data.harnessbandit = {harnesses: [...], policy: harnessbandit, policy_knobs: {},
    seed: 0, steps: N}`; `data.train_batch_size` prompts (groups) per step. The dataset's
    rows carry a `harness` column (verl keeps extra columns in `non_tensor_batch`)."""

    def __init__(self, data_source, data_config):
        from policies import make
        hb = dict(data_config.get("harnessbandit", {}) or {})
        if not hb.get("harnesses") or not hb.get("steps"):
            raise UserError("data.harnessbandit.harnesses and data.harnessbandit.steps are required by "
                            "HarnessCurriculumSampler")
        harnesses, seed = list(hb["harnesses"]), int(hb.get("seed", 0))
        key = hb.get("harness_key", "harness")
        table = getattr(data_source, "dataframe", data_source)
        policy = make(hb.get("policy", "harnessbandit"), n_arms=len(harnesses), seed=seed,
                      **dict(hb.get("policy_knobs", {}) or {}))
        super().__init__(list(table[key]), harnesses, policy, batch_groups=int(data_config["train_batch_size"]),
                         steps=int(hb["steps"]), seed=seed, harness_key=key)
