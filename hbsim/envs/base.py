"""Base class of the synthetic environments: one `TrainingAdapter` (hbsim/adapter.py) whose
sampling, dynamic sampling, leftover buffers, cost ledger, common random numbers, ground
truth logging and held-out evaluation are shared; a subclass only writes its model.

A subclass sets `kind` (its registry name) and `KNOBS` (COMMON_KNOBS | its own knobs) and
writes the hooks of "subclass hooks" below: `_build`, `success_matrix`, `_learn`,
`expected_gains`, `expected_success`, `_model_state` / `_load_model_state`; optionally `_check_knobs`,
`rewards_from_uniform` and `_advance`.

The base provides `self.knobs` (resolved), `self.harnesses`, `self.heldout_harness`,
`self.task_ids` (all tasks, training first), `self.task_category` (n_all,) int index into
CATEGORIES, `self.n_tasks`, `self.n_heldout`, `self.H`, `self.G`, `self.step_count`.

Randomness (common random numbers): every stream is a Generator built from
`SeedSequence(seed, spawn_key=(STREAM, index))`, so a policy's choices on one harness never
shift another harness's streams, the eval noise, or the structure. Streams: structure, per
harness task order and reward noise (stateful), and per step t the learn, world and eval
streams (stateless: spawn key (STREAM, t)). Same seed -> same tasks, task order, initial
success matrix, world noise and eval uniforms for every policy.

Dynamic sampling (SPEC §2.2) is `hbsim.sampling.DynamicSampler` (shared with real runs;
knobs `oversample`, `max_rounds`, `leftover_max_age`, and the group filter's `keep_band`,
`min_abs_adv`, `hbsim.sampling.FILTER_KNOBS`); a batch can come out short.

Ground truth per step (extras): `oracle_arm` (pure harness with the largest expected
one-step gain from the pre-step state), `regret` (max over the pure candidates and the
chosen allocation of the expected gain, minus the chosen one's; >= 0 by construction),
`gain` (expected gain of the chosen allocation), `true_<harness>` (mean true success
over training tasks AFTER the step, training harnesses and the held-out harness), and
`true_heldout_tasks` / `true_heldout_harness` (noise-free held-out success AFTER the step:
the mean true success probability of the held-out tasks on the training harnesses / on
the held-out harness, i.e. the expected mean reward of the two eval suites).
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from hbsim.adapter import CostLedger, StepResult
from hbsim.contract import EVAL_COLUMNS, VALIDATION_SUITE
from hbsim import grpo
from policies.clairvoyant import TARGETS
from policies.errors import UserError
from hbsim.sampling import FILTER_KNOBS, DynamicSampler, GroupFilter, when_set
from hbsim.envs.costs import COST_KNOBS, VALIDATION_KNOBS, harness_costs
from hbsim.contract import SUITES
from policies.knobs import Knob, Knobs
from policies.validate import MAX_EVAL_ROWS, check_int, comma_items

#: PinchBench-like task categories; `task_category` indexes this tuple.
CATEGORIES = ("skills", "integrations", "memory", "csv", "coding")

#: spawn-key stream ids of the common random numbers
STREAM_STRUCTURE, STREAM_TASKS, STREAM_REWARDS, STREAM_LEARN, STREAM_EVAL, STREAM_WORLD = 0, 1, 2, 3, 4, 5

STREAM_VALIDATION = 6                   # the validation suite's eval uniforms (`n_validation_tasks`)
assert TARGETS == ("train", *SUITES)      # the oracle's targets: the training objective, then the suites


def target_means(success: np.ndarray, n_tasks: int, n_harnesses: int) -> np.ndarray:
    """success (..., n_all, H+1) -> (..., 3) mean success on the three TARGETS: training
    tasks x training harnesses, held-out tasks x training harnesses, held-out tasks on the
    held-out harness (column H)."""
    return np.stack([success[..., :n_tasks, :n_harnesses].mean(axis=(-1, -2)),
                     success[..., n_tasks:, :n_harnesses].mean(axis=(-1, -2)),
                     success[..., n_tasks:, n_harnesses].mean(axis=-1)], axis=-1)


#: knobs every synthetic environment has
COMMON_KNOBS = Knobs({
    "n_harnesses": Knob(6, "training harnesses (arms); one held-out harness is added", 1, 64),
    "n_tasks": Knob(200, "training tasks, each available on every training harness", 1, 100_000),
    "n_heldout_tasks": Knob(50, "held-out tasks of both eval suites", 1, 100_000),
    "group_size": Knob(8, "G: rollouts per group", 2, 1024),
    "oversample": Knob(1.5, "groups generated per missing group in a sampling round", 1.0, 16.0),
    "max_rounds": Knob(4, "sampling rounds per harness and step before a batch stays short", 1, 100),
    "leftover_max_age": Knob(0, "drop leftover groups older than this many steps (0 = no age limit)", 0, 10**6),
    "advantage": Knob("loo", "advantage kind (SPEC §2.1)", choices=tuple(grpo.ADVANTAGES)),
    **FILTER_KNOBS,
    "k_attempts": Knob(3, "attempts per held-out task in each eval suite", 1, 100_000),
    **VALIDATION_KNOBS,
    **COST_KNOBS,
}, scope="env")


@dataclass
class Batch:
    """The optimized groups of one step. tasks (n,) int task rows, harnesses (n,) int
    harness columns, rewards (n, G), advantages (n, G), p (n,) true success probabilities
    when the groups were generated, born (n,) step each group was generated at."""

    tasks: np.ndarray
    harnesses: np.ndarray
    rewards: np.ndarray
    advantages: np.ndarray
    p: np.ndarray
    born: np.ndarray

    def __len__(self) -> int:
        return int(self.tasks.shape[0])


def _stream(seed: int, stream: int, index: int = 0) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(stream, index)))


class SyntheticEnv:
    """A synthetic multi-harness GRPO environment (see the module docstring)."""

    kind: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    KNOBS: ClassVar[Knobs] = COMMON_KNOBS

    def __init_subclass__(cls, **kwargs):
        """Every kind's table is named after it (`env kind 'drifting' has no knob ...`) and its
        docstring lists the knobs (`help(DriftingEnv)`)."""
        super().__init_subclass__(**kwargs)
        cls.KNOBS = cls.KNOBS.named(owner=f"env kind {cls.kind!r}", scope="env")
        cls.__doc__ = cls.KNOBS.docstring(cls.__doc__ or cls.summary)

    # -- knobs ---------------------------------------------------------------------
    @classmethod
    def knobs(cls) -> dict[str, Any]:
        """Default value of every knob."""
        return cls.KNOBS.defaults()

    @classmethod
    def resolve_knobs(cls, **knobs) -> dict[str, Any]:
        """Every knob, validated by the table, defaults filled, then cross-checked."""
        resolved = cls.KNOBS.resolve(knobs)
        if resolved.get("n_validation_tasks", 0) >= resolved["n_tasks"]:
            raise UserError(f"env.n_validation_tasks={resolved['n_validation_tasks']} is not allowed: expected "
                            f"fewer than n_tasks={resolved['n_tasks']} (they are carved out of the training tasks)")
        for name in ("group_tokens", "group_tool_seconds"):
            if name in resolved:
                harness_costs(resolved, name)
        rows = cls.eval_rows(resolved)
        if rows > MAX_EVAL_ROWS:   # the evaluation's uniforms are one array of this many draws
            raise UserError(f"env.n_heldout_tasks={resolved['n_heldout_tasks']}, n_validation_tasks="
                            f"{resolved.get('n_validation_tasks', 0)}, n_harnesses={resolved['n_harnesses']} and "
                            f"k_attempts={resolved['k_attempts']} are not allowed together: one evaluation would "
                            f"have {rows} rows ((held-out tasks x (harnesses + 1) + validation tasks x harnesses) x "
                            f"attempts), allowed at most {MAX_EVAL_ROWS}")
        cls._check_knobs(resolved)
        return resolved

    @staticmethod
    def eval_rows(knobs: dict) -> int:
        """The rows of one `evaluate()` of resolved `knobs`: (held-out tasks x (harnesses + 1)
        + validation tasks x harnesses) x attempts (the size bounds read it)."""
        H = knobs["n_harnesses"]
        return (knobs["n_heldout_tasks"] * (H + 1) + knobs.get("n_validation_tasks", 0) * H) * knobs["k_attempts"]

    @classmethod
    def _check_knobs(cls, knobs: dict) -> None:
        """Cross-knob validation (optional); raises UserError."""

    # -- construction --------------------------------------------------------------
    def __init__(self, seed: int = 0, **knobs):
        self.seed = check_int("seed", seed, 0)
        self.knobs = self.resolve_knobs(**knobs)
        k = self.knobs
        self.H, self.G = k["n_harnesses"], k["group_size"]
        self.n_tasks, self.n_heldout = k["n_tasks"], k["n_heldout_tasks"]
        self.n_validation = k.get("n_validation_tasks", 0)
        self.n_train = self.n_tasks - self.n_validation          # the rows the task pools draw from
        self._tokens = harness_costs(k, "group_tokens") if "group_tokens" in k else np.zeros(self.H)
        self._tool_seconds = (harness_costs(k, "group_tool_seconds") if "group_tool_seconds" in k
                              else np.zeros(self.H))
        self.harnesses = [f"h{i}" for i in range(self.H)]
        self.heldout_harness = "hx"
        self.task_ids = np.array([f"t{i:04d}" for i in range(self.n_tasks)]
                                 + [f"e{i:04d}" for i in range(self.n_heldout)])
        structure = _stream(self.seed, STREAM_STRUCTURE)
        self.task_category = structure.integers(len(CATEGORIES), size=self.n_tasks + self.n_heldout)
        self._task_rngs = [_stream(self.seed, STREAM_TASKS, h) for h in range(self.H)]
        self._reward_rngs = [_stream(self.seed, STREAM_REWARDS, h) for h in range(self.H)]
        self._pools = [rng.permutation(self.n_train) for rng in self._task_rngs]
        self._cursors = [0] * self.H
        self._sampler = DynamicSampler(self.H, oversample=k["oversample"], max_rounds=k["max_rounds"],
                                       max_age=k["leftover_max_age"],
                                       group_filter=GroupFilter.of(k, k["advantage"]))
        self.step_count = 0
        self.lr_scale = 1.0               # the design's learning-rate multiplier (`set_lr_scale`)
        self._update_norm = float("nan")  # set by `_learn`: the norm of the update it applied
        self._build(structure)

    # -- subclass hooks ------------------------------------------------------------
    def _build(self, rng: np.random.Generator) -> None:
        """Build the ground truth and the initial learned state from `rng` (the structure stream)."""
        raise NotImplementedError

    def success_matrix(self) -> np.ndarray:
        """(n_tasks + n_heldout_tasks, H + 1) current TRUE success probability of every task
        (training rows first) on every harness (training columns first, the held-out last)."""
        raise NotImplementedError

    def _learn(self, batch: Batch, rng: np.random.Generator) -> tuple[np.ndarray | None, np.ndarray | None]:
        """One optimizer step built from the optimized batch (its advantages!): mutate the
        model, set `self._update_norm` (the L2 norm of the parameter update it applied, the
        train column `update_norm`), return the (d,) float32 gradient sketch and the update
        sketch (each or None). The step's learning rate is the env's lr x `self.lr_scale`.
        `rng` is the step's learn stream (the same for every policy at step t); not called
        when no group was optimized."""
        raise NotImplementedError

    def set_lr_scale(self, scale: float) -> None:
        """The adapter's optional `set_lr_scale` (hbsim/adapter.py): every later step, and the
        expected steps of the ground truth, use the env's own rate knobs x scale (`lr_scale`,
        the design's multiplier, docs/ARCHITECTURE.md): a subclass's step reads its rates x
        `self.lr_scale` (bernoulli lr and task_lr, scenario lr and skill_lr), GradientEnv
        through its optimizer's lr."""
        self.lr_scale = float(scale)

    def expected_gains(self, candidates: np.ndarray) -> np.ndarray:
        """candidates (C, H) int group counts -> (C,) true expected one-step change of the mean
        training success (training tasks x training harnesses) if that allocation were
        optimized from the CURRENT state; must not change the state."""
        raise NotImplementedError

    def target_gains(self, candidates: np.ndarray, target: str = "train") -> np.ndarray:
        """The adapter's optional ground truth (hbsim/adapter.py; the `oracle` policy's):
        candidates (C, H) int group counts -> (C,) true expected one-step change of the mean
        success on `target` (TARGETS) if that allocation were optimized from the CURRENT
        state; the state is not changed. train: `expected_gains` (the objective of the
        `oracle_arm` / `regret` extras); a suite: from `expected_success` (both leave out
        what the env's oracle leaves out, e.g. drift)."""
        if target == "train":
            return self.expected_gains(candidates)
        if target not in TARGETS:
            raise UserError(f"target={target!r} is not allowed: expected one of {', '.join(TARGETS)}")
        heldout = slice(self.n_tasks, None)                    # the held-out rows only: the suites' tasks
        after = self.expected_success(np.asarray(candidates), tasks=heldout)       # (C, n_heldout, H+1)
        now = self.success_matrix()[heldout]
        if target == "heldout_tasks":
            return after[:, :, : self.H].mean(axis=(1, 2)) - now[:, : self.H].mean()
        return after[:, :, self.H].mean(axis=1) - now[:, self.H].mean()

    def expected_success(self, candidates: np.ndarray, tasks: slice = slice(None)) -> np.ndarray:
        """candidates (K, H) -> (K, n, H+1) true success matrix after the expected step of
        each candidate allocation from the current state, rows `tasks` of the success matrix
        (all: n = n_all; `target_gains` asks for the held-out rows); must not change the state."""
        raise NotImplementedError

    def _model_state(self) -> dict:
        """The learned state (numpy arrays), exactly; `_load_model_state` restores it."""
        raise NotImplementedError

    def _load_model_state(self, state: dict) -> None:
        raise NotImplementedError

    def rewards_from_uniform(self, p: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Rewards in [0, 1] from success probabilities p (m,) and uniforms u (m, G) -> (m, G);
        here binary: success where u < p."""
        return (u < p[:, None]).astype(np.float64)

    def _advance(self, rng: np.random.Generator) -> None:
        """What happens every step whatever was trained (drift, forgetting), after `_learn`;
        `rng` is the step's world stream (the same for every policy). Default: nothing."""

    # -- the adapter ---------------------------------------------------------------
    def config(self) -> dict:
        """The env section of the run config (filter knobs only when set: `hbsim.sampling.when_set`)."""
        return when_set({"kind": self.kind, **self.knobs})

    def train_step(self, allocation) -> StepResult:
        counts = self._check_counts(allocation)
        t0 = time.perf_counter()
        before = self.success_matrix()
        arms = np.flatnonzero(counts).tolist()
        self._generated = np.zeros(self.H)                     # fresh groups per harness (`_generate`)
        sample = self._sampler.collect({h: int(counts[h]) for h in arms}, self.step_count,
                                       lambda requests: self._generate(requests, before))
        batch = self._assemble(sample.parts, arms)
        t1 = time.perf_counter()
        pure = np.eye(self.H, dtype=np.int64) * counts.sum()
        if len(arms) == 1:                        # a pure choice is one of the candidates
            gains = self.expected_gains(pure)
            gains = np.append(gains, gains[arms[0]])
        else:
            gains = self.expected_gains(np.vstack([pure, counts[None, :]]))
        t2 = time.perf_counter()
        self._update_norm = float("nan") if len(batch) else 0.0
        sketch, update_sketch = (self._learn(batch, _stream(self.seed, STREAM_LEARN, self.step_count))
                                 if len(batch) else (None, None))
        self._advance(_stream(self.seed, STREAM_WORLD, self.step_count))
        t3 = time.perf_counter()
        self.step_count += 1
        tokens = float(self._generated @ self._tokens)
        ledger = CostLedger(groups_generated=sample.generated, groups_scored=sample.generated,
                            tokens=int(round(tokens)),
                            cost_seconds=tokens * self.knobs["token_seconds"] + float(self._generated @ self._tool_seconds),
                            groups_retained=sample.retained, groups_optimized=len(batch),
                            leftover_used=sample.leftover_used, leftover_age=sample.leftover_age,
                            leftover_size=sample.leftover_size,
                            seconds={"rollout": t1 - t0, "oracle": t2 - t1, "backward": t3 - t2})
        L = grpo.learnability(batch.advantages) if len(batch) else None
        reward = float(batch.rewards.sum() / batch.rewards.size) if len(batch) else float("nan")
        return StepResult(learnability=L, sketch=sketch, update_sketch=update_sketch, reward=reward,
                          cost=ledger, extras=self._ground_truth(gains, counts),
                          generated=sample.generated_array(self.H), update_norm=self._update_norm,
                          groups=sample.groups(self.knobs["advantage"],
                                               lambda h, block: np.full(len(block), self._tokens[h])))

    def evaluate(self) -> pd.DataFrame:
        """Both held-out suites, k attempts per task, with uniforms from the stateless eval
        stream of the current step (identical across policies at the same step). Rows:
        heldout_tasks (task-major, then harness, then attempt), then heldout_harness."""
        k = self.knobs["k_attempts"]
        s = self.success_matrix()[self.n_tasks:]                  # (n_heldout, H + 1)
        u = _stream(self.seed, STREAM_EVAL, self.step_count).random((self.n_heldout, self.H + 1, k))
        rewards = self.rewards_from_uniform(s.reshape(-1), u.reshape(-1, k)).reshape(u.shape)
        rewards = np.concatenate([rewards[:, : self.H].reshape(-1), rewards[:, self.H].reshape(-1)])
        frame = self._eval_index().copy()
        frame["reward"] = rewards
        frame["success"] = rewards >= 1.0
        if self.n_validation:
            frame = pd.concat([frame, self._validation()], ignore_index=True)
        return frame

    def _validation(self) -> pd.DataFrame:
        """Suite `validation`: the n_validation_tasks training rows no pool draws from, on every
        training harness, k attempts (task-major, then harness, then attempt), with uniforms
        from the step's own validation stream (the held-out suites' draws are untouched)."""
        k, H, rows = self.knobs["k_attempts"], self.H, np.arange(self.n_train, self.n_tasks)
        s = self.success_matrix()[rows, :H]                                     # (n_val, H)
        u = _stream(self.seed, STREAM_VALIDATION, self.step_count).random((rows.size, H, k))
        rewards = self.rewards_from_uniform(s.reshape(-1), u.reshape(-1, k)).reshape(-1)
        tasks = np.repeat([f"{t}@{h}" for t in self.task_ids[rows] for h in self.harnesses], k)
        return pd.DataFrame({
            "suite": VALIDATION_SUITE, "task": tasks,
            "category": np.repeat([CATEGORIES[c] for c in self.task_category[rows]], H * k),
            "harness": np.tile(np.repeat(self.harnesses, k), rows.size),
            "attempt": np.tile(np.arange(k, dtype=np.int64), rows.size * H),
            "reward": rewards, "success": rewards >= 1.0})[list(EVAL_COLUMNS)]

    def _eval_index(self) -> pd.DataFrame:
        """The constant columns of `evaluate` (suite, task, category, harness, attempt), built once."""
        if getattr(self, "_eval_index_cache", None) is None:
            k, H = self.knobs["k_attempts"], self.H
            base = self.task_ids[self.n_tasks:].tolist()
            cats = [CATEGORIES[c] for c in self.task_category[self.n_tasks:]]
            rows_t = [(f"{t}@{h}", c, h) for t, c in zip(base, cats) for h in self.harnesses for _ in range(k)]
            rows_h = [(t, c, self.heldout_harness) for t, c in zip(base, cats) for _ in range(k)]
            self._eval_index_cache = pd.DataFrame({
                "suite": ["heldout_tasks"] * len(rows_t) + ["heldout_harness"] * len(rows_h),
                "task": [r[0] for r in rows_t + rows_h], "category": [r[1] for r in rows_t + rows_h],
                "harness": [r[2] for r in rows_t + rows_h],
                "attempt": np.tile(np.arange(k, dtype=np.int64), len(base) * (H + 1)),
                "reward": 0.0, "success": False})[list(EVAL_COLUMNS)]
        return self._eval_index_cache

    def state_dict(self) -> dict:
        return copy.deepcopy({
            "kind": self.kind, "seed": self.seed, "knobs": self.knobs, "step_count": self.step_count,
            "task_rngs": [r.bit_generator.state for r in self._task_rngs],
            "reward_rngs": [r.bit_generator.state for r in self._reward_rngs],
            "pools": self._pools, "cursors": self._cursors, "sampler": self._sampler.state_dict(),
            "model": self._model_state()})

    def load_state_dict(self, state: dict) -> None:
        if state.get("kind") != self.kind or state.get("knobs") != self.knobs:
            raise ValueError(f"state_dict of kind={state.get('kind')!r} with other knobs does not "
                             f"match this {self.kind!r} environment")
        state = copy.deepcopy(state)
        self.step_count = int(state["step_count"])
        for rng, st in zip(self._task_rngs, state["task_rngs"]):
            rng.bit_generator.state = st
        for rng, st in zip(self._reward_rngs, state["reward_rngs"]):
            rng.bit_generator.state = st
        self._pools, self._cursors = state["pools"], state["cursors"]
        self._sampler.load_state_dict(state["sampler"])
        self._load_model_state(state["model"])

    # -- sampling ------------------------------------------------------------------
    def _check_counts(self, allocation) -> np.ndarray:
        counts = np.asarray(getattr(allocation, "counts", allocation))
        if counts.shape != (self.H,) or counts.dtype.kind not in "iu" or counts.min() < 0 or counts.sum() < 1:
            raise ValueError(f"allocation counts={counts.tolist()!r} is not allowed: expected {self.H} "
                             f"non-negative integers with a positive sum")
        return counts.astype(np.int64)

    def _draw_tasks(self, h: int, m: int) -> np.ndarray:
        """Next m tasks of harness h's shuffled pool (reshuffled when exhausted)."""
        out = []
        while m > 0:
            pool, cur = self._pools[h], self._cursors[h]
            take = pool[cur: cur + m]
            out.append(take)
            m -= take.size
            self._cursors[h] = cur + take.size
            if self._cursors[h] >= pool.size:
                self._pools[h] = self._task_rngs[h].permutation(self.n_train)
                self._cursors[h] = 0
        return np.concatenate(out) if len(out) > 1 else out[0]

    def _generate(self, requests: dict[int, int], before: np.ndarray) -> dict:
        """The sampler's `generate`: m fresh groups per harness h from its task pool and reward
        stream, at the pre-step success probabilities `before`. Returns h -> (packed records,
        rewards)."""
        out = {}
        for h, m in requests.items():
            self._generated[h] += m
            tasks = self._draw_tasks(h, m)
            p = before[tasks, h]
            rewards = self.rewards_from_uniform(p, self._reward_rngs[h].random((m, self.G)))
            rec = np.empty((m, 3 + self.G))
            rec[:, 0], rec[:, 1], rec[:, 2], rec[:, 3:] = tasks, self.step_count, p, rewards
            out[h] = (rec, rewards)
        return out

    def _assemble(self, parts: dict[int, list[np.ndarray]], arms: list[int]) -> Batch:
        """The sampler's blocks of packed records (m, 3 + G: task row, birth step, p at
        generation, G rewards) of `arms`, in order, as one Batch."""
        blocks = [block for h in arms for block in parts[h]]
        rec = np.concatenate(blocks) if blocks else np.zeros((0, 3 + self.G))
        rewards, per_arm = rec[:, 3:], [sum(map(len, parts[h])) for h in arms]
        return Batch(tasks=rec[:, 0].astype(np.int64), harnesses=np.repeat(arms, per_arm), rewards=rewards,
                     advantages=grpo.advantages(rewards, self.knobs["advantage"]), p=rec[:, 2],
                     born=rec[:, 1].astype(np.int64))

    def _ground_truth(self, gains: np.ndarray, counts: np.ndarray) -> dict:
        pure, chosen = gains[: self.H], float(gains[-1])
        extras = {"oracle_arm": int(np.argmax(pure)), "gain": chosen,
                  "regret": float(max(pure.max(), chosen) - chosen)}
        success = self.success_matrix()
        truth = (success[: self.n_train].sum(axis=0) / self.n_train).tolist()
        for name, value in zip(self.harnesses + [self.heldout_harness], truth):
            extras[f"true_{name}"] = value
        # noise-free held-out success (the eval suites' expected mean reward) after the step
        extras["true_heldout_tasks"] = float(success[self.n_tasks:, : self.H].mean())
        extras["true_heldout_harness"] = float(success[self.n_tasks:, self.H].mean())
        return extras


# -- list knobs and the held-out harness's alignment (every env) -----------------------------
def int_items(name: str, value, pairs: bool = False) -> list:
    """A list knob's value -- a string ("50,100"; pairs "0-1,2-3"; "" = none) or a list --
    as its non-negative integers (or integer pairs); UserError naming `name` otherwise."""
    try:
        if isinstance(value, str):
            items = comma_items(value)
            items = [tuple(int(x) for x in s.split("-")) for s in items] if pairs else [int(s) for s in items]
        else:
            items = [tuple(int(x) for x in it) if pairs else int(it) for it in value]
            if not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for it in value
                       for x in (it if pairs else [it])):
                raise TypeError
    except (TypeError, ValueError):
        items = None
    flat = [x for it in items or () for x in (it if pairs else (it,))]
    if items is None or any(x < 0 for x in flat) or (pairs and any(len(it) != 2 for it in items)):
        raise UserError(f"{name}={value!r} is not allowed: expected {int_string(pairs).allowed}")
    return items


def int_string(pairs: bool = False):
    """A `Knob.parse` for a list knob (`int_items`) that resolves to the canonical string
    (sorted; integers deduplicated), so configs stay flat scalars for TOML, `--set` and hashing."""
    def parse(name: str, value) -> str:
        items = int_items(name, value, pairs)
        if pairs:                         # the order of disjoint pairs carries no meaning
            return ",".join(f"{a}-{b}" for a, b in sorted(items))
        return ",".join(str(x) for x in sorted(set(items)))
    parse.allowed = ('pairs of harness indices like "0-1,2-3" (or [[0, 1], [2, 3]]; "" = none)' if pairs
                     else 'non-negative integers like "50,100" (or [50, 100]; "" = none)')
    return parse


def heldout_align_knobs() -> dict[str, Knob]:
    """Knobs that align the held-out harness with chosen training harnesses, so transfer to
    it is real and known (every env reads them in its own model; default: no alignment)."""
    return {
        "heldout_align": Knob("", "training harnesses the held-out harness is aligned with (\"\" = none)",
                              parse=int_string()),
        "heldout_align_strength": Knob(0.9, "how strongly the held-out harness follows the aligned ones "
                                            "(0 = not at all, 1 = their mean exactly)", 0.0, 1.0),
    }


def aligned_heldout(vectors: np.ndarray, knobs: dict, unit: bool = True) -> np.ndarray:
    """vectors (H+1, D), the held-out harness's row last -> the held-out row replaced by
    s * mean(aligned rows) + sqrt(1 - s^2) * its own row (s = heldout_align_strength); with
    `unit` the mean direction is normalised first. No alignment: `vectors` unchanged."""
    aligned = int_items("env.heldout_align", knobs["heldout_align"])
    if not aligned:
        return vectors
    if max(aligned) >= vectors.shape[0] - 1:
        raise UserError(f"env.heldout_align={knobs['heldout_align']!r} is not allowed: expected training "
                        f"harness indices in [0, {vectors.shape[0] - 2}]")
    s = knobs["heldout_align_strength"]
    mean = vectors[aligned].mean(axis=0)
    if unit:
        mean = mean / max(np.linalg.norm(mean), 1e-300)
    out = vectors.copy()
    out[-1] = s * mean + np.sqrt(1.0 - s * s) * vectors[-1]
    return out
