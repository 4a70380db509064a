"""The verl side of the integration (design: docs/VERL.md), in the parts that run without
a cluster and without verl installed.

* `verl_result(batch, harnesses, ...)`: a verl `DataProto`-like batch (`.batch` tensors,
  `.non_tensor_batch` arrays, `.meta_info`) after a training step -> the allocation it
  trained (each row's harness: `harness_names`, from `extra_info["harness"]`, else a
  `harness` column, else `data_source`: the keys verl's `_get_gen_batch` keeps) and its
  `StepResult`: L from the
  trajectories' outcome scores grouped by `uid` (SPEC §2.3, LOO advantages recomputed
  from the scores: verl's own advantages may be std-scaled), the sketch that the actor put
  into `meta_info["hb_sketch"]`, and the cost ledger.
* `HarnessCurriculumSampler`: the sampler verl's `RayPPOTrainer` builds from
  `data.sampler.class_path/class_name` (an `AbstractCurriculumSampler` when verl is
  importable). It holds an `hbsim.loop.StepRecorder`: its iterator asks the policy for
  the next step's allocation (`begin`) only when the step's first index is drawn, so with
  `data.dataloader_num_workers=0` the choice for step k+1 follows `update(batch_k)`, which
  records the step (`record`: the policy's feedback, the SPEC §7 train row and its cost
  ledger). Rows come from the task world's per-harness pools (`world.pool.TaskPool`).
* Supported verl: `HarnessCurriculumSampler` (built by verl from `data.sampler`) needs 0.5-0.7
  (`VERL_SUPPORTED`: the releases with `AbstractCurriculumSampler` and the
  `sampler.update(batch=batch)` call in `RayPPOTrainer.fit`); on 0.8-0.9 the project's trainers
  build `HarnessCurriculumCore` themselves (`VERL_TRAINER_SUPPORTED`, `verl_entry_problem`, checked
  by the entry point `verl_main` before verl is imported). `v1_problem` (verl 0.9's v1 config),
  `step_view` / `trajectory_rows` / `merge_views` / `take_update_sketch` (a step read from what
  a trainer holds other than a legacy DataProto: v1's TransferQueue, SkyRL's batch) and
  `SKYRL_KNOBS` serve the v1 trainer and SkyRL (`skyrl_sampler`).
* The group filter (`hbsim.sampling.GroupFilter`, knobs `keep_band`, `min_abs_adv` of
  `FILTER_KNOBS`, in `data.harnessbandit`): L and the retained count are over the groups it
  keeps, as in every other backend. verl trains on its own batch, so the sampler cannot drop
  groups from the update: `keep_rows(batch, filter)` is the per-row mask for an advantage
  hook that zeroes the dropped groups (what the TRL backend does); by default (no band, no
  threshold) the filter is the zero-variance rule and nothing changes.
"""
from __future__ import annotations

import numpy as np

from hbsim.adapter import CostLedger, StepResult
from hbsim.loop import StepRecorder
from hbsim.sampling import FILTER_KNOBS, GroupFilter
from policies import Allocation
from policies.errors import UserError
from policies import validate
from policies.knobs import Knob, Knobs
from real_runs.integrations.signals import group_signals
from real_runs.world.pool import TaskPool


def _column(batch, key, required: bool = True):
    for table in (getattr(batch, "non_tensor_batch", None), getattr(batch, "batch", None), batch):
        if hasattr(table, "keys") and key in table.keys():
            value = table[key]
            return value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
    if required:
        raise UserError(f"verl batch has no {key!r} field; expected it in batch.batch or batch.non_tensor_batch")
    return None


def _get(table, key):
    """table[key] of a dict, DataFrame or datasets.Dataset; None when it has no such column."""
    try:
        value = table[key]
    except (KeyError, ValueError, TypeError, IndexError):
        return None
    return value.detach().cpu().numpy() if hasattr(value, "detach") else value


def harness_names(table, key: str = "harness", n: int | None = None) -> list:
    """Each row's harness name in `table` (a dataset's columns, or a verl batch's
    non_tensor_batch): `extra_info[key]`, else a column `key`, else `data_source` (in that
    order, row by row). verl 0.6/0.7's `_get_gen_batch` drops every non-tensor key but
    `data_source, reward_model, extra_info, uid` before the rollout and its agent-loop path
    does not copy them back, so a dataset's own `harness` column does not reach `update`."""
    extra, column, source = _get(table, "extra_info"), _get(table, key), _get(table, "data_source")
    size = n if n is not None else next((len(c) for c in (extra, column, source) if c is not None), 0)
    names = []
    for i in range(size):
        info = extra[i] if extra is not None else None
        if hasattr(info, "keys") and key in info.keys() and info[key] is not None:
            names.append(str(info[key]))
        elif column is not None:
            names.append(str(column[i]))
        elif source is not None:
            names.append(str(source[i]))
        else:
            raise UserError(f"verl row {i} names no harness: expected extra_info[{key!r}], a {key!r} column or "
                            "data_source (docs/VERL.md, section 1)")
    return names


def _names(name: str, value) -> list:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):     # a list, or OmegaConf's ListConfig
        raise UserError(f"{name}={value!r} is not allowed: expected {_names.allowed}")
    names = list(value)
    if not names or not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
        raise UserError(f"{name}={names!r} is not allowed: expected {_names.allowed}")
    return names


_names.allowed = "a non-empty list of distinct harness names (the values of the dataset's harness column)"


def _mapping(name: str, value) -> dict:
    if not hasattr(value, "keys"):                                             # a dict, or OmegaConf's DictConfig
        raise UserError(f"{name}={value!r} is not allowed: expected {_mapping.allowed}")
    return dict(value)


_mapping.allowed = "a mapping of the policy's knob names to values (hb policies lists them)"

#: every key of `data.harnessbandit` (an unknown one is refused, naming these): the
#: sampler's own, then the group filter's
VERL_KNOBS = Knobs({
    "harnesses": Knob(None, "the harnesses (arms), in arm order; required", optional=True, parse=_names),
    "steps": Knob(None, "optimizer steps the sampler plans; required", 1, validate.MAX_STEPS, type=int, optional=True),
    "policy": Knob("harnessbandit", "the scheduling policy (hb policies lists them)"),
    "policy_knobs": Knob({}, "the policy's knobs", parse=_mapping),
    "seed": Knob(0, "the policy's seed", 0, validate.MAX_SEED),
    "harness_key": Knob("harness", "the key of extra_info (or the column) that names each row's harness"),
    "sketch": Knob(False, "whether the actor sends a gradient sketch (HarnessPPOActor on 0.5-0.7, the engine wrap "
                   "verl_engine_sketch on 0.9); without one T is missing and a policy scoring T only is refused"),
    "sketch_dim": Knob(65536, "sketch coordinates d (SPEC §2.4)", 1, 2**31 - 1),
    "sketch_blocks": Knob(None, "last transformer blocks the sketch reads (unset: the last 4, SPEC §2.4)", 1, 100_000,
                          type=int, optional=True),
    "sketch_block_path": Knob("model.layers", "module path of the actor model's transformer blocks"),
    **FILTER_KNOBS,
}, scope="data.harnessbandit", owner="HarnessCurriculumSampler")
def harness_settings(data_config):
    """The settings of verl's `data.harnessbandit` (`VERL_KNOBS`; unset: every default), each
    checked: what the sampler, the trainers and the sketching worker read."""
    return VERL_KNOBS.settings(dict(data_config.get("harnessbandit", {}) or {}))


#: the knobs of the sketch's shape, read by the actor worker (verl_engine_worker), not the sampler
SKETCH_SHAPE = ("sketch_dim", "sketch_blocks", "sketch_block_path")


#: the same knobs for SkyRL (`harnessbandit.*` arguments of `python -m real_runs.integrations.skyrl_main`):
#: each prompt row's harness is its `env_class` (None: the config's `environment.env_class`)
SKYRL_KNOBS = Knobs(dict(VERL_KNOBS.with_defaults(harness_key="env_class").without(*SKETCH_SHAPE)),
                    scope="harnessbandit", owner="the SkyRL trainer (harnessbandit.*)")


def _groups(batch, score_key: str) -> tuple[np.ndarray, dict]:
    """(rewards per row, uid -> its rows) of a verl batch; every group the same size G."""
    scores = _column(batch, score_key)
    rewards = scores.reshape(len(scores), -1).sum(axis=1).astype(np.float64)
    groups: dict = {}
    for i, u in enumerate(_column(batch, "uid").tolist()):
        groups.setdefault(u, []).append(i)
    sizes = {len(v) for v in groups.values()}
    if len(sizes) != 1:
        raise UserError(f"verl batch group sizes={sorted(sizes)} are not allowed: every uid must have the same "
                        "number of rollouts (actor_rollout_ref.rollout.n)")
    return rewards, groups


def _keep(r: np.ndarray, group_filter: GroupFilter | None) -> np.ndarray | None:
    """The filter's mask of the groups r (n, G) (None: the default rule, group_signals' own)."""
    if group_filter is None or group_filter.default:
        return None
    return group_filter.mask(r) & np.isfinite(r).all(axis=1)


def keep_rows(batch, group_filter: GroupFilter, *, score_key: str = "token_level_scores") -> np.ndarray:
    """(rows,) bool: whether each row's group (`uid`) is kept by `group_filter` (the
    zero-variance rule included), for an advantage hook that zeroes the dropped groups."""
    rewards, groups = _groups(batch, score_key)
    rows = list(groups.values())
    r = rewards[np.asarray(rows)]
    keep = group_filter.mask(r) & np.isfinite(r).all(axis=1)
    out = np.zeros(len(rewards), dtype=bool)
    for k, idx in zip(keep, rows):
        out[idx] = k
    return out


def verl_result(batch, harnesses: list[str], *, score_key: str = "token_level_scores",
                harness_key: str = "harness", advantage: str = "loo",
                group_filter: GroupFilter | None = None) -> tuple[Allocation, StepResult]:
    """(allocation trained, StepResult) of one verl step. Rows sharing a `uid` are one GRPO
    group (all groups must have the same size G); a row's reward is the sum of its
    token-level scores. L and the retained groups: over the groups `group_filter` keeps
    (None or the default filter: those with reward variance). Ledger: the batch's groups
    are generated, scored and optimized (`meta_info["hb_groups_generated"]` overrides the
    generated count, e.g. from DAPO's `num_gen_batches`), tokens = the `response_mask` sum
    when the batch has one."""
    rewards, groups = _groups(batch, score_key)
    names = harness_names(getattr(batch, "non_tensor_batch", batch), harness_key, len(rewards))
    size = len(next(iter(groups.values())))
    index = np.asarray([i for rows in groups.values() for i in rows])
    r = rewards[index]
    learn, retained = group_signals(r, size, advantage, keep=_keep(r.reshape(-1, size), group_filter))
    counts = np.zeros(len(harnesses), dtype=np.int64)
    for rows in groups.values():
        name = str(names[rows[0]])
        if name not in harnesses:
            raise UserError(f"verl batch harness={name!r} is not allowed: expected one of {harnesses}")
        counts[harnesses.index(name)] += 1
    meta = getattr(batch, "meta_info", {}) or {}
    sketch, update = meta.get("hb_sketch"), meta.get("hb_update_sketch")
    mask = _column(batch, "response_mask", required=False)
    generated = int(meta.get("hb_groups_generated", len(groups)))
    ledger = CostLedger(groups_generated=generated, groups_scored=generated, groups_retained=retained,
                        groups_optimized=len(groups), tokens=int(mask.sum()) if mask is not None else 0)
    return Allocation(counts), StepResult(
        learnability=learn, sketch=None if sketch is None else np.asarray(sketch, dtype=np.float32),
        update_sketch=None if update is None else np.asarray(update, dtype=np.float32),
        reward=float(rewards.mean()), cost=ledger)


def step_view(scores, uids, harness, *, harness_key: str = "harness", response_mask=None, meta: dict | None = None):
    """A step's trajectories as `verl_result` reads them, from what a trainer holds other than
    a legacy `DataProto` (verl 0.9's v1 trainer reads them from TransferQueue, SkyRL from its
    TrainingInputBatch): `scores` (rows,) or (rows, tokens) rewards, `uids` (rows,) the GRPO
    group of each row, `harness` (rows,) each row's harness, `response_mask` (rows, tokens)
    for the token count, `meta` the step's `meta_info` (`hb_sketch`, `hb_groups_generated`)."""
    from types import SimpleNamespace
    tensors = {"token_level_scores": np.asarray(scores, dtype=np.float64)}
    if response_mask is not None:
        tensors["response_mask"] = np.asarray(response_mask)
    rows = {"uid": np.asarray(list(uids), dtype=object), harness_key: np.asarray([str(h) for h in harness], dtype=object)}
    return SimpleNamespace(batch=tensors, non_tensor_batch=rows, meta_info=dict(meta or {}))


def trajectory_rows(keys) -> list[int]:
    """The positions of `keys` (`{uid}_{session}_{index}`, verl's agent loop's key format) that
    are each trajectory's first stored output: one row per (uid, session)."""
    seen, rows = set(), []
    for i, key in enumerate(keys):
        head = str(key).rsplit("_", 1)[0]
        if head not in seen:
            seen.add(head)
            rows.append(i)
    return rows


def merge_views(views: list):
    """One step view of the local updates' views (`parameter_sync_step` > 1)."""
    if len(views) == 1:
        return views[0]
    key = next(k for k in views[0].non_tensor_batch if k != "uid")
    return step_view(np.concatenate([v.batch["token_level_scores"] for v in views]),
                     [u for v in views for u in v.non_tensor_batch["uid"]],
                     [h for v in views for h in v.non_tensor_batch[key]], harness_key=key,
                     response_mask=np.concatenate([v.batch["response_mask"] for v in views]),
                     meta=views[-1].meta_info)


def take_update_sketch(output, meta: dict) -> None:
    """Move `hb_sketch` / `hb_update_sketch` from an actor worker group's update output
    (`output["metrics"]`) into `meta` before verl reduces the metrics (it would average the
    vector): one vector, or one per rank (the same all-reduced vector: the first)."""
    metrics = output["metrics"] if hasattr(output, "keys") and "metrics" in output.keys() else None
    if not hasattr(metrics, "pop"):
        return
    for key in ("hb_sketch", "hb_update_sketch"):
        value = metrics.pop(key, None)
        if value is not None:
            arr = np.asarray(value, dtype=np.float32)
            meta[key] = arr[0] if arr.ndim == 2 else arr


class HarnessCurriculumCore:
    """The verl-independent body of `HarnessCurriculumSampler`: `__iter__` yields the dataset
    indices of step after step (`batch_groups` prompts each, drawn from the harnesses of
    the policy's allocation at the moment the step's first index is requested), and
    `update(batch)` records the step through the `recorder` (the policy's feedback and the
    SPEC §7 train row); `result(config)` is the run's RunResult.

    Steps and resume: `len()` is the planned steps' indices (verl's `len(train_dataloader)`
    = `steps`, constant), `__iter__` yields the steps not yet recorded (from `recorder.t`), so
    an epoch re-entered (`trainer.total_epochs` > 1) or a resumed dataloader continues at the
    step verl continues at. verl saves its checkpoint inside the step, before its
    `sampler.update(batch)`: `record_early(batch)` (called by `HarnessRayPPOTrainer` after the
    actor update, before the save) records the step then, and the stock `update` of the same
    step returns that row. A state saved with a step still pending (the stock trainer) lacks
    that step's feedback: loading it is refused, naming the trainer that saves it whole."""

    def __init__(self, harness_column, harnesses: list[str], policy, *, batch_groups: int, steps: int,
                 seed: int = 0, harness_key: str = "harness", label: str | None = None,
                 group_filter: GroupFilter | None = None):
        self.harnesses, self.harness_key = list(harnesses), harness_key
        self.filter = group_filter or GroupFilter()
        self.steps = int(steps)
        self.recorder = StepRecorder(policy, self.harnesses, label=label, seed=seed, batch_groups=int(batch_groups))
        self.rows = TaskPool.of_column(harness_column, self.harnesses, seed)
        self._early: dict | None = None      # the row `record_early` recorded, until the step's `update`

    @classmethod
    def from_config(cls, data_source, data_config, where: str = "verl") -> "HarnessCurriculumCore":
        """The sampler of verl's `data` config (`data.harnessbandit` = VERL_KNOBS) over
        `data_source` (verl's RLHFDataset: its `dataframe`; each row's harness by
        `harness_names`); prompts per step = `data.gen_batch_size`, else `data.train_batch_size`
        (the batch size verl gives its dataloader)."""
        obj = cls.__new__(cls)
        obj._configure(data_source, data_config, where)
        return obj

    def _configure(self, data_source, data_config, where: str = "verl") -> None:
        cfg = harness_settings(data_config)
        prompts = data_config.get("gen_batch_size", None) or data_config["train_batch_size"]
        self._settle(getattr(data_source, "dataframe", data_source), cfg, VERL_KNOBS, int(prompts), where,
                     "verl's schema has no such key: pass them as +data.harnessbandit.harnesses=[...] "
                     "+data.harnessbandit.steps=N")

    def _settle(self, table, cfg, knobs: Knobs, batch_groups: int, where: str, hint: str) -> None:
        """Build the policy and the core from the resolved settings `cfg` of table `knobs`
        (VERL_KNOBS or a trainer's copy under its own scope) over the dataset `table`."""
        from policies import make
        if cfg.harnesses is None or cfg.steps is None:
            raise UserError(f"{knobs.key('harnesses')} and {knobs.key('steps')} are required by {where} ({hint})")
        policy = make(cfg.policy, n_arms=len(cfg.harnesses), seed=cfg.seed, **cfg.policy_knobs)
        problem = None if cfg.sketch else sketchless_problem(policy, where)
        if problem:
            raise UserError(problem)
        HarnessCurriculumCore.__init__(self, harness_names(table, cfg.harness_key), cfg.harnesses, policy,
                                       batch_groups=batch_groups, steps=cfg.steps, seed=cfg.seed,
                                       harness_key=cfg.harness_key, group_filter=GroupFilter.of(cfg, "loo"))

    @property
    def policy(self):
        return self.recorder.policy

    def __len__(self) -> int:
        return self.recorder.batch_groups * self.steps

    def __iter__(self):
        for _ in range(self.recorder.t, self.steps):
            if self.recorder.pending is not None:   # the next step chosen before this one's feedback
                raise UserError("the dataloader drew a step's indices before update(batch) of the previous step: "
                                "it prefetches (or one step takes several batches, as DAPO's filter_groups), so "
                                "each choice would ignore the previous step's feedback; set "
                                "data.dataloader_num_workers=0 and one dataloader batch per step")
            alloc = self.recorder.begin()
            for h, n in enumerate(np.asarray(alloc.counts)):
                yield from self.rows.draw(h, int(n))

    def record_early(self, batch) -> dict:
        """Record the trained step `batch` now (before verl's checkpoint of the step); the
        step's later `update(batch)` returns this row. Returns the train row."""
        self._early = self._record(batch)
        return self._early

    def update(self, batch) -> dict:
        """Record the trained step `batch`; returns its train row (the row `record_early`
        recorded, when it did)."""
        if self._early is not None:
            row, self._early = self._early, None
            return row
        return self._record(batch)

    def _record(self, batch) -> dict:
        pending = self.recorder.pending
        if pending is None:
            raise UserError("update(batch) is not allowed before the sampler drew a step")
        trained, res = verl_result(batch, self.harnesses, harness_key=self.harness_key, group_filter=self.filter)
        if not np.array_equal(trained.counts, pending.allocation.counts):
            raise UserError(f"verl batch harness counts={trained.counts.tolist()} differ from the allocation "
                            f"{np.asarray(pending.allocation.counts).tolist()}: set data.dataloader_num_workers=0 "
                            "and data.shuffle=False so the trainer consumes the sampler's steps in order")
        return self.recorder.record(res)

    def result(self, config: dict | None = None):
        return self.recorder.result(config)

    def state_dict(self) -> dict:
        pending = None if self.recorder.pending is None else self.recorder.t + 1
        return {"recorder": self.recorder.state_dict(), "rows": self.rows.state_dict(), "pending_step": pending}

    def load_state_dict(self, state: dict) -> None:
        if state.get("pending_step") is not None:
            raise UserError(f"this sampler state was saved during step {state['pending_step']}, before its "
                            "sampler.update(batch) (verl's stock RayPPOTrainer saves before it), so that step's "
                            "feedback is lost; train with python -m real_runs.integrations.verl_main (HarnessRayPPOTrainer), "
                            "which records each step before verl saves it")
        self.recorder.load_state_dict(state["recorder"])
        self.rows.load_state_dict(state["rows"])
        self._early = None


#: the verl releases whose RayPPOTrainer.fit calls `sampler.update(batch=batch)` on an
#: AbstractCurriculumSampler built from `data.sampler` (0.8.0 removed both)
VERL_SUPPORTED = ((0, 5), (0, 8))
VERL_RANGE = ">=0.5,<0.8"
#: the releases the project's trainers drive (`verl_trainer.HarnessRayPPOTrainer`: 0.5-0.9, the
#: sampler built by the trainer itself from 0.8 on; `verl_v1.HarnessPPOTrainer`: 0.9's v1 trainer)
VERL_TRAINER_SUPPORTED = ((0, 5), (0, 10))
VERL_V1_SUPPORTED = ((0, 9), (0, 10))
VERL_RANGES = "verl >=0.5,<0.10 (0.5-0.7 and 0.8-0.9's legacy trainer, trainer.use_v1=false; 0.9's v1 trainer)"

try:  # verl is an optional extra (harnessbandit[verl]); without it the class below refuses to build
    import verl as _verl
except ImportError:
    _verl = None
try:
    from verl.experimental.dataset.sampler import AbstractCurriculumSampler as _VerlBase
except ImportError:       # no verl, or a verl without the hook (0.8+)
    _VerlBase = object


def version_tuple(version: str) -> tuple[int, int]:
    """(major, minor) of a release string ('0.9.1' -> (0, 9), '0.8.0.dev' -> (0, 8))."""
    parts = []
    for piece in str(version).split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts + [0] * (2 - len(parts)))


def installed_version(dist: str) -> str | None:
    """The installed version of distribution `dist` from its metadata, without importing it
    (None: not installed)."""
    from importlib import metadata
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def verl_entry_problem(version: str | None) -> str | None:
    """Why the project's verl entry point cannot run on verl `version` (None: it can); checked
    from the package metadata before verl, Hydra or Ray is imported. Pure, for the tests."""
    if version is None:
        return f"the verl entry point needs {VERL_RANGES}; verl is not installed: pip install 'harnessbandit[verl]'"
    low, high = VERL_TRAINER_SUPPORTED
    if not low <= version_tuple(version) < high:
        return (f"the verl entry point needs {VERL_RANGES}; found verl {version}: "
                "pip install 'harnessbandit[verl]' (docs/VERL.md)")
    return None


def verl_problem(version: str | None, has_hook: bool) -> str | None:
    """Why verl `version` cannot drive the sampler (None: it can). Pure, for the tests."""
    if version is None:
        return f"HarnessCurriculumSampler needs verl {VERL_RANGE}, which is not installed: pip install 'harnessbandit[verl]'"
    low, high = VERL_SUPPORTED
    if not (low <= version_tuple(version) < high) or not has_hook:
        return (f"HarnessCurriculumSampler needs verl {VERL_RANGE} (the releases whose RayPPOTrainer.fit calls "
                f"AbstractCurriculumSampler.update(batch)); found verl {version}: on verl 0.8-0.9 the trainer builds "
                "the sampler itself: python -m real_runs.integrations.verl_main (docs/VERL.md)")
    return None


#: the name the project's v1 trainer registers under (`trainer.v1.trainer_mode`)
V1_TRAINER_NAME = "harnessbandit"


def v1_problem(config) -> str | None:
    """Why verl 0.9's v1 trainer config `config` cannot run the harness scheduler (None: it
    can): each step's prompts must be drawn once, after the previous step's update reached
    the policy. Pure (any mapping with `.get`), for the tests."""
    def pick(*path):
        node = config
        for key in path:
            node = node.get(key, None) if hasattr(node, "get") else None
            if node is None:
                return None
        return node
    mode = pick("trainer", "v1", "trainer_mode") or "sync"
    if mode not in ("sync", V1_TRAINER_NAME):
        return (f"trainer.v1.trainer_mode={mode!r} is not allowed with the harness scheduler: expected sync "
                f"(run as {V1_TRAINER_NAME!r}); the async modes draw the next prompts before the step's feedback "
                "reaches the policy")
    if pick("algorithm", "filter_groups", "enable"):
        return ("algorithm.filter_groups.enable=true is not allowed with the harness scheduler: DAPO-style "
                "filtering refills a step with several draws, each ignoring the step's feedback; set it false "
                "(the group filter is +data.harnessbandit.keep_band / min_abs_adv)")
    if pick("trainer", "v1", "sampler", "sync_refill_failed_groups"):
        return ("trainer.v1.sampler.sync_refill_failed_groups=true is not allowed with the harness scheduler: a "
                "refill draws prompts again within the step; set it false")
    custom = pick("trainer", "v1", "sampler", "custom_sampler")
    if custom is not None and custom.get("path", None):
        return ("trainer.v1.sampler.custom_sampler is not allowed with the harness scheduler: the step's "
                "trajectories must be the ones its draw generated; unset it")
    return None


def sketchless_problem(policy, where: str) -> str | None:
    """Why `policy` cannot run where no gradient sketch reaches it (T always missing): a
    fused policy that reads T only (`transfer`, or fusion='transfer') would never update its
    Q; one that reads L and T runs on L alone (SPEC §3 step 4: one present -> that one)."""
    if getattr(policy, "uses_t", False) and not getattr(policy, "uses_l", True):
        name = getattr(policy, "name", type(policy).__name__)
        return (f"policy={name!r} is not allowed in {where} without a gradient sketch: it scores T only, which is "
                "missing there (docs/VERL.md, section 4); use a policy that reads L (harnessbandit, learnability, "
                "sec, ...) or wire the sketch")
    return None


class HarnessCurriculumSampler(HarnessCurriculumCore, _VerlBase):
    """verl (0.5-0.7): `data.sampler.class_path=pkg://real_runs.integrations.verl_sampler`,
    `data.sampler.class_name=HarnessCurriculumSampler`, `data.dataloader_num_workers=0`,
    and `+data.harnessbandit = {harnesses: [...], policy: harnessbandit, policy_knobs: {},
    seed: 0, steps: N}` (optionally `harness_key` and the group filter's `keep_band`, `min_abs_adv`;
    every key is a row of VERL_KNOBS and any other is refused; verl's Hydra schema has no
    `harnessbandit` key, hence the `+`); `data.train_batch_size` prompts (groups) per step.
    Each dataset row names its harness in `extra_info["harness"]` (`harness_names`)."""

    def __init__(self, data_source, data_config):
        problem = verl_problem(getattr(_verl, "__version__", None) if _verl is not None else None,
                               _VerlBase is not object)
        if problem:
            raise UserError(problem)
        self._configure(data_source, data_config)
