"""Configuration of a real run: every knob, validated, and the named presets.

`resolve(preset="tiny", **overrides)` returns a `RealConfig` whose fields are the
resolved knobs of `[env] kind = "real"` (the grid file's env table, `hb real --set`), and
`resolve_env(env)` the resolved env section of a run config, `{"kind": "real",
"n_harnesses", **every knob}` with no None left: `hb real` and grid cells resolve through
it, so the same run hashes the same from both.

Presets:
* ``tiny``: 2 blocks of width 64; a 3-step CPU run takes seconds (tests, smoke runs).
* ``cpu-small``: the tiny shape with a real warm start (1200 steps on demonstrations of
  900 tasks by json, xml and func, and of 20 tasks by the others; about 2.5 minutes on 2
  CPU cores, cached per seed): json, xml and func then solve roughly 15-30% of training
  tasks (held-out tasks too: the model copies names and contents from its context) and
  shell, sexp and kv 0-5%, so GRPO groups have reward variance and a 20-step `hb real`
  run retains groups, takes gradient steps and produces sketches.
  GRPO's Adam lr is 1e-4: at 1e-3 the warm-started model degrades within 10 steps.
* ``gpu-small``: 4 blocks of width 256; sized so that 100 steps of 8 groups x 8
  rollouts take about a minute on one H200 (estimate: the GPU run is pending).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

from policies.base import check_range
from policies.errors import UserError


@dataclass(frozen=True)
class RealConfig:
    preset: str = "tiny"
    device: str = "auto"            # auto | cpu | cuda | cuda:N
    threads: int = 1                # torch CPU threads of the process (0 = torch's default)
    # task world
    n_train_tasks: int = 300
    n_heldout_tasks: int = 100
    # model (built-in transformer) or a local Hugging Face checkpoint
    n_layer: int = 2
    d_model: int = 64
    n_head: int = 4
    d_mlp: int = 256
    max_len: int = 512
    model_path: str = ""            # "" = built-in model; else a local HF causal-LM directory
    hf_block_path: str = "model.layers"
    # rollouts and dynamic sampling (SPEC §2.2)
    group_size: int = 4             # G rollouts per task
    oversample: float = 1.5         # fresh groups requested per missing group
    sample_rounds: int = 2          # sampling rounds per step before accepting a short batch
    leftover_max: int = 16          # groups kept per harness buffer (oldest dropped)
    leftover_max_age: int = 4       # steps a leftover group stays usable (0 = no age limit)
    max_new_tokens: int = 72        # per model call (the longest demonstrated reply is 69 bytes)
    temperature: float = 1.0
    # GRPO objective and optimizer
    advantage: str = "loo"
    lr: float = 1e-3
    kl_coef: float = 0.05
    clip_low: float = 0.2
    clip_high: float = 0.2
    max_grad_norm: float = 1.0
    micro_batch: int = 64           # rows per backward
    # gradient sketch (SPEC §2.4)
    sketch_dim: int = 65536
    sketch_blocks: int = 2
    sketch_patterns: str = "*"      # comma-separated fnmatch patterns inside a block
    sketch_seed: int = 0            # plan seed offset (the plan uses seed + sketch_seed)
    update_sketch: bool = True
    # supervised warm start on demonstrations of a subset of the training harnesses
    warm_harnesses: int = 3         # the first k training harnesses
    warm_steps: int = 20
    warm_batch: int = 16
    warm_lr: float = 3e-3
    warm_tasks: int = 0             # demonstrated tasks: 0 = the training tasks; N = first N of the stream
    warm_other_tasks: int = 0       # the other training harnesses: demonstrated on the first k tasks only
    cache_dir: str = ""             # "" = $HB_CACHE_DIR or ~/.cache/harnessbandit
    # evaluation
    eval_tasks: int = 4             # held-out tasks evaluated (first k)
    eval_attempts: int = 2          # k attempts per (task, harness)
    eval_chunk: int = 512           # episodes per sampling batch

    def to_dict(self) -> dict:
        return asdict(self)

    def model_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("n_layer", "d_model", "n_head", "d_mlp", "max_len")}


PRESETS: dict[str, dict] = {
    "tiny": {},
    "cpu-small": dict(group_size=4, lr=1e-4, warm_steps=1200, warm_batch=16, warm_lr=3e-3, warm_tasks=900,
                      warm_other_tasks=20, threads=2, eval_tasks=24, eval_attempts=2, device="cpu"),
    "gpu-small": dict(n_layer=4, d_model=256, n_head=4, d_mlp=768, max_len=512, group_size=8,
                      max_new_tokens=80, lr=1e-4, sketch_blocks=4, micro_batch=128, warm_steps=2000,
                      warm_batch=64, warm_lr=2e-3, warm_tasks=3000, warm_other_tasks=20, eval_tasks=100,
                      eval_attempts=3, device="auto"),
}

#: batch_groups (groups per optimizer step) of each preset; the loop's allocation size.
BATCH_GROUPS = {"tiny": 2, "cpu-small": 4, "gpu-small": 8}

_CHOICES = {"device": None, "advantage": ("loo", "grpo", "mean"), "preset": tuple(PRESETS)}
_POSITIVE_INT = ("n_train_tasks", "n_heldout_tasks", "n_layer", "d_model", "n_head", "d_mlp", "max_len",
                 "group_size", "sample_rounds", "leftover_max", "max_new_tokens", "micro_batch",
                 "sketch_dim", "sketch_blocks", "warm_harnesses", "warm_batch", "eval_tasks",
                 "eval_attempts", "eval_chunk")


def _check(cfg: RealConfig) -> None:
    if cfg.preset not in PRESETS:
        raise UserError(f"preset={cfg.preset!r} is unknown; valid presets: {', '.join(PRESETS)}")
    if not (cfg.device in ("auto", "cpu", "cuda") or cfg.device.startswith("cuda:")):
        raise UserError(f"device={cfg.device!r} is not allowed: expected auto, cpu, cuda or cuda:N")
    if cfg.advantage not in _CHOICES["advantage"]:
        raise UserError(f"advantage={cfg.advantage!r} is unknown; valid kinds: loo, grpo, mean")
    for name in _POSITIVE_INT:
        check_range(name, getattr(cfg, name), 1, 2**40, integer=True)
    check_range("group_size", cfg.group_size, 2, 2**20, integer=True)
    for name in ("leftover_max_age", "warm_steps", "sketch_seed", "threads", "warm_tasks", "warm_other_tasks"):
        check_range(name, getattr(cfg, name), 0, 2**40, integer=True)
    check_range("warm_tasks", cfg.warm_tasks, 0, 100_000, integer=True)
    check_range("oversample", cfg.oversample, 1.0, 100.0)
    check_range("temperature", cfg.temperature, 0.0, 100.0, low_open=True)
    for name in ("lr", "warm_lr"):
        check_range(name, getattr(cfg, name), 0.0, 10.0, low_open=True)
    for name in ("kl_coef", "max_grad_norm"):
        check_range(name, getattr(cfg, name), 0.0, 1e6)
    for name in ("clip_low", "clip_high"):
        check_range(name, getattr(cfg, name), 0.0, 10.0)
    if cfg.d_model % cfg.n_head:
        raise UserError(f"d_model={cfg.d_model} is not allowed: expected a multiple of n_head={cfg.n_head}")
    if cfg.max_new_tokens >= cfg.max_len:
        raise UserError(f"max_new_tokens={cfg.max_new_tokens} is not allowed: expected < max_len={cfg.max_len}")
    if not isinstance(cfg.update_sketch, bool):
        raise UserError(f"update_sketch={cfg.update_sketch!r} is not allowed: expected true or false")


def resolve(preset: str = "tiny", **overrides) -> RealConfig:
    """The preset's config with `overrides` applied (None = keep the preset's value); unknown
    keys raise naming the valid ones."""
    if preset not in PRESETS:
        raise UserError(f"preset={preset!r} is unknown; valid presets: {', '.join(PRESETS)}")
    valid = {f.name for f in fields(RealConfig)}
    unknown = sorted(set(overrides) - valid)
    if unknown:
        raise UserError(f"real-run knob {unknown[0]!r} is unknown; valid knobs: {', '.join(sorted(valid))}")
    cfg = replace(RealConfig(), preset=preset, **PRESETS[preset])
    typed = {}
    for f in fields(RealConfig):
        if overrides.get(f.name) is not None and f.name != "preset":
            typed[f.name] = coerce_knob(f.name, overrides[f.name], type(getattr(cfg, f.name)))
    cfg = replace(cfg, **typed)
    _check(cfg)
    return cfg


def coerce_knob(name: str, value, kind: type):
    """Accept ints for float knobs; otherwise the value must already have the knob's type."""
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is bool and not isinstance(value, bool):
        raise UserError(f"{name}={value!r} is not allowed: expected true or false")
    if kind is not bool and not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise UserError(f"{name}={value!r} is not allowed: expected a value of type {kind.__name__}")
    return value


def knob_defaults() -> dict:
    """The knob table of `[env] kind = "real"` for grid validation (valid keys, sweep
    defaults): the tiny preset's values, except knobs that some preset sets, which are None
    ("the preset's value"). A run's config never holds these Nones: `resolve_env` fills them."""
    preset_set = set().union(*(p.keys() for p in PRESETS.values()))
    return {k: (None if k in preset_set else v) for k, v in resolve("tiny").to_dict().items()}


def resolve_env(env: dict) -> dict:
    """The resolved env section of a real run's config: `{"kind": "real", "n_harnesses",
    **RealConfig fields}`. A None value means "the preset's value" (the grid's default knob
    table); `kind` must be "real" and `n_harnesses` the task world's training harnesses."""
    from real_runs.harnesses import TRAIN_HARNESSES

    knobs = {k: v for k, v in env.items() if v is not None}
    kind = knobs.pop("kind", "real")
    if kind != "real":
        raise UserError(f"env kind={kind!r} is not allowed here: expected 'real'")
    n = knobs.pop("n_harnesses", len(TRAIN_HARNESSES))
    if n != len(TRAIN_HARNESSES):
        raise UserError(f"env n_harnesses={n!r} is not allowed for kind 'real': the task world has "
                         f"{len(TRAIN_HARNESSES)} training harnesses")
    return {"kind": "real", "n_harnesses": len(TRAIN_HARNESSES), **resolve(**knobs).to_dict()}
